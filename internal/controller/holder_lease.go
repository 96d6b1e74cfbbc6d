package controller

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/pkg/workdir"
)

// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch

// leaseState is what one holder Lease says about its holder.
type leaseState struct {
	// lost explains why the holder is gone; empty while the Lease is live.
	lost string
	// expiry is when a live Lease lapses unless renewed; zero if it never lapses by time.
	expiry time.Time
	// role and creator are the Lease's label locks.turnstile.dev/role and annotation
	// locks.turnstile.dev/created-by: what the admission policies protect it by.
	role, creator string
	// live is true when the state was read from the API server, not the cache.
	live bool
}

// createdBy is the annotation the admission policies stamp on a LockRequest and on a labelled
// Lease with the user that created it (config/admission).
const createdBy = "locks.turnstile.dev/created-by"

// holderLeases reads the Leases that requests name in spec.holder.lease. It returns the
// requests whose Lease lapsed or is gone, with a message saying so; the requests that may not
// hold on their Lease because the admission policies do not protect it (unprotected); and the
// earliest time a live one will lapse, when the key must be decided again.
func (r *LockReconciler) holderLeases(ctx context.Context, namespace string, reqs []*locksv1.LockRequest, now time.Time) (lost, unprotected map[types.UID]string, next time.Time, err error) {
	state := map[string]leaseState{}
	for _, lr := range reqs {
		name := lr.Spec.Holder.Lease
		if name == "" || lr.Status.Phase.IsFinal() {
			continue
		}
		key := types.NamespacedName{Namespace: namespace, Name: name}
		st, ok := state[name]
		if !ok {
			if st, err = r.leaseState(ctx, key, now); err != nil {
				return nil, nil, time.Time{}, err
			}
			state[name] = st
		}
		// guard:no-live-protection-read
		if st.lost == "" && leaseProblem(lr, key, st) != "" && !st.live {
			// The cache may be behind a re-created Lease: a request is failed for its Lease
			// only on what the API server says.
			if st, err = r.liveLeaseState(ctx, key, now); err != nil {
				return nil, nil, time.Time{}, err
			}
			state[name] = st
		}
		if st.lost != "" {
			if lost == nil {
				lost = map[types.UID]string{}
			}
			lost[lr.UID] = st.lost
			continue
		}
		if problem := leaseProblem(lr, key, st); problem != "" {
			if unprotected == nil {
				unprotected = map[types.UID]string{}
			}
			unprotected[lr.UID] = problem
		}
		// A grant made before on an unprotected Lease stands, and still ends when it lapses.
		if !st.expiry.IsZero() && (next.IsZero() || st.expiry.Before(next)) {
			next = st.expiry
		}
	}
	return lost, unprotected, next, nil
}

// leaseProblem says why lr may not hold on its holder Lease (key, in state st), or "" when it
// may. A request admitted under the admission policies (they stamp its creator) holds only on
// a Lease they protect: one created with the label locks.turnstile.dev/role, which makes them
// record its creator and let only that user (or an admin) update or delete it, created by the
// request's owner or by the user that created the request (a delegate). Any other Lease could
// be deleted by another requester, releasing lr's locks as HolderLost while its holder works
// (hole F of #26). A request without the stamp was made where the policies are not installed:
// nothing is protected there, and nothing is refused.
func leaseProblem(lr *locksv1.LockRequest, key types.NamespacedName, st leaseState) string {
	requester := lr.Annotations[createdBy]
	if requester == "" || st.lost != "" {
		return ""
	}
	owner := lr.Spec.Holder.Owner
	fix := fmt.Sprintf("create a holder Lease as %s with the label %s (for example %s=%s, as kubectl turnstile run and pkg/workdir's heartbeat do) and name it in a new request",
		requester, workdir.LabelRole, workdir.LabelRole, workdir.RoleWorkdirGuard)
	switch {
	// guard:holder-lease-label-unchecked
	case st.role == "":
		return fmt.Sprintf("holder Lease %s is not protected: it has no label %s, so anyone who may delete Leases in %s could release this request's locks; %s",
			key, workdir.LabelRole, key.Namespace, fix)
	case st.creator == "":
		return fmt.Sprintf("holder Lease %s is not protected: it has the label %s but no annotation %s (it was labelled before the admission policies were installed), so they do not keep it; delete it and %s",
			key, workdir.LabelRole, createdBy, fix)
	// guard:holder-lease-creator-unchecked
	case st.creator != owner && st.creator != requester:
		who := "owner " + owner
		if requester != owner {
			who += " or its creator " + requester
		}
		return fmt.Sprintf("holder Lease %s was created by %s, not by this request's %s: it is not this holder's to renew, and its creator could release this request's locks; %s",
			key, st.creator, who, fix)
	}
	return ""
}

