package dashboard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

const (
	// settle batches the watch events of one write (a hand-off touches a ProjectLock and two
	// requests within milliseconds) into one patch; it is most of the page's delay budget.
	settle = 15 * time.Millisecond
	// syncTimeout bounds how long a new stream waits for its scope's first lists.
	syncTimeout = 30 * time.Second
	// linger keeps a scope's watches a while after its last page left, so a reload or a
	// namespace flipped back and forth does not list everything again.
	linger = 30 * time.Second
	// subscriberBuffer is how many messages a slow page may fall behind before it is dropped
	// (its EventSource reconnects and starts from a fresh view).
	subscriberBuffer = 256
)

// resourceWatch lists and watches one resource as the user, and remembers why it cannot.
type resourceWatch struct {
	resource string
	informer cache.SharedIndexInformer

	mu      sync.Mutex
	problem string
	// absent is set when the API server does not serve the resource at all (its CRD is not
	// installed): for the Spokes, a cluster that is no fleet's hub.
	absent bool
}

func (w *resourceWatch) setProblem(msg string) (changed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	changed = w.problem != msg
	w.problem = msg
	return changed
}

func (w *resourceWatch) isAbsent() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.absent
}

func (w *resourceWatch) getProblem() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.problem
}

// objects returns the watched objects, or none when the resource cannot be listed.
func objects[T any](w *resourceWatch) []*T {
	if w == nil || w.informer == nil {
		return nil
	}
	items := w.informer.GetStore().List()
	out := make([]*T, 0, len(items))
	for _, o := range items {
		if t, ok := o.(*T); ok {
			out = append(out, t)
		}
	}
	return out
}

// startWatch tries one list first, so that a Forbidden answer becomes a message on the page
// at once rather than an informer retrying forever; then it runs an informer until ctx ends,
// calling changed on every event and whenever the watch fails or recovers.
func startWatch(ctx context.Context, c ctrlclient.WithWatch, resource, ns string, list ctrlclient.ObjectList, obj runtime.Object,
	changed func(), extra ...ctrlclient.ListOption) *resourceWatch {
	w := &resourceWatch{resource: resource}
	opts := func(raw *metav1.ListOptions) []ctrlclient.ListOption {
		return append([]ctrlclient.ListOption{ctrlclient.InNamespace(ns), &ctrlclient.ListOptions{Raw: raw}}, extra...)
	}
	probe := list.DeepCopyObject().(ctrlclient.ObjectList)
	if err := c.List(ctx, probe, opts(&metav1.ListOptions{Limit: 1})...); err != nil {
		w.setProblem(listProblem(resource, ns, err))
		w.mu.Lock()
		w.absent = meta.IsNoMatchError(err)
		w.mu.Unlock()
		return w
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			l := list.DeepCopyObject().(ctrlclient.ObjectList)
			return l, c.List(ctx, l, opts(&o)...)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return c.Watch(ctx, list.DeepCopyObject().(ctrlclient.ObjectList), opts(&o)...)
		},
	}
	w.informer = cache.NewSharedIndexInformer(lw, obj, 0, cache.Indexers{})
	// The page shows a watch that fails (RBAC revoked, API server gone) until it recovers.
	_ = w.informer.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		if w.setProblem(listProblem(resource, ns, err)) {
			changed()
		}
	})
	clear := func() {
		if w.setProblem("") {
			changed()
		}
	}
	_, _ = w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { clear(); changed() },
		UpdateFunc: func(any, any) { clear(); changed() },
		DeleteFunc: func(any) { clear(); changed() },
	})
	go w.informer.RunWithContext(ctx)
	return w
}

