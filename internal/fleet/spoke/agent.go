package spoke

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/fleet/skew"
	"github.com/turnstile-dev/turnstile/internal/version"
	"github.com/turnstile-dev/turnstile/internal/whoami"
	"github.com/turnstile-dev/turnstile/pkg/workdir"
)

// reconcileWorkers is how many spoke requests the agent reconciles at once (Reconcile).
const reconcileWorkers = 4

// DefaultLeaseDuration is L of docs/fleet.md: a spoke's hub Lease lapses this long after its
// last renewal, and its locks pass on.
const DefaultLeaseDuration = 40 * time.Second

// Options configure an agent.
type Options struct {
	// Cluster is the spoke's name in the fleet (--cluster-name), unique in the fleet.
	Cluster string
	// Hub is the connection to the hub's API server (--hub-kubeconfig), as the spoke's identity.
	Hub *rest.Config
	// LeaseDuration is the hub Lease's duration; renewed every third of it. Settings.Lease
	// when that is set.
	LeaseDuration time.Duration
	// Settings are the partition rule's (--hub-lease-duration, --fleet-grace, --max-clock-skew);
	// skew.Defaults() when zero (with LeaseDuration as its Lease when that is set).
	Settings skew.Settings
	// Clock is the agent's clock (a fake one in tests).
	Clock clock.WithTicker
	// Version is the agent's version as it publishes it on its hub Leases
	// (AnnotationAgentVersion); the binary's (internal/version) when empty.
	Version string
	// Workloads is the gated workloads' cache the workload controllers read
	// (workload.NewGatedCache, shared with them by workload.WithGatedCache): the agent watches a
	// running gated workload it stopped in it until it is gone (gone.go). nil: no such wait.
	Workloads cache.Cache
}

// Agent mirrors the spoke's LockRequests to the hub and the hub's decisions back.
type Agent struct {
	opts  Options
	spoke client.Client // the spoke's cached client
	hub   client.Client // the hub, uncached: writes, Lease reads, a grant's read at its let-go
	hubs  cache.Cache   // the hub's requests of this cluster
	// hubRead is where Reconcile reads a hub request: hubs, or a test's lagging view of it
	// (export_test.go).
	hubRead client.Reader
	// recorder reports in the spoke what the agent did or could not do (StoppedOnPartition,
	// HolderGone, HolderOutlivedLease, FleetRefused).
	recorder events.EventRecorder
	// clocks are the namespaces whose hub Lease the agent renews, and each one's partition
	// clock.
	mu     sync.Mutex
	clocks map[string]*hubClock
	// renewals serialise each namespace's renewals (renewing).
	renewals map[string]*sync.Mutex
	kicks    chan struct{} // a renewal wanted now
	// resyncs wakes spoke requests once the hub answers again after renewals failed
	// (resync): their hub writes that failed while it did not (a release, a deletion, a new
	// request) are retried at once, not after the work queue's backoff, which a long partition
	// grows to minutes.
	resyncs chan event.GenericEvent
	// self is the spoke's user name on the hub: the creator its hub requests and Leases record
	// (locks.turnstile.dev/created-by). A hub with MutatingAdmissionPolicy writes the same name
	// over it; a validating-only hub (Kubernetes 1.33 to 1.35) requires it, as of every
	// Turnstile client (internal/whoami).
	self *whoami.Cache
	// hubEvents wakes the spoke request of each hub request the hub cache sees change
	// (watchHub), and hubSynced says that cache has synced: until then the agent decides
	// nothing but the partition rule's stops (beforeHub).
	hubEvents chan event.GenericEvent
	hubSynced atomic.Bool
	// waits are the stopped holders the agent waits for to be gone, by spoke request (gone.go;
	// nil without Options.Workloads); waitEvents wakes the wait controller for a new one, and
	// live reads the workloads from the spoke's API server.
	waitMu     sync.Mutex
	waits      map[types.NamespacedName]*holderWait
	waitEvents chan event.GenericEvent
	live       client.Reader
}

