package cache

import (
	"context"
	goruntime "runtime"
	"sync"
	"time"
	"weak"

	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// newInformerFunc is the constructor of a shared index informer (controller-runtime's
// cache.Options.NewInformer).
type newInformerFunc func(toolscache.ListerWatcher, runtime.Object, time.Duration, toolscache.Indexers) toolscache.SharedIndexInformer

// withCompaction returns newInformer, except that its LockRequest informer stores every
// request compacted (compactRequest: less than half the bytes) and hands out expanded ones: its
// indexer's reads (what the cache reader lists and gets), its index functions and its event
// handlers see *LockRequest, a new object each time but for a deep queue's key lookup, whose
// expansions are kept and shared as the store's objects were (expansionCache). Every other
// informer is newInformer's.
func withCompaction(newInformer newInformerFunc) newInformerFunc {
	return func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
		if _, ok := obj.(*locksv1.LockRequest); !ok {
			return newInformer(lw, obj, resync, indexers)
		}
		ci := &compactInformer{resync: resync}
		ci.SharedIndexInformer = newInformer(lw, obj, resync, ci.wrapIndexers(indexers))
		// Without a transform set later, requests are compacted as they come.
		_ = ci.SharedIndexInformer.SetTransform(compactTransform(nil))
		// The informer has not started: the fanout's registration cannot fail.
		ci.fan, _ = newFanout(ci.SharedIndexInformer)
		return ci
	}
}

// compactInformer is a SharedIndexInformer of LockRequests that stores compactRequests.
type compactInformer struct {
	toolscache.SharedIndexInformer
	resync time.Duration // the handlers' resync period by default
	fan    *fanout
	memo   expandMemo
	groups expansionCache
}

// SetTransform sets the informer's transform to f, then compaction.
func (ci *compactInformer) SetTransform(f toolscache.TransformFunc) error {
	return ci.SharedIndexInformer.SetTransform(compactTransform(f))
}

// compactTransform applies f (when not nil) to a LockRequest, then compacts it. An object already
// compacted (a resync hands the store's objects through the transform again) is left as it is.
func compactTransform(f toolscache.TransformFunc) toolscache.TransformFunc {
	return func(obj any) (any, error) {
		if _, ok := obj.(*compactRequest); ok {
			return obj, nil
		}
		if f != nil {
			var err error
			if obj, err = f(obj); err != nil {
				return obj, err
			}
		}
		return compactObject(obj), nil
	}
}

// AddEventHandler adds h to the informer's fanout.
func (ci *compactInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return ci.AddEventHandlerWithOptions(h, toolscache.HandlerOptions{})
}

func (ci *compactInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, resync time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return ci.AddEventHandlerWithOptions(h, toolscache.HandlerOptions{ResyncPeriod: &resync})
}

// AddEventHandlerWithOptions adds h to the informer's fanout; a handler asking for a resync
// period of its own gets a listener of its own from client-go.
func (ci *compactInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, o toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	// guard:fanout-handlers
	if o.ResyncPeriod == nil || *o.ResyncPeriod == ci.resync {
		return ci.fan.add(h)
	}
	return ci.SharedIndexInformer.AddEventHandlerWithOptions(expandingHandler{h}, o)
}

// Run and RunWithContext run the informer; a handler added from then on is replayed the store.
func (ci *compactInformer) Run(stop <-chan struct{}) {
	ci.fan.start()
	ci.SharedIndexInformer.Run(stop)
}

func (ci *compactInformer) RunWithContext(ctx context.Context) {
	ci.fan.start()
	ci.SharedIndexInformer.RunWithContext(ctx)
}

// RemoveEventHandler removes a handler added to the fanout or given to client-go.
func (ci *compactInformer) RemoveEventHandler(reg toolscache.ResourceEventHandlerRegistration) error {
	if ci.fan.remove(reg) {
		return nil
	}
	return ci.SharedIndexInformer.RemoveEventHandler(reg)
}

func (ci *compactInformer) AddIndexers(ix toolscache.Indexers) error {
	return ci.SharedIndexInformer.AddIndexers(ci.wrapIndexers(ix))
}

func (ci *compactInformer) GetStore() toolscache.Store { return ci.GetIndexer() }

func (ci *compactInformer) GetIndexer() toolscache.Indexer {
	return compactIndexer{Indexer: ci.SharedIndexInformer.GetIndexer(), ci: ci}
}

// wrapIndexers returns index functions that see what ix's see without compaction.
func (ci *compactInformer) wrapIndexers(ix toolscache.Indexers) toolscache.Indexers {
	out := make(toolscache.Indexers, len(ix))
	for name, f := range ix {
		// guard:compact-index-expands
		out[name] = func(obj any) ([]string, error) { return f(ci.memo.view(obj)) }
	}
	return out
}

// expandMemo keeps the last two expansions the index functions asked for: the store computes
// every index of an object in turn, each for the old and the new object of an update.
type expandMemo struct {
	mu   sync.Mutex
	from [2]*compactRequest
	to   [2]*locksv1.LockRequest
	next int
}

