package queue

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

// The first step of Decide on its own: who leaves the key's holders or its queue, and why.
func TestLeaving(t *testing.T) {
	cfg := testConfig()
	cfg.MaxTTL = time.Hour
	granted := func(name string) *wrappers.LockRequestWrapper { return makeReq(name).Granted(t0.Add(-time.Minute), 40) }
	// A spoke's grant on the hub: for a holder in cluster eu, tied to its hub Lease
	// (internal/fleet/members.SpokeHeld).
	spokes := func(name string) *wrappers.LockRequestWrapper {
		return granted(name).Cluster("eu").Lease("spoke-eu").Annotation(locksv1.AnnotationConfirmsStops, "true")
	}
	type want struct {
		Phase   locksv1.LockRequestPhase
		Reason  string
		Message string
	}
	cases := map[string]struct {
		req      *wrappers.LockRequestWrapper
		heldHere bool
		lost     string
		want     *want
	}{
		"a holder that stays": {req: granted("h"), heldHere: true},
		"a waiter that stays": {req: makeReq("w").QueuedAt(t0)},
		"already final":       {req: granted("h").Phase(locksv1.PhaseReleased), heldHere: true},
		"a holder being deleted": {req: granted("h").Deleting(t0.Add(-time.Second)), heldHere: true,
			want: &want{locksv1.PhaseReleased, locksv1.ReasonReleased, "deleted while it held the lock"}},
		"a waiter being deleted": {req: makeReq("w").QueuedAt(t0).Deleting(t0.Add(-time.Second)),
			want: &want{locksv1.PhaseReleased, locksv1.ReasonReleased, "deleted before it was granted"}},
		"deleted and released: the deletion speaks": {req: granted("h").Release().Deleting(t0.Add(-time.Second)), heldHere: true,
			want: &want{locksv1.PhaseReleased, locksv1.ReasonReleased, "deleted while it held the lock"}},
		"a holder released": {req: granted("h").Release(), heldHere: true,
			want: &want{locksv1.PhaseReleased, locksv1.ReasonReleased, "released"}},
		"a waiter released": {req: makeReq("w").QueuedAt(t0).Release(),
			want: &want{locksv1.PhaseReleased, locksv1.ReasonReleased, "released before it was granted"}},
		"a holder whose Lease lapsed": {req: granted("h"), heldHere: true, lost: "holder Lease team-a/r lapsed",
			want: &want{locksv1.PhaseReleased, locksv1.ReasonHolderLost, "holder Lease team-a/r lapsed"}},
		"a holder the ProjectLock does not list: force-unlocked": {req: granted("h"),
			want: &want{locksv1.PhaseReleased, locksv1.ReasonForceUnlocked, "ProjectLock " + name1 + " was deleted: the lock on " + key1 + " was force-unlocked"}},
		"a holder past its ttl": {req: makeReq("h").TTL(time.Minute).Granted(t0.Add(-2*time.Minute), 40), heldHere: true,
			want: &want{locksv1.PhaseExpired, locksv1.ReasonExpired, "the grant expired after its ttl of 1m0s"}},
		"released past its ttl: the release speaks": {req: makeReq("h").TTL(time.Minute).Granted(t0.Add(-2*time.Minute), 40).Release(), heldHere: true,
			want: &want{locksv1.PhaseReleased, locksv1.ReasonReleased, "released"}},
		"a spoke's grant released: held until its spoke has stopped it":      {req: spokes("h").Release(), heldHere: true},
		"a spoke's grant being deleted: held until its spoke has stopped it": {req: spokes("h").Deleting(t0.Add(-time.Second)), heldHere: true},
		"a spoke's grant released, its spoke stopped it: released": {req: spokes("h").Release().Annotation(locksv1.AnnotationSpokeStopped, "40"), heldHere: true,
			want: &want{locksv1.PhaseReleased, locksv1.ReasonReleased, "released"}},
		"a spoke's grant released, its spoke stopped another token: held": {req: spokes("h").Release().Annotation(locksv1.AnnotationSpokeStopped, "39"), heldHere: true},
		"a spoke's grant released whose hub Lease lapsed: released, its spoke stopped it by the partition rule": {req: spokes("h").Release(), heldHere: true, lost: "holder Lease team-a/spoke-eu lapsed",
			want: &want{locksv1.PhaseReleased, locksv1.ReasonReleased, "released"}},
		"a spoke's grant whose hub Lease lapsed": {req: spokes("h"), heldHere: true, lost: "holder Lease team-a/spoke-eu lapsed",
			want: &want{locksv1.PhaseReleased, locksv1.ReasonHolderLost, "holder Lease team-a/spoke-eu lapsed"}},
		"a spoke's grant past its ttl: expired (its spoke stops its holder before, by its own clock)": {req: spokes("h").TTL(time.Minute).Granted(t0.Add(-2*time.Minute), 40), heldHere: true,
			want: &want{locksv1.PhaseExpired, locksv1.ReasonExpired, "the grant expired after its ttl of 1m0s"}},
		"a spoke's waiter released": {req: makeReq("w").Cluster("eu").Lease("spoke-eu").QueuedAt(t0).Release(),
			want: &want{locksv1.PhaseReleased, locksv1.ReasonReleased, "released before it was granted"}},
		"a grant for a holder in a cluster tied to another Lease: released": {req: spokes("h").Lease("ci-runner").Release(), heldHere: true,
			want: &want{locksv1.PhaseReleased, locksv1.ReasonReleased, "released"}},
		"a spoke's grant released by an agent that says no stops (an older agent): released": {req: granted("h").Cluster("eu").Lease("spoke-eu").Release(), heldHere: true,
			want: &want{locksv1.PhaseReleased, locksv1.ReasonReleased, "released"}},
		"a spoke's keep-running grant (no hub Lease): released": {req: granted("h").Cluster("eu").Release(), heldHere: true,
			want: &want{locksv1.PhaseReleased, locksv1.ReasonReleased, "released"}},
		"a waiter asking for more than the maximum ttl": {req: makeReq("w").TTL(2 * time.Hour).QueuedAt(t0),
			want: &want{locksv1.PhaseFailed, locksv1.ReasonInvalid, "spec.ttl 2h0m0s is over this operator's maximum of 1h0m0s; ask for at most 1h0m0s"}},
		"a waiter past its waitTimeout": {req: makeReq("w").WaitTimeout(time.Minute).QueuedAt(t0.Add(-time.Minute)),
			want: &want{locksv1.PhaseFailed, locksv1.ReasonTimeout, "not granted within waitTimeout 1m0s"}},
		"a first-seen waiter has not waited yet": {req: makeReq("w").WaitTimeout(time.Minute).Creation(t0.Add(-time.Hour))},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := tc.req.Obj()
			in := Input{Now: now, Name: name1, Config: cfg}
			if tc.lost != "" {
				in.LostHolders = map[types.UID]string{req.UID: tc.lost}
			}
			e := newEntry(req, name1, cfg, now)
			e.heldHere = tc.heldHere
			var got *want
			if o := leaving(e, in); o != nil {
				got = &want{o.phase, o.reason, o.message}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("leaving (-want +got):\n%s", diff)
			}
		})
	}
}
