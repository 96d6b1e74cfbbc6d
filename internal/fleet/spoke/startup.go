package spoke

import (
	"context"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// An agent that starts while the hub does not answer (restarted during a partition: an
// upgrade, a drained node, an OOM kill) must still stop the spoke's running holders before the
// hub hands their locks on. Nothing it does before that may wait on the hub: its client and
// cache know the hub's kinds without discovery (hubMapper), its controller hears of the hub's
// requests through a channel rather than waiting for the hub cache to sync (watchHub), and
// until that cache has synced each spoke request is only judged by the partition rule
// (beforeHub), whose verdict for a clock no renewal has set is Stop.

// hubEventBuffer is how many hub request changes wait for the agent's controller.
const hubEventBuffer = 1024

// hubSyncTimeout is how long the mirror controllers wait for the hub cache: as long as it
// takes (a hundred years).
const hubSyncTimeout = 100 * 365 * 24 * time.Hour

// hubMapper maps the kinds the agent reads and writes on the hub to their resources, with no
// discovery: a mapper that asks the hub fails while it is cut off, and so did the agent's
// setup (its cache's configuration asks whether each kind is namespaced).
func hubMapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	for _, k := range []struct {
		gvk   schema.GroupVersionKind
		scope meta.RESTScope
	}{
		{locksv1.GroupVersion.WithKind("LockRequest"), meta.RESTScopeNamespace},
		{locksv1.GroupVersion.WithKind("ProjectLock"), meta.RESTScopeNamespace},
		{locksv1.GroupVersion.WithKind("CommandLock"), meta.RESTScopeRoot},
		{locksv1.GroupVersion.WithKind("Spoke"), meta.RESTScopeRoot},
		{coordinationv1.SchemeGroupVersion.WithKind("Lease"), meta.RESTScopeNamespace},
		{authenticationv1.SchemeGroupVersion.WithKind("SelfSubjectReview"), meta.RESTScopeRoot},
	} {
		m.Add(k.gvk, k.scope)
	}
	return m
}

// watchHub feeds the agent's controller with the spoke request of each hub request that
// changes (spokeOf), from the hub cache's informer, and once that cache has synced, says so
// (hubSynced) and wakes every request. It waits for the hub as long as it takes.
func (a *Agent) watchHub(ctx context.Context) error {
	inf, err := a.hubs.GetInformer(ctx, &locksv1.LockRequest{}, cache.BlockUntilSynced(false))
	if err != nil {
		return err
	}
	wake := func(o any) {
		if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
			o = t.Obj
		}
		obj, ok := o.(client.Object)
		if !ok {
			return
		}
		for _, r := range a.spokeOf(ctx, obj) {
			select {
			case a.hubEvents <- event.GenericEvent{Object: &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: r.Name}}}:
			case <-ctx.Done():
				return
			}
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    wake,
		UpdateFunc: func(_, o any) { wake(o) },
		DeleteFunc: wake,
	}); err != nil {
		return err
	}
	if !a.hubs.WaitForCacheSync(ctx) {
		return nil // stopped first
	}
	a.hubSynced.Store(true)
	log.FromContext(ctx).Info("the hub cache has synced: deciding from the hub's requests")
	a.resync(ctx)
	<-ctx.Done()
	return nil
}

// beforeHub is Reconcile before the hub cache has synced (spoke is the spoke request; getErr,
// its read's NotFound): a holder the spoke shows running is judged by the partition rule alone
// (its hub request unseen: the hub Lease's lapse is its deadline), and stopped when the rule
// says so, as Reconcile would; anything else waits for the hub (watchHub wakes every request
// when the cache syncs).
func (a *Agent) beforeHub(ctx context.Context, spoke *locksv1.LockRequest, getErr error) (ctrl.Result, error) {
	if getErr != nil || spoke.Status.Phase != locksv1.PhaseGranted || KeepRunning(spoke) || LostToPartition(spoke) {
		return ctrl.Result{}, nil
	}
	st, v := a.judge(ctx, spoke.Namespace, nil)
	if v.Stop {
		log.FromContext(ctx).Info("stopping a holder before the hub is heard from", "why", v.Why)
		return ctrl.Result{}, a.writeStatus(ctx, spoke, a.lostStatus(spoke, st, v))
	}
	// Looked at again at its deadline, or sooner: the hub cache syncs meanwhile, most likely.
	return ctrl.Result{RequeueAfter: min(max(v.StopAt.Sub(a.opts.Clock.Now()), 0)+10*time.Millisecond, time.Second)}, nil
}

// namespacesInUse are the namespaces whose hub Lease the agent renews: the heartbeat's
// (FleetNamespace), and each with a hub request of this cluster that is not final or, before
// the hub cache has synced, a spoke request that is not.
func (a *Agent) namespacesInUse(ctx context.Context) (map[string]bool, error) {
	// The heartbeat Lease, renewed whether or not the spoke holds anything: the hub's fleet view
	// tells an idle spoke from a lost one by it.
	inUse := map[string]bool{FleetNamespace: true}
	var list locksv1.LockRequestList
	c := client.Reader(a.spoke)
	if a.hubSynced.Load() {
		c = a.hubs
	}
	if err := c.List(ctx, &list); err != nil {
		return nil, err
	}
	for i := range list.Items {
		if !list.Items[i].Status.Phase.IsFinal() {
			inUse[list.Items[i].Namespace] = true
		}
	}
	return inUse, nil
}
