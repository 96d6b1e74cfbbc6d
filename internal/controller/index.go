// Package controller holds Turnstile's reconcilers: thin plumbing that reads the cache, asks the
// pure packages (internal/queue, internal/deadlock) what to do, and writes the result in the
// order that keeps one key from ever having two holders.
package controller

import (
	"context"

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

// Index is one field index of LockRequests: Field's values for an object.
type Index struct {
	Field  string
	Values func(*locksv1.LockRequest) []string
}

// Indexes are the field indexes the reconcilers list LockRequests by.
var Indexes = []Index{
	{IndexLockName, func(lr *locksv1.LockRequest) []string { return lockkey.Names(lr.Spec.Locks) }},
	{IndexCommand, func(lr *locksv1.LockRequest) []string { return nonEmpty(lr.Spec.Command) }},
	{IndexHolderLease, func(lr *locksv1.LockRequest) []string { return nonEmpty(lr.Spec.Holder.Lease) }},
	{IndexHolderIdentity, func(lr *locksv1.LockRequest) []string { return []string{lr.Spec.Holder.ID().Key()} }},
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// SetupIndexes registers Indexes with indexer.
func SetupIndexes(ctx context.Context, indexer client.FieldIndexer) error {
	for _, ix := range Indexes {
		values := ix.Values
		if err := indexer.IndexField(ctx, &locksv1.LockRequest{}, ix.Field, func(o client.Object) []string {
			return values(o.(*locksv1.LockRequest))
		}); err != nil {
			return err
		}
	}
	return nil
}
