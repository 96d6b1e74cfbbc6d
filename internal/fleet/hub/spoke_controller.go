// Package hub is the hub's side of a fleet (docs/fleet.md): the Spoke reconciler, which keeps
// one cluster-scoped Spoke per member of the members ConfigMap, with the spoke's connection,
// heartbeat, clock skew, holders and waiters as the hub sees them (the fleet at a glance), and
// the per-spoke metrics read from those Spokes.
package hub

import (
	"context"
	"fmt"
	"maps"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/fleet/delay"
	"github.com/turnstile-dev/turnstile/internal/fleet/spoke"
	"github.com/turnstile-dev/turnstile/internal/sharding"
	"github.com/turnstile-dev/turnstile/internal/version"
	"github.com/turnstile-dev/turnstile/pkg/workdir"
)

// viewDelay is how long after a change of a spoke's requests or hub Leases its Spoke is
// reconciled. A hand-off between spokes changes two requests of two clusters, each of which
// moves a Spoke's counts: written at once, those two status writes sit in the hub's API server
// between the release and the grant. Later, a hand-off's changes come to one write per Spoke,
// after the grant. The Spoke is for people and alerts, which do not see a quarter of a second.
const viewDelay = 250 * time.Millisecond

// IndexHolderCluster indexes LockRequests by spec.holder.cluster: a spoke's holders and waiters.
const IndexHolderCluster = "spec.holder.cluster"

// +kubebuilder:rbac:groups=locks.turnstile.dev,resources=spokes,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=locks.turnstile.dev,resources=spokes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch,resourceNames=turnstile-fleet-members

// SpokeReconciler keeps the Spokes: one per member of the members ConfigMap (made, updated and
// deleted to match it), each with its status from the spoke's hub Leases and the hub's requests
// of its holders. Everything it reads is in the manager's cache; it writes only Spokes.
type SpokeReconciler struct {
	client  client.Client
	clock   clock.PassiveClock
	router  sharding.Router
	version string // the hub manager's, which a Ready message compares with each agent's
}

var _ reconcile.Reconciler = (*SpokeReconciler)(nil)

// Option configures a SpokeReconciler.
type Option func(*SpokeReconciler)

// WithClock sets the hub's clock, which judges Lease lapses (a fake one in tests).
func WithClock(c clock.PassiveClock) Option { return func(r *SpokeReconciler) { r.clock = c } }

// WithRouter runs the reconciler active-active (internal/sharding): Spokes this replica does
// not own are reconciled after the router's backup delay.
func WithRouter(rt sharding.Router) Option { return func(r *SpokeReconciler) { r.router = rt } }

// WithVersion sets the hub manager's version, which a connected spoke's Ready message compares
// with its agent's (the binary's, internal/version, by default).
func WithVersion(v string) Option { return func(r *SpokeReconciler) { r.version = v } }

// NewSpokeReconciler builds the reconciler on c, the manager's cached client.
func NewSpokeReconciler(c client.Client, opts ...Option) *SpokeReconciler {
	r := &SpokeReconciler{client: c, clock: clock.RealClock{}, version: version.Get().Version}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Reconcile brings one Spoke (named after its cluster) to its member entry and its status to
// what the hub sees.
func (r *SpokeReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	cluster := req.Name
	members, err := r.members(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	var sp locksv1.Spoke
	err = r.client.Get(ctx, types.NamespacedName{Name: cluster}, &sp)
	if err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("get spoke %s: %w", cluster, err)
	}
	exists := err == nil
	member, isMember := members[cluster]
	switch {
	// The members ConfigMap is the fleet: a Spoke of a cluster it does not list goes (and the
	// admission policy refuses that cluster's writes already).
	// guard:hub-spoke-not-member-deleted
	case !isMember:
		if exists && sp.DeletionTimestamp == nil {
			if err := r.client.Delete(ctx, &sp, client.Preconditions{UID: &sp.UID}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
				return reconcile.Result{}, fmt.Errorf("delete spoke %s, no longer a member: %w", cluster, err)
			}
		}
		return reconcile.Result{}, nil
	case !exists:
		sp = locksv1.Spoke{ObjectMeta: metav1.ObjectMeta{Name: cluster}, Spec: locksv1.SpokeSpec{Labels: member.Labels}}
		if err := r.client.Create(ctx, &sp); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return reconcile.Result{}, nil // its event brings it back
			}
			return reconcile.Result{}, fmt.Errorf("create spoke %s: %w", cluster, err)
		}
	case !maps.Equal(sp.Spec.Labels, member.Labels):
		sp.Spec.Labels = member.Labels
		if err := r.client.Update(ctx, &sp); err != nil {
			return reconcile.Result{}, ignoreConflict(fmt.Errorf("update spoke %s: %w", cluster, err))
		}
	}
	obs, err := r.observe(ctx, cluster)
	if err != nil {
		return reconcile.Result{}, err
	}
	obs.LabelsProblem = member.Problem
	now := r.clock.Now()
	want, next := Status(&sp, obs, now)
	// One status write per reconcile, only when it changes.
	if !equality.Semantic.DeepEqual(sp.Status, want) {
		sp.Status = want
		if err := r.client.Status().Update(ctx, &sp); err != nil {
			return reconcile.Result{}, ignoreConflict(client.IgnoreNotFound(err))
		}
	}
	if next.IsZero() {
		return reconcile.Result{}, nil
	}
	// Looked at again when its first live Lease lapses (a renewal meanwhile brings it sooner).
	return reconcile.Result{RequeueAfter: next.Sub(now) + 10*time.Millisecond}, nil
}

