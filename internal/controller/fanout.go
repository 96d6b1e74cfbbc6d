package controller

import (
	"errors"
	"slices"
	"sync"

	toolscache "k8s.io/client-go/tools/cache"
)

// fanout is the LockRequest informer's one client-go event handler; the handlers added to the
// informer are its. client-go gives every handler its own listener, whose buffer of pending
// notifications grows as it must and never shrinks (k8s.io/utils' RingGrowing,
// kubernetes/utils#321). A controller's handler is added after the cache has synced, and client-go
// replays the whole store into its buffer at once: at 100,000 requests each of the six handlers
// kept a buffer of 2^17 notifications, 12 MiB in all, for the life of the manager. The fanout is
// registered before the informer starts, so the store is never replayed through client-go; it
// replays the store to a handler added later itself, synchronously, and hands each event on to
// every handler in the order they were added, one at a time.
//
// A handler added after the informer has started gets an add for every object in the store,
// then the events that follow, as client-go's replay gives it. Unlike client-go's, the replay
// does not stop the store from changing, so an event already reflected in the replay may follow
// it (an add or an update of an object it listed, a delete of one it did not): handlers added
// after the start must be level-triggered, as every controller's is (it enqueues a key, and its
// reconcile reads the cache). Handlers that count events (RequestCounts) are added before the
// start, when the replay is empty.
//
// A handler that asks for a resync period other than the informer's is given to client-go as
// it is: the fanout's own listener resyncs at the informer's period.
type fanout struct {
	informer toolscache.SharedIndexInformer // the compacting informer's underlying one
	reg      toolscache.ResourceEventHandlerRegistration

	mu       sync.Mutex
	handlers []*fanoutHandler
}

// fanoutHandler is a handler of the fanout, and its registration.
type fanoutHandler struct {
	f *fanout
	h toolscache.ResourceEventHandler
}

// newFanout registers a fanout with inf, which must not have started.
func newFanout(inf toolscache.SharedIndexInformer) (*fanout, error) {
	f := &fanout{informer: inf}
	reg, err := inf.AddEventHandler(f)
	if err != nil {
		return nil, err
	}
	f.reg = reg
	return f, nil
}

// add adds h: it replays the store to h (requests expanded), then hands it every event.
func (f *fanout) add(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	if f.informer.IsStopped() {
		return nil, errors.New("handler was not added to the LockRequest informer because it has stopped already")
	}
	// Under mu no event is handed on: every change the store shows is either in the replay or
	// handed on after it.
	// guard:fanout-replay-holds-events
	f.mu.Lock()
	defer f.mu.Unlock()
	// guard:fanout-replays
	for _, obj := range f.informer.GetStore().List() {
		h.OnAdd(expandObject(obj), true)
	}
	fh := &fanoutHandler{f: f, h: h}
	// guard:fanout-replay-holds-events/2
	f.handlers = append(f.handlers, fh)
	return fh, nil
}

// remove removes a handler of f; it reports whether reg was one.
func (f *fanout) remove(reg toolscache.ResourceEventHandlerRegistration) bool {
	fh, ok := reg.(*fanoutHandler)
	if !ok || fh.f != f {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handlers = slices.DeleteFunc(f.handlers, func(x *fanoutHandler) bool { return x == fh })
	return true
}

// OnAdd, OnUpdate and OnDelete hand an event to every handler, each its own expansion.
func (f *fanout) OnAdd(obj any, initial bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, fh := range f.handlers {
		fh.h.OnAdd(expandObject(obj), initial)
	}
}

func (f *fanout) OnUpdate(old, obj any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, fh := range f.handlers {
		// guard:compact-handler-expands
		fh.h.OnUpdate(expandObject(old), expandObject(obj))
	}
}

func (f *fanout) OnDelete(obj any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, fh := range f.handlers {
		fh.h.OnDelete(expandObject(obj))
	}
}

// HasSynced reports whether the handler has had every object of the informer's first list: the
// fanout's listener has handed them all on, and a handler added later had them in its replay.
func (fh *fanoutHandler) HasSynced() bool { return fh.f.reg.HasSynced() }

// HasSyncedChecker is HasSynced for toolscache.WaitFor.
func (fh *fanoutHandler) HasSyncedChecker() toolscache.DoneChecker {
	return fh.f.reg.HasSyncedChecker()
}
