package queue

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkDecideDepth1000 decides a key with a holder and 1,000 queued waiters: the reconcile
// a deep queue pays on every event.
func BenchmarkDecideDepth1000(b *testing.B) {
	w := newWorld(b)
	w.add(makeReq("holder").Owner("h", 1).Obj())
	d := w.decide(name1, now, testConfig())
	w.apply(name1, w.input(name1, now, testConfig()), d, 0)
	for i := range 1000 {
		w.add(makeReq(fmt.Sprintf("w%04d", i)).Owner("w", int64(i+2)).QueuedAt(t0.Add(time.Duration(i) * time.Millisecond)).Obj())
	}
	in := w.input(name1, now, testConfig())
	b.ReportAllocs()
	for b.Loop() {
		Decide(in)
	}
}
