package spoke

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestRetryBackoffIsCapped: a spoke request whose reconcile keeps failing (a stop at the
// partition deadline that cannot be written yet) is tried again within maxRetryDelay however
// often it failed, and each request has its own backoff (no overall bucket).
func TestRetryBackoffIsCapped(t *testing.T) {
	l := retryLimiter()
	holder := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "apply"}}
	var last time.Duration
	for range 40 { // 5 ms · 2^39 without the cap
		last = l.When(holder)
	}
	if last > maxRetryDelay {
		t.Fatalf("after 40 failures the next try is %s away, want at most %s", last, maxRetryDelay)
	}
	for i := range 200 {
		other := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: fmt.Sprintf("other-%d", i)}}
		if d := l.When(other); d > 5*time.Millisecond {
			t.Fatalf("request %d's first retry is %s away: another request's failures slowed it", i, d)
		}
	}
}
