package cache

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	fcache "k8s.io/client-go/tools/cache/testing"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// listeningInformer counts the handlers given to client-go's informer: each is a listener with
// a buffer of its own.
type listeningInformer struct {
	toolscache.SharedIndexInformer
	mu        sync.Mutex
	listeners int
}

func (l *listeningInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return l.AddEventHandlerWithOptions(h, toolscache.HandlerOptions{})
}

func (l *listeningInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, resync time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return l.AddEventHandlerWithOptions(h, toolscache.HandlerOptions{ResyncPeriod: &resync})
}

func (l *listeningInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, o toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	l.mu.Lock()
	l.listeners++
	l.mu.Unlock()
	return l.SharedIndexInformer.AddEventHandlerWithOptions(h, o)
}

func (l *listeningInformer) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.listeners
}

// fanoutInformer is a compacting LockRequest informer over src (no resync), and the client-go
// informer under it.
func fanoutInformer(t *testing.T, src *fcache.FakeControllerSource) (toolscache.SharedIndexInformer, *listeningInformer) {
	t.Helper()
	var under *listeningInformer
	inf := withCompaction(func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, ix toolscache.Indexers) toolscache.SharedIndexInformer {
		under = &listeningInformer{SharedIndexInformer: toolscache.NewSharedIndexInformer(lw, obj, resync, ix)}
		return under
	})(src, &locksv1.LockRequest{}, 0, toolscache.Indexers{})
	return inf, under
}

// requestSource is a source of n waiting requests.
func requestSource(t *testing.T, n int) *fcache.FakeControllerSource {
	t.Helper()
	src := fcache.NewFakeControllerSource()
	for i := range n {
		lr := packableRequest(t, i, locksv1.PhasePending)
		lr.ResourceVersion = ""
		src.Add(lr)
	}
	return src
}

// runSynced runs inf until the test ends and waits for it to sync.
func runSynced(t *testing.T, inf toolscache.SharedIndexInformer) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	go inf.RunWithContext(ctx)
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("not synced")
	}
	return ctx
}

// lastSeen records, per request, the last object its handler was handed (nil: deleted).
type lastSeen struct {
	mu      sync.Mutex
	objs    map[string]*locksv1.LockRequest
	initial int
	wrong   []string
}

func newLastSeen() *lastSeen { return &lastSeen{objs: map[string]*locksv1.LockRequest{}} }

func (s *lastSeen) see(obj any, gone bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	lr, ok := obj.(*locksv1.LockRequest)
	if !ok {
		s.wrong = append(s.wrong, fmt.Sprintf("%T", obj))
		return
	}
	if gone {
		lr = nil
	}
	s.objs[obj.(*locksv1.LockRequest).Namespace+"/"+obj.(*locksv1.LockRequest).Name] = lr
}

func (s *lastSeen) OnAdd(obj any, initial bool) {
	if initial {
		s.mu.Lock()
		s.initial++
		s.mu.Unlock()
	}
	s.see(obj, false)
}
func (s *lastSeen) OnUpdate(_, obj any) { s.see(obj, false) }
func (s *lastSeen) OnDelete(obj any)    { s.see(obj, true) }

// state is what s last saw of each request still there, by key: its resourceVersion.
func (s *lastSeen) state() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for k, lr := range s.objs {
		if lr != nil {
			out[k] = lr.ResourceVersion
		}
	}
	return out
}

// storeState is the informer's store, as lastSeen.state.
func storeState(inf toolscache.SharedIndexInformer) map[string]string {
	out := map[string]string{}
	for _, o := range inf.GetStore().List() {
		lr := o.(*locksv1.LockRequest)
		out[lr.Namespace+"/"+lr.Name] = lr.ResourceVersion
	}
	return out
}

