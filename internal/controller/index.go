// Package controller holds Turnstile's reconcilers: thin plumbing that reads the cache
// (internal/cache, whose package comment says what it promises them), asks the pure packages
// (internal/queue, internal/deadlock) what to do, and writes the result in the order that keeps
// one key from ever having two holders.
package controller

import (
	"context"
	"hash/fnv"
	"strconv"

	toolscache "k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/cache"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
	"github.com/turnstile-dev/turnstile/internal/queue"
)

// The field indexes of LockRequests, beside the key index (cache.KeyIndex: a key's requests, the
// lookup of every reconcile of a key, which the cache treats as a deep queue's).
const (
	// IndexCommand indexes LockRequests by spec.command, so a freeze finds its requests.
	IndexCommand = "spec.command"
	// IndexHolderLease indexes LockRequests by spec.holder.lease.
	IndexHolderLease = "spec.holder.lease"
	// IndexHolderIdentity indexes LockRequests by a bucket of their holder identity
	// (IdentityBucket), so the deadlock detector can tell whether anyone could be waiting for an
	// identity: it lists the identity's bucket and keeps the requests of the identity
	// (sameIdentity). A bucket, not the identity: most identities have one request, and an index
	// value costs a set of its own (about 250 bytes); identityBuckets sets per namespace cost
	// what a few requests' sets did.
	IndexHolderIdentity = "spec.holder.identity"
	// IndexWork indexes the LockRequests whose keys may have work for a decision, across
	// namespaces: "undecided" (no status yet) and "holding" (holds a key: a release, an expiry),
	// so the watchdog looks at those alone, not at every waiter (watchdog.go).
	IndexWork = "status.work"
	// identityBuckets is how many buckets a namespace's identities fall into.
	identityBuckets = 16
)

// IdentityBucket is the bucket of IndexHolderIdentity that id falls in: a hash of its Key, so
// every request of one identity is in one bucket.
func IdentityBucket(id locksv1.HolderID) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id.Key()))
	sum := h.Sum64()
	sum ^= sum >> 29 // fold: FNV's low bits alone spread similar keys poorly
	sum *= 0xbf58476d1ce4e5b9
	sum ^= sum >> 32
	return bucketNames[sum%identityBuckets]
}

// bucketNames are the index values of the buckets, one shared string each.
var bucketNames = func() []string {
	out := make([]string, identityBuckets)
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}()

// Index is one field index of LockRequests: Field's values for an object. The cache's
// IndexField keeps every value twice, under the object's namespace and under "all
// namespaces"; each index here keeps only the one its readers list: a Namespaced index is only
// ever listed within one namespace, the others only across all of them.
type Index struct {
	Field      string
	Values     func(*locksv1.LockRequest) []string
	Namespaced bool
}

// Indexes are the field indexes the reconcilers list LockRequests by.
var Indexes = []Index{
	{cache.KeyIndex, func(lr *locksv1.LockRequest) []string { return lockkey.Names(lr.Spec.Locks) }, true},
	// A CommandLock is cluster-wide: its requests are listed across namespaces.
	{IndexCommand, func(lr *locksv1.LockRequest) []string { return nonEmpty(lr.Spec.Command) }, false},
	{IndexHolderLease, func(lr *locksv1.LockRequest) []string { return nonEmpty(lr.Spec.Holder.Lease) }, true},
	{IndexHolderIdentity, func(lr *locksv1.LockRequest) []string { return []string{IdentityBucket(lr.Spec.Holder.ID())} }, true},
	{IndexWork, workIndex, false},
}

// The values of IndexWork.
const (
	workUndecided = "undecided"
	workHolding   = "holding"
)

// workIndex is a request's IndexWork values: undecided, or holding a key; none for a waiter or
// a final request.
func workIndex(lr *locksv1.LockRequest) []string {
	switch {
	case lr.Status.Phase.IsFinal():
		return nil
	case lr.Status.Phase == "":
		return []string{workUndecided}
	case len(queue.HeldLocks(lr)) > 0:
		return []string{workHolding}
	}
	return nil
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// allNamespaces is the "namespace" of the cache reader's keys for a list across namespaces.
const allNamespaces = "__all_namespaces"

// SetupIndexes registers Indexes directly on the LockRequest informer of the cache c, under the
// name and keys the cache's reader looks up for a list with client.MatchingFields
// ("field:<field>"; "<namespace>/<value>" with client.InNamespace, "__all_namespaces/<value>"
// without).
func SetupIndexes(ctx context.Context, c ctrlcache.Cache) error {
	informer, err := c.GetInformer(ctx, &locksv1.LockRequest{})
	if err != nil {
		return err
	}
	for _, ix := range Indexes {
		if err := informer.AddIndexers(toolscache.Indexers{"field:" + ix.Field: ix.keys}); err != nil {
			return err
		}
	}
	return nil
}

// keys are the index keys of obj: its values under its namespace, or under all namespaces.
func (ix Index) keys(obj any) ([]string, error) {
	lr, ok := obj.(*locksv1.LockRequest)
	if !ok {
		return nil, nil
	}
	vs := ix.Values(lr)
	scope := allNamespaces
	// guard:index-scope
	if ix.Namespaced {
		scope = lr.Namespace
	}
	keys := make([]string, len(vs))
	for i, v := range vs {
		keys[i] = scope + "/" + v
	}
	return keys, nil
}
