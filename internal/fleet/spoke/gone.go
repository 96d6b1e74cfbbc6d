package spoke

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/fleet/skew"
)

// The wait for a stopped holder to be gone (docs/fleet.md, "Partition: the rule, with numbers",
// "The wait"). When the agent stops a running gated workload (a partition stop, or a grant given
// back for a clock skew), it watches that Pod or Job until it is gone, and says when, against the
// time the hub can hand its locks on: the operator's evidence that no two holders overlapped.
// Until then (or until that time) it does not release the request's hub request either (the hub
// would hand the lock on at once: a partition healed a moment after the stop, a skew give-back).
const (
	// ReasonHolderGone is the Normal event on a spoke request and its workload once the holder
	// the agent stopped is gone, before the hub can hand its locks on.
	ReasonHolderGone = "HolderGone"
	// ReasonHolderOutlivedLease is the Warning event on a spoke request and its workload whose
	// stopped holder still ran when the hub could hand its locks on.
	ReasonHolderOutlivedLease = "HolderOutlivedLease"
	// AnnotationHandOn is written on a spoke request after the stop of its running gated
	// workload: when the hub can hand its locks on (RFC 3339, by the hub's clock) and by what
	// ("renewTime+L" or "expiresAt"), e.g. "2026-11-29T17:02:13.5Z renewTime+L". The wait is
	// pending while AnnotationHolderGone is not set; an agent restarted resumes it from these.
	AnnotationHandOn = "locks.turnstile.dev/fleet-hand-on"
	// AnnotationHolderGone is how the wait ended: "gone at T" or "outlived at T" (RFC 3339).
	AnnotationHolderGone = "locks.turnstile.dev/fleet-holder-gone"
)

// The wait's outcomes, the label of turnstile_fleet_stopped_holders_total.
const (
	outcomeGone     = "gone"
	outcomeOutlived = "outlived"
)

// waitKicks is how many new waits wait for the wait controller.
const waitKicks = 256

var stoppedHolders = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "turnstile_fleet_stopped_holders_total",
	Help: "Running gated workloads a spoke agent stopped (the hub unreachable, or a clock skew over --max-clock-skew), by how the wait for them ended: " +
		"gone before the hub could hand their locks on, or outlived (still running then).",
}, []string{"outcome"})

func init() {
	metrics.Registry.MustRegister(stoppedHolders)
	stoppedHolders.WithLabelValues(outcomeGone)
	stoppedHolders.WithLabelValues(outcomeOutlived)
}

// holderWait is the wait for one stopped holder.
type holderWait struct {
	// req is the spoke request, as the stop wrote it: the events' object, also once deleted (a
	// Pod's request is deleted by the workload controller once the Pod is gone).
	req      *locksv1.LockRequest
	workload *metav1.PartialObjectMetadata
	handOn   time.Time
	by       string // what handOn is: "renewTime+L" or "expiresAt"
}

// setupWait adds the wait controller: it reconciles spoke requests whose wait is pending (their
// AnnotationHandOn, or a new wait from stopped), and is woken by the gated Pods and Jobs of the
// shared cache (Options.Workloads) that one waits for. No cache: no wait.
func (a *Agent) setupWait(mgr ctrl.Manager) error {
	if a.opts.Workloads == nil {
		return nil
	}
	a.live = mgr.GetAPIReader()
	a.waits = map[types.NamespacedName]*holderWait{}
	a.waitEvents = make(chan event.GenericEvent, waitKicks)
	pending := predicate.NewPredicateFuncs(func(o client.Object) bool { return waitPending(o.GetAnnotations()) })
	b := builder.ControllerManagedBy(mgr).
		Named("fleet-spoke-holder-gone").
		WithOptions(controller.Options{MaxConcurrentReconciles: 2, RateLimiter: retryLimiter()}).
		For(&locksv1.LockRequest{}, builder.WithPredicates(pending)).
		WatchesRawSource(source.Channel(a.waitEvents, &handler.EnqueueRequestForObject{}))
	for _, obj := range []client.Object{&corev1.Pod{}, &batchv1.Job{}} {
		b = b.WatchesRawSource(source.Kind(a.opts.Workloads, obj, handler.EnqueueRequestsFromMapFunc(a.waitsOn)))
	}
	return b.Complete(reconcile.Func(a.reconcileWait))
}