// view is obj expanded, for reading only.
func (m *expandMemo) view(obj any) any {
	c, ok := obj.(*compactRequest)
	if !ok {
		return expandObject(obj)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, f := range m.from {
		if f == c {
			return m.to[i]
		}
	}
	lr := c.expand()
	m.from[m.next], m.to[m.next] = c, lr
	m.next = 1 - m.next
	return lr
}

// compactObject is obj compacted when it is a LockRequest (or a tombstone of one).
func compactObject(obj any) any {
	switch o := obj.(type) {
	case *locksv1.LockRequest:
		return compactLockRequest(o)
	case toolscache.DeletedFinalStateUnknown:
		o.Obj = compactObject(o.Obj)
		return o
	}
	return obj
}

// expandObject is obj expanded when it is compacted (or a tombstone of a compacted one).
func expandObject(obj any) any {
	switch o := obj.(type) {
	case *compactRequest:
		return o.expand()
	case toolscache.DeletedFinalStateUnknown:
		o.Obj = expandObject(o.Obj)
		return o
	}
	return obj
}

func expandAll(objs []any) []any {
	for i, o := range objs {
		objs[i] = expandObject(o)
	}
	return objs
}

// expandingHandler hands its handler expanded requests.
type expandingHandler struct {
	inner toolscache.ResourceEventHandler
}

func (h expandingHandler) OnAdd(obj any, initial bool) { h.inner.OnAdd(expandObject(obj), initial) }
func (h expandingHandler) OnDelete(obj any)            { h.inner.OnDelete(expandObject(obj)) }

func (h expandingHandler) OnUpdate(old, obj any) {
	// guard:compact-own-resync-expands
	h.inner.OnUpdate(expandObject(old), expandObject(obj))
}

// compactIndexer is the informer's indexer as its readers see it: requests expanded.
type compactIndexer struct {
	toolscache.Indexer
	ci *compactInformer
}

func (x compactIndexer) Add(obj any) error    { return x.Indexer.Add(compactObject(obj)) }
func (x compactIndexer) Update(obj any) error { return x.Indexer.Update(compactObject(obj)) }
func (x compactIndexer) Delete(obj any) error { return x.Indexer.Delete(compactObject(obj)) }
func (x compactIndexer) List() []any          { return expandAll(x.Indexer.List()) }

func (x compactIndexer) Replace(objs []any, rv string) error {
	out := make([]any, len(objs))
	for i, o := range objs {
		out[i] = compactObject(o)
	}
	return x.Indexer.Replace(out, rv)
}

func (x compactIndexer) Get(obj any) (any, bool, error) {
	o, ok, err := x.Indexer.Get(obj)
	return expandObject(o), ok, err
}

func (x compactIndexer) GetByKey(key string) (any, bool, error) {
	o, ok, err := x.Indexer.GetByKey(key)
	return expandObject(o), ok, err
}

func (x compactIndexer) Index(name string, obj any) ([]any, error) {
	objs, err := x.Indexer.Index(name, obj)
	return expandAll(objs), err
}

func (x compactIndexer) ByIndex(name, value string) ([]any, error) {
	objs, err := x.Indexer.ByIndex(name, value)
	// guard:compact-groups-key-index
	if name == groupIndex && len(objs) >= groupSize {
		return x.ci.groups.expandAll(objs), err
	}
	// guard:compact-reader-expands
	return expandAll(objs), err
}

func (x compactIndexer) AddIndexers(ix toolscache.Indexers) error {
	return x.Indexer.AddIndexers(x.ci.wrapIndexers(ix))
}

// A deep queue's requests are listed on every reconcile of its key (the lock controller lists
// them from the cache without copying: client.UnsafeDisableDeepCopy). Expanding 1,000 requests
// each time would cost 1.5 MB and about a millisecond a reconcile; a lookup of groupSize or more
// requests in the key index hands out expansions it keeps, each as long as the compact request
// it expands is alive (the store's, until the request changes), groupMax of them at most. Like
// the store's objects before compaction, they are shared: readers that do not copy must not
// change them. Other lookups (a namespace's requests, for the deadlock detector) are expanded
// each time: kept, they would hold a namespace's worth of expansions for every namespace.
const (
	groupSize = 64
	groupMax  = 16384
)

// groupIndex is the key index as the cache names it.
var groupIndex = "field:" + KeyIndex

// expansionCache keeps expansions of compact requests, each until its request is collected.
type expansionCache struct {
	mu sync.Mutex
	m  map[weak.Pointer[compactRequest]]*locksv1.LockRequest
}

func (e *expansionCache) expandAll(objs []any) []any {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil {
		e.m = map[weak.Pointer[compactRequest]]*locksv1.LockRequest{}
	}
	for i, o := range objs {
		c, ok := o.(*compactRequest)
		if !ok {
			objs[i] = expandObject(o)
			continue
		}
		k := weak.Make(c)
		lr, ok := e.m[k]
		if !ok {
			lr = c.expand()
			if len(e.m) < groupMax {
				e.m[k] = lr
				goruntime.AddCleanup(c, e.forget, k)
			}
		}
		objs[i] = lr
	}
	return objs
}

// forget drops the expansion of a collected compact request.
func (e *expansionCache) forget(k weak.Pointer[compactRequest]) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.m, k)
}

// size is how many expansions e keeps.
func (e *expansionCache) size() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.m)
}
