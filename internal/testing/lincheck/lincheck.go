// Package lincheck records what lock clients observed — each acquire from the moment it asked to
// the moment it saw its grant, with the tokens the grant showed, and each release from the call
// to its answer — and checks that history with porcupine (the checker etcd's robustness tests
// use) against a sequential model of a fenced lock: one holder per key at a time, and every
// holder's tokens above every token an earlier holder of the key showed.
package lincheck

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// Kind is what a client did.
type Kind int

// The operations of a fenced lock.
const (
	Acquire Kind = iota
	Release
)

// Input is one operation on one key.
type Input struct {
	Kind   Kind
	Key    string
	Client locksv1.HolderID // the holder identity, compared field by field (one request per identity at a time)
}

// Output is what an acquire saw: the per-key token and the request-level token of its grant.
type Output struct {
	KeyToken     int64
	RequestToken int64
}

// History is a concurrent-safe log of operations, timed on one monotonic clock.
type History struct {
	mu    sync.Mutex
	start time.Time
	ops   []porcupine.Operation
}

// NewHistory starts an empty history.
func NewHistory() *History { return &History{start: time.Now()} }

// Now is a timestamp on the history's clock: take it before the call and after the answer.
func (h *History) Now() int64 { return int64(time.Since(h.start)) }

// Add records one operation that was called at call and answered at ret.
func (h *History) Add(in Input, out Output, call, ret int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: 0, Input: in, Call: call, Output: out, Return: ret})
}

// Len is how many operations were recorded.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ops)
}

// state is one key's lock: its holder (held false when free) and the highest token any holder
// showed.
type state struct {
	held   bool
	holder locksv1.HolderID
	top    int64
}

// Model is the sequential specification of a fenced lock, partitioned by key.
var Model = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(Input).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() interface{} { return state{} },
	Step: func(s, input, output interface{}) (bool, interface{}) {
		st, in := s.(state), input.(Input)
		switch in.Kind {
		case Acquire:
			out := output.(Output)
			ok := !st.held && out.KeyToken > st.top && out.RequestToken >= out.KeyToken
			return ok, state{held: true, holder: in.Client, top: max(st.top, out.RequestToken)}
		default:
			return st.held && st.holder == in.Client, state{top: st.top}
		}
	},
	DescribeOperation: func(input, output interface{}) string {
		in := input.(Input)
		if in.Kind == Release {
			return fmt.Sprintf("%s releases %s", in.Client, in.Key)
		}
		out := output.(Output)
		return fmt.Sprintf("%s acquires %s (token %d, request %d)", in.Client, in.Key, out.KeyToken, out.RequestToken)
	},
	DescribeState: func(s interface{}) string {
		st := s.(state)
		if !st.held {
			return fmt.Sprintf("free, top token %d", st.top)
		}
		return fmt.Sprintf("held by %s, top token %d", st.holder, st.top)
	},
}

// Result is the verdict on a history.
type Result struct {
	Operations int
	Keys       int
	Verdict    porcupine.CheckResult
	// Explanation describes the longest linearizable prefix of a key that is not linearizable.
	Explanation string
}

func (r Result) String() string {
	return fmt.Sprintf("%d operations on %d keys: %s", r.Operations, r.Keys, r.Verdict)
}

// Check checks the history, giving up after timeout (Verdict Unknown).
func (h *History) Check(timeout time.Duration) Result {
	h.mu.Lock()
	ops := append([]porcupine.Operation(nil), h.ops...)
	h.mu.Unlock()
	res, info := porcupine.CheckOperationsVerbose(Model, ops, timeout)
	r := Result{Operations: len(ops), Keys: len(Model.Partition(ops)), Verdict: res}
	if res == porcupine.Illegal {
		var b strings.Builder
		for _, part := range info.PartialLinearizationsOperations() {
			for _, lin := range part {
				if len(lin) == 0 {
					continue
				}
				fmt.Fprintf(&b, "a longest linearizable prefix:\n")
				for _, op := range lin {
					fmt.Fprintf(&b, "  [%d..%d] %s\n", op.Call, op.Return, Model.DescribeOperation(op.Input, op.Output))
				}
				break
			}
		}
		r.Explanation = b.String()
	}
	return r
}
