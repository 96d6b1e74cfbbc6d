package workload

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/whoami"
)

// Event reasons on the workload.
const (
	ReasonWaiting        = "LockWaiting"
	ReasonGranted        = "LockGranted"
	ReasonReleased       = "LockReleased"
	ReasonLost           = "LockLost"
	ReasonRequestFailed  = "LockRequestFailed"
	ReasonInvalid        = "InvalidLockAnnotation"
	ReasonRequestRefused = "LockRequestRefused"
	// ReasonPodsLeft is on a LockRequest whose Job is gone while some of its Pods still run.
	ReasonPodsLeft = "WorkloadPodsLeft"
)

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;update;patch

// Reconciler takes, lets go, releases and enforces the lock of one workload kind.
type Reconciler struct {
	kind      kind
	client    client.Client // writes, and LockRequests from the manager's cache
	workloads client.Reader // the gated-only cache of Pods and Jobs
	live      client.Reader // the API server itself
	recorder  events.EventRecorder
	// self is the manager's user name, recorded as the creator of the requests it makes.
	self  whoami.Cache
	clock clock.PassiveClock // when renewals are due
}

// Option configures the workload controllers.
type Option func(*Reconciler)

// WithClock sets the clock renewals are timed by (tests use a fake one).
func WithClock(c clock.PassiveClock) Option { return func(r *Reconciler) { r.clock = c } }

// SetupWithManager registers the Pod and Job controllers. Pods and Jobs are read from a cache
// of their own that lists and watches only objects labelled locks.turnstile.dev/gated=true,
// so a cluster's other workloads cost the manager nothing.
func SetupWithManager(mgr ctrl.Manager, opts ...Option) error {
	gated, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme:               mgr.GetScheme(),
		Mapper:               mgr.GetRESTMapper(),
		DefaultLabelSelector: labels.SelectorFromSet(labels.Set{LabelGated: "true"}),
		DefaultTransform:     cache.TransformStripManagedFields(),
	})
	if err != nil {
		return fmt.Errorf("gated workloads cache: %w", err)
	}
	if err := mgr.Add(gated); err != nil {
		return err
	}
	recorder := mgr.GetEventRecorder("turnstile-workloads")
	for _, k := range []kind{podKind{}, jobKind{}} {
		r := &Reconciler{kind: k, client: mgr.GetClient(), workloads: gated, live: mgr.GetAPIReader(), recorder: recorder, clock: clock.RealClock{}}
		for _, o := range opts {
			o(r)
		}
		obj := k.newObject()
		err := builder.ControllerManagedBy(mgr).
			Named("gated-"+k.name()).
			WatchesRawSource(source.Kind(gated, obj, &handler.TypedEnqueueRequestForObject[client.Object]{})).
			Watches(&locksv1.LockRequest{}, handler.EnqueueRequestsFromMapFunc(r.ownerOf)).
			Complete(r)
		if err != nil {
			return err
		}
	}
	return nil
}

// ownerOf maps a LockRequest made for a workload of this kind to that workload.
func (r *Reconciler) ownerOf(_ context.Context, o client.Object) []reconcile.Request {
	c := metav1.GetControllerOf(o)
	if c == nil || !strings.EqualFold(c.Kind, r.kind.name()) {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: c.Name}}}
}

// RequestName is the LockRequest of the workload of kind ("pod", "job") and name: one per
// workload name, so a workload that is gone is matched to its request without its object.
func RequestName(kind, name string) string {
	n := kind + "-" + name
	if len(n) <= 253 {
		return n
	}
	sum := sha256.Sum256([]byte(name))
	return n[:240] + "-" + hex.EncodeToString(sum[:])[:12]
}

