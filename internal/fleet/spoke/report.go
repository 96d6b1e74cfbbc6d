package spoke

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/workload"
)

// What the agent reports in the spoke (docs/fleet.md): a holder it stopped because the hub was
// unreachable, and the hub's refusal of this spoke.
const (
	// ReasonStoppedOnPartition is the event on a spoke request (and the workload it was made
	// for) whose running holder the agent stopped because the hub stopped answering.
	ReasonStoppedOnPartition = "StoppedOnPartition"
	// ReasonFleetRefused is the reason of a spoke request's Stalled condition, and of its event,
	// when the hub refuses this spoke's write of its request or hub Lease (its RBAC or its
	// admission policies: a cluster that is not a member, a cluster name that is not this
	// spoke's identity's).
	ReasonFleetRefused = "FleetRefused"
)

// Refusal says whether err is the hub refusing this spoke (403 Forbidden from its RBAC or
// admission policies, 401 Unauthorized for its credential), and the hub's own words for it.
// Anything else (a timeout, a conflict, a hub that is down) is retried as it is.
func Refusal(err error) (string, bool) {
	var st apierrors.APIStatus
	if err == nil || !errors.As(err, &st) || !apierrors.IsForbidden(err) && !apierrors.IsUnauthorized(err) {
		return "", false
	}
	msg := st.Status().Message
	if msg == "" {
		msg = err.Error()
	}
	return msg, true
}

// RefusedStatus is the status of a spoke request whose mirror the hub refused (the hub's words
// in why): what the spoke showed (Pending when nothing), Stalled True and Granted False with
// reason FleetRefused and a message that says so and what to do, so kubectl wait and health
// checks end rather than wait for a grant that cannot come.
func RefusedStatus(spoke *locksv1.LockRequest, cluster, why string, now time.Time) locksv1.LockRequestStatus {
	out := *spoke.Status.DeepCopy()
	if out.Phase == "" {
		out.Phase = locksv1.PhasePending
	}
	msg := RefusedMessage(cluster, why)
	out.BlockedBy = queue.Clip(msg)
	// The refusal is the verdict on this generation of the request: kubectl wait and kstatus
	// read a condition only once status.observedGeneration reaches metadata.generation.
	g := spoke.Generation
	out.ObservedGeneration = g
	queue.SetCondition(&out.Conditions, locksv1.ConditionStalled, metav1.ConditionTrue, ReasonFleetRefused, msg, g, now)
	queue.SetCondition(&out.Conditions, locksv1.ConditionGranted, metav1.ConditionFalse, ReasonFleetRefused, msg, g, now)
	queue.SetCondition(&out.Conditions, locksv1.ConditionReady, metav1.ConditionFalse, ReasonFleetRefused, msg, g, now)
	return out
}

// RefusedMessage is what a spoke request whose mirror the hub refused says: the hub's words
// (which name the cluster, and for a cluster that is not a member the command that makes it
// one), and that nothing is decided until the hub accepts this spoke.
func RefusedMessage(cluster, why string) string {
	return fmt.Sprintf("the hub refused this spoke (--cluster-name=%s): %s; this request waits, undecided, until the hub accepts it (the agent tries again every renewal period)",
		cluster, strings.TrimSpace(why))
}

// createOrReport makes spoke's hub request; when the hub refuses this spoke, it says so in the
// spoke request (a Stalled condition, a Warning event, a log line) and tries again one renewal
// period later, instead of retrying silently.
func (a *Agent) createOrReport(ctx context.Context, spoke *locksv1.LockRequest) (ctrl.Result, error) {
	err := a.create(ctx, spoke)
	if taken := (*nameTaken)(nil); errors.As(err, &taken) {
		return a.foreign(ctx, spoke, taken.hub)
	}
	why, refused := Refusal(err)
	// guard:spoke-refusal-reported
	if !refused {
		return ctrl.Result{}, err
	}
	// The refusal is logged as an error once per request and message (when the request is
	// marked), and at V(1) on each retry of a request so marked: a refused cluster's every request retries each renewal
	// period, and an error line each time would bury the first.
	logger := log.FromContext(ctx)
	// A request the hub decided already (under this spoke's name before, for an agent started
	// again under another) keeps what it was decided: the refusal does not take a grant back.
	undecided := spoke.Status.Phase == "" || spoke.Status.Phase == locksv1.PhasePending
	if c := meta.FindStatusCondition(spoke.Status.Conditions, locksv1.ConditionStalled); undecided &&
		(c == nil || c.Reason != ReasonFleetRefused || c.Message != RefusedMessage(a.opts.Cluster, why)) {
		logger.Error(err, "the hub refused this spoke: nothing of this cluster is decided until it accepts it", "cluster", a.opts.Cluster)
		spoke.Status = RefusedStatus(spoke, a.opts.Cluster, why, a.opts.Clock.Now())
		if err := a.spoke.Status().Update(ctx, spoke); err != nil {
			return ctrl.Result{}, ignoreGone(err)
		}
		a.recorder.Eventf(spoke, nil, corev1.EventTypeWarning, ReasonFleetRefused, "Mirror", "%s", RefusedMessage(a.opts.Cluster, why))
	} else if !undecided {
		logger.Error(err, "the hub refused this spoke; this request keeps what the hub decided before", "cluster", a.opts.Cluster, "phase", spoke.Status.Phase)
	} else {
		logger.V(1).Info("the hub still refuses this spoke", "cluster", a.opts.Cluster, "why", why)
	}
	return ctrl.Result{RequeueAfter: a.opts.Settings.RenewEvery()}, nil
}