// SetupWithManager adds the agent to mgr, the spoke's manager: a controller of the spoke's
// LockRequests that also watches this cluster's requests on the hub, and the Lease renewal.
func SetupWithManager(mgr ctrl.Manager, o Options) (*Agent, error) {
	if o.Cluster == "" || o.Hub == nil {
		return nil, errors.New("a spoke agent needs its cluster name and the hub's kubeconfig")
	}
	if o.Settings == (skew.Settings{}) {
		o.Settings = skew.Defaults()
		if o.LeaseDuration > 0 {
			o.Settings.Lease = o.LeaseDuration
		}
	}
	o.LeaseDuration = o.Settings.Lease
	if err := o.Settings.Validate(); err != nil {
		return nil, err
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Version == "" {
		o.Version = version.Get().Version
	}
	if !IsVersion(o.Version) { // a build's own -X version that the hub would not show
		o.Version = ""
	}
	// The hub client's responses carry the hub's Date: the renewals' round trips measure the
	// clock skew with it.
	hubCfg := rest.CopyConfig(o.Hub)
	hubCfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return dateRecorder{next: rt} })
	// The hub's kinds are known: no discovery, so an agent that starts while the hub does not
	// answer (restarted during a partition) sets up, and stops its holders (beforeHub).
	mapper := hubMapper()
	hub, err := client.New(hubCfg, client.Options{Scheme: mgr.GetScheme(), Mapper: mapper})
	if err != nil {
		return nil, fmt.Errorf("hub client: %w", err)
	}
	mine := labels.SelectorFromSet(labels.Set{LabelCluster: o.Cluster})
	hubs, err := cache.New(o.Hub, cache.Options{
		Scheme:           mgr.GetScheme(),
		Mapper:           mapper,
		ByObject:         map[client.Object]cache.ByObject{&locksv1.LockRequest{}: {Label: mine}},
		DefaultTransform: cache.TransformStripManagedFields(),
	})
	if err != nil {
		return nil, fmt.Errorf("hub cache: %w", err)
	}
	if err := mgr.Add(hubs); err != nil {
		return nil, err
	}
	a := &Agent{opts: o, spoke: mgr.GetClient(), hub: hub, hubs: hubs, hubRead: hubs, clocks: map[string]*hubClock{}, kicks: make(chan struct{}, 1), self: &whoami.Cache{},
		resyncs: make(chan event.GenericEvent), hubEvents: make(chan event.GenericEvent, hubEventBuffer),
		recorder: mgr.GetEventRecorder("turnstile-fleet-spoke")}
	// The hub's requests come through a channel (watchHub), not a source of the hub cache: a
	// controller starts no worker before its sources have synced, and gives up after its
	// CacheSyncTimeout, so one that waited on the hub would judge nothing while it is cut off.
	err = builder.ControllerManagedBy(mgr).
		Named("fleet-spoke").
		WithOptions(controller.Options{MaxConcurrentReconciles: reconcileWorkers, RateLimiter: retryLimiter()}).
		For(&locksv1.LockRequest{}).
		WatchesRawSource(source.Channel(a.hubEvents, &handler.EnqueueRequestForObject{})).
		WatchesRawSource(source.Channel(a.resyncs, &handler.EnqueueRequestForObject{})).
		Complete(a)
	if err != nil {
		return nil, err
	}
	if err := a.setupMirrors(mgr); err != nil {
		return nil, err
	}
	if err := a.setupWait(mgr); err != nil {
		return nil, err
	}
	if err := mgr.Add(manager.RunnableFunc(a.watchHub)); err != nil {
		return nil, err
	}
	return a, mgr.Add(a.renewer())
}