func waitPending(ann map[string]string) bool {
	return ann[AnnotationHandOn] != "" && ann[AnnotationHolderGone] == ""
}

// startWait begins the wait for the holder of spoke, whose running gated workload the agent
// has just stopped: the hub can hand its locks on at min(the last answered renewal + L, the hub
// grant's end). Unknown (an agent restarted during a cut stops its holders before it has heard
// the hub): no wait. A request a user made (no workload) has none either.
func (a *Agent) startWait(ctx context.Context, spoke *locksv1.LockRequest) {
	w := WorkloadOf(spoke)
	if a.waits == nil || w == nil {
		return
	}
	at, by := a.handOn(ctx, spoke)
	if at.IsZero() {
		log.FromContext(ctx).Info("not waiting for the stopped holder to be gone: when the hub can hand its locks on is unknown", "request", spoke.Name)
		return
	}
	key := client.ObjectKeyFromObject(spoke)
	a.waitMu.Lock()
	a.waits[key] = &holderWait{req: spoke.DeepCopy(), workload: w, handOn: at, by: by}
	a.waitMu.Unlock()
	// Never blocks the stop's worker: a wait not woken so begins with its workload's next change
	// (the workload controller deletes the Pod or suspends the Job next).
	select {
	case a.waitEvents <- event.GenericEvent{Object: &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}}:
	default:
		log.FromContext(ctx).Info("the wait controller is behind: the wait for the stopped holder begins with its workload's next change", "request", spoke.Name)
	}
}

// handOn is when the hub can hand the locks of spoke's hub request on, by the hub's clock: the
// hub Lease's renewTime of the last answered renewal + L, or the hub grant's end when sooner;
// zero when neither is known.
func (a *Agent) handOn(ctx context.Context, spoke *locksv1.LockRequest) (time.Time, string) {
	st, _ := a.clockOf(spoke.Namespace)
	var at time.Time
	by := "renewTime+L"
	if !st.Renewed.IsZero() {
		at = st.Renewed.Add(a.opts.Settings.Lease)
	}
	if a.hubSynced.Load() {
		var hub locksv1.LockRequest
		key := types.NamespacedName{Namespace: spoke.Namespace, Name: HubName(a.opts.Cluster, spoke.Name)}
		if err := a.hubRead.Get(ctx, key, &hub); err == nil {
			if end := EarliestExpiry([]locksv1.LockRequest{hub}); !end.IsZero() && (at.IsZero() || end.Before(at)) {
				at, by = end, "expiresAt"
			}
		}
	}
	return at, by
}

// waitsOn maps a gated Pod or Job to the spoke requests whose wait is for it.
func (a *Agent) waitsOn(_ context.Context, o client.Object) []reconcile.Request {
	kind := "Pod"
	if _, ok := o.(*batchv1.Job); ok {
		kind = "Job"
	}
	a.waitMu.Lock()
	defer a.waitMu.Unlock()
	var out []reconcile.Request
	for key, w := range a.waits {
		if w.workload.Kind == kind && w.workload.Namespace == o.GetNamespace() && w.workload.Name == o.GetName() {
			out = append(out, reconcile.Request{NamespacedName: key})
		}
	}
	return out
}

// reconcileWait looks at one stopped holder: gone (HolderGone), still running at the hand-on
// time (HolderOutlivedLease), or looked at again then (its Pod's or Job's changes wake it
// sooner).
func (a *Agent) reconcileWait(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	w, err := a.waitOf(ctx, req.NamespacedName)
	if err != nil || w == nil {
		return ctrl.Result{}, err
	}
	gone, grace, err := a.holderGone(ctx, w.workload)
	if err != nil {
		return ctrl.Result{}, err
	}
	now := a.opts.Clock.Now()
	switch {
	case gone:
		return ctrl.Result{}, a.endWait(ctx, req.NamespacedName, w, outcomeGone, now, grace)
	// guard:spoke-wait-outlived-at-hand-on
	case !now.Before(w.handOn):
		return ctrl.Result{}, a.endWait(ctx, req.NamespacedName, w, outcomeOutlived, now, grace)
	}
	return ctrl.Result{RequeueAfter: w.handOn.Sub(now)}, nil
}

