package cache

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
// registered before the informer starts, so the store is never replayed through client-go.
//
// It hands each event on to every handler in the order they were added, one at a time, the
// request expanded once for all of them: handlers share what they are handed, as client-go's
// shared the store's objects before the store held compact requests, and must not change it.
//
// A handler added before the informer starts joins at once. One added after it has started is
// replayed the store (an add, initial, of every request) by a goroutine, then joins, and its
// registration has synced; handlers that join while a replay runs are replayed together in the
// next, each request expanded once for them all (the controllers start together: at 100,000
// requests one replay each was 600,000 expansions in the cold start). Unlike client-go's, the
// replay does not stop the store from changing, so an event already reflected in the replay
// may follow it (an add or an update of an object it listed, a delete of one it did not):
// handlers added after the start must be level-triggered, as every controller's is (it enqueues
// a key, and its reconcile reads the cache). Handlers that count events (the controllers'
// request counts) are added before the start.
//
// A handler that asks for a resync period other than the informer's is given to client-go as
// it is: the fanout's own listener resyncs at the informer's period.
type fanout struct {
	informer toolscache.SharedIndexInformer // the compacting informer's underlying one
	reg      toolscache.ResourceEventHandlerRegistration

	// mu is held while an event is handed on and while a replay lists the store and hands it on.
	mu       sync.Mutex
	handlers []*fanoutHandler

	startMu sync.Mutex
	started bool // the informer runs: a handler added now is replayed the store

	joinMu    sync.Mutex
	joining   []*fanoutHandler // added after the start, waiting for a replay
	replaying bool             // a goroutine replays to the joining handlers
}

// fanoutHandler is a handler of the fanout, and its registration.
type fanoutHandler struct {
	f        *fanout
	h        toolscache.ResourceEventHandler
	replayed chan struct{} // closed when it has joined

	doneOnce sync.Once
	done     chan struct{} // closed when it has synced
}

func newFanoutHandler(f *fanout, h toolscache.ResourceEventHandler) *fanoutHandler {
	return &fanoutHandler{f: f, h: h, replayed: make(chan struct{})}
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

// start records that the informer is about to run.
func (f *fanout) start() {
	f.startMu.Lock()
	defer f.startMu.Unlock()
	f.started = true
}

// add adds h: before the start it joins at once (the store is empty); after, it is replayed the
// store (requests expanded) and joins.
func (f *fanout) add(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	if f.informer.IsStopped() {
		return nil, errors.New("handler was not added to the LockRequest informer because it has stopped already")
	}
	fh := newFanoutHandler(f, h)
	f.startMu.Lock()
	if !f.started {
		// Nothing is handed on before the start, which waits for this.
		f.mu.Lock()
		f.handlers = append(f.handlers, fh)
		f.mu.Unlock()
		f.startMu.Unlock()
		close(fh.replayed)
		return fh, nil
	}
	f.startMu.Unlock()
	f.joinMu.Lock()
	defer f.joinMu.Unlock()
	f.joining = append(f.joining, fh)
	if !f.replaying {
		f.replaying = true
		go f.replay()
	}
	return fh, nil
}

// replay replays the store to the joining handlers, and they join, until none is waiting.
func (f *fanout) replay() {
	for f.replayOnce() {
	}
}

// replayOnce replays the store to the handlers joining now; it reports whether there were any.
func (f *fanout) replayOnce() bool {
	// Under mu no event is handed on: every change the store shows is either in the replay or
	// handed on after it.
	// guard:fanout-replay-holds-events
	f.mu.Lock()
	defer f.mu.Unlock()
	f.joinMu.Lock()
	batch := f.joining
	f.joining = nil
	if len(batch) == 0 {
		f.replaying = false
	}
	f.joinMu.Unlock()
	if len(batch) == 0 {
		return false
	}
	// guard:fanout-replays
	for _, obj := range f.informer.GetStore().List() {
		lr := expandObject(obj)
		for _, fh := range batch {
			fh.h.OnAdd(lr, true)
		}
	}
	// guard:fanout-replay-holds-events/2
	f.handlers = append(f.handlers, batch...)
	for _, fh := range batch {
		close(fh.replayed)
	}
	return true
}

// remove removes a handler of f; it reports whether reg was one.
func (f *fanout) remove(reg toolscache.ResourceEventHandlerRegistration) bool {
	fh, ok := reg.(*fanoutHandler)
	if !ok || fh.f != f {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.joinMu.Lock()
	defer f.joinMu.Unlock()
	f.handlers = slices.DeleteFunc(f.handlers, func(x *fanoutHandler) bool { return x == fh })
	f.joining = slices.DeleteFunc(f.joining, func(x *fanoutHandler) bool { return x == fh })
	return true
}

// OnAdd, OnUpdate and OnDelete hand an event to every handler.
func (f *fanout) OnAdd(obj any, initial bool) {
	f.handOn(obj, func(h toolscache.ResourceEventHandler, lr any) { h.OnAdd(lr, initial) })
}

func (f *fanout) OnDelete(obj any) {
	f.handOn(obj, func(h toolscache.ResourceEventHandler, lr any) { h.OnDelete(lr) })
}

func (f *fanout) OnUpdate(old, obj any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.handlers) == 0 {
		return
	}
	// guard:compact-handler-expands
	was, lr := expandObject(old), expandObject(obj)
	for _, fh := range f.handlers {
		fh.h.OnUpdate(was, lr)
	}
}

// handOn calls call for every handler with one expansion of obj.
func (f *fanout) handOn(obj any, call func(toolscache.ResourceEventHandler, any)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.handlers) == 0 {
		return
	}
	lr := expandObject(obj)
	for _, fh := range f.handlers {
		call(fh.h, lr)
	}
}

// HasSynced reports whether the handler has had every object of the informer's first list: it
// was replayed the store (or joined before the start), and the fanout's listener has handed the
// first list on.
func (fh *fanoutHandler) HasSynced() bool {
	select {
	case <-fh.replayed:
		return fh.f.reg.HasSynced()
	default:
		return false
	}
}

// HasSyncedChecker is HasSynced for toolscache.WaitFor.
func (fh *fanoutHandler) HasSyncedChecker() toolscache.DoneChecker { return fh }

// Name names the handler for toolscache.WaitFor.
func (fh *fanoutHandler) Name() string { return "LockRequest event handler" }

// Done is closed when the handler has synced.
func (fh *fanoutHandler) Done() <-chan struct{} {
	fh.doneOnce.Do(func() {
		fh.done = make(chan struct{})
		go func() {
			<-fh.replayed
			<-fh.f.reg.HasSyncedChecker().Done()
			close(fh.done)
		}()
	})
	return fh.done
}
