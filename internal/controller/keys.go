package controller

import (
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/turnstile-dev/turnstile/internal/sharding"
)

// keyTracker is what the lock controller's work queue says of each key that is in it or being
// reconciled: how often an event woke it, since when it has been due without being handed to a
// worker, and since when a worker holds it. The executor reads the wakes to let position
// refreshes yield to new work (refreshYields); the watchdog reads the rest to say why a key with
// work went undecided (watchdog.go). A key neither queued nor held by a worker is not kept.
type keyTracker struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	keys  map[reconcile.Request]*keyState
	// queue is the controller's queue, once it is made: the watchdog wakes keys through it.
	queue workqueue.TypedInterface[reconcile.Request]
}

type keyState struct {
	wakes uint64    // adds without a delay: events (a requeue after a delay is not a wake)
	due   time.Time // when it came due, or will, unless handed out since; zero: not queued
	held  time.Time // when a worker took it; zero: no worker holds it
}

func newKeyTracker(c clock.PassiveClock) *keyTracker {
	return &keyTracker{clock: c, keys: map[reconcile.Request]*keyState{}}
}

func (t *keyTracker) state(k reconcile.Request) *keyState {
	s, ok := t.keys[k]
	if !ok {
		s = &keyState{}
		t.keys[k] = s
	}
	return s
}

// added records an add of k: woken by an event when after is zero, else due after it.
func (t *keyTracker) added(k reconcile.Request, after time.Duration, woken bool) {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.state(k)
	if woken {
		s.wakes++
	}
	if due := now.Add(after); s.due.IsZero() || due.Before(s.due) {
		s.due = due
	}
}

// handed records that a worker took k.
func (t *keyTracker) handed(k reconcile.Request) {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.state(k)
	s.held, s.due = now, time.Time{}
}

// done records that the worker let k go; it stays known if it was added meanwhile.
func (t *keyTracker) done(k reconcile.Request) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.keys[k]
	if !ok {
		return
	}
	s.held = time.Time{}
	if s.due.IsZero() {
		delete(t.keys, k)
	}
}

// wake adds k to the controller's queue, as an event would.
func (t *keyTracker) wake(k reconcile.Request) {
	t.mu.Lock()
	q := t.queue
	t.mu.Unlock()
	if q != nil {
		q.Add(k)
	}
}

// wakes is how often an event woke k while it was queued or held.
func (t *keyTracker) wakes(k reconcile.Request) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, ok := t.keys[k]; ok {
		return s.wakes
	}
	return 0
}

// where says where k is: queued (due since), held by a worker (since), or neither.
func (t *keyTracker) where(k reconcile.Request) (due, held time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, ok := t.keys[k]; ok {
		return s.due, s.held
	}
	return time.Time{}, time.Time{}
}

// trackedQueue is the lock controller's queue, telling t of every add, hand-out and done.
type trackedQueue struct {
	priorityqueue.PriorityQueue[reconcile.Request]
	t *keyTracker
}

var _ priorityqueue.PriorityQueue[reconcile.Request] = (*trackedQueue)(nil)

// newTrackedQueue is a controller.Options.NewQueue: controller-runtime's priority queue (routed
// by router in active-active, sharding.NewQueueFunc), tracked by t.
func newTrackedQueue(t *keyTracker, router sharding.Router, opts ...sharding.QueueOption) func(string, workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	routed := sharding.NewQueueFunc(router, opts...)
	return func(name string, rl workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
		var inner priorityqueue.PriorityQueue[reconcile.Request]
		if routed != nil {
			inner = routed(name, rl).(priorityqueue.PriorityQueue[reconcile.Request])
		} else {
			inner = priorityqueue.New(name, func(o *priorityqueue.Opts[reconcile.Request]) { o.RateLimiter = rl })
		}
		q := &trackedQueue{PriorityQueue: inner, t: t}
		t.mu.Lock()
		t.queue = q
		t.mu.Unlock()
		return q
	}
}

func (q *trackedQueue) Add(item reconcile.Request) {
	q.AddWithOpts(priorityqueue.AddOpts{}, item)
}

func (q *trackedQueue) AddAfter(item reconcile.Request, after time.Duration) {
	q.AddWithOpts(priorityqueue.AddOpts{After: after}, item)
}

func (q *trackedQueue) AddRateLimited(item reconcile.Request) {
	q.AddWithOpts(priorityqueue.AddOpts{RateLimited: true}, item)
}

func (q *trackedQueue) AddWithOpts(o priorityqueue.AddOpts, items ...reconcile.Request) {
	for _, item := range items {
		// A retry after an error is due after the limiter's delay, which only the inner queue
		// knows: it is recorded as due now, an upper bound on how late it is.
		q.t.added(item, o.After, o.After == 0 && !o.RateLimited)
	}
	q.PriorityQueue.AddWithOpts(o, items...)
}

func (q *trackedQueue) GetWithPriority() (reconcile.Request, int, bool) {
	item, prio, shutdown := q.PriorityQueue.GetWithPriority()
	if !shutdown {
		q.t.handed(item)
	}
	return item, prio, shutdown
}

func (q *trackedQueue) Get() (reconcile.Request, bool) {
	item, _, shutdown := q.GetWithPriority()
	return item, shutdown
}

func (q *trackedQueue) Done(item reconcile.Request) {
	q.t.done(item)
	q.PriorityQueue.Done(item)
}
