package workload

import (
	"context"
	"fmt"
	"slices"
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
	// ReasonPodsLeft is on a LockRequest whose Job is gone (or has finished) while some of its
	// Pods still run.
	ReasonPodsLeft = "WorkloadPodsLeft"
	// ReasonNameTaken is on a workload both of whose request names are taken by requests the
	// manager did not make: it stays held, and the manager deletes neither.
	ReasonNameTaken = "LockRequestNameTaken"
	// ReasonEarlier is on a workload that waits for the request of an earlier workload of the
	// same name (a Job deleted and created again) whose Pods still run.
	ReasonEarlier = "EarlierWorkloadRunning"
	// ReasonMismatch is on a workload whose request does not ask for what its annotations say:
	// it is not let go on it.
	ReasonMismatch = "LockRequestMismatch"
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
	clock     clock.PassiveClock // when renewals are due
	self      *whoami.Cache      // the manager's user name: the creator its own requests carry
	// stopGrace, when set, is the longest a stopped workload's Pods may take to terminate (a
	// spoke agent's --fleet-grace): see WithStopGrace.
	stopGrace *time.Duration
	// gated is the gated workloads' cache given by WithGatedCache (nil: SetupWithManager makes one).
	gated cache.Cache
}

// Option configures the workload controllers.
type Option func(*Reconciler)

// WithClock sets the clock renewals are timed by (tests use a fake one).
func WithClock(c clock.PassiveClock) Option { return func(r *Reconciler) { r.clock = c } }

// WithIdentity sets the manager's user name, which is otherwise asked of the API server
// (a SelfSubjectReview, as kubectl auth whoami) before the first reconcile.
func WithIdentity(user string) Option {
	return func(r *Reconciler) { r.self = whoami.Known(user) }
}

// WithStopGrace caps how long a workload stopped on a lost lock may take to terminate: a Pod is
// deleted with gracePeriodSeconds min(its own, d), and a Job's Pods, once it is suspended, too
// (the Job controller would delete them with their own). A spoke agent sets it to its
// --fleet-grace: it stops a holder at a deadline that leaves that much before the hub can hand
// the lock on (docs/fleet.md, "Partition: the rule, with numbers"), and a Pod's default 30 s
// would outlast it.
func WithStopGrace(d time.Duration) Option {
	return func(r *Reconciler) { r.stopGrace = &d }
}

// WithGatedCache has the controllers read and watch Pods and Jobs in c (NewGatedCache), which
// they then share with another controller of the manager (a spoke agent's wait for a stopped
// holder to be gone), rather than in a cache of their own.
func WithGatedCache(c cache.Cache) Option {
	return func(r *Reconciler) { r.gated = c }
}

// NewGatedCache makes the gated workloads' cache, added to mgr: it lists and watches only the
// Pods and Jobs labelled locks.turnstile.dev/gated=true, so a cluster's other workloads cost the
// manager nothing.
func NewGatedCache(mgr ctrl.Manager) (cache.Cache, error) {
	gated, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme:               mgr.GetScheme(),
		Mapper:               mgr.GetRESTMapper(),
		DefaultLabelSelector: labels.SelectorFromSet(labels.Set{LabelGated: "true"}),
		DefaultTransform:     cache.TransformStripManagedFields(),
	})
	if err != nil {
		return nil, fmt.Errorf("gated workloads cache: %w", err)
	}
	return gated, mgr.Add(gated)
}

// SetupWithManager registers the Pod and Job controllers. Pods and Jobs are read from the gated
// workloads' cache (NewGatedCache; one of their own unless WithGatedCache gives one).
func SetupWithManager(mgr ctrl.Manager, opts ...Option) error {
	var given Reconciler
	for _, o := range opts {
		o(&given)
	}
	gated := given.gated
	if gated == nil {
		var err error
		if gated, err = NewGatedCache(mgr); err != nil {
			return err
		}
	}
	recorder := mgr.GetEventRecorder("turnstile-workloads")
	self := &whoami.Cache{}
	for _, k := range []kind{podKind{}, jobKind{}} {
		r := &Reconciler{kind: k, client: mgr.GetClient(), live: mgr.GetAPIReader(), recorder: recorder, clock: clock.RealClock{}, self: self}
		for _, o := range opts {
			o(r)
		}
		r.gated, r.workloads = gated, gated
		obj := k.newObject()
		err := builder.ControllerManagedBy(mgr).
			Named("gated-"+k.name()).
			WatchesRawSource(source.Kind(gated, obj, &handler.TypedEnqueueRequestForObject[client.Object]{})).
			Watches(&locksv1.LockRequest{}, handler.EnqueueRequestsFromMapFunc(r.workloadsOf)).
			Complete(r)
		if err != nil {
			return err
		}
	}
	return nil
}

