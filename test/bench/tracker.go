package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// tracker watches every LockRequest with one watch, as a user's `kubectl wait` would, and
// timestamps what it sees the moment the event arrives: when a request is first seen Granted,
// and the grants of each namespace in order. It also sorts every status write it sees by what
// it did (enqueue, grant, refresh, finish), so write counts can be explained.
type tracker struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every event
	objs    map[types.NamespacedName]*objState
	grants  map[string][]grantEvent // namespace -> grants in order
	// gone are the requests whose deletion is awaited (ExpectGone): when it was seen, zero
	// until it is; released, when such a request was first seen released (spec.release, a
	// final phase) or deleted, whichever came first.
	gone     map[types.NamespacedName]time.Time
	released map[types.NamespacedName]time.Time
	stats    map[string]*Transitions
	err      error
}

type objState struct {
	phase     locksv1.LockRequestPhase
	grantedAt time.Time
}

type grantEvent struct {
	name string
	at   time.Time
}

// Transitions counts, per namespace, the LockRequest events the tracker saw, by what the write
// did. Every status write is one Modified event, so these explain the API write counts.
type Transitions struct {
	Added    int `json:"added"`
	Enqueued int `json:"enqueued"`  // no phase -> Pending
	Granted  int `json:"granted"`   // -> Granted
	Refresh  int `json:"refreshed"` // Pending -> Pending: a queue position or message refresh
	Finished int `json:"finished"`  // -> Released, Expired or Failed
	Other    int `json:"other"`
	Deleted  int `json:"deleted"`
	// Phased counts requests that got a phase (never decremented); LastPhased is when the
	// latest one did.
	Phased     int       `json:"-"`
	FirstPhase time.Time `json:"-"`
	LastPhased time.Time `json:"-"`
}

func (t Transitions) minus(o Transitions) Transitions {
	return Transitions{Added: t.Added - o.Added, Enqueued: t.Enqueued - o.Enqueued, Granted: t.Granted - o.Granted,
		Refresh: t.Refresh - o.Refresh, Finished: t.Finished - o.Finished, Other: t.Other - o.Other, Deleted: t.Deleted - o.Deleted}
}

func startTracker(ctx context.Context, cfg *rest.Config) (*tracker, error) {
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: framework.Scheme})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	w, err := wc.Watch(ctx, &locksv1.LockRequestList{})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watch lockrequests: %w", err)
	}
	t := &tracker{
		cancel: cancel, done: make(chan struct{}), changed: make(chan struct{}),
		objs: map[types.NamespacedName]*objState{}, grants: map[string][]grantEvent{},
		gone: map[types.NamespacedName]time.Time{}, released: map[types.NamespacedName]time.Time{}, stats: map[string]*Transitions{},
	}
	go func() {
		defer close(t.done)
		rv := ""
		for {
			for ev := range w.ResultChan() {
				at := time.Now()
				if ev.Type == watch.Error {
					t.fail(fmt.Errorf("watch error: %v", ev.Object))
					continue
				}
				if m, ok := ev.Object.(metav1.Object); ok && m.GetResourceVersion() != "" {
					rv = m.GetResourceVersion()
				}
				t.observe(ev, at)
			}
			w.Stop()
			if ctx.Err() != nil {
				return
			}
			// The server closed the watch: resume from the last resourceVersion seen.
			w, err = wc.Watch(ctx, &locksv1.LockRequestList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
			if err != nil {
				t.fail(fmt.Errorf("resume watch: %w", err))
				return
			}
		}
	}()
	return t, nil
}

func (t *tracker) fail(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		t.err = err
	}
	close(t.changed)
	t.changed = make(chan struct{})
}

// Err is the first watch failure: the tracker may have missed events.
func (t *tracker) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// Stop ends the watch.
func (t *tracker) Stop() {
	t.cancel()
	<-t.done
}

func (t *tracker) observe(ev watch.Event, at time.Time) {
	lr, ok := ev.Object.(*locksv1.LockRequest)
	if !ok {
		return
	}
	key := types.NamespacedName{Namespace: lr.Namespace, Name: lr.Name}
	t.mu.Lock()
	defer t.mu.Unlock()
	defer func() {
		close(t.changed)
		t.changed = make(chan struct{})
	}()
	st := t.stats[lr.Namespace]
	if st == nil {
		st = &Transitions{}
		t.stats[lr.Namespace] = st
	}
	prev := t.objs[key]
	if r, expected := t.released[key]; expected && r.IsZero() && (ev.Type == watch.Deleted || lr.Spec.Release || lr.Status.Phase.IsFinal()) {
		t.released[key] = at
	}
	switch ev.Type {
	case watch.Deleted:
		st.Deleted++
		delete(t.objs, key)
		if g, expected := t.gone[key]; expected && g.IsZero() {
			t.gone[key] = at
		}
		return
	case watch.Added:
		st.Added++
	case watch.Modified:
	default:
		return
	}
	if prev == nil {
		prev = &objState{}
	}
	cur := &objState{phase: lr.Status.Phase, grantedAt: prev.grantedAt}
	t.objs[key] = cur
	if ev.Type == watch.Modified {
		switch {
		case cur.phase == locksv1.PhaseGranted && prev.phase != locksv1.PhaseGranted:
			st.Granted++
		case prev.phase == "" && cur.phase == locksv1.PhasePending:
			st.Enqueued++
		case prev.phase == locksv1.PhasePending && cur.phase == locksv1.PhasePending:
			st.Refresh++
		case cur.phase.IsFinal() && !prev.phase.IsFinal():
			st.Finished++
		default:
			st.Other++
		}
	}
	if prev.phase == "" && cur.phase != "" {
		st.Phased++
		if st.FirstPhase.IsZero() {
			st.FirstPhase = at
		}
		st.LastPhased = at
	}
	if cur.phase == locksv1.PhaseGranted && prev.phase != locksv1.PhaseGranted && cur.grantedAt.IsZero() {
		cur.grantedAt = at
		t.grants[lr.Namespace] = append(t.grants[lr.Namespace], grantEvent{name: lr.Name, at: at})
	}
}

