// Package controller holds Turnstile's reconcilers: thin plumbing that reads the cache, asks the
// pure packages (internal/queue, internal/deadlock) what to do, and writes the result in the
// order that keeps one key from ever having two holders.
package controller

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
	"github.com/turnstile-dev/turnstile/internal/queue"
)

const (
	// IndexLockName indexes LockRequests by the ProjectLock names of their targets, so one key's
	// reconcile lists only its own requests.
	IndexLockName = "spec.locks.projectLockName"
	// IndexCommand indexes LockRequests by spec.command, so a freeze finds its requests.
	IndexCommand = "spec.command"
	// IndexHolderLease indexes LockRequests by spec.holder.lease.
	IndexHolderLease = "spec.holder.lease"
	// IndexHolderIdentity indexes LockRequests by holder identity (owner#pull), so the deadlock
	// detector can tell whether anyone could be waiting for an identity.
	IndexHolderIdentity = "spec.holder.identity"
)

// SetupIndexes registers the field indexes the reconcilers list by.
func SetupIndexes(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, &locksv1.LockRequest{}, IndexLockName, func(o client.Object) []string {
		return lockkey.Names(o.(*locksv1.LockRequest).Spec.Locks)
	}); err != nil {
		return err
	}
	if err := indexer.IndexField(ctx, &locksv1.LockRequest{}, IndexCommand, func(o client.Object) []string {
		if c := o.(*locksv1.LockRequest).Spec.Command; c != "" {
			return []string{c}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := indexer.IndexField(ctx, &locksv1.LockRequest{}, IndexHolderLease, func(o client.Object) []string {
		if l := o.(*locksv1.LockRequest).Spec.Holder.Lease; l != "" {
			return []string{l}
		}
		return nil
	}); err != nil {
		return err
	}
	return indexer.IndexField(ctx, &locksv1.LockRequest{}, IndexHolderIdentity, func(o client.Object) []string {
		return []string{queue.Identity(o.(*locksv1.LockRequest).Spec.Holder)}
	})
}