// TestFanoutOneListener: the handlers of the LockRequest informer, added before it starts and
// after it has synced, are one listener of client-go's informer, so the store is never replayed
// into a buffer of client-go's; each gets what it would from client-go: a handler added after
// the sync gets the store as initial adds (expanded requests), synced once replayed, then every
// event; a removed handler gets nothing more. A handler asking for a resync period of its own
// gets its own listener, and expanded requests too.
func TestFanoutOneListener(t *testing.T) {
	src := requestSource(t, 50)
	inf, under := fanoutInformer(t, src)
	early := newLastSeen()
	earlyReg, err := inf.AddEventHandler(early)
	if err != nil {
		t.Fatal(err)
	}
	ctx := runSynced(t, inf)
	// The store has synced; the fanout's listener may still be handing the first list on, and a
	// replay may be followed by an add it listed (see fanout). The handlers below are added once
	// the first list has been handed on, so each is handed the store exactly once.
	if !toolscache.WaitForCacheSync(ctx.Done(), earlyReg.HasSynced) {
		t.Fatal("the handler added before the start did not sync")
	}
	var late []*lastSeen
	var regs []toolscache.ResourceEventHandlerRegistration
	for range 6 {
		h := newLastSeen()
		reg, err := inf.AddEventHandlerWithOptions(h, toolscache.HandlerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !toolscache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
			t.Fatal("a handler added after the sync did not sync")
		}
		h.mu.Lock()
		initial := h.initial
		h.mu.Unlock()
		if initial != 50 || len(h.state()) != 50 {
			t.Fatalf("a handler added after the sync: %d initial adds, %d requests, want 50", initial, len(h.state()))
		}
		late, regs = append(late, h), append(regs, reg)
	}
	if n := under.count(); n != 1 {
		t.Fatalf("client-go's informer has %d listeners, want 1 (the fanout)", n)
	}

	// Changes reach every handler; a removed one hears no more.
	if err := inf.RemoveEventHandler(regs[5]); err != nil {
		t.Fatal(err)
	}
	removed := late[5].state()
	lr := packableRequest(t, 3, locksv1.PhasePending)
	lr.Status.QueuePosition = 7
	src.Modify(lr)
	src.Delete(packableRequest(t, 4, locksv1.PhasePending))
	g := gomega.NewWithT(t)
	g.Eventually(func() map[string]string { return early.state() }).Should(gomega.HaveLen(49))
	want := storeState(inf)
	for i, h := range append([]*lastSeen{early}, late[:5]...) {
		g.Eventually(h.state).Should(gomega.Equal(want), "handler %d", i)
		if len(h.wrong) > 0 {
			t.Fatalf("handler %d was handed %v", i, h.wrong)
		}
		if q := h.objs["team/"+lr.Name].Status.QueuePosition; q != 7 {
			t.Fatalf("handler %d: queue position %d, want 7 (the update's new object)", i, q)
		}
	}
	if d := cmp.Diff(removed, late[5].state()); d != "" {
		t.Fatalf("a removed handler heard more (-before +after)\n%s", d)
	}

	own := newLastSeen()
	resync := time.Hour
	if _, err := inf.AddEventHandlerWithResyncPeriod(own, resync); err != nil {
		t.Fatal(err)
	}
	if n := under.count(); n != 2 {
		t.Fatalf("a handler with its own resync period: %d listeners, want 2", n)
	}
	lr.Status.QueuePosition = 8
	src.Modify(lr)
	g.Eventually(func() int32 {
		own.mu.Lock()
		defer own.mu.Unlock()
		if o := own.objs["team/"+lr.Name]; o != nil {
			return o.Status.QueuePosition
		}
		return 0
	}).Should(gomega.Equal(int32(8)))
	if len(own.wrong) > 0 {
		t.Fatalf("a handler with its own resync period was handed %v", own.wrong)
	}
}

// TestFanoutLosesNoEvent: handlers added while the store changes as fast as it can end with
// what the store holds: no event falls between a handler's replay and the events after it.
func TestFanoutLosesNoEvent(t *testing.T) {
	src := requestSource(t, 200)
	inf, _ := fanoutInformer(t, src)
	runSynced(t, inf)
	done := make(chan struct{})
	tick := make(chan struct{}, 20) // a handler is added every 150 changes, while they go on
	go func() {
		defer close(done)
		for n := range 3000 {
			if n%150 == 0 {
				tick <- struct{}{}
			}
			i := n % 200
			lr := packableRequest(t, i, locksv1.PhasePending)
			switch n % 7 {
			case 0:
				src.Delete(lr)
			case 1:
				src.Add(lr) // again, after its delete (or an add of one there: a modify)
			default:
				lr.Status.QueuePosition = int32(n)
				src.Modify(lr)
			}
		}
	}()
	var hs []*lastSeen
	for range 20 {
		<-tick
		h := newLastSeen()
		if _, err := inf.AddEventHandler(h); err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	<-done
	g := gomega.NewWithT(t)
	want := func() map[string]string { return storeState(inf) }
	sourceState := func() map[string]string {
		l, err := src.List(metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		objs, err := meta.ExtractList(l)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			lr := o.(*locksv1.LockRequest)
			out[lr.Namespace+"/"+lr.Name] = lr.ResourceVersion
		}
		return out
	}
	g.Eventually(want).Should(gomega.Equal(sourceState())) // the informer has seen every change
	for i, h := range hs {
		g.Eventually(func() map[string]string {
			if d := cmp.Diff(want(), h.state()); d != "" {
				return map[string]string{"diff": d}
			}
			return nil
		}).Should(gomega.BeNil(), "handler %d", i)
	}
}

// blockingReplay is a handler that, at the first object of its replay, has a change made and
// waits a while for another handler to be handed it.
type blockingReplay struct {
	*lastSeen
	once   sync.Once
	change func()
	seen   <-chan struct{}
}

func (b *blockingReplay) OnAdd(obj any, initial bool) {
	b.once.Do(func() {
		b.change()
		select {
		case <-b.seen: // handed on during the replay: the replay must still hand it on after
		case <-time.After(200 * time.Millisecond): // held until the replay ends, as it should be
		}
	})
	b.lastSeen.OnAdd(obj, initial)
}

// TestFanoutReplayHoldsEvents: a change made while a handler's replay runs, after the replay
// listed the store, reaches that handler too.
func TestFanoutReplayHoldsEvents(t *testing.T) {
	src := requestSource(t, 3)
	inf, _ := fanoutInformer(t, src)
	seen := make(chan struct{})
	var seenOnce sync.Once
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{UpdateFunc: func(_, obj any) {
		if obj.(*locksv1.LockRequest).Status.QueuePosition == 99 {
			seenOnce.Do(func() { close(seen) })
		}
	}}); err != nil {
		t.Fatal(err)
	}
	runSynced(t, inf)
	changed := packableRequest(t, 1, locksv1.PhasePending)
	changed.Status.QueuePosition = 99
	h := &blockingReplay{lastSeen: newLastSeen(), change: func() { src.Modify(changed.DeepCopy()) }, seen: seen}
	if _, err := inf.AddEventHandler(h); err != nil {
		t.Fatal(err)
	}
	<-seen
	gomega.NewWithT(t).Eventually(h.state).Should(gomega.Equal(storeState(inf)))
}

