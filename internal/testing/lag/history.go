// Package lag gives tests managers whose caches lag behind the API server by amounts the test
// chooses. A History records every event of the kinds Turnstile's reconcilers read, in the
// store's order, from one watch per kind. A View is one manager's cache: for each kind, a
// consistent prefix of that kind's history (a state that really existed), advanced only forward
// and only when the test says so, independently per kind — as an informer's caches are. Reads
// through a View come from that prefix; writes go straight to the API server, with the
// resourceVersion preconditions the reconciler puts on them.
//
// This is how the safety tests attack the grant path: two or three reconcilers, each on its own
// View, deciding from different stale pictures of the same keys while the test force-unlocks,
// freezes, expires and deletes, and checks the invariant against the store after every step.
package lag

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// Kind is one watched resource.
type Kind int

// The kinds a View serves.
const (
	LockRequests Kind = iota
	ProjectLocks
	CommandLocks
	Leases
	numKinds
)

// Kinds lists every kind, for loops.
var Kinds = []Kind{LockRequests, ProjectLocks, CommandLocks, Leases}

func (k Kind) String() string {
	return [...]string{"LockRequests", "ProjectLocks", "CommandLocks", "Leases"}[k]
}

func (k Kind) newList() client.ObjectList {
	switch k {
	case LockRequests:
		return &locksv1.LockRequestList{}
	case ProjectLocks:
		return &locksv1.ProjectLockList{}
	case CommandLocks:
		return &locksv1.CommandLockList{}
	default:
		return &coordinationv1.LeaseList{}
	}
}

// kindOf maps an object or list type to its Kind.
func kindOf(o any) (Kind, bool) {
	switch o.(type) {
	case *locksv1.LockRequest, *locksv1.LockRequestList:
		return LockRequests, true
	case *locksv1.ProjectLock, *locksv1.ProjectLockList:
		return ProjectLocks, true
	case *locksv1.CommandLock, *locksv1.CommandLockList:
		return CommandLocks, true
	case *coordinationv1.Lease, *coordinationv1.LeaseList:
		return Leases, true
	}
	return 0, false
}

// Event is one change of one object, as the watch delivered it.
type Event struct {
	Type   watch.EventType
	Object client.Object
}

// History is every event of every kind since it started, in the store's order per kind.
type History struct {
	c      client.WithWatch
	mu     sync.Mutex
	logs   [numKinds][]Event
	err    error
	cancel context.CancelFunc
	done   sync.WaitGroup
	// changed is closed (and replaced) whenever an event is recorded or the history fails:
	// what Sync and SyncWith wait on instead of sleeping.
	changed chan struct{}
	// noops are the updates through a View that the API server answered as no-ops.
	noops []NoOp
}

// NoOp is an update a manager made through a View that the API server answered without
// changing the object: it came back with the resourceVersion it was sent with. Such a write
// fences nothing (a write in flight preconditioned on that resourceVersion still lands), so the
// protocol makes none (docs/protocol.md, "A fence must change the stored object").
type NoOp struct {
	Kind   Kind
	Key    client.ObjectKey
	RV     string
	Status bool // a status subresource update
}

func (n NoOp) String() string {
	what := "update"
	if n.Status {
		what = "status update"
	}
	return fmt.Sprintf("no-op write: a %s of %s %s at rv %s kept its resourceVersion", what, n.Kind, n.Key, n.RV)
}

func (h *History) recordNoOp(n NoOp) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.noops = append(h.noops, n)
}

// NoOps are the no-op updates made through any View of this history in namespace ns (every
// namespace if "", cluster-scoped objects always).
func (h *History) NoOps(ns string) []NoOp {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []NoOp
	for _, n := range h.noops {
		if ns == "" || n.Key.Namespace == "" || n.Key.Namespace == ns {
			out = append(out, n)
		}
	}
	return out
}