// spokeOf maps a hub request to the spoke request it mirrors. A hub request whose spoke
// request is gone is reconciled too, and deleted: that is how an agent restarted finds the hub
// requests of spoke requests deleted while it was away (the cache's first list brings them all).
func (a *Agent) spokeOf(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetAnnotations()[AnnotationSpokeName]
	if name == "" || o.GetLabels()[LabelCluster] != a.opts.Cluster {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
}

// Reconcile brings one spoke request and its hub request together. Its hub writes are given up
// after RetryAfter, as a renewal is: in a partition a write to the hub can hang (a black hole
// answers nothing), and a worker held by one must not keep the others from stopping their
// holders at their deadlines. Several workers run, for the same reason.
func (a *Agent) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, a.opts.Settings.RetryAfter())
	defer cancel()
	var spoke locksv1.LockRequest
	err := a.spoke.Get(ctx, req.NamespacedName, &spoke)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	// guard:spoke-judges-before-the-hub
	if !a.hubSynced.Load() {
		return a.beforeHub(ctx, &spoke, err)
	}
	if err != nil {
		return ctrl.Result{}, a.deleteHub(ctx, req.Namespace, req.Name, "")
	}
	hubKey := types.NamespacedName{Namespace: spoke.Namespace, Name: HubName(a.opts.Cluster, spoke.Name)}
	var hub locksv1.LockRequest
	if err = a.hubRead.Get(ctx, hubKey, &hub); client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, err
	}
	if err == nil {
		mine, err := a.ours(ctx, &hub, spoke.Name)
		if err != nil {
			return ctrl.Result{}, err
		}
		if !mine {
			return a.foreign(ctx, &spoke, &hub)
		}
	}
	switch {
	// A request of a spoke request that was deleted and re-created under its name is not
	// adopted: its grant was the old request's (its workload's), not this one's.
	// guard:spoke-uid-adopted
	case err == nil && hub.Annotations[AnnotationSpokeUID] != string(spoke.UID):
		return ctrl.Result{}, a.deleteHub(ctx, hub.Namespace, spoke.Name, hub.Annotations[AnnotationSpokeUID])
	case spoke.DeletionTimestamp != nil && err == nil:
		return ctrl.Result{}, a.deleteHub(ctx, hub.Namespace, spoke.Name, string(spoke.UID))
	case spoke.DeletionTimestamp != nil:
		return ctrl.Result{}, nil
	// A granted request whose hub request is gone (an admin deleted it on the hub) has lost its
	// grant: it is not asked for again under the old grant's eyes.
	// guard:spoke-grant-gone-lost
	case apierrors.IsNotFound(err) && spoke.Status.Phase == locksv1.PhaseGranted:
		return ctrl.Result{}, a.lose(ctx, &spoke, fmt.Sprintf("its hub request %s/%s is gone: the hub holds no grant for it any more (an admin deleted it there)", hubKey.Namespace, hubKey.Name))
	case apierrors.IsNotFound(err):
		return a.createOrReport(ctx, &spoke)
	}
	// A request whose holder was stopped when the hub was unreachable stays as the agent wrote
	// it: the hub's grant (its old token) is never shown again, and it is released on the hub.
	// guard:spoke-lost-stays-lost
	if LostToPartition(&spoke) {
		return a.releaseLost(ctx, &spoke, &hub)
	}
	refusedEdit, err := a.carry(ctx, &spoke, &hub)
	if err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if Ended(&hub) {
		return ctrl.Result{}, a.endedOnHub(ctx, &spoke, &hub)
	}
	want := SpokeStatus(&spoke, &hub)
	// The partition rule, then the hub's freezes as the spoke judges them (localfreeze.go).
	res, want, err := a.judgeGrant(ctx, &spoke, &hub, want)
	if err != nil {
		return ctrl.Result{}, err
	}
	if refusedEdit != "" {
		want = refusedEditStatus(&spoke, want, a.opts.Cluster, refusedEdit, a.opts.Clock.Now())
		// Tried again each renewal period, not at the failure backoff: the hub's answer to
		// the same change does not change sooner.
		if res.RequeueAfter == 0 || res.RequeueAfter > a.opts.Settings.RenewEvery() {
			res.RequeueAfter = a.opts.Settings.RenewEvery()
		}
	}
	if err := a.writeStatus(ctx, &spoke, want); err != nil {
		return ctrl.Result{}, err
	}
	return res, nil
}

// releaseLost releases hub, the hub request of spoke, a request whose holder the agent stopped
// (or whose grant it gave back): once, and not while the holder it stopped may still run.
func (a *Agent) releaseLost(ctx context.Context, spoke, hub *locksv1.LockRequest) (ctrl.Result, error) {
	if hub.Status.Phase.IsFinal() || hub.Spec.Release && (locksv1.SpokeStopped(hub) || hub.Status.Phase != locksv1.PhaseGranted) {
		return ctrl.Result{}, nil
	}
	// Not while the holder the agent stopped may still run (a partition healed a moment after the
	// stop, a skew give-back: the hub would hand the lock on at once), until the hub could hand
	// it on anyway; the end of its wait (gone.go) wakes the request.
	// guard:spoke-release-after-holder-gone
	if until, held := a.holdsRelease(spoke); held {
		return ctrl.Result{RequeueAfter: until.Sub(a.opts.Clock.Now()) + 10*time.Millisecond}, nil
	}
	patch := client.MergeFromWithOptions(hub.DeepCopy(), client.MergeFromWithOptimisticLock{})
	hub.Spec.Release = true
	markStopped(hub) // its stop is said with the release
	return ctrl.Result{}, client.IgnoreNotFound(a.hub.Patch(ctx, hub, patch))
}

