package sharding

import (
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// NewQueueFunc is a controller.Options.NewQueue: the controller-runtime priority queue, with
// every add of a key this replica does not own delayed by the router's backup delay. Event adds
// and time-driven requeues (RequeueAfter: TTL expiry, holder-Lease lapse, thaw) go through the
// same rule, so a backup decides a deadline D after the owner would. Rate-limited retries
// after an error are left alone: they only follow a reconcile that already ran here. A nil
// router gives nil, controller-runtime's default queue.
func NewQueueFunc(router Router, opts ...QueueOption) func(string, workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	if router == nil {
		return nil
	}
	return func(name string, rl workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
		q := newRoutedQueue(priorityqueue.New(name, func(o *priorityqueue.Opts[reconcile.Request]) { o.RateLimiter = rl }), router, opts...)
		if s, ok := router.(subscriber); ok {
			s.Subscribe(q.reroute)
		}
		return q
	}
}

func newRoutedQueue(pq priorityqueue.PriorityQueue[reconcile.Request], router Router, opts ...QueueOption) *routedQueue {
	q := &routedQueue{PriorityQueue: pq, router: router, clock: clock.RealClock{}, delayed: map[reconcile.Request]delayedItem{}}
	for _, o := range opts {
		o(q)
	}
	return q
}

// Progress says when a key was last decided by anyone: when a write of a decision on it (a
// status that some replica wrote) was last seen in the watch.
type Progress interface {
	// LastDecided is the time that write was seen; zero when never.
	LastDecided(key string) time.Time
}

// QueueOption configures NewQueueFunc's queue.
type QueueOption func(*routedQueue)

// WithProgress lets a backup leave a key alone while its owner decides it: when a delayed
// item comes due and the key was decided since the item was due for its owner, the owner is
// alive and at work on it, and the item waits one more backup delay instead of being decided
// here — once: an item deferred before is decided when it comes due again, whatever the
// progress. A key nobody has decided for a backup delay is decided by its backup at once (its
// owner died, hung or is cut off), and any key within two backup delays of being due for its
// owner: progress is only evidence that the owner is at work, and an owner that writes some of
// a key's statuses but hangs before the write a waiter needs must not hold the key up for
// longer than that (docs/protocol.md, "Backups"). Without it a backup decides every key it is
// given from its cache, a backup delay after its owner, which usually writes nothing but costs
// a reconcile and, where this replica's cache lags the owner's writes by more than the delay,
// a conflicting write (409).
func WithProgress(p Progress) QueueOption { return func(q *routedQueue) { q.progress = p } }

// WithQueueClock sets the clock that stamps when a delayed item was due for its owner.
func WithQueueClock(c clock.PassiveClock) QueueOption { return func(q *routedQueue) { q.clock = c } }

// subscriber is a Router that says when ownership may have changed.
type subscriber interface{ Subscribe(func()) }

// routedQueue is a priority queue whose adds wait for the key's backup delay. The queue keeps
// the earliest ready time of an item, so a key already queued by the owner rule is not pushed
// back by a later backup add.
type routedQueue struct {
	priorityqueue.PriorityQueue[reconcile.Request]
	router Router

	progress Progress // nil: a backup decides every delayed item when it comes due
	clock    clock.PassiveClock

	// delayed are the items added with a backup delay and not handed out since, each with the
	// earliest time it was due for its owner (the add, plus any RequeueAfter): when this replica
	// comes to own one (its owner left or lapsed), reroute makes it ready at once; when it
	// comes due, the owner's progress since that time defers it (WithProgress), once.
	mu      sync.Mutex
	delayed map[reconcile.Request]delayedItem
}

// delayedItem is when a delayed item was due for its owner, and whether it was deferred once
// already.
type delayedItem struct {
	due      time.Time
	deferred bool
}

var _ priorityqueue.PriorityQueue[reconcile.Request] = (*routedQueue)(nil)

func (q *routedQueue) Add(item reconcile.Request) {
	q.AddWithOpts(priorityqueue.AddOpts{}, item)
}

func (q *routedQueue) AddAfter(item reconcile.Request, after time.Duration) {
	q.AddWithOpts(priorityqueue.AddOpts{After: after}, item)
}

func (q *routedQueue) AddWithOpts(o priorityqueue.AddOpts, items ...reconcile.Request) {
	if o.RateLimited {
		q.PriorityQueue.AddWithOpts(o, items...)
		return
	}
	for _, item := range items {
		io := o
		// The delay is read and the item recorded as delayed under one lock, which reroute
		// also takes: an ownership change that lands after the read finds the item recorded.
		q.mu.Lock()
		if j := Judge(q.router, item.String()); !j.Owner {
			due := q.clock.Now().Add(io.After)
			io.After += j.Delay
			if was, ok := q.delayed[item]; !ok {
				q.delayed[item] = delayedItem{due: due}
			} else if due.Before(was.due) {
				// An item deferred once stays deferred: a new add does not buy it another delay.
				q.delayed[item] = delayedItem{due: due, deferred: was.deferred}
			}
		}
		q.mu.Unlock()
		q.PriorityQueue.AddWithOpts(io, item)
	}
}

func (q *routedQueue) GetWithPriority() (reconcile.Request, int, bool) {
	for {
		item, prio, shutdown := q.PriorityQueue.GetWithPriority()
		if shutdown {
			return item, prio, shutdown
		}
		d, deferred := q.deferral(item)
		if !deferred {
			return item, prio, shutdown
		}
		// Handed out to nobody: put it back to come due again a backup delay from now.
		q.Done(item)
		q.PriorityQueue.AddWithOpts(priorityqueue.AddOpts{After: d}, item)
	}
}

// deferral says whether item, just come due, waits another backup delay d: it was delayed as a
// backup's, was not deferred before, this replica still does not own it, and the key was
// decided since it was due for its owner. It forgets the item as delayed otherwise.
func (q *routedQueue) deferral(item reconcile.Request) (d time.Duration, deferred bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	was, delayed := q.delayed[item]
	delete(q.delayed, item)
	if !delayed || q.progress == nil {
		return 0, false
	}
	key := item.String()
	j := Judge(q.router, key)
	if !j.Defers(was.deferred, q.progress.LastDecided(key), was.due) {
		return 0, false
	}
	q.delayed[item] = delayedItem{due: q.clock.Now(), deferred: true}
	BackupDeferrals.Inc()
	return j.Delay, true
}

func (q *routedQueue) Get() (reconcile.Request, bool) {
	item, _, shutdown := q.GetWithPriority()
	return item, shutdown
}

// reroute makes ready at once every delayed item this replica now owns. An item whose wait
// was a deadline plus the delay is decided early; that decision requeues it at its deadline.
func (q *routedQueue) reroute() {
	q.mu.Lock()
	var now []reconcile.Request
	for item := range q.delayed {
		if Judge(q.router, item.String()).Owner {
			now = append(now, item)
			delete(q.delayed, item)
		}
	}
	q.mu.Unlock()
	for _, item := range now {
		q.PriorityQueue.AddWithOpts(priorityqueue.AddOpts{}, item)
	}
}