// Start records the history of every kind in all namespaces. The objects that exist already
// are its first events (Added), as an informer's initial list is.
func Start(ctx context.Context, c client.WithWatch) (*History, error) {
	ctx, cancel := context.WithCancel(ctx)
	h := &History{c: c, cancel: cancel, changed: make(chan struct{})}
	for _, k := range Kinds {
		list := k.newList()
		if err := c.List(ctx, list); err != nil {
			cancel()
			return nil, fmt.Errorf("list %s: %w", k, err)
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			cancel()
			return nil, err
		}
		for _, it := range items {
			if o := it.(client.Object); !system(o) {
				h.logs[k] = append(h.logs[k], Event{watch.Added, o})
			}
		}
		rv := list.(metav1.ListInterface).GetResourceVersion()
		h.done.Add(1)
		go h.follow(ctx, k, rv)
	}
	return h, nil
}

// system reports whether o belongs to the control plane itself (kube-apiserver renews its
// identity Leases in kube-system every few seconds): not Turnstile's business, and left out so
// that a history, and a seeded run, does not depend on when they happen.
func system(o client.Object) bool { return strings.HasPrefix(o.GetNamespace(), "kube-") }

// follow appends k's watch events, resuming from the last resourceVersion when the server ends
// the watch, so no event is missed.
func (h *History) follow(ctx context.Context, k Kind, rv string) {
	defer h.done.Done()
	for ctx.Err() == nil {
		w, err := h.c.Watch(ctx, k.newList(), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
		if err != nil {
			if ctx.Err() == nil {
				h.fail(fmt.Errorf("watch %s from %s: %w", k, rv, err))
			}
			return
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				h.fail(fmt.Errorf("watch %s: %v", k, ev.Object))
				w.Stop()
				return
			}
			o, ok := ev.Object.(client.Object)
			if !ok || ev.Type == watch.Bookmark {
				continue
			}
			rv = o.GetResourceVersion()
			if system(o) {
				continue
			}
			h.mu.Lock()
			h.logs[k] = append(h.logs[k], Event{ev.Type, o})
			h.notify()
			h.mu.Unlock()
		}
		w.Stop()
	}
}

func (h *History) fail(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		h.err = err
	}
	h.notify()
}

// notify wakes whoever waits for the history to change; h.mu is held.
func (h *History) notify() {
	close(h.changed)
	h.changed = make(chan struct{})
}

// await waits until cond holds, checking it now and after each change of the history, for at
// most 10 seconds; what names the wait in its error.
func (h *History) await(what string, cond func() (bool, error)) error {
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		h.mu.Lock()
		changed, err := h.changed, h.err
		h.mu.Unlock()
		if err != nil {
			return err
		}
		if ok, err := cond(); err != nil || ok {
			return err
		}
		select {
		case <-changed:
		case <-timeout.C:
			return fmt.Errorf("history of %s did not catch up with the API server within 10s", what)
		}
	}
}

// Stop stops recording.
func (h *History) Stop() {
	h.cancel()
	h.done.Wait()
}

// Err is the first error the recording met; a History with an error has lost events.
func (h *History) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// Len is how many events of kind k are recorded.
func (h *History) Len(k Kind) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.logs[k])
}

// Mark is a position in every kind's history.
type Mark [numKinds]int

// Mark is the current end of every kind's history.
func (h *History) Mark() Mark {
	h.mu.Lock()
	defer h.mu.Unlock()
	var m Mark
	for _, k := range Kinds {
		m[k] = len(h.logs[k])
	}
	return m
}

// Events returns kind k's events from..to (to past the end means the end).
func (h *History) Events(k Kind, from, to int) []Event {
	return h.events(k, from, min(to, h.Len(k)))
}

func (h *History) events(k Kind, from, to int) []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.logs[k][from:to]
}

