// Package controller holds Turnstile's reconcilers: thin plumbing that reads the cache, asks the
// pure packages (internal/queue, internal/deadlock) what to do, and writes the result in the
// order that keeps one key from ever having two holders.
package controller

import (
	"context"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
)

const (
	// IndexLockName indexes LockRequests by the ProjectLock names of their targets, so one key's
	// reconcile lists only its own requests.
	IndexLockName = "spec.locks.projectLockName"
	// IndexCommand indexes LockRequests by spec.command, so a freeze finds its requests.
	IndexCommand = "spec.command"
	// IndexHolderLease indexes LockRequests by spec.holder.lease.
	IndexHolderLease = "spec.holder.lease"
	// IndexHolderIdentity indexes LockRequests by holder identity (HolderID.Key, injective: an
	// owner containing '#' is not another identity), so the deadlock detector can tell whether
	// anyone could be waiting for an identity.
	IndexHolderIdentity = "spec.holder.identity"
)

// Index is one field index of LockRequests: Field's values for an object. A Namespaced index
// is only ever listed within one namespace, so it keeps only the namespaced keys: the cache's
// IndexField keeps every value twice (also under "all namespaces"), and an index with a value
// per request (the holder identity) is then two small sets per request.
type Index struct {
	Field      string
	Values     func(*locksv1.LockRequest) []string
	Namespaced bool
}

// Indexes are the field indexes the reconcilers list LockRequests by.
var Indexes = []Index{
	{IndexLockName, func(lr *locksv1.LockRequest) []string { return lockkey.Names(lr.Spec.Locks) }, true},
	// A CommandLock is cluster-wide: its requests are listed across namespaces.
	{IndexCommand, func(lr *locksv1.LockRequest) []string { return nonEmpty(lr.Spec.Command) }, false},
	{IndexHolderLease, func(lr *locksv1.LockRequest) []string { return nonEmpty(lr.Spec.Holder.Lease) }, true},
	{IndexHolderIdentity, func(lr *locksv1.LockRequest) []string { return []string{lr.Spec.Holder.ID().Key()} }, true},
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// SetupIndexes registers Indexes with the cache c: the namespaced ones directly on the
// LockRequest informer, under the name and keys the cache's reader looks up for a list with
// client.InNamespace and client.MatchingFields ("field:<field>", "<namespace>/<value>").
func SetupIndexes(ctx context.Context, c cache.Cache) error {
	informer, err := c.GetInformer(ctx, &locksv1.LockRequest{})
	if err != nil {
		return err
	}
	for _, ix := range Indexes {
		values := ix.Values
		if !ix.Namespaced {
			if err := c.IndexField(ctx, &locksv1.LockRequest{}, ix.Field, func(o client.Object) []string {
				return values(o.(*locksv1.LockRequest))
			}); err != nil {
				return err
			}
			continue
		}
		if err := informer.AddIndexers(toolscache.Indexers{"field:" + ix.Field: func(obj any) ([]string, error) {
			lr, ok := obj.(*locksv1.LockRequest)
			if !ok {
				return nil, nil
			}
			vs := values(lr)
			keys := make([]string, len(vs))
			for i, v := range vs {
				keys[i] = lr.Namespace + "/" + v
			}
			return keys, nil
		}}); err != nil {
			return err
		}
	}
	return nil
}
