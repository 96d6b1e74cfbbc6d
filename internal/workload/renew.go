package workload

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// renewal is what to do about the grant of a request whose workload runs.
type renewal struct {
	// ttl is the spec.ttl that renews the grant now; 0 when it is not due.
	ttl time.Duration
	// after is when to look again: when the next renewal is due.
	after time.Duration
}

// nextRenewal decides the renewal of lr's grant at now, as `kubectl turnstile run` renews: a
// quarter of the grant's term after it was granted or last renewed, spec.ttl is changed, and the
// lock controller runs the new ttl from the moment it sees the change (docs/protocol.md,
// internal/queue/renew.go). A renewal is a change of the spec, so the ttl alternates between two
// values a second apart (the term's even and odd neighbours), and never rises over the term the
// operator last accepted once a renewal was refused. A renewal the lock controller has not
// answered yet (its observedGeneration behind the spec) is not made again.
func nextRenewal(lr *locksv1.LockRequest, now time.Time) renewal {
	st := &lr.Status
	if st.Phase != locksv1.PhaseGranted || lr.Spec.Release || st.GrantedAt == nil || st.ExpiresAt == nil {
		return renewal{}
	}
	base := st.GrantedAt.Time
	if st.RenewedAt != nil {
		base = st.RenewedAt.Time
	}
	term := st.ExpiresAt.Sub(base).Truncate(time.Second)
	if term < time.Second {
		term = time.Second
	}
	at := base.Add(term / 4)
	answered := lr.Generation == st.ObservedGeneration
	// guard:workload-renew-when-due
	if !answered || now.Before(at) {
		// An answer is a status write, which brings the workload back before this.
		return renewal{after: max(at.Sub(now), time.Second)}
	}
	return renewal{ttl: renewedTTL(term, refused(lr)), after: term / 4}
}

// renewedTTL is the spec.ttl that renews a grant whose term is term: an odd number of seconds
// rises by one, an even one (or any once a renewal was refused for being over the operator's
// maximum) falls by one, so that two renewals in a row alternate between two values and the
// term stays within a second of what was asked.
func renewedTTL(term time.Duration, refused bool) time.Duration {
	secs := int64(term / time.Second)
	if (secs%2 == 0 || refused) && secs > 1 {
		return time.Duration(secs-1) * time.Second
	}
	return time.Duration(secs+1) * time.Second
}

func refused(lr *locksv1.LockRequest) bool {
	c := meta.FindStatusCondition(lr.Status.Conditions, locksv1.ConditionGranted)
	return c != nil && c.Reason == locksv1.ReasonRenewalRefused
}

// renew renews lr's grant when it is due, for a workload that still runs, and says when to come
// back. The write carries the resourceVersion read: a request that changed since (released,
// expired, renewed by another replica) is decided again from what it is now.
func (r *Reconciler) renew(ctx context.Context, lr *locksv1.LockRequest) (ctrl.Result, error) {
	next := nextRenewal(lr, r.clock.Now())
	if next.ttl == 0 {
		return ctrl.Result{RequeueAfter: next.after}, nil
	}
	patch := client.MergeFromWithOptions(lr.DeepCopy(), client.MergeFromWithOptimisticLock{})
	lr.Spec.TTL = &metav1.Duration{Duration: next.ttl}
	if err := r.client.Patch(ctx, lr, patch); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{}, nil // read from a cache behind: its newer version's event brings the workload back
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return ctrl.Result{RequeueAfter: next.after}, nil
}

// sooner is the earlier of two requeues (0 is none).
func sooner(a, b ctrl.Result) ctrl.Result {
	if a.RequeueAfter == 0 || (b.RequeueAfter != 0 && b.RequeueAfter < a.RequeueAfter) {
		return b
	}
	return a
}
