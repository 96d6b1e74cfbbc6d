package spoke

import (
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// maxRetryDelay caps a spoke request's retry backoff after a failed reconcile. controller-runtime's
// default grows from 5 ms, doubling, to 1000 s: a holder whose stop at its partition deadline
// could not be written (the spoke's API server slow, restarting or out of reach for a few
// seconds) would be tried again only after several seconds more, past the moment the hub hands
// its locks on (the deadline leaves L − stop, 7 s with L = 20 s and 15 s with the default 40 s).
// The stop is what the partition rule rests on, so it is retried at least twice a second.
const maxRetryDelay = 500 * time.Millisecond

// retryLimiter is the agent's per-request backoff: 5 ms doubling per failure, capped at
// maxRetryDelay. It has no overall bucket (controller-runtime's default has 10 per second): a
// spoke whose API server comes back with a hundred holders past their deadline stops them all
// at once, not ten a second.
func retryLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	// guard:spoke-retry-capped
	return workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, maxRetryDelay)
}
