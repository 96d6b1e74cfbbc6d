package keeper

import (
	"fmt"
	"time"
)

// StopMargin is how long before the server may consider the holder gone the command's last
// process must have exited: it covers clock differences between this host and the manager and
// the moments between the keeper's last reap and run's release.
const StopMargin = 3 * time.Second

// ttlSlack is what a grant's ttl loses against a lease: the controller counts a renewal from
// the second it sees it in (status.renewedAt is whole seconds), and run alternates the ttl with
// one a second shorter, as a renewal is a change of spec.ttl.
const ttlSlack = 2 * time.Second

// FitGrace says why grace cannot fit in a lease of d ("" when it fits): the tree must be
// stopped, grace included, StopMargin before the Lease can lapse, and that point must leave room
// for one failed renewal and its retry (a third of the lease, then a sixth). what names d in
// the refusal ("--lease-duration").
func FitGrace(what string, d, grace time.Duration) string {
	return fits(what, d, grace, 0)
}

// FitTTL is FitGrace for the grant's ttl, renewed every quarter of it.
func FitTTL(what string, ttl, grace time.Duration) string {
	return fits(what, ttl, grace, ttlSlack)
}

func fits(what string, d, grace, slack time.Duration) string {
	// guard:run-grace-unchecked
	if grace+StopMargin+slack <= d/2 {
		return ""
	}
	return fmt.Sprintf("--grace %s does not fit in %s %s: the command must be stopped, grace included, %s before the locks can pass on, with room for a failed renewal and its retry; use %s of at least %s, or --grace of at most %s",
		grace, what, d, StopMargin, what, 2*(grace+StopMargin+slack), max(0, d/2-StopMargin-slack))
}

// StopAt is when the tree must begin to stop so that its last process has exited, grace
// included, StopMargin before the server may consider this holder gone: its Lease lapsing
// (last renewal + lease duration) or its grant expiring (expiresAt; zero when unknown).
func StopAt(lastRenew, expiresAt time.Time, lease, grace time.Duration) time.Time {
	d := lastRenew.Add(lease - StopMargin)
	// guard:run-deadline-ignores-expiry
	if exp := expiresAt.Add(-StopMargin); !expiresAt.IsZero() && exp.Before(d) {
		d = exp
	}
	return d.Add(-grace)
}