// workloadsOf maps a LockRequest to the workloads of this kind it may concern: the one its
// stamp names, and the one whose request names it has (a request of someone else's at one of
// them may have gone, and set the name free). Waking a workload is no trust: what the manager
// does is decided from the stamp.
func (r *Reconciler) workloadsOf(_ context.Context, o client.Object) []reconcile.Request {
	var names []string
	if kind, name := stampedWorkload(o); kind == r.kind.name() {
		names = append(names, name)
	} else if c := metav1.GetControllerOf(o); kind == "" && c != nil && strings.EqualFold(c.Kind, r.kind.name()) {
		names = append(names, c.Name) // made before the stamp
	}
	names = append(names, workloadOfName(r.kind.name(), o.GetName())...)
	var out []reconcile.Request
	for i, n := range names {
		if !slices.Contains(names[:i], n) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: n}})
		}
	}
	return out
}

// Reconcile takes, lets go, renews, releases or enforces the lock of the workload of one kind
// and name, and keeps or deletes the requests the manager made for earlier workloads of that
// name. It acts only on requests it made (their stamp): another's request never moves it, and
// is never deleted.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ours, others, err := r.requests(ctx, req.NamespacedName)
	if err != nil {
		return ctrl.Result{}, err
	}
	obj, err := r.object(ctx, req.NamespacedName, len(ours) > 0)
	if err != nil {
		return ctrl.Result{}, err
	}
	var res ctrl.Result
	var mine []*locksv1.LockRequest
	earlier := false
	for _, m := range ours {
		if obj != nil && m.uid == obj.GetUID() {
			mine = append(mine, m.lr)
			continue
		}
		// Made for another object of this name: that one is gone (a name is one object's at a time).
		earlier = true
		rr, err := r.gone(ctx, m)
		if err != nil {
			return ctrl.Result{}, err
		}
		res = sooner(res, rr)
	}
	if obj == nil || (len(mine) == 0 && obj.GetLabels()[LabelGated] != "true") {
		return res, nil
	}
	rr, err := r.reconcileWorkload(ctx, obj, mine, earlier, others)
	return sooner(res, rr), err
}

// requests are the requests at the request names of the workload key names (from the cache):
// those the manager made for a workload of that name, and, by name, those of others.
func (r *Reconciler) requests(ctx context.Context, key client.ObjectKey) ([]made, [2]*locksv1.LockRequest, error) {
	var ours []made
	var others [2]*locksv1.LockRequest
	self, err := r.self.Name(ctx, r.client)
	if err != nil {
		return nil, others, err
	}
	for i, n := range RequestNames(r.kind.name(), key.Name) {
		lr := &locksv1.LockRequest{}
		if err := r.client.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: n}, lr); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return nil, others, err
		}
		if uid, ok := madeFor(lr, self, r.kind.name(), key.Name); ok {
			ours = append(ours, made{lr: lr, uid: uid})
		} else {
			others[i] = lr
		}
	}
	return ours, others, nil
}

// object reads the workload from the gated cache, or, when the cache does not have it and the
// manager holds a request for its name, from the API server: it may have left the cache (its
// label removed by an admin) and still run, and a lagging cache must never drop a lock a live
// workload holds. nil when there is none.
func (r *Reconciler) object(ctx context.Context, key client.ObjectKey, requested bool) (client.Object, error) {
	obj := r.kind.newObject()
	err := r.workloads.Get(ctx, key, obj)
	switch {
	case err == nil:
		return obj, nil
	case !apierrors.IsNotFound(err):
		return nil, err
	case !requested:
		return nil, nil
	}
	// guard:workload-gone-from-cache
	if err := r.live.Get(ctx, key, obj); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return obj, nil
}