// endedOnHub handles spoke, whose hub grant hub was ended on the hub (Ended: an admin released
// or deleted it there, or this spoke released it) and waits for this spoke: the spoke request
// shows it no more (EndedStatus), and then the hub hears so.
func (a *Agent) endedOnHub(ctx context.Context, spoke, hub *locksv1.LockRequest) error {
	// guard:spoke-says-stopped-after-the-stop
	if err := a.writeStatus(ctx, spoke, EndedStatus(spoke, hub, a.opts.Cluster, a.opts.Clock.Now())); err != nil {
		return err
	}
	return a.confirmStopped(ctx, hub)
}

// writeStatus writes want as spoke's status, once per hub change, only when it differs, and
// reports a holder it stops so.
func (a *Agent) writeStatus(ctx context.Context, spoke *locksv1.LockRequest, want locksv1.LockRequestStatus) error {
	if equality.Semantic.DeepEqual(spoke.Status, want) {
		return nil
	}
	wasLost, wasRunning := LostToPartition(spoke), spoke.Status.Phase == locksv1.PhaseGranted
	spoke.Status = want
	if err := a.spoke.Status().Update(ctx, spoke); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !wasLost && LostToPartition(spoke) {
		a.stopped(ctx, spoke, wasRunning)
		if wasRunning {
			a.startWait(ctx, spoke)
		}
	}
	return nil
}

// carry carries spoke's changes (SpecUpdate) over to its hub request hub. A change the hub
// refuses (a priority or freeze bypass this spoke may not give there) leaves the hub request as
// it was, in hub too: its status is still copied and the partition rule still applies (a grant
// the hub ends is ended in the spoke too), and the refusal (the hub's words) is said on the
// request.
func (a *Agent) carry(ctx context.Context, spoke, hub *locksv1.LockRequest) (refused string, err error) {
	next, changed := SpecUpdate(spoke, hub)
	// A hub request an older agent made says no stops: this one says them from now on (a final
	// one has nothing left to stop).
	if !changed && (hub.Annotations[locksv1.AnnotationConfirmsStops] == "true" || hub.Status.Phase.IsFinal()) {
		return "", nil
	}
	before := hub.DeepCopy()
	patch := client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})
	// A release made in the spoke is its holder's own: the stop is said with it, so the hub
	// hands the lock on in the same write (notForDoneRequests lets no grant go to it after).
	if next.Release && !hub.Spec.Release {
		markStopped(hub)
	}
	hub.Spec = next
	hub.Annotations[AnnotationSpokeGeneration] = itoa(spoke.Generation)
	hub.Annotations[locksv1.AnnotationConfirmsStops] = "true"
	err = a.hub.Patch(ctx, hub, patch)
	why, isRefusal := Refusal(err)
	// guard:spoke-refused-edit-copies-status
	if !isRefusal {
		return "", err
	}
	*hub = *before
	return why, nil
}