// stopped reports a holder the agent stopped because the hub was unreachable: a Warning event
// StoppedOnPartition on the spoke request and on the workload it was made for (the workload
// controller stops that workload on the request's loss, as on any lost lock). A grant given back
// for a clock skew over the flag (ClockSkewTooLarge; running says whether its holder ran) is
// reported by an event of that reason, with its message.
func (a *Agent) stopped(ctx context.Context, spoke *locksv1.LockRequest, running bool) {
	reason, msg := ReasonStoppedOnPartition, "stopped: the hub is unreachable"
	c := meta.FindStatusCondition(spoke.Status.Conditions, locksv1.ConditionGranted)
	switch {
	case c != nil && c.Reason == ReasonClockSkewTooLarge:
		reason, msg = ReasonClockSkewTooLarge, c.Message
	case c != nil:
		msg = "stopped: " + c.Message
	}
	log.FromContext(ctx).Info("stopped a holder or gave its grant back", "request", spoke.Name, "running", running, "why", msg)
	a.recorder.Eventf(spoke, nil, corev1.EventTypeWarning, reason, "Stop", "%s", msg)
	if w := WorkloadOf(spoke); w != nil {
		a.recorder.Eventf(w, spoke, corev1.EventTypeWarning, reason, "Stop", "%s", msg)
	}
}

// WorkloadOf is a reference to the gated workload spoke was made for (a Pod or a Job of its
// namespace, from the workload controller's stamp), or nil for a request a user made.
func WorkloadOf(spoke *locksv1.LockRequest) *metav1.PartialObjectMetadata {
	kind, name, ok := strings.Cut(spoke.Annotations[workload.AnnotationWorkload], "/")
	if !ok || name == "" {
		return nil
	}
	w := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: spoke.Namespace, Name: name,
		UID: types.UID(spoke.Annotations[workload.AnnotationWorkloadUID])}}
	switch kind {
	case "pod":
		w.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	case "job":
		w.TypeMeta = metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"}
	default:
		return nil
	}
	return w
}

func ignoreGone(err error) error {
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// refusedEditStatus is want (the hub's status, the partition rule applied) of a spoke request
// whose change the hub refused (the hub's words in why): the hub keeps the request as it was,
// which want still shows, and Stalled True with reason FleetRefused says the change did not
// reach the hub and why, for this generation.
func refusedEditStatus(spoke *locksv1.LockRequest, want locksv1.LockRequestStatus, cluster, why string, now time.Time) locksv1.LockRequestStatus {
	out := *want.DeepCopy()
	g := spoke.Generation
	msg := fmt.Sprintf("the hub refused this request's change (generation %d) from this spoke (--cluster-name=%s): %s; "+
		"the hub keeps the request as it was before it, which this status shows; undo the change, or make it on a new request",
		g, cluster, strings.TrimSpace(why))
	if c := meta.FindStatusCondition(spoke.Status.Conditions, locksv1.ConditionStalled); c != nil && c.Reason == ReasonFleetRefused && c.Message == msg {
		now = c.LastTransitionTime.Time // the same refusal: the condition is not rewritten
	}
	out.ObservedGeneration = g
	queue.SetCondition(&out.Conditions, locksv1.ConditionStalled, metav1.ConditionTrue, ReasonFleetRefused, msg, g, now)
	return out
}