// gone keeps, renewed, or deletes a request the manager made for a workload that is gone: a
// Pod that is gone has stopped; a Job's Pods outlive it (the garbage collector deletes them
// after it, and each stops within its grace period), so its lock is theirs until the last one
// has finished. Only then is the request deleted, and only the one read (its uid).
func (r *Reconciler) gone(ctx context.Context, m made) (ctrl.Result, error) {
	// guard:workload-job-pods-outlive
	if running, err := r.podsLeft(ctx, m.lr.Namespace, m.uid); err != nil || running > 0 {
		if err != nil {
			return ctrl.Result{}, err
		}
		r.recorder.Eventf(m.lr, nil, corev1.EventTypeNormal, ReasonPodsLeft, "Keep",
			"the %s is gone but %d of its Pods still run: the lock is kept until they are gone", r.kind.name(), running)
		res, err := r.renew(ctx, m.lr)
		return sooner(res, ctrl.Result{RequeueAfter: time.Second}), err
	}
	logf.FromContext(ctx).Info("workload gone: deleting its lock request", "request", m.lr.Name, "workloadUID", m.uid)
	return ctrl.Result{}, client.IgnoreNotFound(r.client.Delete(ctx, m.lr, client.Preconditions{UID: &m.lr.UID}))
}

// reconcileWorkload handles a workload that exists, with the requests the manager made for it
// (mine), whether an earlier workload of its name still has one, and the requests of others
// at its request names.
func (r *Reconciler) reconcileWorkload(ctx context.Context, obj client.Object, mine []*locksv1.LockRequest, earlier bool, others [2]*locksv1.LockRequest) (ctrl.Result, error) {
	lr, extra := pick(mine, obj.GetAnnotations()[AnnotationFencingToken])
	for _, d := range extra {
		if err := r.dropDuplicate(ctx, d); err != nil {
			return ctrl.Result{}, err
		}
	}
	// A workload being deleted keeps its lock until it is gone: a Pod's containers run until the
	// kubelet has stopped them, which is when the Pod object goes.
	// guard:workload-released-while-running
	if done, how := r.kind.finished(obj); done {
		// A Job may say it has finished while some of its Pods still stop (a Job controller
		// older than 1.31 does): it has ended when they have.
		// guard:workload-finished-pods-counted
		if running, err := r.podsLeft(ctx, obj.GetNamespace(), obj.GetUID()); err != nil || running > 0 {
			if err != nil || lr == nil {
				return ctrl.Result{}, err
			}
			res, err := r.renew(ctx, lr)
			return sooner(res, ctrl.Result{RequeueAfter: time.Second}), err
		}
		return ctrl.Result{}, r.release(ctx, obj, lr, how)
	}
	if lr == nil {
		return r.unrequested(ctx, obj, earlier, others)
	}
	return r.follow(ctx, obj, lr)
}

// pick is the request a workload follows among those the manager made for it: the one whose
// grant it was let go on (its fencing token), else the one at its first name. Two exist only
// when two replicas created one each at once (one saw the first name taken by someone else's
// request, the other saw it free a moment later); the others are duplicates.
func pick(mine []*locksv1.LockRequest, token string) (*locksv1.LockRequest, []*locksv1.LockRequest) {
	if len(mine) == 0 {
		return nil, nil
	}
	at := 0
	for i, lr := range mine {
		if token != "" && lr.Status.Phase == locksv1.PhaseGranted && strconv.FormatInt(lr.Status.FencingToken, 10) == token {
			at = i
		}
	}
	extra := slices.Delete(slices.Clone(mine), at, at+1)
	return mine[at], extra
}

// dropDuplicate ends a duplicate request of a workload: deleted while it waits, released while
// it holds (the request the workload follows is of the same holder, so the keys it holds stay
// held when that one holds them too), left to the retention once it has finished.
func (r *Reconciler) dropDuplicate(ctx context.Context, d *locksv1.LockRequest) error {
	switch {
	case d.Status.Phase.IsFinal() || d.Spec.Release:
		return nil
	case d.Status.Phase == locksv1.PhaseGranted:
		patch := client.MergeFrom(d.DeepCopy())
		d.Spec.Release = true
		return client.IgnoreNotFound(r.client.Patch(ctx, d, patch))
	}
	return client.IgnoreNotFound(r.client.Delete(ctx, d, client.Preconditions{UID: &d.UID}))
}