// partition applies the partition rule to a spoke request whose hub grant it would show (want,
// the hub's status): a granted holder is stopped at the stop deadline (want becomes
// LostStatus), a grant not shown yet is not shown while the rule lets nothing go (HeldStatus),
// and a holder that runs is looked at again at its deadline.
func (a *Agent) partition(ctx context.Context, spoke, hub *locksv1.LockRequest, want locksv1.LockRequestStatus) (ctrl.Result, locksv1.LockRequestStatus) {
	if want.Phase != locksv1.PhaseGranted {
		return ctrl.Result{}, want
	}
	// Judged by its own grant's end only: another request's ttl in the namespace is not this
	// holder's deadline (any requester, or a hub user labelling her request, would stop others).
	// guard:spoke-judged-by-own-expiry
	st, v := a.judge(ctx, spoke.Namespace, []locksv1.LockRequest{*hub})
	running := spoke.Status.Phase == locksv1.PhaseGranted
	keep := KeepRunning(spoke)
	// A grant held only because the last renewal is too old to leave it its minimum run (the
	// last few seconds of each renewal period) is judged again after a renewal made now, not a
	// second later: one round trip, where the hand-off waited a second one time in twenty.
	if PartitionAction(running, keep, v) == Hold && a.renewSoon(ctx, spoke.Namespace, time.Second) {
		st, v = a.judge(ctx, spoke.Namespace, []locksv1.LockRequest{*hub})
	}
	now := a.opts.Clock.Now()
	switch PartitionAction(running, keep, v) {
	case Stop:
		log.FromContext(ctx).Info("stopping a holder: the hub is unreachable or the clock skew too large", "why", v.Why)
		return ctrl.Result{}, a.lostStatus(spoke, st, v)
	// A grant held back only because the spoke's clock is off the hub's by more than the flag
	// allows is given back: held, the hub would keep the key for it as long as the clock is
	// broken, and nothing else in the fleet could have it.
	// guard:spoke-skew-gives-grant-back
	case Hold:
		if v.SkewTooLarge {
			log.FromContext(ctx).Info("giving a hub grant back: the clock skew with the hub is too large", "why", v.Why)
			return ctrl.Result{}, a.lostStatus(spoke, st, v)
		}
		a.kick()
		return ctrl.Result{RequeueAfter: time.Second}, HeldStatus(spoke, st, v)
	}
	if running && keep {
		return ctrl.Result{}, want // never stopped: nothing to look at again
	}
	// Looked at again at its stop deadline (a renewal meanwhile moves it on).
	return ctrl.Result{RequeueAfter: max(v.StopAt.Sub(now), 0) + 10*time.Millisecond}, want
}

// create makes spoke's hub request, after the hub Lease it names: a hub request whose Lease is
// missing is released at once (HolderLost).
func (a *Agent) create(ctx context.Context, spoke *locksv1.LockRequest) error {
	if spoke.Status.Phase.IsFinal() || spoke.Spec.Release {
		return nil // nothing to ask the hub for
	}
	// guard:spoke-lease-before-request
	if err := a.ensureLease(ctx, spoke.Namespace); err != nil {
		return err
	}
	hub := HubRequest(a.opts.Cluster, spoke)
	// guard:spoke-stamps-creator
	if err := a.self.Stamp(ctx, a.hub, hub); err != nil {
		return err
	}
	if err := a.hub.Create(ctx, hub); apierrors.IsAlreadyExists(err) {
		// Ours, not in the hub cache yet (its event comes), or someone else's under this name
		// that the cache, which selects this cluster's label, does not show: read it.
		var cur locksv1.LockRequest
		if err := a.hub.Get(ctx, client.ObjectKeyFromObject(hub), &cur); err != nil {
			return client.IgnoreNotFound(err)
		}
		// guard:spoke-name-taken-said
		mine, err := a.ours(ctx, &cur, spoke.Name)
		if err != nil {
			return err
		}
		if !mine {
			return &nameTaken{hub: &cur}
		}
	} else if err != nil {
		return fmt.Errorf("create hub request %s/%s: %w", hub.Namespace, hub.Name, err)
	}
	log.FromContext(ctx).V(1).Info("mirrored to the hub", "hub", hub.Name)
	return nil
}

