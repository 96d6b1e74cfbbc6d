package workdir

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// LeaseExpiry is when a Lease lapses: its last renewal (or acquisition, or, for a Lease written
// with neither, its creation) plus its duration. ok is false for a Lease without a duration,
// which lapses only when it is deleted. It is the one definition both sides use: a Heartbeat
// taking over another holder's Lease, and the operator releasing the holders of a LockRequest
// that names it.
func LeaseExpiry(l *coordinationv1.Lease) (expiry, renewed time.Time, ok bool) {
	switch {
	case l.Spec.RenewTime != nil:
		renewed = l.Spec.RenewTime.Time
	case l.Spec.AcquireTime != nil:
		renewed = l.Spec.AcquireTime.Time
	default:
		renewed = l.CreationTimestamp.Time
	}
	if l.Spec.LeaseDurationSeconds == nil {
		return time.Time{}, renewed, false
	}
	return renewed.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second), renewed, true
}

// leaseLapsed reports whether l has lapsed at now.
func leaseLapsed(l *coordinationv1.Lease, now time.Time) bool {
	expiry, _, ok := LeaseExpiry(l)
	return ok && !now.Before(expiry)
}
