package queue

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// sharedView is what the shared tests assert of a key after a step: who holds it, in which
// mode, with which tokens, and who waits.
type sharedView struct {
	Mode    locksv1.LockMode
	Holders []string // holding requests, "name:token", in grant order
	Count   int32
	Waiting []string // d.Queue
}

func sharedViewOf(w *world, d Decision) sharedView {
	v := sharedView{Waiting: names(d.Queue)}
	pl := w.locks[name1]
	if pl == nil {
		return v
	}
	v.Mode, v.Count = pl.Status.Mode, pl.Status.HolderCount
	for _, h := range pl.Status.SharedHolders {
		v.Holders = append(v.Holders, h.Request.Name+":"+itoa(h.FencingToken))
	}
	if h := pl.Status.Holder; h != nil {
		for _, r := range h.Requests {
			v.Holders = append(v.Holders, r.Name+":"+itoa(pl.Status.FencingToken))
		}
	}
	return v
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// tokenOf is a request's token for tgt1 as its status shows it, 0 unless it holds.
func tokenOf(t *testing.T, w *world, name string) int64 {
	t.Helper()
	r := w.get(name)
	if r == nil || len(r.Status.Locks) == 0 || !r.Status.Locks[0].Held {
		return 0
	}
	return r.Status.Locks[0].FencingToken
}

func reader(name, owner string) *locksv1.LockRequest {
	return makeReq(name).Owner(owner, 0).Shared().Obj()
}

func writer(name, owner string) *locksv1.LockRequest {
	return makeReq(name).Owner(owner, 0).Obj()
}

// TestSharedReadersHoldTogether: shared requests of different identities hold one key together,
// each with a token above every token granted before it (mutants shared-beside-exclusive,
// shared-token-per-grant).
func TestSharedReadersHoldTogether(t *testing.T) {
	cfg := testConfig()
	w := newWorld(t)
	w.add(reader("r1", "alice"))
	w.decide(name1, now, cfg)
	w.add(reader("r2", "bob"))
	d := w.decide(name1, now.Add(time.Second), cfg)
	t1, t2 := tokenOf(t, w, "r1"), tokenOf(t, w, "r2")
	if t1 == 0 || t2 <= t1 {
		t.Fatalf("tokens r1 %d, r2 %d: both must hold, r2's above r1's", t1, t2)
	}
	want := sharedView{Mode: locksv1.ModeShared, Holders: []string{"r1:" + itoa(t1), "r2:" + itoa(t2)}, Count: 2}
	if diff := cmp.Diff(want, sharedViewOf(w, d)); diff != "" {
		t.Errorf("key (-want +got):\n%s", diff)
	}
	if pl := w.locks[name1]; pl.Status.FencingToken != t2 {
		t.Errorf("ProjectLock token %d, want the latest grant's %d", pl.Status.FencingToken, t2)
	}
	if c := findCond(w.locks[name1].Status.Conditions, locksv1.ConditionLocked); c == nil || c.Message != "locked by alice and 1 other shared holder" {
		t.Errorf("Locked condition %+v", c)
	}
	// Deciding again changes nothing: the readers keep their own tokens.
	if again := w.decide(name1, now.Add(2*time.Second), cfg); !empty(again) {
		t.Errorf("deciding again writes:\n%s", describeDecision(again))
	}
}

// TestSharedWriterPreference: an exclusive request waits until no one holds the key and then
// holds it alone; a shared request that arrives after it does not pass it (mutants
// shared-writer-preference, shared-beside-exclusive); tokens increase from readers to the writer
// and from the writer to the next reader.
func TestSharedWriterPreference(t *testing.T) {
	cfg := testConfig()
	w := newWorld(t)
	at := now
	step := func() Decision {
		at = at.Add(time.Second)
		return w.decide(name1, at, cfg)
	}
	w.add(reader("r1", "alice"))
	w.add(reader("r2", "bob"))
	step()
	w.add(writer("w", "carol"))
	step()
	w.add(reader("r3", "dave"))
	d := step()
	t2 := max(tokenOf(t, w, "r1"), tokenOf(t, w, "r2"))
	if diff := cmp.Diff(sharedView{Mode: locksv1.ModeShared, Holders: []string{"r1:" + itoa(t2), "r2:" + itoa(t2)}, Count: 2, Waiting: []string{"w", "r3"}}, sharedViewOf(w, d)); diff != "" {
		t.Fatalf("readers hold, the writer and the later reader wait (-want +got):\n%s", diff)
	}
	if got := w.get("r3").Status.BlockedBy; got != "locked by alice and 1 other shared holder; waiting behind exclusive request w of carol (writer preference)" {
		t.Errorf("r3 blockedBy %q", got)
	}
	if got := w.get("w").Status.BlockedBy; got != "locked by alice and 1 other shared holder" {
		t.Errorf("w blockedBy %q", got)
	}

	// One reader leaves: the other keeps holding, with its token; the writer still waits.
	w.get("r1").Spec.Release = true
	d = step()
	if diff := cmp.Diff(sharedView{Mode: locksv1.ModeShared, Holders: []string{"r2:" + itoa(t2)}, Count: 1, Waiting: []string{"w", "r3"}}, sharedViewOf(w, d)); diff != "" {
		t.Fatalf("after r1's release (-want +got):\n%s", diff)
	}
	// The last reader leaves: the writer holds alone, above every reader's token.
	w.get("r2").Spec.Release = true
	d = step()
	tw := tokenOf(t, w, "w")
	if tw <= t2 {
		t.Fatalf("writer's token %d not above the readers' %d", tw, t2)
	}
	if diff := cmp.Diff(sharedView{Mode: locksv1.ModeExclusive, Holders: []string{"w:" + itoa(tw)}, Count: 1, Waiting: []string{"r3"}}, sharedViewOf(w, d)); diff != "" {
		t.Fatalf("after the readers left (-want +got):\n%s", diff)
	}
	// The writer leaves: the reader behind it holds, above the writer's token.
	w.get("w").Spec.Release = true
	d = step()
	t3 := tokenOf(t, w, "r3")
	if t3 <= tw {
		t.Fatalf("reader's token %d not above the writer's %d", t3, tw)
	}
	if diff := cmp.Diff(sharedView{Mode: locksv1.ModeShared, Holders: []string{"r3:" + itoa(t3)}, Count: 1}, sharedViewOf(w, d)); diff != "" {
		t.Fatalf("after the writer left (-want +got):\n%s", diff)
	}
}

// TestSharedDecisionTable: one decision from a given store, for each rule of shared holding.
func TestSharedDecisionTable(t *testing.T) {
	cfg := testConfig()
	cases := map[string]struct {
		setup   func(w *world)
		at      time.Duration
		want    sharedView
		wantFin []string // requests finished by the decision
	}{
		"an exclusive holder keeps a reader out": {
			setup: func(w *world) {
				w.add(writer("w", "carol"))
				w.decide(name1, now, cfg)
				w.add(reader("r1", "alice"))
			},
			want: sharedView{Mode: locksv1.ModeExclusive, Holders: []string{"w:2"}, Count: 1, Waiting: []string{"r1"}},
		},
		"a writer does not join readers": {
			setup: func(w *world) {
				w.add(reader("r1", "alice"))
				w.decide(name1, now, cfg)
				w.add(writer("w", "carol"))
			},
			want: sharedView{Mode: locksv1.ModeShared, Holders: []string{"r1:2"}, Count: 1, Waiting: []string{"w"}},
		},
		"a free key: readers ahead of a writer hold together, a reader behind it waits": {
			setup: func(w *world) {
				w.add(reader("r1", "alice"))
				w.add(reader("r2", "bob"))
				w.add(writer("w", "carol"))
				w.add(reader("r3", "dave"))
			},
			want: sharedView{Mode: locksv1.ModeShared, Holders: []string{"r1:5", "r2:5"}, Count: 2, Waiting: []string{"w", "r3"}},
		},
		"a frozen writer stops no reader": {
			setup: func(w *world) {
				w.freezes, _ = ResolveFreezes([]locksv1.CommandLock{commandLock("apply", true, "maintenance", nil)}, FreezeFlags{}, now)
				w.add(reader("r1", "alice"))
				w.decide(name1, now, cfg)
				w.add(makeReq("w").Owner("carol", 0).Command("apply").Obj())
				w.add(reader("r2", "bob"))
			},
			want: sharedView{Mode: locksv1.ModeShared, Holders: []string{"r1:2", "r2:3"}, Count: 2, Waiting: []string{"w"}},
		},
		"a shared holder expires alone": {
			setup: func(w *world) {
				w.add(makeReq("r1").Owner("alice", 0).Shared().TTL(5 * time.Second).Obj())
				w.add(reader("r2", "bob"))
				w.decide(name1, now, cfg)
			},
			at:      10 * time.Second,
			want:    sharedView{Mode: locksv1.ModeShared, Holders: []string{"r2:3"}, Count: 1},
			wantFin: []string{"r1"},
		},
		"a force-unlock releases every shared holder": {
			setup: func(w *world) {
				w.add(reader("r1", "alice"))
				w.add(reader("r2", "bob"))
				w.decide(name1, now, cfg)
				w.forceUnlock(name1)
			},
			want:    sharedView{},
			wantFin: []string{"r1", "r2"},
		},
		"the holder's own identity re-enters at once, exclusive beside its own reader": {
			setup: func(w *world) {
				w.add(reader("r1", "alice"))
				w.decide(name1, now, cfg)
				w.add(writer("w", "carol"))
				w.add(writer("a2", "alice"))
			},
			want: sharedView{Mode: locksv1.ModeExclusive, Holders: []string{"a2:3", "r1:3"}, Count: 2, Waiting: []string{"w"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			tc.setup(w)
			d := w.decide(name1, now.Add(time.Second+tc.at), cfg)
			if diff := cmp.Diff(tc.want, sharedViewOf(w, d)); diff != "" {
				t.Errorf("key (-want +got):\n%s%s", diff, describeDecision(d))
			}
			var fin []string
			for _, u := range d.Finish {
				fin = append(fin, u.Request.Name)
			}
			if diff := cmp.Diff(tc.wantFin, fin); diff != "" {
				t.Errorf("finished (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSharedHoldersCapped: at most MaxSharedHolders requests hold a key shared (the bound of
// ProjectLock.status.sharedHolders, which the API server enforces); the next waits (mutant
// shared-holders-uncapped).
func TestSharedHoldersCapped(t *testing.T) {
	w := newWorld(t)
	for i := range locksv1.MaxSharedHolders + 1 {
		w.add(reader(fmt.Sprintf("r%03d", i), fmt.Sprintf("user%03d", i)))
	}
	d := w.decide(name1, now, testConfig())
	if got := len(w.locks[name1].Status.SharedHolders); got != locksv1.MaxSharedHolders {
		t.Errorf("%d shared holders, want %d", got, locksv1.MaxSharedHolders)
	}
	if diff := cmp.Diff([]string{fmt.Sprintf("r%03d", locksv1.MaxSharedHolders)}, names(d.Queue)); diff != "" {
		t.Errorf("waiting (-want +got):\n%s", diff)
	}
}

// TestSharedTryOnceWriterHoldsBackNobody: a writer with waitTimeout 0s that finds readers
// holding fails Busy in the decision, and a reader behind it is granted in that same decision,
// not at the next event (mutant shared-try-once-writer-holds-back).
func TestSharedTryOnceWriterHoldsBackNobody(t *testing.T) {
	cfg := testConfig()
	w := newWorld(t)
	w.add(reader("r1", "alice"))
	w.decide(name1, now, cfg)
	w.add(makeReq("w").Owner("bob", 0).WaitTimeout(0).Obj())
	w.add(reader("r2", "carol"))
	d := w.decideOnce(name1, now.Add(time.Second), cfg)
	t1, t2 := tokenOf(t, w, "r1"), tokenOf(t, w, "r2")
	if diff := cmp.Diff(sharedView{Mode: locksv1.ModeShared, Holders: []string{"r1:" + itoa(t1), "r2:" + itoa(t2)}, Count: 2}, sharedViewOf(w, d)); diff != "" {
		t.Fatalf("the reader behind the try-once writer holds with the first (-want +got):\n%s", diff)
	}
	if got := w.get("w").Status.Phase; got != locksv1.PhaseFailed {
		t.Errorf("try-once writer phase %s, want Failed", got)
	}
}
