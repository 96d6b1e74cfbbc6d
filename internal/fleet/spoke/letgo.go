package spoke

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/queue"
)

// liveReadTimeout bounds the let-go's live read of a hub request (liveGate): a hub that does not
// answer within it lets nothing go now, and the request is looked at again a second later.
const liveReadTimeout = time.Second

// liveGate reads a hub grant live from the hub at the moment the spoke would let it go: a hub
// grant (want, after the partition rule and the freeze gate) the spoke does not show yet. The
// hub cache can lag: it can still show a grant that the hub has ended since (an admin's
// force-release, the hub request deleted, the key handed to a holder in another spoke), and a
// grant let go from it would make two holders of one key across clusters for as long as the
// watch lags. So the agent reads the hub request with a plain GET (a quorum read) and shows the
// grant only if the hub still holds it (SameGrant), with the live object's status (its token,
// its expiresAt). Else, or when the read fails or takes longer than liveReadTimeout, nothing is
// let go: the spoke request stays Pending, says why it waits (ConfirmingStatus), and is looked
// at again within a second (the cache brings the hub's newer state meanwhile). A holder the
// spoke already shows, and anything that is not a grant, pass as they are: only the let-go costs
// the round trip.
func (a *Agent) liveGate(ctx context.Context, spoke, hub *locksv1.LockRequest, res ctrl.Result, want locksv1.LockRequestStatus) (ctrl.Result, locksv1.LockRequestStatus) {
	if want.Phase != locksv1.PhaseGranted || spoke.Status.Phase == locksv1.PhaseGranted {
		return res, want
	}
	// guard:spoke-lets-go-live
	live, why := a.liveGrant(ctx, hub)
	if why != "" {
		return ctrl.Result{RequeueAfter: time.Second}, ConfirmingStatus(spoke, hub, a.opts.Cluster, why, a.opts.Clock.Now())
	}
	return res, SpokeStatus(spoke, live)
}

// liveGrant reads hub, the hub cache's copy of a granted hub request, live from the hub within
// liveReadTimeout, and says why the hub has not confirmed that it still holds that grant
// (SameGrant), or "" when it has. It reads only while the hub answers the renewals of hub's
// namespace (answering): a read in a partition would hold a reconcile worker for the timeout,
// each time, while the others must stop holders at their deadlines; a grant is not let go then
// anyway (the partition rule).
func (a *Agent) liveGrant(ctx context.Context, hub *locksv1.LockRequest) (*locksv1.LockRequest, string) {
	if !a.answering(hub.Namespace) {
		return nil, "the hub is not answering this namespace's renewals"
	}
	ctx, cancel := context.WithTimeout(ctx, liveReadTimeout)
	defer cancel()
	var live locksv1.LockRequest
	if err := a.hub.Get(ctx, client.ObjectKeyFromObject(hub), &live); err != nil {
		log.FromContext(ctx).V(1).Info("a hub grant not let go: its live read failed", "hub", hub.Name, "error", err.Error())
		switch {
		case apierrors.IsNotFound(err):
			return nil, "the hub no longer holds it (its hub request is gone; this spoke's view of the hub lags)"
		case ctx.Err() != nil:
			return nil, fmt.Sprintf("the hub did not answer its read within %s", liveReadTimeout)
		}
		return nil, "its read from the hub failed: " + err.Error()
	}
	if !SameGrant(hub, &live) {
		log.FromContext(ctx).Info("a hub grant not let go: the hub no longer holds it (the hub cache lags)",
			"hub", hub.Name, "phase", live.Status.Phase, "release", live.Spec.Release, "token", live.Status.FencingToken)
		return &live, "the hub no longer holds it (this spoke's view of the hub lags)"
	}
	return &live, ""
}

// ConfirmingStatus is the status of a spoke request whose hub grant the spoke does not let go
// yet, for the reason why (liveGate): what the spoke showed (Pending), blockedBy its hub
// request, and Granted False with reason ConfirmingWithHub saying why and that it is tried
// again each second.
func ConfirmingStatus(spoke, hub *locksv1.LockRequest, cluster, why string, now time.Time) locksv1.LockRequestStatus {
	return notLetGo(spoke, "hub lockrequest "+hub.Name, ReasonConfirmingWithHub, fmt.Sprintf("granted by the hub, but not let go in this spoke (cluster %s) until a live read from the hub confirms the grant: %s; tried again each second",
		cluster, why), now)
}

// notLetGo is the status of a spoke request whose hub grant the spoke holds back (FrozenStatus,
// ConfirmingStatus): what the spoke showed (pendingStatus), blockedBy, and Granted False with
// reason and msg.
func notLetGo(spoke *locksv1.LockRequest, blockedBy, reason, msg string, now time.Time) locksv1.LockRequestStatus {
	out := pendingStatus(spoke)
	out.BlockedBy = blockedBy
	queue.SetCondition(&out.Conditions, locksv1.ConditionGranted, metav1.ConditionFalse, reason, msg, out.ObservedGeneration, now)
	return out
}

// pendingStatus is a copy of what spoke shows, Pending when it shows no phase yet.
func pendingStatus(spoke *locksv1.LockRequest) locksv1.LockRequestStatus {
	out := *spoke.Status.DeepCopy()
	if out.Phase == "" {
		out.Phase = locksv1.PhasePending
	}
	return out
}

// SameGrant says whether live, a hub request as read live from the hub, still holds the grant
// that cached, the hub cache's copy of it, shows: the same object (UID), Granted, not released
// (an admin's force-release ends the grant before the hub's status says so) and not being
// deleted (its finalizer releases it), with the same fencing token. Pure.
func SameGrant(cached, live *locksv1.LockRequest) bool {
	return live.UID == cached.UID && live.Status.Phase == locksv1.PhaseGranted && !live.Spec.Release &&
		live.DeletionTimestamp == nil && live.Status.FencingToken == cached.Status.FencingToken
}

// answering says whether the hub answered the last renewal of ns's hub Lease.
func (a *Agent) answering(ns string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.clocks[ns]
	return c != nil && c.tried && !c.failing
}