// deleteHub deletes the hub request of the spoke request named spokeName in ns, only when it
// is ours (made by this agent for that spoke request), and only the one of the spoke UID uid
// when uid is set; by UID precondition. One not in the hub cache yet is deleted once it is:
// its watch event brings the spoke request's name back here.
func (a *Agent) deleteHub(ctx context.Context, ns, spokeName, uid string) error {
	var cur locksv1.LockRequest
	if err := a.hubs.Get(ctx, types.NamespacedName{Namespace: ns, Name: HubName(a.opts.Cluster, spokeName)}, &cur); err != nil {
		return client.IgnoreNotFound(err)
	}
	mine, err := a.ours(ctx, &cur, spokeName)
	if err != nil {
		return err
	}
	// guard:spoke-deletes-only-its-own
	if !mine || uid != "" && cur.Annotations[AnnotationSpokeUID] != uid {
		return nil
	}
	// Its spoke request is gone, and its holder with it: a grant is released with its stop said,
	// in one write on which the hub hands the lock on at once, and deleted once the hub has
	// written it final (its event brings the spoke request's name back here). Deleted at once, it
	// would race the hub's decision on the release, and a holder gone before its release is
	// decided costs the hub a second write; and the hub admits the deletion of a spoke's grant
	// only once its spoke has said the stop (turnstile-fleet-stopped).
	if cur.Status.Phase == locksv1.PhaseGranted {
		return a.releaseStopped(ctx, &cur)
	}
	if err := a.hub.Delete(ctx, &cur, client.Preconditions{UID: &cur.UID}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete hub request %s/%s: %w", ns, cur.Name, err)
	}
	return nil
}

// ensureLease makes sure the spoke's hub Lease in ns exists and is renewed, and keeps it
// renewed from then on.
func (a *Agent) ensureLease(ctx context.Context, ns string) error {
	// Renewed within a renewal period, by the renewer (the namespace is in use) or here: fresh
	// enough. A namespace left idle is not renewed, and its Lease lapses on the hub after L: a
	// request named on it then would be HolderLost at once.
	// guard:spoke-lease-fresh-before-request
	if st, _ := a.clockOf(ns); !st.Renewed.IsZero() && a.opts.Clock.Since(st.Renewed) < a.opts.Settings.RenewEvery() {
		return nil
	}
	return a.renew(ctx, ns)
}

// renew renews (or creates) the hub Lease in ns, within RetryAfter (a renewal that hangs in a
// partition is given up and retried), and on its answer moves the partition clock: the
// renewTime it wrote (the spoke's clock just before it was sent) and the skew its round trip
// measures against the hub's Date.
func (a *Agent) renew(ctx context.Context, ns string) error {
	// One renewal of a namespace at a time (the renewer's, a request's ensureLease, a judgement's
	// first): two at once conflict (409), and a failed first one reads as an unknown clock, whose
	// verdict is Stop.
	l := a.renewLock(ns)
	l.Lock()
	defer l.Unlock()
	return a.renewLocked(ctx, ns, a.opts.Settings.RetryAfter())
}

// renewSoon renews ns's Lease within limit if the hub answered its last renewal and no other
// renewal of ns is under way, and says whether it did: a liveness shortcut that must never
// answering says whether the hub answered the last renewal of ns's hub Lease.
func (a *Agent) answering(ns string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.clocks[ns]
	return c != nil && c.tried && !c.failing
}

// hold a reconcile worker in a partition (the others stop holders at their deadlines).
func (a *Agent) renewSoon(ctx context.Context, ns string, limit time.Duration) bool {
	l := a.renewLock(ns)
	if !a.answering(ns) || !l.TryLock() {
		return false
	}
	defer l.Unlock()
	return a.renewLocked(ctx, ns, limit) == nil
}

// renewLocked is renew with ns's renewal lock held, given up after limit.
func (a *Agent) renewLocked(ctx context.Context, ns string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	err := a.renewOnce(ctx, ns)
	// Someone else's write of the Lease between its read and our update: read it again.
	if apierrors.IsConflict(err) {
		err = a.renewOnce(ctx, ns)
	}
	a.mu.Lock()
	c := a.clockLocked(ns)
	c.tried = true
	c.failing = err != nil
	a.mu.Unlock()
	return err
}

// clockLocked is ns's partition clock, made (used now) when there is none; a.mu held.
func (a *Agent) clockLocked(ns string) *hubClock {
	c := a.clocks[ns]
	if c == nil {
		c = &hubClock{used: a.opts.Clock.Now()}
		a.clocks[ns] = c
	}
	return c
}

// renewLock is ns's renewal lock.
func (a *Agent) renewLock(ns string) *sync.Mutex {
	a.mu.Lock()
	if a.renewals == nil {
		a.renewals = map[string]*sync.Mutex{}
	}
	l := a.renewals[ns]
	if l == nil {
		l = &sync.Mutex{}
		a.renewals[ns] = l
	}
	a.mu.Unlock()
	return l
}

