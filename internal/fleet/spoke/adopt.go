package spoke

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/whoami"
)

// ReasonHubNameTaken is the reason of a spoke request whose name on the hub (HubName) is held
// by a hub request this agent did not make for it: a hub user's request under that name, or
// another spoke request's whose long name was shortened to the same hub name.
const ReasonHubNameTaken = "HubNameTaken"

// ReasonHubRequestLost is the reason of a granted spoke request whose hub request is gone, or
// is no longer the one the agent made for it: the hub holds no grant for it any more.
const ReasonHubRequestLost = "HubRequestLost"

// nameTaken is create's answer when a spoke request's hub name is held by a hub request that
// is not ours (hub).
type nameTaken struct{ hub *locksv1.LockRequest }

func (e *nameTaken) Error() string {
	return fmt.Sprintf("hub request %s/%s is not this agent's", e.hub.Namespace, e.hub.Name)
}

// ours says whether hub is the hub request this agent made for the spoke request named name:
// created by the agent's hub identity (the API server's admission stamps a request's creator,
// and refuses anyone else's name there), for this cluster's holder, and for that spoke request
// (AnnotationSpokeName). The fleet's labels and annotations alone prove nothing: a hub user may
// create a request under a spoke request's hub name dressed as the agent's, and two long spoke
// names can shorten to one hub name. A hub request that is not ours is never adopted, copied
// from, patched nor deleted.
func (a *Agent) ours(ctx context.Context, hub *locksv1.LockRequest, name string) (bool, error) {
	self, err := a.self.Name(ctx, a.hub)
	if err != nil {
		return false, fmt.Errorf("who this agent is on the hub: %w", err)
	}
	// guard:spoke-adopts-only-its-own
	return hub.Annotations[whoami.AnnotationCreatedBy] == self && hub.Spec.Holder.Cluster == a.opts.Cluster &&
		hub.Annotations[AnnotationSpokeName] == name, nil
}

// foreign reports a spoke request whose hub name is taken by a hub request that is not ours:
// nothing is asked of the hub for it. Undecided, it waits (Stalled, HubNameTaken: rename it); a
// decided one keeps what it was decided, and the agent says so in its log.
func (a *Agent) foreign(ctx context.Context, spoke, hub *locksv1.LockRequest) (ctrl.Result, error) {
	creator := hub.Annotations[whoami.AnnotationCreatedBy]
	if creator == "" {
		creator = "someone unknown"
	}
	msg := fmt.Sprintf("the hub request %s/%s, this request's name on the hub, was not made by this spoke's agent for it (created by %s, for the spoke request %q of cluster %q): "+
		"the agent asks nothing of the hub for this request; delete it and create it under another name (a spoke request is <cluster>.<name> on the hub, shortened with a hash past 253 characters)",
		hub.Namespace, hub.Name, creator, hub.Annotations[AnnotationSpokeName], hub.Spec.Holder.Cluster)
	// A granted request keeps what the hub decided: another agent's request under its hub name
	// (this agent started under another spoke's name or identity) does not take its grant back,
	// as a refusal does not; a hub request deleted under it is HubRequestLost (Reconcile), and a
	// dressed one a hub user cannot write (turnstile-fleet-reserved).
	if spoke.Status.Phase == locksv1.PhaseGranted || spoke.Status.Phase.IsFinal() {
		log.FromContext(ctx).Error(nil, "a decided spoke request's hub name is held by a hub request this agent did not make for it", "request", spoke.Name, "why", msg)
		return ctrl.Result{}, nil
	}
	now := a.opts.Clock.Now()
	if c := meta.FindStatusCondition(spoke.Status.Conditions, locksv1.ConditionStalled); c != nil && c.Reason == ReasonHubNameTaken && c.Message == msg {
		return ctrl.Result{}, nil
	}
	log.FromContext(ctx).Error(nil, "a spoke request's hub name is taken", "hub", types.NamespacedName{Namespace: hub.Namespace, Name: hub.Name}, "creator", creator)
	st := *spoke.Status.DeepCopy()
	if st.Phase == "" {
		st.Phase = locksv1.PhasePending
	}
	st.BlockedBy = queue.Clip(msg)
	g := spoke.Generation
	st.ObservedGeneration = g
	queue.SetCondition(&st.Conditions, locksv1.ConditionStalled, metav1.ConditionTrue, ReasonHubNameTaken, msg, g, now)
	queue.SetCondition(&st.Conditions, locksv1.ConditionGranted, metav1.ConditionFalse, ReasonHubNameTaken, msg, g, now)
	queue.SetCondition(&st.Conditions, locksv1.ConditionReady, metav1.ConditionFalse, ReasonHubNameTaken, msg, g, now)
	spoke.Status = st
	if err := a.spoke.Status().Update(ctx, spoke); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	a.recorder.Eventf(spoke, nil, corev1.EventTypeWarning, ReasonHubNameTaken, "Mirror", "%s", msg)
	return ctrl.Result{}, nil
}

// lose ends a granted spoke request whose hub grant is gone (msg says why): Released, Granted
// False with reason HubRequestLost, which the gated workload controller reads as a lost lock.
// Final: the agent never makes it a hub request again (a new grant is a new request's).
func (a *Agent) lose(ctx context.Context, spoke *locksv1.LockRequest, msg string) error {
	spoke.Status = LostRequestStatus(spoke, msg, a.opts.Clock.Now())
	if err := a.spoke.Status().Update(ctx, spoke); err != nil {
		return client.IgnoreNotFound(err)
	}
	log.FromContext(ctx).Info("a spoke request lost its hub grant", "request", spoke.Name, "why", msg)
	a.recorder.Eventf(spoke, nil, corev1.EventTypeWarning, ReasonHubRequestLost, "Mirror", "%s", msg)
	return nil
}

// LostRequestStatus is the status of a granted spoke request whose hub grant is gone (msg):
// Released, final, Granted False and Stalled True with reason HubRequestLost.
func LostRequestStatus(spoke *locksv1.LockRequest, msg string, now time.Time) locksv1.LockRequestStatus {
	out := *spoke.Status.DeepCopy()
	out.Phase = locksv1.PhaseReleased
	out.QueuePosition, out.BlockedBy = 0, ""
	out.FinishedAt = &metav1.Time{Time: now}
	g := out.ObservedGeneration
	queue.SetCondition(&out.Conditions, locksv1.ConditionGranted, metav1.ConditionFalse, ReasonHubRequestLost, msg, g, now)
	queue.SetCondition(&out.Conditions, locksv1.ConditionStalled, metav1.ConditionTrue, ReasonHubRequestLost, msg, g, now)
	queue.SetCondition(&out.Conditions, locksv1.ConditionReady, metav1.ConditionFalse, ReasonHubRequestLost, msg, g, now)
	meta.RemoveStatusCondition(&out.Conditions, locksv1.ConditionReconciling)
	return out
}