// Reconcile takes, lets go, renews, releases or enforces the lock of one workload.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	lrKey := client.ObjectKey{Namespace: req.Namespace, Name: RequestName(r.kind.name(), req.Name)}
	lr := &locksv1.LockRequest{}
	if err := r.client.Get(ctx, lrKey, lr); apierrors.IsNotFound(err) {
		lr = nil
	} else if err != nil {
		return ctrl.Result{}, err
	}
	obj := r.kind.newObject()
	if err := r.workloads.Get(ctx, req.NamespacedName, obj); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		return r.missing(ctx, req.NamespacedName, obj, lr)
	}
	if isControlledByJob(obj) {
		return ctrl.Result{}, nil // the Job holds the lock for its Pods
	}
	if lr != nil && !ownedBy(lr, obj) {
		// An earlier workload of the same name left its request behind: it goes first (its
		// deletion event brings this workload back).
		return ctrl.Result{}, client.IgnoreNotFound(r.client.Delete(ctx, lr, client.Preconditions{UID: &lr.UID}))
	}
	// A workload being deleted keeps its lock until it is gone: a Pod's containers run until the
	// kubelet has stopped them, which is when the Pod object goes.
	// guard:workload-released-while-running
	if done, how := r.kind.finished(obj); done {
		return ctrl.Result{}, r.release(ctx, obj, lr, how)
	}
	if lr == nil {
		return ctrl.Result{}, r.create(ctx, obj, lrKey)
	}
	return r.follow(ctx, obj, lr)
}

// missing handles a workload the gated cache does not have: gone, or no longer gated. The API
// server is asked before its request is deleted, so a lagging cache never drops a lock a live
// workload holds.
func (r *Reconciler) missing(ctx context.Context, key client.ObjectKey, obj client.Object, lr *locksv1.LockRequest) (ctrl.Result, error) {
	if lr == nil {
		return ctrl.Result{}, nil
	}
	// guard:workload-gone-from-cache
	if err := r.live.Get(ctx, key, obj); err == nil && ownedBy(lr, obj) {
		// It left the gated cache (its label removed) but runs: it keeps its lock, renewed while
		// it runs, released once it has finished (read live: no watch brings it back).
		if done, how := r.kind.finished(obj); done {
			return ctrl.Result{}, r.release(ctx, obj, lr, how)
		}
		return r.renew(ctx, lr)
	} else if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	// A deleted Job's Pods outlive it (the garbage collector deletes them after, and each
	// stops within its grace period): the lock is theirs, renewed, until the last one is gone.
	// guard:workload-job-pods-outlive
	if running, err := r.podsLeft(ctx, lr); err != nil || running > 0 {
		if err != nil {
			return ctrl.Result{}, err
		}
		r.recorder.Eventf(lr, nil, corev1.EventTypeNormal, ReasonPodsLeft, "Keep",
			"the %s is gone but %d of its Pods still run: the lock is kept until they are gone", r.kind.name(), running)
		res, err := r.renew(ctx, lr)
		return sooner(res, ctrl.Result{RequeueAfter: time.Second}), err
	}
	logf.FromContext(ctx).Info("workload gone: deleting its lock request", "request", lr.Name)
	return ctrl.Result{}, client.IgnoreNotFound(r.client.Delete(ctx, lr, client.Preconditions{UID: &lr.UID}))
}

// release releases the lock of a workload that has finished (how says how), once.
func (r *Reconciler) release(ctx context.Context, obj client.Object, lr *locksv1.LockRequest, how string) error {
	if lr == nil || lr.Spec.Release || lr.Status.Phase.IsFinal() {
		return nil
	}
	patch := client.MergeFrom(lr.DeepCopy())
	lr.Spec.Release = true
	if err := r.client.Patch(ctx, lr, patch); err != nil {
		return client.IgnoreNotFound(err)
	}
	r.recorder.Eventf(obj, lr, corev1.EventTypeNormal, ReasonReleased, "Release", "released lock request %s: %s", lr.Name, how)
	return nil
}