// leaseState reads one holder Lease from the cache. Before it declares a holder lost it reads
// the Lease again from the API server: a cache that is behind a renewal must not release a
// live holder's lock.
func (r *LockReconciler) leaseState(ctx context.Context, key types.NamespacedName, now time.Time) (leaseState, error) {
	var lease coordinationv1.Lease
	err := r.client.Get(ctx, key, &lease)
	if err != nil && !apierrors.IsNotFound(err) {
		return leaseState{}, fmt.Errorf("get holder lease %s: %w", key, err)
	}
	if err == nil {
		// guard:no-live-lease-read
		if st := judgeLease(key, &lease, now); st.lost == "" {
			return st, nil
		}
	}
	return r.liveLeaseState(ctx, key, now)
}

// liveLeaseState reads one holder Lease from the API server.
func (r *LockReconciler) liveLeaseState(ctx context.Context, key types.NamespacedName, now time.Time) (leaseState, error) {
	var lease coordinationv1.Lease
	switch err := r.apiReader.Get(ctx, key, &lease); {
	case apierrors.IsNotFound(err):
		return leaseState{lost: fmt.Sprintf("holder Lease %s does not exist (deleted, or not created before the request named it): the holder is gone", key), live: true}, nil
	case err != nil:
		return leaseState{}, fmt.Errorf("confirm holder lease %s: %w", key, err)
	}
	st := judgeLease(key, &lease, now)
	st.live = true
	return st, nil
}

func judgeLease(key types.NamespacedName, lease *coordinationv1.Lease, now time.Time) leaseState {
	if lease.DeletionTimestamp != nil {
		return leaseState{lost: fmt.Sprintf("holder Lease %s is being deleted: the holder is gone", key)}
	}
	role, creator := lease.Labels[workdir.LabelRole], lease.Annotations[createdBy]
	expiry, renewed, ok := workdir.LeaseExpiry(lease)
	if !ok {
		return leaseState{role: role, creator: creator}
	}
	if now.Before(expiry) {
		return leaseState{expiry: expiry, role: role, creator: creator}
	}
	return leaseState{lost: fmt.Sprintf("holder Lease %s lapsed at %s: last renewed %s with a duration of %ds, the holder is gone",
		key, expiry.UTC().Format(time.RFC3339), renewed.UTC().Format(time.RFC3339), ptr.Deref(lease.Spec.LeaseDurationSeconds, 0))}
}

// leaseKeys maps a Lease event to the keys of the live requests that name it.
func (r *LockReconciler) leaseKeys(ctx context.Context, o client.Object) []reconcile.Request {
	var list locksv1.LockRequestList
	if err := r.client.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{IndexHolderLease: o.GetName()}); err != nil {
		log.FromContext(ctx).Error(err, "list lockrequests for holder lease", "lease", client.ObjectKeyFromObject(o))
		return nil
	}
	return liveRequestKeys(ctx, list.Items, nil)
}

// leaseShortened passes Lease creations and deletions, and updates that bring the Lease's
// expiry forward (a holder giving it up). A plain renewal only pushes the expiry back; the
// requeue at the old expiry finds it renewed, so holders renewing every few seconds cost no
// reconciles.
func leaseShortened() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			oldLease, ok1 := e.ObjectOld.(*coordinationv1.Lease)
			newLease, ok2 := e.ObjectNew.(*coordinationv1.Lease)
			if !ok1 || !ok2 {
				return true
			}
			if newLease.DeletionTimestamp != nil {
				return true
			}
			oldExp, _, oldOK := workdir.LeaseExpiry(oldLease)
			newExp, _, newOK := workdir.LeaseExpiry(newLease)
			return oldOK != newOK || newExp.Before(oldExp)
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}