// Sync waits until the history holds every change the API server has made so far: replaying
// each kind's events gives exactly the objects and resourceVersions a live list returns.
func (h *History) Sync(ctx context.Context) error {
	for _, k := range Kinds {
		err := h.await(k.String(), func() (bool, error) {
			live, err := h.liveVersions(ctx, k)
			return err == nil && equalVersions(live, h.replayedVersions(k)), err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// SyncWith waits until the history of kind k holds every change that list — just read from the
// API server, in namespace ns ("" for all) — shows.
func (h *History) SyncWith(k Kind, ns string, list client.ObjectList) error {
	want, err := versionsOf(list)
	if err != nil {
		return err
	}
	return h.await(k.String(), func() (bool, error) {
		have := h.replayedVersions(k)
		if ns != "" {
			for key := range have {
				if key.Namespace != ns {
					delete(have, key)
				}
			}
		}
		return equalVersions(want, have), nil
	})
}

func (h *History) liveVersions(ctx context.Context, k Kind) (map[client.ObjectKey]string, error) {
	list := k.newList()
	if err := h.c.List(ctx, list); err != nil {
		return nil, fmt.Errorf("list %s: %w", k, err)
	}
	return versionsOf(list)
}

func versionsOf(list client.ObjectList) (map[client.ObjectKey]string, error) {
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	out := map[client.ObjectKey]string{}
	for _, it := range items {
		if o := it.(client.Object); !system(o) {
			out[client.ObjectKeyFromObject(o)] = o.GetResourceVersion()
		}
	}
	return out, nil
}

func (h *History) replayedVersions(k Kind) map[client.ObjectKey]string {
	out := map[client.ObjectKey]string{}
	for _, ev := range h.events(k, 0, h.Len(k)) {
		key := client.ObjectKeyFromObject(ev.Object)
		if ev.Type == watch.Deleted {
			delete(out, key)
			continue
		}
		out[key] = ev.Object.GetResourceVersion()
	}
	return out
}

func equalVersions(a, b map[client.ObjectKey]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Describe lists kind k's events from..to, one per line, for a failure message.
func (h *History) Describe(k Kind, from, to int) string {
	out := ""
	for i, ev := range h.events(k, from, to) {
		out += fmt.Sprintf("%s[%d] %s %s rv=%s\n", k, from+i, ev.Type, client.ObjectKeyFromObject(ev.Object), ev.Object.GetResourceVersion())
	}
	return out
}

// Summary says in one line what matters of o to the grant protocol: a request's phase, the keys
// it holds and its tokens; a ProjectLock's holders, token and whether it is being deleted.
func Summary(o client.Object) string {
	out := fmt.Sprintf("%s rv=%s", o.GetName(), o.GetResourceVersion())
	if o.GetDeletionTimestamp() != nil {
		out += " deleting"
	}
	switch o := o.(type) {
	case *locksv1.LockRequest:
		out += fmt.Sprintf(" %s token=%d", o.Status.Phase, o.Status.FencingToken)
		for _, l := range o.Status.Locks {
			if l.Held {
				out += fmt.Sprintf(" held[%s]=%d", l.Key, l.FencingToken)
			}
		}
		if o.Status.QueuePosition > 0 {
			out += fmt.Sprintf(" position=%d", o.Status.QueuePosition)
		}
		if o.Spec.Release {
			out += " release"
		}
	case *locksv1.ProjectLock:
		out += fmt.Sprintf(" token=%d holders=[", o.Status.FencingToken)
		for i, r := range o.Status.HolderRequests() {
			if i > 0 {
				out += " "
			}
			out += r.Name
		}
		out += "] queue=["
		for i, q := range o.Status.Queue {
			if i > 0 {
				out += " "
			}
			out += q.Request + ":" + string(q.Priority)
		}
		out += "]"
	case *locksv1.CommandLock:
		out += fmt.Sprintf(" locked=%v", o.Spec.Locked)
	}
	return out
}

// keysOf returns the sorted keys of a state map.
func keysOf(m map[client.ObjectKey]client.Object) []client.ObjectKey {
	out := make([]client.ObjectKey, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}