// waitFor blocks until cond (called with the lock held) is true.
func (t *tracker) waitFor(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		t.mu.Lock()
		ok, err, changed := cond(), t.err, t.changed
		t.mu.Unlock()
		if ok {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		}
	}
}

// WaitGranted returns when the request was first seen Granted.
func (t *tracker) WaitGranted(ctx context.Context, ns, name string, timeout time.Duration) (time.Time, error) {
	key := types.NamespacedName{Namespace: ns, Name: name}
	var at time.Time
	err := t.waitFor(ctx, timeout, "grant of "+key.String(), func() bool {
		if o := t.objs[key]; o != nil && !o.grantedAt.IsZero() {
			at = o.grantedAt
			return true
		}
		return false
	})
	return at, err
}

// ExpectGone has the tracker note when the request's deletion is seen, for WaitGone; called
// before the request can be deleted.
func (t *tracker) ExpectGone(ns, name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gone[types.NamespacedName{Namespace: ns, Name: name}] = time.Time{}
	t.released[types.NamespacedName{Namespace: ns, Name: name}] = time.Time{}
}

// Released is when a request given to ExpectGone was first seen released or deleted (zero if
// it was not), and forgets it; called once WaitGone has returned.
func (t *tracker) Released(ns, name string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	key := types.NamespacedName{Namespace: ns, Name: name}
	at := t.released[key]
	delete(t.released, key)
	return at
}

// WaitGone returns when the deletion of a request given to ExpectGone was seen, and forgets it.
func (t *tracker) WaitGone(ctx context.Context, ns, name string, timeout time.Duration) (time.Time, error) {
	key := types.NamespacedName{Namespace: ns, Name: name}
	var at time.Time
	err := t.waitFor(ctx, timeout, "the deletion of "+key.String(), func() bool {
		if g := t.gone[key]; !g.IsZero() {
			at = g
			delete(t.gone, key)
			return true
		}
		return false
	})
	return at, err
}

// WaitPhased returns when the request has a phase.
func (t *tracker) WaitPhased(ctx context.Context, ns, name string, timeout time.Duration) error {
	key := types.NamespacedName{Namespace: ns, Name: name}
	return t.waitFor(ctx, timeout, "a phase on "+key.String(), func() bool {
		o := t.objs[key]
		return o != nil && o.phase != ""
	})
}

// GrantCount is how many grants the namespace has seen so far.
func (t *tracker) GrantCount(ns string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.grants[ns])
}

// WaitGrant returns the namespace's grant number i (counting from 0).
func (t *tracker) WaitGrant(ctx context.Context, ns string, i int, timeout time.Duration) (grantEvent, error) {
	var g grantEvent
	err := t.waitFor(ctx, timeout, fmt.Sprintf("grant #%d in %s", i, ns), func() bool {
		if gs := t.grants[ns]; len(gs) > i {
			g = gs[i]
			return true
		}
		return false
	})
	return g, err
}

// WaitAllPhased returns the namespace's phase statistics once n requests have a phase.
func (t *tracker) WaitAllPhased(ctx context.Context, ns string, n int, timeout time.Duration) (Transitions, error) {
	var st Transitions
	err := t.waitFor(ctx, timeout, fmt.Sprintf("%d requests with a phase in %s", n, ns), func() bool {
		if s := t.stats[ns]; s != nil && s.Phased >= n {
			st = *s
			return true
		}
		return false
	})
	return st, err
}

// Stats is a snapshot of the namespace's transition counts.
func (t *tracker) Stats(ns string) Transitions {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.stats[ns]; s != nil {
		return *s
	}
	return Transitions{}
}

// PhasedIn is how many requests of the namespaces have been seen getting a phase.
func (t *tracker) PhasedIn(nss []string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.phasedIn(nss)
}

func (t *tracker) phasedIn(nss []string) int {
	n := 0
	for _, ns := range nss {
		if s := t.stats[ns]; s != nil {
			n += s.Phased
		}
	}
	return n
}

// WaitPhasedIn returns when n requests of the namespaces have been seen getting a phase, with
// the time the watch delivered the n-th.
func (t *tracker) WaitPhasedIn(ctx context.Context, nss []string, n int, timeout time.Duration) (time.Time, error) {
	var at time.Time
	err := t.waitFor(ctx, timeout, fmt.Sprintf("%d requests with a phase in %d namespaces", n, len(nss)), func() bool {
		if t.phasedIn(nss) < n {
			return false
		}
		for _, ns := range nss {
			if s := t.stats[ns]; s != nil && s.LastPhased.After(at) {
				at = s.LastPhased
			}
		}
		return true
	})
	return at, err
}