// waitOf is the pending wait of the spoke request key: from its annotations (written by an
// earlier wait, maybe of an agent since restarted), or the one stopped began (whose annotation
// it writes now); the one stopped began when the request is gone; nil when none is pending.
func (a *Agent) waitOf(ctx context.Context, key types.NamespacedName) (*holderWait, error) {
	a.waitMu.Lock()
	mem := a.waits[key]
	a.waitMu.Unlock()
	var lr locksv1.LockRequest
	err := a.spoke.Get(ctx, key, &lr)
	switch {
	case apierrors.IsNotFound(err):
		return mem, nil
	case err != nil:
		return nil, err
	case lr.Annotations[AnnotationHolderGone] != "":
		a.forgetWait(key)
		return nil, nil
	case lr.Annotations[AnnotationHandOn] != "":
		w := parseWait(&lr, a.opts.Settings.Lease)
		if w == nil {
			a.forgetWait(key)
			return nil, nil
		}
		a.waitMu.Lock()
		a.waits[key] = w
		a.waitMu.Unlock()
		return w, nil
	case mem == nil:
		return nil, nil
	case mem.req.UID != lr.UID: // deleted and made again under its name: the old wait is moot
		a.forgetWait(key)
		return nil, nil
	}
	patch := client.MergeFrom(lr.DeepCopy())
	if lr.Annotations == nil {
		lr.Annotations = map[string]string{}
	}
	lr.Annotations[AnnotationHandOn] = mem.handOn.UTC().Format(time.RFC3339Nano) + " " + mem.by
	if err := a.spoke.Patch(ctx, &lr, patch); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return mem, nil
}

// parseWait is the wait AnnotationHandOn of lr says (nil: none, or unreadable), for a request
// whose holder the agent stopped (LostToPartition). The annotation is the agent's record, but
// the request's owner may write its metadata: the hand-on time it says is taken no later than
// the stop (status.finishedAt, the manager's alone to write, in whole seconds) + 1 s + L, which
// it never is (the last answered renewal came before the stop), so that a hand-on written far
// ahead cannot keep the hub request from release (holdsRelease) for longer.
func parseWait(lr *locksv1.LockRequest, lease time.Duration) *holderWait {
	at, by, _ := strings.Cut(lr.Annotations[AnnotationHandOn], " ")
	t, err := time.Parse(time.RFC3339Nano, at)
	w := WorkloadOf(lr)
	if err != nil || w == nil || !LostToPartition(lr) || lr.Status.FinishedAt == nil {
		return nil
	}
	// guard:spoke-wait-hand-on-capped
	if latest := lr.Status.FinishedAt.Add(time.Second + lease); t.After(latest) {
		t = latest
	}
	if by == "" {
		by = "renewTime+L"
	}
	return &holderWait{req: lr.DeepCopy(), workload: w, handOn: t, by: by}
}

func (a *Agent) forgetWait(key types.NamespacedName) {
	a.waitMu.Lock()
	delete(a.waits, key)
	a.waitMu.Unlock()
}

// holderGone says whether the stopped workload w is gone, read from the API server: a Pod
// deleted (or another under its name) or terminated (Succeeded, Failed); a Job gone or
// suspended (or finished) none of whose Pods (by its controller UID) still runs. grace is the
// longest deletion grace of what still runs (its own when it is not being deleted), in seconds.
func (a *Agent) holderGone(ctx context.Context, w *metav1.PartialObjectMetadata) (gone bool, grace int64, err error) {
	key := types.NamespacedName{Namespace: w.Namespace, Name: w.Name}
	if w.Kind == "Pod" {
		var p corev1.Pod
		if err := a.live.Get(ctx, key, &p); err != nil {
			return apierrors.IsNotFound(err), 0, client.IgnoreNotFound(err)
		}
		if w.UID != "" && p.UID != w.UID || terminated(&p) {
			return true, 0, nil
		}
		return false, podGrace(&p), nil
	}
	uid := w.UID
	var j batchv1.Job
	switch err := a.live.Get(ctx, key, &j); {
	case err != nil && !apierrors.IsNotFound(err):
		return false, 0, err
	// A Job not suspended yet (the workload controller stops it on the request's loss) may still
	// start Pods: not gone.
	case err == nil && j.UID == uid && !ptr.Deref(j.Spec.Suspend, false) && !jobFinished(&j):
		return false, 0, nil
	}
	var pods corev1.PodList
	if err := a.live.List(ctx, &pods, client.InNamespace(w.Namespace), client.MatchingLabels{batchv1.ControllerUidLabel: string(uid)}); err != nil {
		return false, 0, err
	}
	gone = true
	for i := range pods.Items {
		p := &pods.Items[i]
		if ref := metav1.GetControllerOf(p); ref == nil || ref.UID != uid || terminated(p) {
			continue
		}
		gone, grace = false, max(grace, podGrace(p))
	}
	return gone, grace, nil
}