// pointers records the objects a handler is handed, by request.
type pointers struct {
	mu      sync.Mutex
	objs    map[string][]*locksv1.LockRequest
	gate    chan struct{} // when not nil, the first add closes entered and waits for it
	entered chan struct{}
	once    sync.Once
}

func (p *pointers) OnAdd(obj any, _ bool) {
	if p.gate != nil {
		p.once.Do(func() {
			close(p.entered)
			<-p.gate
		})
	}
	p.record(obj)
}
func (p *pointers) OnUpdate(_, obj any) { p.record(obj) }
func (p *pointers) OnDelete(obj any)    { p.record(obj) }

func (p *pointers) record(obj any) {
	lr := obj.(*locksv1.LockRequest)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.objs == nil {
		p.objs = map[string][]*locksv1.LockRequest{}
	}
	p.objs[lr.Name] = append(p.objs[lr.Name], lr)
}

func (p *pointers) last(name string) *locksv1.LockRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	if objs := p.objs[name]; len(objs) > 0 {
		return objs[len(objs)-1]
	}
	return nil
}

// TestFanoutSharesExpansions: handlers that join while a replay runs are replayed together,
// each request expanded once for them all, and every handler is handed one expansion of an
// event.
func TestFanoutSharesExpansions(t *testing.T) {
	src := requestSource(t, 20)
	inf, _ := fanoutInformer(t, src)
	early := &pointers{}
	if _, err := inf.AddEventHandler(early); err != nil {
		t.Fatal(err)
	}
	ctx := runSynced(t, inf)
	// The first late handler's replay waits at its first add; two more join meanwhile.
	first := &pointers{gate: make(chan struct{}), entered: make(chan struct{})}
	r1, err := inf.AddEventHandler(first)
	if err != nil {
		t.Fatal(err)
	}
	<-first.entered
	b, c := &pointers{}, &pointers{}
	r2, err := inf.AddEventHandler(b)
	if err != nil {
		t.Fatal(err)
	}
	r3, err := inf.AddEventHandler(c)
	if err != nil {
		t.Fatal(err)
	}
	close(first.gate)
	for _, r := range []toolscache.ResourceEventHandlerRegistration{r1, r2, r3} {
		if !toolscache.WaitFor(ctx, "handler", r.HasSyncedChecker()) {
			t.Fatal("a handler did not sync")
		}
	}
	name := packableRequest(t, 3, locksv1.PhasePending).Name
	if b.last(name) == nil || b.last(name) != c.last(name) {
		t.Fatal("handlers replayed together were handed different expansions of a request")
	}
	if b.last(name) == first.last(name) {
		t.Fatal("a handler replayed before the others shares their expansion")
	}
	lr := packableRequest(t, 3, locksv1.PhasePending)
	lr.Status.QueuePosition = 5
	src.Modify(lr)
	g := gomega.NewWithT(t)
	for _, p := range []*pointers{early, first, b, c} {
		g.Eventually(func() int32 {
			if o := p.last(name); o != nil {
				return o.Status.QueuePosition
			}
			return 0
		}).Should(gomega.Equal(int32(5)))
	}
	if got := early.last(name); got != first.last(name) || got != b.last(name) || got != c.last(name) {
		t.Fatal("the handlers were handed different expansions of one event")
	}
}