// members reads the members ConfigMap from the cache; none without a fleet.
func (r *SpokeReconciler) members(ctx context.Context) (map[string]Member, error) {
	var cm corev1.ConfigMap
	if err := r.client.Get(ctx, types.NamespacedName{Namespace: Namespace, Name: MembersConfigMap}, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return Members(nil), nil
		}
		return nil, fmt.Errorf("get configmap %s/%s: %w", Namespace, MembersConfigMap, err)
	}
	return Members(&cm), nil
}

// observe reads what the hub sees of cluster: its hub Leases (ViewLease), and its requests'
// holders and waiters.
func (r *SpokeReconciler) observe(ctx context.Context, cluster string) (Observation, error) {
	o := Observation{HubVersion: r.version}
	var leases coordinationv1.LeaseList
	if err := r.client.List(ctx, &leases, client.MatchingLabels{workdir.LabelRole: spoke.RoleSpoke, spoke.LabelCluster: cluster}); err != nil {
		return o, fmt.Errorf("list the hub Leases of spoke %s: %w", cluster, err)
	}
	for i := range leases.Items {
		if v, ok := ViewLease(cluster, &leases.Items[i]); ok {
			o.Leases = append(o.Leases, v)
		}
	}
	var reqs locksv1.LockRequestList
	if err := r.client.List(ctx, &reqs, client.MatchingFields{IndexHolderCluster: cluster}, client.UnsafeDisableDeepCopy); err != nil {
		return o, fmt.Errorf("list the hub requests of spoke %s: %w", cluster, err)
	}
	for i := range reqs.Items {
		o.Holders, o.Waiters = count(&reqs.Items[i], o.Holders, o.Waiters)
		if KeepsRunning(&reqs.Items[i]) {
			o.KeepRunning++
		}
	}
	return o, nil
}

// KeepsRunning says whether lr is a spoke's grant held on the hub while the spoke is cut off:
// granted and not being released, for a holder in a cluster, with no holder Lease to lapse, and
// opted out of the partition stop (fleet.turnstile.dev/on-partition: keep-running, which the
// manager's cache keeps). The hub's policy turnstile-fleet-spoke accepts a spoke's request
// without its Lease only so. A delegate's ordinary request for a holder in a cluster (a hub
// user's, spec.holder.cluster set, no Lease) is the spoke's holder, not its keep-running one.
func KeepsRunning(lr *locksv1.LockRequest) bool {
	// guard:hub-spoke-keep-running-counted
	return lr.Spec.Holder.Cluster != "" && lr.Spec.Holder.Lease == "" && lr.Status.Phase == locksv1.PhaseGranted && !lr.Spec.Release &&
		// guard:hub-keep-running-opted-out
		locksv1.KeepsRunning(lr.Annotations)
}

// count adds lr to the holders (granted) or the waiters (pending, or not decided yet).
func count(lr *locksv1.LockRequest, holders, waiters int32) (int32, int32) {
	switch {
	case lr.Status.Phase == locksv1.PhaseGranted:
		return holders + 1, waiters
	case lr.Status.Phase.IsFinal() || lr.Spec.Release || lr.DeletionTimestamp != nil:
		return holders, waiters
	default:
		return holders, waiters + 1
	}
}

func ignoreConflict(err error) error {
	// Another replica wrote the Spoke: its write's event brings the Spoke back here.
	if apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// SetupWithManager adds the reconciler to mgr, with the LockRequest index it reads.
func (r *SpokeReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &locksv1.LockRequest{}, IndexHolderCluster, func(o client.Object) []string {
		if c := o.(*locksv1.LockRequest).Spec.Holder.Cluster; c != "" {
			return []string{c}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("index lockrequests by %s: %w", IndexHolderCluster, err)
	}
	byName := func(name string) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: name}}}
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("fleet-spoke-view").
		For(&locksv1.Spoke{}).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.membersChanged),
			builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
				return o.GetNamespace() == Namespace && o.GetName() == MembersConfigMap
			}))).
		Watches(&coordinationv1.Lease{}, delay.Enqueue(viewDelay, func(_ context.Context, o client.Object) []reconcile.Request {
			if o.GetLabels()[workdir.LabelRole] != spoke.RoleSpoke || o.GetLabels()[spoke.LabelCluster] == "" {
				return nil
			}
			return byName(o.GetLabels()[spoke.LabelCluster])
		})).
		Watches(&locksv1.LockRequest{}, delay.Enqueue(viewDelay, func(_ context.Context, o client.Object) []reconcile.Request {
			if c := o.(*locksv1.LockRequest).Spec.Holder.Cluster; c != "" {
				return byName(c)
			}
			return nil
		})).
		WithOptions(controller.Options{NewQueue: sharding.NewQueueFunc(r.router)}).
		Complete(r)
}

// membersChanged maps the members ConfigMap to every member and every Spoke: a member added is
// made, one removed deleted.
func (r *SpokeReconciler) membersChanged(ctx context.Context, o client.Object) []reconcile.Request {
	cm, _ := o.(*corev1.ConfigMap)
	names := map[string]bool{}
	for name := range Members(cm) {
		names[name] = true
	}
	var spokes locksv1.SpokeList
	if err := r.client.List(ctx, &spokes); err == nil {
		for i := range spokes.Items {
			names[spokes.Items[i].Name] = true
		}
	}
	out := make([]reconcile.Request, 0, len(names))
	for name := range names {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
	}
	return out
}
