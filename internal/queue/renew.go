package queue

import (
	"fmt"
	"time"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// term is how long a granted request's grant runs, renewals included.
type term struct {
	// expiry is when the grant ends; zero when the request is not granted.
	expiry time.Time
	// renewed is true when a renewal is applied now: the grant runs ttl from now.
	renewed bool
	// seen is true when a change of spec.ttl is seen now, applied or refused.
	seen bool
	// refused says why spec.ttl is not the ttl in force (it is over the operator's maximum).
	refused string
}

// grantTerm is the term of a granted request. A grant runs its ttl from status.grantedAt, or
// from status.renewedAt once renewed. A renewal is a change of spec.ttl while granted: the spec
// moved on since the status was written (generation) and the ttl no longer gives the expiresAt
// written. It runs the new ttl from the moment it is seen, like a Lease renewal: the operator's
// MaxTTL bounds how far ahead any grant reaches from its last renewal, never the total time a
// holder that keeps renewing may hold. A ttl over MaxTTL is never put in force on a grant: the
// renewal is refused and the grant keeps the expiresAt it had, so a bad renewal never costs the
// holder its lock (at creation the same ttl fails the request with reason Invalid).
//
// Once written, status.expiresAt is the grant's end: a ttl that differs without a spec change
// (the operator's default ttl changed, or a refused renewal) does not move it.
func grantTerm(req *locksv1.LockRequest, ttl time.Duration, cfg Config, now time.Time) term {
	st := &req.Status
	// A grant with no ttl (NoExpiry) has no end.
	if st.Phase != locksv1.PhaseGranted || st.GrantedAt == nil || ttl == 0 {
		return term{}
	}
	base := st.GrantedAt.Time
	if st.RenewedAt != nil {
		base = st.RenewedAt.Time
	}
	inForce := grantExpiry(base, ttl)
	if st.ExpiresAt == nil || st.ExpiresAt.Time.Equal(inForce) {
		return term{expiry: inForce}
	}
	t := term{expiry: st.ExpiresAt.Time, seen: req.Generation != st.ObservedGeneration}
	switch {
	case cfg.MaxTTL > 0 && ttl > cfg.MaxTTL:
		t.refused = fmt.Sprintf("renewal refused: spec.ttl %s is over this operator's maximum of %s; ask for at most %s", ttl, cfg.MaxTTL, cfg.MaxTTL)
	case t.seen:
		// Counted from the renewal as status.renewedAt keeps it (to the second), as a grant
		// counts from grantedAt, so the expiresAt written is the one the next decision derives.
		t.expiry, t.renewed = grantExpiry(now.Truncate(time.Second), ttl), true
	}
	return t
}

// expiredMessage says why a grant ended at its expiry.
func expiredMessage(e *entry) string {
	if e.term.refused != "" {
		return fmt.Sprintf("the grant expired at %s (%s)", e.term.expiry.UTC().Format(time.RFC3339), e.term.refused)
	}
	return fmt.Sprintf("the grant expired after its ttl of %s", e.ttl)
}

// renewalEvent is the event of a renewal seen now, or nil.
func renewalEvent(e *entry, st locksv1.LockRequestStatus) *Event {
	switch {
	case !e.term.seen:
		return nil
	case e.term.refused != "":
		return &Event{"Warning", locksv1.ReasonInvalid, fmt.Sprintf("%s; the grant still ends at %s", e.term.refused, st.ExpiresAt.UTC().Format(time.RFC3339))}
	case e.term.renewed:
		return &Event{"Normal", locksv1.ReasonRenewed, fmt.Sprintf("renewed %s for spec.ttl %s: held until %s", keysText(e), e.ttl, st.ExpiresAt.UTC().Format(time.RFC3339))}
	}
	return nil
}