// follow makes a live workload follow its request: let go with its fencing token once granted
// (and renewed while it runs), stopped when the lock is gone after it ran.
func (r *Reconciler) follow(ctx context.Context, obj client.Object, lr *locksv1.LockRequest) (ctrl.Result, error) {
	token := obj.GetAnnotations()[AnnotationFencingToken]
	switch {
	case lr.Status.Phase == locksv1.PhaseGranted && !lr.Spec.Release:
		want := strconv.FormatInt(lr.Status.FencingToken, 10)
		if r.kind.held(obj) || token != want {
			// guard:workload-grant-read-live
			if ok, err := r.stillGranted(ctx, lr); err != nil || !ok {
				return ctrl.Result{}, err // the newer request's event brings the workload back
			}
			patch := client.MergeFromWithOptions(obj.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
			r.kind.letGo(obj, want)
			if err := r.client.Patch(ctx, obj, patch); err != nil {
				return ctrl.Result{}, client.IgnoreNotFound(err)
			}
			r.recorder.Eventf(obj, lr, corev1.EventTypeNormal, ReasonGranted, "Grant", "lock granted (lock request %s, fencing token %s): the %s may run", lr.Name, want, r.kind.name())
		}
		if j, ok := obj.(*batchv1.Job); ok {
			// guard:workload-pods-not-owners
			if err := r.ownPods(ctx, j, lr); err != nil {
				return ctrl.Result{}, err
			}
		}
		// guard:workload-not-renewed
		return r.renew(ctx, lr)
	// guard:workload-not-stopped
	case lr.Status.Phase.IsFinal() && token != "":
		// It ran under the lock, and the lock is gone while it has not finished: stop it.
		return ctrl.Result{}, r.stop(ctx, obj, lr)
	case lr.Status.Phase.IsFinal():
		r.recorder.Eventf(obj, lr, corev1.EventTypeWarning, ReasonRequestFailed, "Wait",
			"lock request %s is %s (%s); the %s stays held: delete it and create it again to ask anew",
			lr.Name, lr.Status.Phase, conditionMessage(lr), r.kind.name())
	}
	return ctrl.Result{}, nil
}

// stillGranted reads lr live before its workload is let go: a cache that lags may still show
// a grant that a force-unlock, an expiry or a release has ended, and a workload let go on it
// would run without its lock until the cache caught up and it was stopped. The grant must be
// the same (request, fencing token) the cache showed.
func (r *Reconciler) stillGranted(ctx context.Context, lr *locksv1.LockRequest) (bool, error) {
	live := &locksv1.LockRequest{}
	if err := r.live.Get(ctx, client.ObjectKeyFromObject(lr), live); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return live.UID == lr.UID && live.Status.Phase == locksv1.PhaseGranted && !live.Spec.Release &&
		live.Status.FencingToken == lr.Status.FencingToken, nil
}

// ownPods makes each of a running Job's Pods an owner of its lock request too. The garbage
// collector deletes an object only once all its owners are gone, so a Job deleted while its Pods
// still stop does not take its request (and so its lock) with it before them.
func (r *Reconciler) ownPods(ctx context.Context, j *batchv1.Job, lr *locksv1.LockRequest) error {
	var pods corev1.PodList
	if err := r.live.List(ctx, &pods, client.InNamespace(j.Namespace), client.MatchingLabels{batchv1.ControllerUidLabel: string(j.UID)}); err != nil {
		return err
	}
	patch := client.MergeFromWithOptions(lr.DeepCopy(), client.MergeFromWithOptimisticLock{})
	added := false
	for _, p := range pods.Items {
		if !ownedBy(lr, &p) && p.DeletionTimestamp == nil {
			lr.OwnerReferences = append(lr.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID})
			added = true
		}
	}
	if !added {
		return nil
	}
	return client.IgnoreNotFound(r.client.Patch(ctx, lr, patch))
}

// podsLeft counts, live, the Pods of the Job lr was made for that have not finished: those
// that own lr (the garbage collector drops the gone Job's reference from it) and those the
// Job's label finds while lr still names the Job. 0 for a Pod's request: a Pod object that is
// gone has stopped.
func (r *Reconciler) podsLeft(ctx context.Context, lr *locksv1.LockRequest) (int, error) {
	var pods []corev1.Pod
	if c := metav1.GetControllerOf(lr); c != nil && c.Kind == "Job" {
		var list corev1.PodList
		if err := r.live.List(ctx, &list, client.InNamespace(lr.Namespace), client.MatchingLabels{batchv1.ControllerUidLabel: string(c.UID)}); err != nil {
			return 0, err
		}
		pods = list.Items
	}
	for _, o := range lr.OwnerReferences {
		if o.Kind != "Pod" || o.APIVersion != "v1" {
			continue
		}
		var p corev1.Pod
		if err := r.live.Get(ctx, client.ObjectKey{Namespace: lr.Namespace, Name: o.Name}, &p); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return 0, err
		}
		if p.UID == o.UID {
			pods = append(pods, p)
		}
	}
	left := map[types.UID]bool{}
	for _, p := range pods {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			left[p.UID] = true
		}
	}
	return len(left), nil
}

