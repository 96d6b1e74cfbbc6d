package sharding

import (
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
		return &routedQueue{
			PriorityQueue: priorityqueue.New(name, func(o *priorityqueue.Opts[reconcile.Request]) { o.RateLimiter = rl }),
			router:        router,
		}
	}
}

// routedQueue is a priority queue whose adds wait for the key's backup delay. The queue keeps
// the earliest ready time of an item, so a key already queued by the owner rule is not pushed
// back by a later backup add.
type routedQueue struct {
	priorityqueue.PriorityQueue[reconcile.Request]
	router Router
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
		io.After += q.router.Delay(item.String())
		q.PriorityQueue.AddWithOpts(io, item)
	}
}