// listProblem says in words why a resource cannot be shown, followed by the API server's own
// message.
func listProblem(resource, ns string, err error) string {
	where := "in namespace " + ns
	if ns == "" {
		where = "in all namespaces"
	}
	if resource == "commandlocks" || resource == "namespaces" || resource == "spokes" {
		where = "(cluster-wide)"
	}
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Sprintf("You may not list %s %s. The API server said: %v", resource, where, err)
	case apierrors.IsUnauthorized(err):
		return fmt.Sprintf("The API server does not accept your credentials to list %s %s: %v", resource, where, err)
	case errors.Is(err, context.Canceled):
		return ""
	}
	return fmt.Sprintf("Cannot list %s %s: %v", resource, where, err)
}

// hasSynced reports whether every watch that runs has listed once.
func hasSynced(ws ...*resourceWatch) bool {
	for _, w := range ws {
		if w != nil && w.informer != nil && !w.informer.HasSynced() {
			return false
		}
	}
	return true
}

// problems lists the watches' problems, in a fixed order.
func problems(ws ...*resourceWatch) []Problem {
	out := []Problem{}
	for _, w := range ws {
		if w == nil {
			continue
		}
		if p := w.getProblem(); p != "" {
			out = append(out, Problem{Resource: w.resource, Message: p})
		}
	}
	return out
}

// subscriber is one open event stream.
type subscriber struct {
	ch chan []byte
	// gone is closed when the subscriber was dropped for falling behind.
	gone     chan struct{}
	dropOnce sync.Once
}

func newSubscriber() *subscriber {
	return &subscriber{ch: make(chan []byte, subscriberBuffer), gone: make(chan struct{})}
}

// send queues msg, or drops the subscriber when it has fallen too far behind. Call with the
// owner's lock held.
func (s *subscriber) send(msg []byte) bool {
	select {
	case s.ch <- msg:
		return true
	default:
		s.dropOnce.Do(func() { close(s.gone) })
		return false
	}
}

// cluster watches what every scope shares: CommandLocks, namespaces, and the fleet's Spokes.
type cluster struct {
	hub    *hub
	cls    *resourceWatch
	nss    *resourceWatch
	spokes *resourceWatch
	// fleetDirty wakes fleetRun.
	fleetDirty chan struct{}
	mu         sync.Mutex
	subs       map[*subscriber]bool
	// access is what the user may do in each namespace, by SelfSubjectAccessReview.
	access map[string]bool
	// all is whether the user may list ProjectLocks in every namespace at once.
	all      bool
	lastSent []byte
	// fleetFull is the whole Fleet tab as last built (nil before its first list), sent to a page
	// that joins; fleetLast is the same, encoded for the next patch.
	fleetFull []byte
	fleetLast encodedFleet
}

// Namespaces is the namespace selector's content.
type Namespaces struct {
	// Items are the namespaces, each with whether the user may list its locks.
	Items []NamespaceOption `json:"items"`
	// All is whether "all namespaces" may be chosen.
	All bool `json:"all"`
	// Default is the kubeconfig's namespace.
	Default string `json:"default"`
	// Problem says why the list is incomplete (the user may not list namespaces).
	Problem string `json:"problem,omitempty"`
}

// NamespaceOption is one namespace of the selector.
type NamespaceOption struct {
	Name    string `json:"name"`
	Allowed bool   `json:"allowed"`
}

func (cl *cluster) start(ctx context.Context) {
	h := cl.hub
	cl.cls = startWatch(ctx, h.client, "commandlocks", "", &locksv1.CommandLockList{}, &locksv1.CommandLock{}, h.commandLocksChanged)
	cl.all = h.canList(ctx, "")
	cl.nss = startWatch(ctx, h.client, "namespaces", "", &corev1.NamespaceList{}, &corev1.Namespace{}, func() { cl.namespacesChanged(ctx) })
	cl.namespacesChanged(ctx)
	cl.spokes = startWatch(ctx, h.client, "spokes", "", &locksv1.SpokeList{}, &locksv1.Spoke{}, cl.fleetChanged)
	go cl.fleetRun(ctx)
}