func terminated(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

func jobFinished(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if c.Status == corev1.ConditionTrue && (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) {
			return true
		}
	}
	return false
}

// podGrace is the grace a Pod is given to stop: its deletion's, or its own when not deleted.
func podGrace(p *corev1.Pod) int64 {
	if p.DeletionGracePeriodSeconds != nil {
		return *p.DeletionGracePeriodSeconds
	}
	return ptr.Deref(p.Spec.TerminationGracePeriodSeconds, corev1.DefaultTerminationGracePeriodSeconds)
}

// endWait records how the wait for w ended (outcome, at now): on the request (AnnotationHolderGone,
// which also lets its hub request be released), as an event on it and on its workload, and in
// turnstile_fleet_stopped_holders_total. grace is the running holder's, when outlived.
func (a *Agent) endWait(ctx context.Context, key types.NamespacedName, w *holderWait, outcome string, now time.Time, grace int64) error {
	var lr locksv1.LockRequest
	err := a.spoke.Get(ctx, key, &lr)
	if err == nil && lr.UID == w.req.UID {
		patch := client.MergeFrom(lr.DeepCopy())
		if lr.Annotations == nil {
			lr.Annotations = map[string]string{}
		}
		lr.Annotations[AnnotationHolderGone] = outcome + " at " + now.UTC().Format(time.RFC3339Nano)
		if err := a.spoke.Patch(ctx, &lr, patch); client.IgnoreNotFound(err) != nil {
			return err
		}
	} else if client.IgnoreNotFound(err) != nil {
		return err
	}
	a.forgetWait(key)
	when := fmt.Sprintf("%s at %s, by the hub's clock", w.by, stamp(w.handOn))
	reason, typ := ReasonHolderGone, corev1.EventTypeNormal
	msg := fmt.Sprintf("the stopped holder was gone at %s, %s before the hub can hand its locks on (%s)", stamp(now), secs(w.handOn.Sub(now)), when)
	if outcome == outcomeOutlived {
		reason, typ = ReasonHolderOutlivedLease, corev1.EventTypeWarning
		msg = fmt.Sprintf("the stopped holder was still running at %s, when the hub could hand its locks on (%s): its grace (%ds) is longer than --fleet-grace (%s) allows, or its node does not answer",
			stamp(now), when, grace, skew.Secs(a.opts.Settings.Grace))
	}
	log.FromContext(ctx).Info("the wait for a stopped holder ended", "request", key.Name, "outcome", outcome, "handOn", w.handOn)
	stoppedHolders.WithLabelValues(outcome).Inc()
	a.recorder.Eventf(w.req, nil, typ, reason, "Stop", "%s", msg)
	a.recorder.Eventf(w.workload, w.req, typ, reason, "Stop", "%s", msg)
	return nil
}

// secs writes d in seconds to the tenth: "12.3s".
func secs(d time.Duration) string {
	return fmt.Sprintf("%.1fs", d.Seconds())
}

// holdsRelease says whether the hub request of spoke, a request whose holder the agent stopped,
// is kept from release: its wait is pending (the holder is not known gone) and the hub cannot
// hand its locks on yet; and until when.
func (a *Agent) holdsRelease(spoke *locksv1.LockRequest) (time.Time, bool) {
	if a.waits == nil || spoke.Annotations[AnnotationHolderGone] != "" {
		return time.Time{}, false
	}
	var at time.Time
	if w := parseWait(spoke, a.opts.Settings.Lease); w != nil {
		at = w.handOn
	} else {
		a.waitMu.Lock()
		if w := a.waits[client.ObjectKeyFromObject(spoke)]; w != nil && w.req.UID == spoke.UID {
			at = w.handOn
		}
		a.waitMu.Unlock()
	}
	return at, !at.IsZero() && a.opts.Clock.Now().Before(at)
}