// unrequested handles a live workload the manager has no request for.
func (r *Reconciler) unrequested(ctx context.Context, obj client.Object, earlier bool, others [2]*locksv1.LockRequest) (ctrl.Result, error) {
	ann := obj.GetAnnotations()
	switch {
	// It was let go, and its request is gone: deleted under it (admission refuses that while it
	// is granted, but not where the policies are not installed). It runs without its lock.
	// guard:workload-request-deleted-stops
	case ann[AnnotationFencingToken] != "":
		return ctrl.Result{}, r.requestGone(ctx, obj)
	case ann[AnnotationLockEnded] != "":
		return ctrl.Result{}, nil // its request ended: a workload asks once
	// An earlier workload of this name still has its request (a Job deleted and created again
	// while its Pods run): this one asks once that request is gone, so the two are never two
	// holders of one session at once.
	// guard:workload-earlier-holds-name
	case earlier:
		r.recorder.Eventf(obj, nil, corev1.EventTypeNormal, ReasonEarlier, "Wait",
			"an earlier %s named %s still holds its lock request (its Pods still run): this one asks for the lock once they are gone", r.kind.name(), obj.GetName())
		return ctrl.Result{}, nil
	}
	return r.create(ctx, obj, others)
}

// requestGone stops a workload that was let go and has no request of the manager's any more,
// once the API server confirms it: a cache that lags may not show a request that exists.
func (r *Reconciler) requestGone(ctx context.Context, obj client.Object) error {
	self, err := r.self.Name(ctx, r.client)
	if err != nil {
		return err
	}
	// guard:workload-request-gone-read-live
	for _, n := range RequestNames(r.kind.name(), obj.GetName()) {
		lr := &locksv1.LockRequest{}
		if err := r.live.Get(ctx, client.ObjectKey{Namespace: obj.GetNamespace(), Name: n}, lr); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return err
		}
		if uid, ok := madeFor(lr, self, r.kind.name(), obj.GetName()); ok && uid == obj.GetUID() {
			return nil // it is there: its event brings the workload back
		}
	}
	return r.stop(ctx, obj, "its lock request was deleted")
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
	ann := obj.GetAnnotations()
	token := ann[AnnotationFencingToken]
	want := strconv.FormatInt(lr.Status.FencingToken, 10)
	granted := lr.Status.Phase == locksv1.PhaseGranted && !lr.Spec.Release
	switch {
	case ann[AnnotationLockEnded] != "":
		return ctrl.Result{}, nil // stopped, or its request failed: it asked once
	// Let go once. A Job its owner suspended after it was let go (its token is the grant's) keeps
	// its lock, renewed: it has not finished and its owner may resume it. It is not let go again,
	// which would undo the owner's suspend.
	// guard:workload-owner-suspend-kept
	case granted && token == "":
		return r.letGo(ctx, obj, lr, want)
	case granted && token == want:
		// guard:workload-not-renewed
		return r.renew(ctx, lr)
	// It ran under a grant that is gone (released, expired, force-unlocked) or is not this
	// request's: stop it.
	// guard:workload-not-stopped
	case token != "":
		return ctrl.Result{}, r.stop(ctx, obj, fmt.Sprintf("lock request %s is %s (%s)", lr.Name, phaseOf(lr), conditionMessage(lr)))
	case lr.Status.Phase.IsFinal():
		return ctrl.Result{}, r.ended(ctx, obj, lr)
	}
	return ctrl.Result{}, nil
}