func (a *Agent) renewOnce(ctx context.Context, ns string) error {
	name := LeaseName(a.opts.Cluster)
	var lease coordinationv1.Lease
	err := a.hub.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &lease)
	date := &hubDate{}
	wctx := context.WithValue(ctx, dateKey{}, date)
	sent := a.opts.Clock.Now()
	now := metav1.NewMicroTime(sent)
	skewed, measured := a.skewBound()
	switch {
	case apierrors.IsNotFound(err):
		lease = coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{workdir.LabelRole: RoleSpoke, LabelCluster: a.opts.Cluster}},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(name),
				LeaseDurationSeconds: ptr.To(int32(a.opts.LeaseDuration / time.Second)),
				AcquireTime:          &now, RenewTime: &now,
			},
		}
		lease.Annotations = map[string]string{}
		if a.opts.Version != "" {
			lease.Annotations[AnnotationAgentVersion] = a.opts.Version
		}
		if measured {
			lease.Annotations[AnnotationClockSkew] = FormatSkew(skewed)
		}
		if err := a.self.Stamp(ctx, a.hub, &lease); err != nil {
			return err
		}
		if err := a.hub.Create(wctx, &lease); err != nil {
			return fmt.Errorf("create hub lease %s/%s: %w", ns, name, err)
		}
	case err != nil:
		return fmt.Errorf("get hub lease %s/%s: %w", ns, name, err)
	default:
		lease.Spec.RenewTime = &now
		lease.Spec.LeaseDurationSeconds = ptr.To(int32(a.opts.LeaseDuration / time.Second))
		if lease.Annotations == nil {
			lease.Annotations = map[string]string{}
		}
		if a.opts.Version != "" {
			lease.Annotations[AnnotationAgentVersion] = a.opts.Version
		}
		if measured {
			lease.Annotations[AnnotationClockSkew] = FormatSkew(skewed)
		}
		if err := a.hub.Update(wctx, &lease); err != nil {
			return fmt.Errorf("renew hub lease %s/%s: %w", ns, name, err)
		}
	}
	received := a.opts.Clock.Now()
	sample, err := skew.Measure(skew.RoundTrip{Sent: sent, Received: received, Hub: HubTimes(date.get())})
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.clockLocked(ns)
	c.st.Renewed = sent
	if err != nil {
		return fmt.Errorf("hub lease %s/%s renewed, its clock skew not measured: %w", ns, name, err)
	}
	c.st.Skew = c.st.Skew.Add(sample)
	return nil
}

// renewer renews the hub Lease of every namespace with a live hub request of this cluster,
// every third of the lease duration, and when kicked (a grant waits to be let go), by
// nextRenewal: while the hub does not answer, the kicks of the held grants (one a second each)
// do not make a renewal round a second for the whole cut.
func (a *Agent) renewer() manager.RunnableFunc {
	return func(ctx context.Context) error {
		last := a.opts.Clock.Now()
		failures := 0
		kicked := false
		for {
			if wait := nextRenewal(a.opts.Settings, last, failures, kicked).Sub(a.opts.Clock.Now()); wait > 0 {
				select {
				case <-ctx.Done():
					return nil
				case <-a.opts.Clock.After(wait):
				case <-a.kicks:
					kicked = true
					continue // judged again: at once, or after the backoff
				}
			}
			kicked = false
			err := a.renewAll(ctx)
			last = a.opts.Clock.Now()
			switch {
			case err != nil:
				failures++
				log.FromContext(ctx).Error(err, "renewing the hub Leases")
			// Not a safety guard (a release or deletion reaches the hub later without it, on the
			// work queue's backoff or the hub cache's relist): a liveness kick.
			case failures > 0:
				failures = 0
				go a.resync(ctx)
			}
		}
	}
}

// nextRenewal is when the renewer renews next, after its last round ended at last, of which
// failures in a row failed (0: the last one succeeded), and whether it was kicked since. Every
// RenewEvery while the hub answers, and at once when kicked; RetryAfter after a failure (it and
// its retry both come before the stop must begin), and when kicked no sooner than a backoff of
// 1 s doubled with each failure in a row, up to RetryAfter: a cut is still noticed to end
// within RetryAfter, without a round of calls (one a namespace, each up to RetryAfter) each
// second of it. Pure.
func nextRenewal(s skew.Settings, last time.Time, failures int, kicked bool) time.Time {
	switch {
	// guard:spoke-renewal-backoff
	case failures == 0 && kicked:
		return last
	case failures == 0:
		return last.Add(s.RenewEvery())
	case !kicked:
		return last.Add(s.RetryAfter())
	}
	return last.Add(min(time.Second<<min(failures-1, 30), s.RetryAfter()))
}

