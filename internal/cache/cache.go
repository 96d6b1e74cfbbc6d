package cache

import (
	"errors"

	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	turnstile "github.com/turnstile-dev/turnstile/pkg/client"
)

// KeyIndex is the field index of LockRequests by the ProjectLock names of their targets, so one
// key's reconcile lists only its own requests. The controllers define its values (with the
// other indexes, in internal/controller); it is named here because the cache treats its lookups
// as a deep queue's: one of groupSize or more requests hands out expansions it keeps.
const KeyIndex = "spec.locks.projectLockName"

// Options are the cache settings the controllers are written for. Cached objects carry no
// managedFields: nothing here reads them, they are a large part of a small object such as a
// LockRequest or a Lease, and the manager caches every request of a deep queue and every Lease
// in the cluster. Status updates of such an object keep the stored managedFields (the API
// server reads a missing list as "unchanged"). LockRequests are trimmed further
// (trimLockRequest): the annotations no decision reads go, shared strings are stored once.
//
// Its informers relist at once when a watch is answered 410 Gone (pkg/client.NewInformer), not
// after client-go's informer backoff: after an API server restart every watch is. The
// LockRequest informer stores compact requests (withCompaction). Use it with New.
func Options() ctrlcache.Options {
	// guard:cache-compacts-requests
	return ctrlcache.Options{DefaultTransform: trimTransform(), NewInformer: withCompaction(turnstile.NewInformer)}
}

// New is the manager's cache (ctrl.Options.NewCache, with Options): controller-runtime's
// cache.New, with the LockRequest informer watching through a decoder that reads each event
// once (withOwnWatch, internal/watchjson). That watch is of every LockRequest, which is what
// controller-runtime's would be only when nothing scopes them, so options that scope
// LockRequests (namespaces, selectors) are refused rather than half applied: the list would
// keep to the scope and the watch would not.
func New(cfg *rest.Config, opts ctrlcache.Options) (ctrlcache.Cache, error) {
	// guard:cache-refuses-scoped-requests
	if err := unscopedLockRequests(opts); err != nil {
		return nil, err
	}
	start, err := lockRequestWatch(cfg, opts.HTTPClient)
	if err != nil {
		return nil, err
	}
	newInformer := opts.NewInformer
	if newInformer == nil {
		newInformer = toolscache.NewSharedIndexInformer
	}
	// guard:cache-watches-lockrequests-once
	opts.NewInformer = withOwnWatch(start, newInformer)
	return ctrlcache.New(cfg, opts)
}

// unscopedLockRequests is an error when opts scope what the cache holds of LockRequests.
func unscopedLockRequests(opts ctrlcache.Options) error {
	scoped := len(opts.DefaultNamespaces) > 0 || opts.DefaultLabelSelector != nil || opts.DefaultFieldSelector != nil
	for obj, by := range opts.ByObject {
		if _, ok := obj.(*locksv1.LockRequest); ok && (len(by.Namespaces) > 0 || by.Label != nil || by.Field != nil) {
			scoped = true
		}
	}
	if scoped {
		return errors.New("the manager's cache holds every LockRequest: its options must not scope them by namespace or selector (cache.New watches them all)")
	}
	return nil
}