// letGo lets a held workload run on lr's grant, in one write with its fencing token: only when
// lr asks for exactly what the workload's annotations ask for, for its creator, and its grant
// is still in force when read from the API server.
func (r *Reconciler) letGo(ctx context.Context, obj client.Object, lr *locksv1.LockRequest, token string) (ctrl.Result, error) {
	// guard:workload-lets-go-only-on-its-locks
	if why := r.mismatch(obj, lr); why != "" {
		r.recorder.Eventf(obj, lr, corev1.EventTypeWarning, ReasonMismatch, "Grant",
			"lock request %s %s: the %s is not let go on it; delete it and create it again", lr.Name, why, r.kind.name())
		return ctrl.Result{}, nil
	}
	// guard:workload-grant-read-live
	if ok, err := r.stillGranted(ctx, lr); err != nil || !ok {
		return ctrl.Result{}, err // the newer request's event brings the workload back
	}
	patch := client.MergeFromWithOptions(obj.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	r.kind.letGo(obj, token)
	if err := r.client.Patch(ctx, obj, patch); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	r.recorder.Eventf(obj, lr, corev1.EventTypeNormal, ReasonGranted, "Grant", "lock granted (lock request %s, fencing token %s): the %s may run", lr.Name, token, r.kind.name())
	return r.renew(ctx, lr)
}

// mismatch says how lr does not ask for what obj's annotations ask for ("" when it does): the
// same locks in the same order and mode, the same command, and the holder the manager makes
// for the workload. The admission policies fix the annotations when the workload is created;
// this holds where they are not installed.
func (r *Reconciler) mismatch(obj client.Object, lr *locksv1.LockRequest) string {
	spec, err := Parse(r.kind.annotations(obj))
	switch {
	case err != nil:
		return "was made for annotations that are no longer valid (" + err.Error() + ")"
	case !sameLocks(lr.Spec.Locks, spec.Locks):
		return "asks for other locks than the annotation " + AnnotationLock
	case lr.Spec.Command != spec.Command:
		return "is for another command than the annotation " + AnnotationCommand
	case lr.Spec.Holder != r.holder(obj):
		return "is held for " + lr.Spec.Holder.ID().String() + ", not for " + r.holder(obj).ID().String()
	}
	return ""
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

// podsLeft counts, live, the Pods of the Job of uid that have not finished: those the Job
// controller labels as the Job's (batch.kubernetes.io/controller-uid), whatever became of the
// Job. 0 for a Pod's request: a Pod that is gone (or finished) has stopped.
func (r *Reconciler) podsLeft(ctx context.Context, ns string, uid types.UID) (int, error) {
	if _, ok := r.kind.(jobKind); !ok {
		return 0, nil
	}
	var pods corev1.PodList
	if err := r.live.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{batchv1.ControllerUidLabel: string(uid)}); err != nil {
		return 0, err
	}
	left := 0
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			left++
		}
	}
	return left, nil
}

// holder is the holder of the request made for obj: the user who created it, as admission
// recorded it, and a session of its own per workload name.
func (r *Reconciler) holder(obj client.Object) locksv1.Holder {
	owner := obj.GetAnnotations()[AnnotationCreatedBy]
	if owner == "" {
		owner = r.kind.runAs(obj)
	}
	return locksv1.Holder{Owner: owner, Session: session(r.kind.name(), obj.GetName())}
}

