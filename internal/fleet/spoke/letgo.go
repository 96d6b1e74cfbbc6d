package spoke

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/queue"
)

// A spoke's grant ends on the hub only once its spoke has stopped it (docs/fleet.md, "A spoke's
// grant ends when its spoke has stopped it"): the hub keeps a spoke's released grant as the
// key's holder until the hub request carries locksv1.AnnotationSpokeStopped with its token, or
// the spoke's hub Lease lapses, and refuses to delete one before then (admission policy
// turnstile-fleet-stopped). So the agent lets a grant go from its view of the hub, however late
// that view: a grant the hub has ended is not handed on until this agent has seen the end,
// stopped the holder, and said so. The agent says so (confirmStopped) only after the spoke
// request shows the grant no more, and never lets go a grant whose end it has seen: the end (a
// release, a deletion) cannot be undone, and its view of the hub never goes back.

// ReasonEndedOnHub is the reason of a spoke request whose hub grant an admin released or
// deleted on the hub: its holder is stopped (final, Released; Stalled True, so kstatus reads
// Failed, as a force-unlock), and the hub hands the lock on once the agent has said so.
const ReasonEndedOnHub = "EndedOnHub"

// Ended says whether hub, as the agent's view of the hub shows it, is a grant ended on the hub
// that waits for this spoke: released or being deleted while the hub still shows it Granted.
func Ended(hub *locksv1.LockRequest) bool {
	return hub.Status.Phase == locksv1.PhaseGranted && (hub.Spec.Release || hub.DeletionTimestamp != nil)
}

// EndedStatus is the status of a spoke request whose hub grant has ended on the hub (Ended):
// what it shows, when the spoke request itself was released or is being deleted (its holder is
// done with it; the hub's final status follows), else Released, final, with the hub's reason
// said: a holder is stopped (the gated workload controller reads it as a lost lock), and a grant
// not let go yet never is.
func EndedStatus(spoke, hub *locksv1.LockRequest, cluster string, now time.Time) locksv1.LockRequestStatus {
	if spoke.Spec.Release || spoke.DeletionTimestamp != nil {
		return *spoke.Status.DeepCopy()
	}
	how := "released"
	if hub.DeletionTimestamp != nil {
		how = "deleted"
	}
	out := pendingStatus(spoke)
	out.Phase = locksv1.PhaseReleased
	out.BlockedBy, out.QueuePosition = "", 0
	out.FinishedAt = &metav1.Time{Time: now}
	msg := fmt.Sprintf("its hub request %s/%s was %s on the hub (by an admin there): the holder in this cluster (%s) is stopped, and the hub hands the lock on once this spoke has said so",
		hub.Namespace, hub.Name, how, cluster)
	g := out.ObservedGeneration
	queue.SetCondition(&out.Conditions, locksv1.ConditionGranted, metav1.ConditionFalse, ReasonEndedOnHub, msg, g, now)
	queue.SetCondition(&out.Conditions, locksv1.ConditionStalled, metav1.ConditionTrue, ReasonEndedOnHub, msg, g, now)
	queue.SetCondition(&out.Conditions, locksv1.ConditionReady, metav1.ConditionFalse, ReasonEndedOnHub, msg, g, now)
	meta.RemoveStatusCondition(&out.Conditions, locksv1.ConditionReconciling)
	return out
}

// confirmStopped writes on hub that this spoke has stopped the grant hub shows
// (locksv1.AnnotationSpokeStopped with its token), once: the hub then hands the key on. Called
// only once the spoke request shows the grant no more.
func (a *Agent) confirmStopped(ctx context.Context, hub *locksv1.LockRequest) error {
	if hub.Status.Phase != locksv1.PhaseGranted || locksv1.SpokeStopped(hub) {
		return nil
	}
	patch := client.MergeFromWithOptions(hub.DeepCopy(), client.MergeFromWithOptimisticLock{})
	markStopped(hub)
	if err := a.hub.Patch(ctx, hub, patch); err != nil {
		return client.IgnoreNotFound(err)
	}
	log.FromContext(ctx).V(1).Info("told the hub this spoke stopped its grant", "hub", hub.Name, "token", hub.Status.FencingToken)
	return nil
}

// releaseStopped releases hub, a grant whose spoke request is gone, with its stop said, in one
// write (nothing once it is released and said so: the hub's final status comes).
func (a *Agent) releaseStopped(ctx context.Context, hub *locksv1.LockRequest) error {
	if hub.Spec.Release && locksv1.SpokeStopped(hub) {
		return nil
	}
	// Not preconditioned on the view's resourceVersion, which may lag (a 409 would cost a retry
	// on the hand-off's path), but on its UID: a request made anew under the name is not
	// touched. The token said is the view's: if the hub's is newer, the hub waits and the agent
	// says the newer one when its view shows it.
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": hub.UID, "annotations": map[string]string{locksv1.AnnotationSpokeStopped: locksv1.StoppedToken(hub.Status.FencingToken)}},
		"spec":     map[string]any{"release": true},
	})
	if err != nil {
		return err
	}
	return client.IgnoreNotFound(a.hub.Patch(ctx, hub, client.RawPatch(types.MergePatchType, body)))
}

// markStopped sets hub's locksv1.AnnotationSpokeStopped to the token of the grant it shows (a
// change to write; nothing for a hub request the view does not show granted).
func markStopped(hub *locksv1.LockRequest) {
	if hub.Status.Phase != locksv1.PhaseGranted {
		return
	}
	if hub.Annotations == nil {
		hub.Annotations = map[string]string{}
	}
	hub.Annotations[locksv1.AnnotationSpokeStopped] = locksv1.StoppedToken(hub.Status.FencingToken)
}

// notForDoneRequests keeps a hub grant from being let go to a spoke request that is released or
// being deleted: its holder is done with it, and the agent may have told the hub so already
// (carry confirms the stop with the release). A holder the spoke already shows, and anything that
// is not a grant, pass as they are.
func notForDoneRequests(spoke *locksv1.LockRequest, want locksv1.LockRequestStatus) locksv1.LockRequestStatus {
	// guard:spoke-lets-go-only-to-live-requests
	if want.Phase == locksv1.PhaseGranted && spoke.Status.Phase != locksv1.PhaseGranted && (spoke.Spec.Release || spoke.DeletionTimestamp != nil) {
		return pendingStatus(spoke)
	}
	return want
}

// notLetGo is the status of a spoke request whose hub grant the spoke holds back (FrozenStatus,
// HeldStatus): what the spoke showed (pendingStatus), blockedBy, and Granted False with
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