// namespacesChanged checks access to namespaces not seen before and tells every page when the
// selector's options change.
func (cl *cluster) namespacesChanged(ctx context.Context) {
	names := []string{}
	for _, ns := range objects[corev1.Namespace](cl.nss) {
		names = append(names, ns.Name)
	}
	if d := cl.hub.opts.DefaultNamespace; d != "" && !slices.Contains(names, d) {
		names = append(names, d)
	}
	slices.Sort(names)
	cl.mu.Lock()
	var unknown []string
	for _, n := range names {
		if _, ok := cl.access[n]; !ok {
			unknown = append(unknown, n)
		}
	}
	cl.mu.Unlock()
	for _, n := range unknown {
		ok := cl.hub.canList(ctx, n)
		cl.mu.Lock()
		cl.access[n] = ok
		cl.mu.Unlock()
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	msg := frame(msgNamespaces, cl.namespacesLocked(names))
	if string(msg) == string(cl.lastSent) {
		return
	}
	cl.lastSent = msg
	for s := range cl.subs {
		if !s.send(msg) {
			delete(cl.subs, s)
		}
	}
}

func (cl *cluster) namespacesLocked(names []string) Namespaces {
	out := Namespaces{Items: []NamespaceOption{}, All: cl.all, Default: cl.hub.opts.DefaultNamespace}
	for _, n := range names {
		out.Items = append(out.Items, NamespaceOption{Name: n, Allowed: cl.access[n]})
	}
	if p := cl.nss.getProblem(); p != "" {
		out.Problem = p + ". The selector offers your kubeconfig's namespace; type another to try it."
	}
	return out
}

// subscribe registers s for namespace and fleet updates and returns the current namespace
// options and Fleet tab (nil before the Spokes' first list: its first build goes to s).
func (cl *cluster) subscribe(s *subscriber) (namespaces, fleet []byte) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.subs[s] = true
	return cl.lastSent, cl.fleetFull
}

func (cl *cluster) unsubscribe(s *subscriber) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	delete(cl.subs, s)
}

// scope is the watches of one namespace ("" for all) and the pages that show it.
type scope struct {
	hub *hub
	ns  string

	ctx    context.Context
	cancel context.CancelFunc
	dirty  chan struct{}
	ready  chan struct{} // closed once the first view is built

	pls, lrs, evs *resourceWatch

	mu   sync.Mutex
	subs map[*subscriber]bool
	last encoded
	// view is the full view as last built, sent to a page that joins.
	view viewMessage
	idle *time.Timer
}

func (s *scope) start() {
	h := s.hub
	s.pls = startWatch(s.ctx, h.client, "projectlocks", s.ns, &locksv1.ProjectLockList{}, &locksv1.ProjectLock{}, s.changed)
	s.lrs = startWatch(s.ctx, h.client, "lockrequests", s.ns, &locksv1.LockRequestList{}, &locksv1.LockRequest{}, s.changed)
	// Deadlocks, expiries, force-unlocks and lost holders are all Warning events.
	s.evs = startWatch(s.ctx, h.client, "events", s.ns, &corev1.EventList{}, &corev1.Event{}, s.changed,
		ctrlclient.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("type", corev1.EventTypeWarning)})
	go s.run()
}

// changed marks the scope for a rebuild; the run loop batches what arrives within settle.
func (s *scope) changed() {
	select {
	case s.dirty <- struct{}{}:
	default:
	}
}

func (s *scope) run() {
	ctx := s.ctx
	// The first view waits for every list, so a page never shows a half-listed namespace.
	for !hasSynced(s.pls, s.lrs, s.evs, s.hub.cluster.cls) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	s.rebuild()
	close(s.ready)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.dirty:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(settle):
		}
		s.rebuild()
	}
}

