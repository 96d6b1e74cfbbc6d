package sharding

import (
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// NewQueueFunc is a controller.Options.NewQueue: the controller-runtime priority queue, with
// every add of a key this replica does not own delayed by the router's backup delay. Event adds
// and time-driven requeues (RequeueAfter: TTL expiry, holder-Lease lapse, thaw) go through the
// same rule, so a backup decides a deadline D after the owner would. Rate-limited retries
// after an error are left alone: they only follow a reconcile that already ran here. A nil
// router gives nil, controller-runtime's default queue.
func NewQueueFunc(router Router) func(string, workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	if router == nil {
		return nil
	}
	return func(name string, rl workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
		q := &routedQueue{
			PriorityQueue: priorityqueue.New(name, func(o *priorityqueue.Opts[reconcile.Request]) { o.RateLimiter = rl }),
			router:        router,
			delayed:       map[reconcile.Request]bool{},
		}
		if s, ok := router.(subscriber); ok {
			s.Subscribe(q.reroute)
		}
		return q
	}
}

// subscriber is a Router that says when ownership may have changed.
type subscriber interface{ Subscribe(func()) }

// routedQueue is a priority queue whose adds wait for the key's backup delay. The queue keeps
// the earliest ready time of an item, so a key already queued by the owner rule is not pushed
// back by a later backup add.
type routedQueue struct {
	priorityqueue.PriorityQueue[reconcile.Request]
	router Router

	// delayed are the items added with a backup delay and not handed out since: when this
	// replica comes to own one (its owner left or lapsed), reroute makes it ready at once.
	mu      sync.Mutex
	delayed map[reconcile.Request]bool
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
		if d := q.router.Delay(item.String()); d > 0 {
			io.After += d
			q.mu.Lock()
			q.delayed[item] = true
			q.mu.Unlock()
		}
		q.PriorityQueue.AddWithOpts(io, item)
	}
}

func (q *routedQueue) GetWithPriority() (reconcile.Request, int, bool) {
	item, prio, shutdown := q.PriorityQueue.GetWithPriority()
	q.mu.Lock()
	delete(q.delayed, item)
	q.mu.Unlock()
	return item, prio, shutdown
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
		if q.router.Delay(item.String()) == 0 {
			now = append(now, item)
			delete(q.delayed, item)
		}
	}
	q.mu.Unlock()
	for _, item := range now {
		q.PriorityQueue.AddWithOpts(priorityqueue.AddOpts{}, item)
	}
}