// create makes the workload's LockRequest, stamped as the manager's, for the user that created
// the workload, at the first of its names that nobody else's request has. A request of someone
// else's is never deleted, replaced or adopted.
func (r *Reconciler) create(ctx context.Context, obj client.Object, others [2]*locksv1.LockRequest) (ctrl.Result, error) {
	spec, err := Parse(r.kind.annotations(obj))
	if err != nil {
		r.recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonInvalid, "Validate", "%s; the %s stays held until it is fixed", err, r.kind.name())
		return ctrl.Result{}, nil
	}
	self, err := r.self.Name(ctx, r.client)
	if err != nil {
		return ctrl.Result{}, err
	}
	lr, err := r.newRequest(obj, spec, self)
	if err != nil {
		return ctrl.Result{}, err
	}
	var taken []string
	for i, n := range RequestNames(r.kind.name(), obj.GetName()) {
		// guard:workload-name-taken-never-deleted
		if others[i] != nil {
			taken = append(taken, fmt.Sprintf("%s (created by %s)", n, createdBy(others[i])))
			continue
		}
		lr.Name = n
		err := r.client.Create(ctx, lr.DeepCopy())
		switch {
		case err == nil:
			r.recorder.Eventf(obj, lr, corev1.EventTypeNormal, ReasonWaiting, "Request", "waiting for lock request %s (owner %s)", n, lr.Spec.Holder.Owner)
			return ctrl.Result{}, nil
		case apierrors.IsAlreadyExists(err):
			// The cache has not seen it yet: whose is it?
			cur := &locksv1.LockRequest{}
			if err := r.live.Get(ctx, client.ObjectKey{Namespace: lr.Namespace, Name: n}, cur); err != nil {
				return ctrl.Result{}, err
			}
			if _, ok := madeFor(cur, self, r.kind.name(), obj.GetName()); ok {
				return ctrl.Result{}, nil // the manager's own: its event brings the workload back
			}
			taken = append(taken, fmt.Sprintf("%s (created by %s)", n, createdBy(cur)))
		case apierrors.IsForbidden(err) || apierrors.IsInvalid(err):
			r.recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonRequestRefused, "Request", "the API server refused its lock request: %s", err)
			return ctrl.Result{}, nil
		default:
			return ctrl.Result{}, err
		}
	}
	r.recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonNameTaken, "Request",
		"the names of its lock request are taken by requests the Turnstile manager did not make: %s; the %s stays held until one of them is deleted",
		strings.Join(taken, ", "), r.kind.name())
	// A request's going wakes the workload whose name it has (workloadsOf), but a name cut to fit
	// (a workload's name of about 240 characters or more) cannot be read back: look again.
	return ctrl.Result{RequeueAfter: time.Minute}, nil
}

// newRequest is the request the manager makes for obj, without its name: for the workload's
// creator, its own session, the annotations' locks, and the manager's stamp.
func (r *Reconciler) newRequest(obj client.Object, spec Spec, self string) (*locksv1.LockRequest, error) {
	gvk, err := r.client.GroupVersionKindFor(obj)
	if err != nil {
		return nil, err
	}
	lr := &locksv1.LockRequest{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: obj.GetNamespace(),
			Labels:    map[string]string{LabelWorkloadKind: r.kind.name(), LabelWorkloadName: labelValue(obj.GetName())},
			Annotations: map[string]string{
				// Recorded as the request's creator, as the mutating admission policy would (where
				// it does not run, the validating one requires it), and the manager's stamp.
				// guard:workload-records-creator
				AnnotationCreatedBy:   self,
				AnnotationWorkload:    r.kind.name() + "/" + obj.GetName(),
				AnnotationWorkloadUID: string(obj.GetUID()),
			},
		},
		Spec: locksv1.LockRequestSpec{
			Locks:    spec.Locks,
			Holder:   r.holder(obj),
			Command:  spec.Command,
			Priority: spec.Priority,
			Reason:   fit(fmt.Sprintf("%s %s/%s", gvk.Kind, obj.GetNamespace(), obj.GetName()), maxReason),
		},
	}
	if spec.TTL != nil {
		lr.Spec.TTL = &metav1.Duration{Duration: *spec.TTL}
	}
	if spec.KeepRunning {
		lr.Annotations[locksv1.AnnotationOnPartition] = locksv1.OnPartitionKeepRunning
	}
	return lr, nil
}

// stop stops a workload that lost its lock (why says how): a Pod is deleted; a Job is
// suspended again (its Pods go with it), its fencing token removed and the loss recorded on it,
// so that it is neither let go nor asked for again (delete it and create it again).
func (r *Reconciler) stop(ctx context.Context, obj client.Object, why string) error {
	switch o := obj.(type) {
	case *corev1.Pod:
		if err := r.deletePod(ctx, o); err != nil {
			return client.IgnoreNotFound(err)
		}
		r.recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonLost, "Stop", "deleted: the Pod lost its lock: %s", why)
	case *batchv1.Job:
		patch := client.MergeFromWithOptions(o.DeepCopy(), client.MergeFromWithOptimisticLock{})
		o.Spec.Suspend = ptr.To(true)
		delete(o.Annotations, AnnotationFencingToken)
		setAnnotation(o, AnnotationLockEnded, clip("lost its lock: "+why))
		if err := r.client.Patch(ctx, o, patch); err != nil {
			return client.IgnoreNotFound(err)
		}
		r.recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonLost, "Stop", "suspended: the Job lost its lock: %s; delete it and create it again to ask anew", why)
		return r.deleteJobPods(ctx, o)
	}
	return nil
}