func (s *scope) rebuild() {
	h := s.hub
	now := h.opts.Clock.Now()
	v := Build(Input{
		Now: now, AgingStep: h.opts.AgingStep,
		ProjectLocks: objects[locksv1.ProjectLock](s.pls), Requests: objects[locksv1.LockRequest](s.lrs),
		CommandLocks: objects[locksv1.CommandLock](h.cluster.cls), Events: objects[corev1.Event](s.evs),
	})
	probs := problems(s.pls, s.lrs, h.cluster.cls, s.evs)
	enc := encode(v, probs)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.view = viewMessage{Now: now, Namespace: s.ns, View: v, Problems: probs}
	p, changed := diff(s.last, v, enc, probs, now)
	s.last = enc
	if !changed {
		return
	}
	msg := frame(msgPatch, p)
	for sub := range s.subs {
		if !sub.send(msg) {
			delete(s.subs, sub)
		}
	}
}

// hub owns the watches: one cluster part, and one scope per namespace that a page shows.
type hub struct {
	opts    Options
	client  ctrlclient.WithWatch
	ctx     context.Context
	cluster *cluster

	mu     sync.Mutex
	scopes map[string]*scope
}

func newHub(ctx context.Context, c ctrlclient.WithWatch, opts Options) *hub {
	h := &hub{opts: opts, client: c, ctx: ctx, scopes: map[string]*scope{}}
	h.cluster = &cluster{hub: h, subs: map[*subscriber]bool{}, access: map[string]bool{}, fleetDirty: make(chan struct{}, 1)}
	h.cluster.start(ctx)
	return h
}

// commandLocksChanged rebuilds every scope: each shows the freezes.
func (h *hub) commandLocksChanged() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.scopes {
		s.changed()
	}
}

// canList asks the API server whether the user may list ProjectLocks in ns ("" = all).
func (h *hub) canList(ctx context.Context, ns string) bool {
	r := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ns, Verb: "list", Group: locksv1.GroupVersion.Group, Resource: "projectlocks",
		},
	}}
	if err := h.client.Create(ctx, r); err != nil {
		// Not knowing is not a no: the page tries, and shows the API server's answer.
		return true
	}
	return r.Status.Allowed
}

// subscribe returns the scope of ns, its current full view and a subscriber for its patches.
// The view and the registration happen under the scope's lock, so no patch is missed or
// applied twice.
func (h *hub) subscribe(ctx context.Context, ns string) (*scope, *subscriber, []byte, error) {
	h.mu.Lock()
	s := h.scopes[ns]
	if s == nil {
		sctx, cancel := context.WithCancel(h.ctx)
		s = &scope{hub: h, ns: ns, ctx: sctx, cancel: cancel, dirty: make(chan struct{}, 1), ready: make(chan struct{}), subs: map[*subscriber]bool{}}
		h.scopes[ns] = s
		s.start()
	}
	s.mu.Lock()
	if s.idle != nil {
		s.idle.Stop()
		s.idle = nil
	}
	sub := newSubscriber()
	s.subs[sub] = true
	s.mu.Unlock()
	h.mu.Unlock()

	wait, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	select {
	case <-s.ready:
	case <-wait.Done():
		h.unsubscribe(s, sub)
		return nil, nil, nil, fmt.Errorf("the watches of %s did not sync: %w", scopeName(ns), wait.Err())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Drop what was queued before the view it is part of.
	for len(sub.ch) > 0 {
		<-sub.ch
	}
	return s, sub, frame(msgView, s.view), nil
}

// unsubscribe removes a page; the scope's watches stop after linger without pages.
func (h *hub) unsubscribe(s *scope, sub *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.subs, sub)
	if len(s.subs) > 0 || s.idle != nil {
		return
	}
	s.idle = time.AfterFunc(linger, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.subs) > 0 || h.scopes[s.ns] != s {
			return
		}
		delete(h.scopes, s.ns)
		s.cancel()
	})
}

func scopeName(ns string) string {
	if ns == "" {
		return "all namespaces"
	}
	return "namespace " + ns
}