// create makes the workload's LockRequest: owned by it, for the user that created it.
func (r *Reconciler) create(ctx context.Context, obj client.Object, key client.ObjectKey) error {
	spec, err := Parse(r.kind.annotations(obj))
	if err != nil {
		r.recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonInvalid, "Validate", "%s; the %s stays held until it is fixed", err, r.kind.name())
		return nil
	}
	owner := obj.GetAnnotations()[AnnotationCreatedBy]
	if owner == "" {
		owner = r.kind.runAs(obj)
	}
	gvk, err := r.client.GroupVersionKindFor(obj)
	if err != nil {
		return err
	}
	lr := &locksv1.LockRequest{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: key.Namespace, Name: key.Name,
			Labels: map[string]string{LabelWorkloadKind: r.kind.name(), LabelWorkloadName: labelValue(obj.GetName())},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: obj.GetName(), UID: obj.GetUID(), Controller: ptr.To(true),
			}},
		},
		Spec: locksv1.LockRequestSpec{
			Locks:    spec.Locks,
			Holder:   locksv1.Holder{Owner: owner, Session: r.kind.name() + "/" + obj.GetName()},
			Command:  spec.Command,
			Priority: spec.Priority,
			Reason:   fmt.Sprintf("%s %s/%s", gvk.Kind, obj.GetNamespace(), obj.GetName()),
		},
	}
	if spec.TTL != nil {
		lr.Spec.TTL = &metav1.Duration{Duration: *spec.TTL}
	}
	// The manager creates it for the workload's creator, as a delegate: recorded as its creator,
	// as the mutating admission policy would (where it does not run, the validating one requires it).
	// guard:workload-records-creator
	if err := r.self.Stamp(ctx, r.client, lr); err != nil {
		return err
	}
	if err := r.client.Create(ctx, lr); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
			r.recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonRequestRefused, "Request", "the API server refused its lock request: %s", err)
			return nil
		}
		return err
	}
	r.recorder.Eventf(obj, lr, corev1.EventTypeNormal, ReasonWaiting, "Request", "waiting for lock request %s (owner %s)", lr.Name, owner)
	return nil
}

// stop stops a workload that lost its lock: a Pod is deleted, a Job suspended again (its Pods
// go with it) and its fencing token removed.
func (r *Reconciler) stop(ctx context.Context, obj client.Object, lr *locksv1.LockRequest) error {
	why := fmt.Sprintf("lost its lock: lock request %s is %s (%s)", lr.Name, lr.Status.Phase, conditionMessage(lr))
	switch o := obj.(type) {
	case *corev1.Pod:
		uid := o.UID
		if err := r.client.Delete(ctx, o, client.Preconditions{UID: &uid}); err != nil {
			return client.IgnoreNotFound(err)
		}
		r.recorder.Eventf(obj, lr, corev1.EventTypeWarning, ReasonLost, "Stop", "deleted: the Pod %s", why)
	case *batchv1.Job:
		patch := client.MergeFromWithOptions(o.DeepCopy(), client.MergeFromWithOptimisticLock{})
		o.Spec.Suspend = ptr.To(true)
		delete(o.Annotations, AnnotationFencingToken)
		if err := r.client.Patch(ctx, o, patch); err != nil {
			return client.IgnoreNotFound(err)
		}
		r.recorder.Eventf(obj, lr, corev1.EventTypeWarning, ReasonLost, "Stop", "suspended: the Job %s; delete it and create it again to ask anew", why)
	}
	return nil
}

func conditionMessage(lr *locksv1.LockRequest) string {
	for _, t := range []string{locksv1.ConditionStalled, locksv1.ConditionGranted} {
		if c := meta.FindStatusCondition(lr.Status.Conditions, t); c != nil && c.Message != "" {
			return c.Message
		}
	}
	return "no reason given"
}

func ownedBy(lr *locksv1.LockRequest, obj client.Object) bool {
	for _, o := range lr.OwnerReferences {
		if o.UID == obj.GetUID() {
			return true
		}
	}
	return false
}

func isControlledByJob(obj client.Object) bool {
	c := metav1.GetControllerOf(obj)
	return c != nil && c.Kind == "Job" && c.APIVersion == "batch/v1"
}

// labelValue is name as a label value (at most 63 characters): names longer than that are
// found by the request's name instead, so the label only has to be recognisable.
func labelValue(name string) string {
	if len(name) <= 63 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return name[:50] + "-" + hex.EncodeToString(sum[:])[:12]
}