// deletePod deletes a stopped Pod (this UID only), within the stop grace when one is set.
func (r *Reconciler) deletePod(ctx context.Context, p *corev1.Pod) error {
	uid := p.UID
	opts := []client.DeleteOption{client.Preconditions{UID: &uid}}
	if g, capped := r.grace(p); capped {
		opts = append(opts, client.GracePeriodSeconds(g))
	}
	return r.client.Delete(ctx, p, opts...)
}

// grace is the deletion grace of a stopped Pod: min(its own, the stop grace), and whether the
// stop grace applies (a Pod already terminating within it is left as it is).
func (r *Reconciler) grace(p *corev1.Pod) (int64, bool) {
	if r.stopGrace == nil {
		return 0, false
	}
	own := ptr.Deref(p.Spec.TerminationGracePeriodSeconds, corev1.DefaultTerminationGracePeriodSeconds)
	if p.DeletionGracePeriodSeconds != nil {
		own = *p.DeletionGracePeriodSeconds
	}
	limit := int64(r.stopGrace.Seconds())
	// guard:workload-stop-grace-capped
	if own <= limit {
		return own, p.DeletionTimestamp == nil
	}
	return limit, true
}

// deleteJobPods deletes, within the stop grace, the Pods of a Job that was stopped (suspended):
// the Job controller deletes them with their own grace, which may outlast the stop's deadline.
// Only the Job's own Pods, by its controller reference's UID (a label alone anyone may write),
// read from the API server: the gated cache holds the Jobs, not their Pods.
func (r *Reconciler) deleteJobPods(ctx context.Context, job *batchv1.Job) error {
	if r.stopGrace == nil {
		return nil
	}
	var pods corev1.PodList
	if err := r.live.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabels{batchv1.ControllerUidLabel: string(job.UID)}); err != nil {
		return err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		// guard:workload-job-pods-by-owner
		if ref := metav1.GetControllerOf(p); ref == nil || ref.UID != job.UID {
			continue
		}
		if _, capped := r.grace(p); !capped {
			continue
		}
		if err := r.deletePod(ctx, p); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("delete Pod %s of the stopped Job: %w", p.Name, err)
		}
	}
	return nil
}

// ended records on a workload that was never let go that its request ended (failed: deadlock
// victim, waitTimeout, queue full; or released), so that it stays held and is not asked for
// again once the request is gone (the retention deletes it).
func (r *Reconciler) ended(ctx context.Context, obj client.Object, lr *locksv1.LockRequest) error {
	why := fmt.Sprintf("lock request %s is %s (%s)", lr.Name, phaseOf(lr), conditionMessage(lr))
	patch := client.MergeFromWithOptions(obj.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	setAnnotation(obj, AnnotationLockEnded, clip(why))
	if err := r.client.Patch(ctx, obj, patch); err != nil {
		return client.IgnoreNotFound(err)
	}
	r.recorder.Eventf(obj, lr, corev1.EventTypeWarning, ReasonRequestFailed, "Wait",
		"%s; the %s stays held: delete it and create it again to ask anew", why, r.kind.name())
	return nil
}

func phaseOf(lr *locksv1.LockRequest) string {
	if lr.Spec.Release && !lr.Status.Phase.IsFinal() {
		return "being released"
	}
	return string(lr.Status.Phase)
}

func conditionMessage(lr *locksv1.LockRequest) string {
	for _, t := range []string{locksv1.ConditionStalled, locksv1.ConditionGranted} {
		if c := meta.FindStatusCondition(lr.Status.Conditions, t); c != nil && c.Message != "" {
			return c.Message
		}
	}
	return "no reason given"
}

func createdBy(lr *locksv1.LockRequest) string {
	if c := lr.Annotations[AnnotationCreatedBy]; c != "" {
		return c
	}
	return "someone unrecorded"
}

// clip keeps a recorded reason to a size an annotation holds well.
func clip(s string) string {
	if len(s) <= 1024 {
		return s
	}
	return s[:1021] + "..."
}