// renewAll renews the Lease of each namespace in use (one with a hub request of this cluster
// that is not final) and the heartbeat Lease in FleetNamespace.
func (a *Agent) renewAll(ctx context.Context) error {
	inUse, err := a.namespacesInUse(ctx)
	if err != nil {
		return err
	}
	a.forget(inUse, a.opts.Clock.Now())
	// At once, not one after the other: each renewal waits on the hub (up to RetryAfter), and a
	// namespace's renewals must come every RenewEvery however many namespaces there are and
	// however slowly the hub answers (one by one, a hub whose calls took 0.8 s stopped the
	// holders of a spoke with six namespaces at L 20 s).
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		// guard:spoke-renews-at-once
		sem = make(chan struct{}, renewWorkers)
	)
	for ns := range inUse {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := a.renew(ctx, ns); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// forget marks the namespaces in inUse used at now, and forgets the partition clock and the
// renewal lock of each namespace not used for longer than the Lease's duration: its hub Lease
// has lapsed on the hub (nothing renews it), so its clock has nothing left to judge, and its
// skew samples must not stay in the bound the agent publishes (skewBound) for good. A namespace
// used again starts afresh (judge renews before it judges: an unknown clock lets nothing go).
// A renewal of ns under way keeps its lock (and its clock, which it writes): forgotten next time.
func (a *Agent) forget(inUse map[string]bool, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for ns := range inUse {
		a.clockLocked(ns).used = now
	}
	for ns, c := range a.clocks {
		if inUse[ns] || now.Sub(c.used) <= a.opts.Settings.Lease {
			continue
		}
		if l := a.renewals[ns]; l != nil {
			if !l.TryLock() {
				continue
			}
			l.Unlock()
			delete(a.renewals, ns)
		}
		delete(a.clocks, ns)
	}
}

// renewWorkers is how many hub Leases the agent renews at once.
const renewWorkers = 32

// skewBound is the largest clock skew bound of the agent's hub Leases, which it publishes on
// each (AnnotationClockSkew); false before the first measure.
func (a *Agent) skewBound() (time.Duration, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out time.Duration
	var ok bool
	for _, c := range a.clocks {
		if b, known := c.st.Skew.Max(); known {
			out, ok = max(out, b), true
		}
	}
	return out, ok
}

// resync wakes every spoke request, and the spoke request of every hub request of this cluster
// (a spoke request deleted while the hub did not answer is gone from the spoke: its hub request
// names it), once the hub answers renewals again: what the agent could not write on the hub
// meanwhile (a release, a deletion, a request made while cut off) is written now, not when the
// work queue's backoff, grown during the partition, next tries it.
func (a *Agent) resync(ctx context.Context) {
	seen := map[types.NamespacedName]bool{}
	var keys []types.NamespacedName
	var hubs locksv1.LockRequestList
	if !a.hubSynced.Load() {
		return // the hub cache's first list, when it comes, wakes every request (watchHub)
	}
	if err := a.hubs.List(ctx, &hubs); err == nil {
		for i := range hubs.Items {
			for _, r := range a.spokeOf(ctx, &hubs.Items[i]) {
				keys = append(keys, r.NamespacedName)
			}
		}
	}
	var spokes locksv1.LockRequestList
	if err := a.spoke.List(ctx, &spokes); err == nil {
		for i := range spokes.Items {
			keys = append(keys, client.ObjectKeyFromObject(&spokes.Items[i]))
		}
	}
	log.FromContext(ctx).Info("the hub answers again: looking at every request", "requests", len(keys))
	for _, k := range keys {
		if seen[k] {
			continue
		}
		seen[k] = true
		o := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}}
		select {
		case a.resyncs <- event.GenericEvent{Object: o}:
		case <-ctx.Done():
			return
		}
	}
}
