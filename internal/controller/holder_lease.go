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
}

// holderLeases reads the Leases that requests name in spec.holder.lease. It returns the
// requests whose Lease lapsed or is gone, with a message saying so, and the earliest time a
// live one will lapse, when the key must be decided again.
func (r *LockReconciler) holderLeases(ctx context.Context, namespace string, reqs []*locksv1.LockRequest, now time.Time) (map[types.UID]string, time.Time, error) {
	var (
		lost  map[types.UID]string
		next  time.Time
		state = map[string]leaseState{}
	)
	for _, lr := range reqs {
		name := lr.Spec.Holder.Lease
		if name == "" || lr.Status.Phase.IsFinal() {
			continue
		}
		st, ok := state[name]
		if !ok {
			var err error
			if st, err = r.leaseState(ctx, types.NamespacedName{Namespace: namespace, Name: name}, now); err != nil {
				return nil, time.Time{}, err
			}
			state[name] = st
		}
		switch {
		case st.lost != "":
			if lost == nil {
				lost = map[types.UID]string{}
			}
			lost[lr.UID] = st.lost
		case !st.expiry.IsZero() && (next.IsZero() || st.expiry.Before(next)):
			next = st.expiry
		}
	}
	return lost, next, nil
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
		if st := judgeLease(key, &lease, now); st.lost == "" {
			return st, nil
		}
	}
	switch err := r.apiReader.Get(ctx, key, &lease); {
	case apierrors.IsNotFound(err):
		return leaseState{lost: fmt.Sprintf("holder Lease %s does not exist (deleted, or not created before the request named it): the holder is gone", key)}, nil
	case err != nil:
		return leaseState{}, fmt.Errorf("confirm holder lease %s: %w", key, err)
	}
	return judgeLease(key, &lease, now), nil
}

func judgeLease(key types.NamespacedName, lease *coordinationv1.Lease, now time.Time) leaseState {
	if lease.DeletionTimestamp != nil {
		return leaseState{lost: fmt.Sprintf("holder Lease %s is being deleted: the holder is gone", key)}
	}
	expiry, renewed, ok := workdir.LeaseExpiry(lease)
	if !ok {
		return leaseState{}
	}
	if now.Before(expiry) {
		return leaseState{expiry: expiry}
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
