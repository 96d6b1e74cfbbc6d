package controller

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/deadlock"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
	"github.com/turnstile-dev/turnstile/internal/queue"
)

// DeadlockDetector looks for wait-for cycles between holder identities of one namespace and
// fails one victim per cycle. It runs when a request starts waiting (the lock reconciler calls
// Waiting, which only notes the request and returns, so detection never slows a grant) and as
// a periodic full scan. A new waiter that cannot be on a cycle (it holds nothing, nobody queues
// behind it, and its identity has nothing else live) costs no check: that is the common
// arrival, a new pull request at the back of a queue.
type DeadlockDetector struct {
	options
	client   client.Client
	recorder events.EventRecorder

	mu sync.Mutex
	// work is, per namespace, what asked for a check since the last round.
	work map[string]*checkWork
	kick chan struct{}
}

// checkWork is what asked for one namespace's check.
type checkWork struct {
	// full is set when the check must run whatever the new waits are: the periodic scan, or
	// a victim that moved on since its snapshot.
	full bool
	// waits are the requests the check was asked for, by name. The cache may not show their
	// waiting write yet: the check waits until it shows a version newer than staleRV.
	waits map[string]pendingWait
}

type pendingWait struct {
	staleRV string
	// last: nobody waits behind the request in the queue it waits in (see NewWait).
	last bool
}

const (
	// cacheRetry is how often a check looks again for a write the cache does not show yet. The
	// cache follows within milliseconds.
	cacheRetry = 2 * time.Millisecond
	// cacheWait bounds that wait.
	cacheWait = time.Second
)

var _ DeadlockChecker = (*DeadlockDetector)(nil)

// NewDeadlockDetector builds a detector. It uses WithClock, WithConfig, WithFreezeFlags,
// WithDeadlockPolicy, WithScanInterval (none: no periodic scan) and WithMetrics.
func NewDeadlockDetector(c client.Client, recorder events.EventRecorder, opts ...Option) *DeadlockDetector {
	return &DeadlockDetector{options: newOptions(opts), client: c, recorder: recorder,
		work: map[string]*checkWork{}, kick: make(chan struct{}, 1)}
}

// Waiting asks for a check of namespace because requests in it started waiting. The check
// waits until the cache shows a newer version of each request than the one in waits, since the
// cycle a new wait closes is not in the cache before that.
func (d *DeadlockDetector) Waiting(_ context.Context, namespace string, waits []NewWait) {
	d.mu.Lock()
	w := d.workFor(namespace)
	for _, nw := range waits {
		last := nw.Last
		if prev, ok := w.waits[nw.Request.Name]; ok {
			// A request with several keys is reported by each: it is last only if all agree.
			last = last && prev.last
		}
		w.waits[nw.Request.Name] = pendingWait{staleRV: nw.Request.ResourceVersion, last: last}
	}
	d.mu.Unlock()
	d.wake()
}

// recheck asks for a full check of namespace, once the cache shows a newer version of lr than
// the one read when lr is not nil.
func (d *DeadlockDetector) recheck(namespace string, lr *locksv1.LockRequest) {
	d.mu.Lock()
	w := d.workFor(namespace)
	w.full = true
	if lr != nil {
		w.waits[lr.Name] = pendingWait{staleRV: lr.ResourceVersion}
	}
	d.mu.Unlock()
	d.wake()
}

// workFor is namespace's pending work; d.mu must be held.
func (d *DeadlockDetector) workFor(namespace string) *checkWork {
	w, ok := d.work[namespace]
	if !ok {
		w = &checkWork{waits: map[string]pendingWait{}}
		d.work[namespace] = w
	}
	return w
}

func (d *DeadlockDetector) wake() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// Start runs the detector until ctx ends (a manager Runnable).
func (d *DeadlockDetector) Start(ctx context.Context) error {
	var tick <-chan time.Time
	if d.scan > 0 {
		t := d.clock.NewTicker(d.scan)
		defer t.Stop()
		tick = t.C()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-d.kick:
		case <-tick:
			namespaces := d.requestNamespaces(ctx)
			d.mu.Lock()
			for _, ns := range namespaces {
				d.workFor(ns).full = true
			}
			d.mu.Unlock()
		}
		d.mu.Lock()
		work := d.work
		d.work = map[string]*checkWork{}
		d.mu.Unlock()
		namespaces := make([]string, 0, len(work))
		for ns := range work {
			namespaces = append(namespaces, ns)
		}
		sort.Strings(namespaces)
		for _, ns := range namespaces {
			w := work[ns]
			d.awaitCache(ctx, ns, w.waits)
			if !w.full && d.noCycleThrough(ctx, ns, w.waits) {
				d.metrics.DeadlockChecks.WithLabelValues(checkSkipped).Inc()
				continue
			}
			d.metrics.DeadlockChecks.WithLabelValues(checkRun).Inc()
			if err := d.Check(ctx, ns); err != nil {
				log.FromContext(ctx).Error(err, "deadlock check", "namespace", ns)
			}
		}
	}
}

// Outcomes of a round's look at one namespace, for turnstile_deadlock_checks_total.
const (
	checkRun     = "checked"
	checkSkipped = "skipped"
)

// awaitCache waits until the cache shows a newer version of each awaited request than the one
// read before its write, so the check sees the waits it was told about. The wait is bounded by
// cacheWait (the periodic scan covers whatever a check misses), and the set is fixed when the
// round starts, so waiters that keep arriving cannot postpone a check for ever.
func (d *DeadlockDetector) awaitCache(ctx context.Context, namespace string, waits map[string]pendingWait) {
	if len(waits) == 0 {
		return
	}
	staleRV := make(map[string]string, len(waits))
	for name, w := range waits {
		staleRV[name] = w.staleRV
	}
	caughtUp := func(ctx context.Context) (bool, error) {
		for name, rv := range staleRV {
			var lr locksv1.LockRequest
			if err := d.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &lr); err == nil && lr.ResourceVersion == rv {
				return false, nil
			}
			delete(staleRV, name) // newer, gone or unreadable: nothing more to wait for
		}
		return true, nil
	}
	// A timeout or a cancelled context both mean: check with what the cache has.
	_ = wait.PollUntilContextTimeout(ctx, cacheRetry, cacheWait, true, caughtUp)
}

// noCycleThrough reports, from the cache, whether none of the new waits can be on a wait-for
// cycle (see cannotCloseCycle), so the namespace needs no check for them. Any read it cannot
// make means: check.
func (d *DeadlockDetector) noCycleThrough(ctx context.Context, namespace string, waits map[string]pendingWait) bool {
	for name, w := range waits {
		var lr locksv1.LockRequest
		if err := d.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &lr); err != nil {
			if apierrors.IsNotFound(err) {
				continue // gone: it waits for nobody
			}
			return false
		}
		var bucket locksv1.LockRequestList
		if err := d.client.List(ctx, &bucket, client.InNamespace(namespace),
			client.MatchingFields{IndexHolderIdentity: IdentityBucket(lr.Spec.Holder.ID())}, client.UnsafeDisableDeepCopy); err != nil {
			return false
		}
		if !cannotCloseCycle(&lr, w.last, sameIdentity(bucket.Items, lr.Spec.Holder.ID())) {
			return false
		}
	}
	return true
}

// cannotCloseCycle reports whether w, a request that started waiting, is on no wait-for cycle.
// A cycle through w's identity needs someone who waits for that identity: on a key it holds,
// or behind one of its requests in a queue. Nobody can while w holds nothing, nobody waits
// behind it (last), and no other request of its identity is live. same is every request of w's
// identity in the namespace, w included. Pure.
//
// This is enough for the check a new wait asks for. Whoever later queues behind w asks for its
// own check, which is skipped only when nobody can wait for it in turn; and a grant to another
// request of w's identity creates no edge that its queue did not have.
func cannotCloseCycle(w *locksv1.LockRequest, last bool, same []locksv1.LockRequest) bool {
	if w.Status.Phase != locksv1.PhasePending || !isLive(w) {
		return true // waits for nobody: no edge leaves it
	}
	// guard:deadlock-skip-with-waiters-behind
	if !last {
		return false
	}
	for _, l := range w.Status.Locks {
		// guard:deadlock-skip-while-holding
		if l.Held {
			return false
		}
	}
	for i := range same {
		if same[i].UID != w.UID && isLive(&same[i]) {
			return false
		}
	}
	return true
}

// sameIdentity is the requests of items whose holder is id (items is an IndexHolderIdentity
// bucket, which holds other identities too).
func sameIdentity(items []locksv1.LockRequest, id locksv1.HolderID) []locksv1.LockRequest {
	var out []locksv1.LockRequest
	for i := range items {
		// guard:identity-bucket-filter
		if items[i].Spec.Holder.ID() == id {
			out = append(out, items[i])
		}
	}
	return out
}

// isLive reports whether a request can still hold or wait: not finished, not released, not
// being deleted.
func isLive(lr *locksv1.LockRequest) bool {
	return !lr.Status.Phase.IsFinal() && !lr.Spec.Release && lr.DeletionTimestamp == nil
}

// Check finds the cycles of one namespace and fails one victim per cycle.
//
// Every replica runs a detector, so two may find one cycle from caches a little apart, by
// clocks a little apart. One request per cycle is failed all the same (docs/protocol.md, "One
// victim per deadlock"): the cycle is re-read live before the write, and a detector that finds
// it broken (a member failed, granted or gone, or a holder let go) writes nothing; the victim
// is a function of what the store says of the members (StoredVictim), not of a clock or a
// cache; and the write is preconditioned on the victim's resourceVersion read live.
func (d *DeadlockDetector) Check(ctx context.Context, namespace string) error {
	graph, err := d.snapshot(ctx, namespace)
	if err != nil {
		return err
	}
	for _, c := range graph.FindCycles() {
		live, moved, err := d.reread(ctx, namespace, c)
		if err != nil {
			return err
		}
		if moved != "" {
			// Broken or changed since the snapshot (another detector's victim, a grant, a
			// release): look again once the cache shows the member that moved on.
			var cached locksv1.LockRequest
			if err := d.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: moved}, &cached); err != nil {
				d.recheck(namespace, nil)
			} else {
				d.recheck(namespace, &cached)
			}
			continue
		}
		victim := StoredVictim(d.policy, c, live, d.cfg.AgingStep)
		if err := d.fail(ctx, namespace, victim, c, live[victim.Waiter.Request]); err != nil {
			return err
		}
	}
	return nil
}

// reread reads cycle c past the cache and reports whether it still stands in the store: every
// waiting member still Pending, live, of the identity and waiting on the key the cycle says, and
// on every edge to a holder, that holder's identity still holding the key (its ProjectLock lists
// it, and one of the requests listed is live). A cache older than a holder's release shows a
// cycle whose waiters all still wait although it is broken. It returns the members as read, by
// name, or the name of a request that moved on (the cycle is broken): a waiter, or for a holder
// that let go, a holding request as the cache lists it, so the recheck waits until the cache
// shows it.
func (d *DeadlockDetector) reread(ctx context.Context, namespace string, c deadlock.Cycle) (map[string]*locksv1.LockRequest, string, error) {
	// guard:deadlock-no-live-reread
	reader := d.live
	if reader == nil {
		reader = d.client
	}
	live := make(map[string]*locksv1.LockRequest, len(c.Edges))
	lockNames := make(map[string]string, len(c.Edges)) // key -> its ProjectLock's name
	for _, e := range c.Edges {
		if _, ok := live[e.Waiter.Request]; ok {
			continue
		}
		var lr locksv1.LockRequest
		switch err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: e.Waiter.Request}, &lr); {
		case apierrors.IsNotFound(err):
			return nil, e.Waiter.Request, nil
		case err != nil:
			return nil, "", fmt.Errorf("re-read deadlock cycle member %s/%s: %w", namespace, e.Waiter.Request, err)
		}
		ref, waits := queue.FirstUnheld(&lr)
		// guard:deadlock-victim-moved-on
		if lr.Status.Phase != locksv1.PhasePending || !isLive(&lr) || lr.Spec.Holder.ID() != e.From || !waits || ref.Key != e.Key {
			return nil, e.Waiter.Request, nil
		}
		live[e.Waiter.Request] = &lr
		lockNames[e.Key] = ref.Name
	}
	for _, e := range c.Edges {
		if !e.Holds {
			continue // To waits ahead of From on the key: its own edges are checked
		}
		held, err := stillHolds(ctx, reader, namespace, lockNames[e.Key], e.To)
		if err != nil {
			return nil, "", err
		}
		// guard:deadlock-holder-not-reread
		if !held {
			return nil, d.cachedHolderRequest(ctx, namespace, lockNames[e.Key], e.Waiter.Request), nil
		}
		if moved, err := d.rereadAnyOf(ctx, reader, namespace, lockNames[e.Key], e); moved != "" || err != nil {
			return nil, moved, err
		}
	}
	return live, "", nil
}

// rereadAnyOf checks, past the cache, the rest of an any-of hop (e.AnyOf): each other holder
// of the key it waits for still holds it (one leaving would let the waiter in), and still waits
// by the request that blocked it in the snapshot. It returns the name of a request that moved on,
// or "".
func (d *DeadlockDetector) rereadAnyOf(ctx context.Context, reader client.Reader, namespace, lockName string, e deadlock.Edge) (string, error) {
	for _, b := range e.AnyOf {
		held, err := stillHolds(ctx, reader, namespace, lockName, b.Identity)
		if err != nil {
			return "", err
		}
		// guard:deadlock-any-of-holders-reread
		if !held {
			return d.cachedHolderRequest(ctx, namespace, lockName, e.Waiter.Request), nil
		}
		var lr locksv1.LockRequest
		switch err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: b.Waiter.Request}, &lr); {
		case apierrors.IsNotFound(err):
			return b.Waiter.Request, nil
		case err != nil:
			return "", fmt.Errorf("re-read deadlock cycle member %s/%s: %w", namespace, b.Waiter.Request, err)
		}
		ref, waits := queue.FirstUnheld(&lr)
		if lr.Status.Phase != locksv1.PhasePending || !isLive(&lr) || lr.Spec.Holder.ID() != b.Identity || !waits || ref.Key != b.Key {
			return b.Waiter.Request, nil
		}
	}
	return "", nil
}

// stillHolds reports whether, read by reader, the ProjectLock name lists id as its holder with
// at least one listed request still live (the same rule as WaitsFor's holder).
func stillHolds(ctx context.Context, reader client.Reader, namespace, name string, id deadlock.Identity) (bool, error) {
	var pl locksv1.ProjectLock
	switch err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &pl); {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("re-read deadlock cycle key %s/%s: %w", namespace, name, err)
	}
	var held []locksv1.HolderRequest // id's requests among the holders, in either mode
	if h := pl.Status.Holder; h != nil && h.ID() == id {
		held = h.Requests
	}
	for _, sh := range pl.Status.SharedHolders {
		if sh.ID() == id {
			held = append(held, sh.Request)
		}
	}
	for _, r := range held {
		var lr locksv1.LockRequest
		switch err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: r.Name}, &lr); {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return false, fmt.Errorf("re-read deadlock cycle holder %s/%s: %w", namespace, r.Name, err)
		}
		if string(lr.UID) == r.UID && isLive(&lr) {
			return true, nil
		}
	}
	return false, nil
}

// cachedHolderRequest is the first request the cache's ProjectLock name lists as holding, or
// fallback when it lists none.
func (d *DeadlockDetector) cachedHolderRequest(ctx context.Context, namespace, name, fallback string) string {
	var pl locksv1.ProjectLock
	if err := d.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &pl); err == nil {
		if hs := pl.Status.HolderRequests(); len(hs) > 0 {
			return hs[0].Name
		}
	}
	return fallback
}

// StoredVictim is the victim policy p picks in cycle c, ranked by what the store says of the
// members (live, by name): each waiter's stored priority, aged by step from its status.queuedAt
// to the newest status.queuedAt in the cycle, and its queuedAt as its arrival. No clock and no
// cache takes part, so every detector that reads the same members picks the same victim. Pure.
func StoredVictim(p deadlock.Policy, c deadlock.Cycle, live map[string]*locksv1.LockRequest, step time.Duration) deadlock.Edge {
	arrival := func(lr *locksv1.LockRequest) time.Time {
		if lr.Status.QueuedAt != nil {
			return lr.Status.QueuedAt.Time
		}
		return lr.CreationTimestamp.Time
	}
	var newest time.Time
	for _, e := range c.Edges {
		if lr := live[e.Waiter.Request]; lr != nil && arrival(lr).After(newest) {
			newest = arrival(lr)
		}
	}
	ranked := deadlock.Cycle{Edges: make([]deadlock.Edge, len(c.Edges))}
	for i, e := range c.Edges {
		if lr := live[e.Waiter.Request]; lr != nil {
			at := arrival(lr)
			e.Waiter.Arrival = at
			e.Waiter.Priority = queue.AgedPriority(lr.Spec.Priority, newest.Sub(at), step)
		}
		ranked.Edges[i] = e
	}
	// guard:deadlock-victim-by-clock
	return p.Victim(ranked)
}

// requestNamespaces are the namespaces with requests: from the informer-kept counts when the
// detector has them (no copy of every request), else from a list.
func (d *DeadlockDetector) requestNamespaces(ctx context.Context) []string {
	if d.counts != nil {
		return d.counts.Namespaces()
	}
	var all locksv1.LockRequestList
	if err := d.client.List(ctx, &all, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	var out []string
	for i := range all.Items {
		out = append(out, all.Items[i].Namespace)
	}
	return out
}

// snapshot builds the namespace's wait-for graph from the cache.
func (d *DeadlockDetector) snapshot(ctx context.Context, namespace string) (*deadlock.Graph, error) {
	var locks locksv1.ProjectLockList
	// The cache's own objects: WaitsFor only reads them.
	if err := d.client.List(ctx, &locks, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list projectlocks: %w", err)
	}
	var reqs locksv1.LockRequestList
	if err := d.client.List(ctx, &reqs, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list lockrequests: %w", err)
	}
	var cls locksv1.CommandLockList
	if err := d.client.List(ctx, &cls); err != nil {
		return nil, fmt.Errorf("list commandlocks: %w", err)
	}
	now := d.clock.Now()
	freezes, _ := queue.ResolveFreezes(cls.Items, d.flags, now)
	// guard:deadlock-window-namespace-labels
	if freezes.NeedsNamespaceLabels() {
		labels, err := namespaceLabels(ctx, d.client, namespace)
		if err != nil {
			return nil, err
		}
		freezes = freezes.InNamespace(labels)
	}
	if err := inFleet(ctx, d.live, &freezes); err != nil {
		return nil, err
	}
	return deadlock.Build(WaitsFor(locks.Items, reqs.Items, freezes, now, d.cfg)), nil
}

// WaitsFor is the wait-for input of one namespace: every key with its holder and its queue in
// grant order. Pure.
//
// A request waits on the first key it does not hold yet (keys are taken in order); a frozen
// request waits on the freeze, not on anyone, so it adds no edge (frozen as grants judge it:
// freeze windows by scope, spec.bypassFreeze — freezes carries the namespace's labels when a
// window selects namespaces). A ProjectLock's holder counts
// only while one of the requests it lists is still live (not finished, not released, not being
// deleted): the ProjectLock is written after the outgoing holder's requests, so for a moment it
// names a holder that has let go, and an edge to it could close a cycle that never exists (bob
// deletes his request for k2 and asks for k1, which alice holds, while alice waits for k2).
func WaitsFor(locks []locksv1.ProjectLock, reqs []locksv1.LockRequest, freezes queue.Freezes, now time.Time, cfg queue.Config) []deadlock.KeyState {
	live := map[string]bool{}
	for i := range reqs {
		if isLive(&reqs[i]) {
			live[string(reqs[i].UID)] = true
		}
	}
	type keyInfo struct {
		key     string
		holder  *deadlock.Identity
		shared  []deadlock.Identity
		full    bool
		count   int   // live shared holders, when every listed one is live
		bound   int32 // the lowest maxHolders among them (status.maxHolders)
		waiting []*locksv1.LockRequest
	}
	keys := map[string]*keyInfo{}
	get := func(name string) *keyInfo {
		k, ok := keys[name]
		if !ok {
			k = &keyInfo{}
			keys[name] = k
		}
		return k
	}
	for i := range locks {
		pl := &locks[i]
		k := get(pl.Name)
		k.key = lockkey.String(pl.Spec.LockTarget)
		k.shared, k.full = sharedIdentities(pl, live)
		k.count, k.bound = countingBound(pl, live)
		h := pl.Status.Holder
		if h == nil {
			continue
		}
		for _, r := range h.Requests {
			// guard:deadlock-edge-to-departed-holder
			if live[r.UID] {
				// guard:deadlock-holder-cluster
				k.holder = new(h.ID()) // every field, the cluster included
				break
			}
		}
	}
	for i := range reqs {
		lr := &reqs[i]
		if lr.Status.Phase != locksv1.PhasePending || !live[string(lr.UID)] {
			continue
		}
		// Judged per request, as grants judge it: a window's scope, and spec.bypassFreeze.
		// guard:deadlock-freeze-per-request
		if _, frozen := freezes.ForRequest(lr); frozen {
			continue
		}
		ref, ok := queue.FirstUnheld(lr)
		if !ok {
			continue
		}
		k := get(ref.Name)
		if k.key == "" {
			k.key = ref.Key
		}
		k.waiting = append(k.waiting, lr)
	}
	states := make([]deadlock.KeyState, 0, len(keys))
	for name, k := range keys {
		st := deadlock.KeyState{Key: k.key, Holder: k.holder, Shared: k.shared, Full: k.full}
		for _, w := range queue.Order(name, k.waiting, now, cfg) {
			shared := queue.SharedOn(w.Request, name)
			st.Queue = append(st.Queue, deadlock.Waiter{
				Identity: w.Request.Spec.Holder.ID(),
				Request:  w.Request.Name, Priority: w.Priority, Arrival: w.Arrival,
				Shared: shared,
				// guard:deadlock-counting-kept-out
				KeptOut: shared && keptOut(k.count, k.bound, queue.MaxHoldersOn(w.Request, name)),
			})
		}
		states = append(states, st)
	}
	sort.Slice(states, func(i, j int) bool { return states[i].Key < states[j].Key })
	return states
}

// fail marks the victim Failed with reason Deadlock, with the resourceVersion it was read at
// live (lr), and tells every member of the cycle.
func (d *DeadlockDetector) fail(ctx context.Context, namespace string, victim deadlock.Edge, c deadlock.Cycle, lr *locksv1.LockRequest) error {
	msg := c.String()
	now := d.clock.Now()
	obj := lr.DeepCopy()
	obj.Status = queue.FinishedStatus(lr, locksv1.PhaseFailed, locksv1.ReasonDeadlock, msg, now)
	if err := d.client.Status().Update(ctx, obj); err != nil {
		switch {
		case apierrors.IsConflict(err):
			// The victim moved on since the live read (another detector failed it, say):
			// look again once the cache shows it.
			d.recheck(namespace, lr)
			return nil
		case apierrors.IsNotFound(err):
			d.recheck(namespace, nil)
			return nil
		}
		return fmt.Errorf("fail deadlock victim %s/%s: %w", namespace, lr.Name, err)
	}
	d.metrics.Deadlocks.Inc()
	d.metrics.Finished.WithLabelValues(string(locksv1.PhaseFailed), locksv1.ReasonDeadlock).Inc()
	d.recorder.Eventf(obj, nil, "Warning", locksv1.ReasonDeadlock, "Deadlock", "chosen as the victim (policy %s): %s", d.policy, msg)
	seen := map[string]bool{victim.Waiter.Request: true}
	for _, e := range c.Edges {
		if seen[e.Waiter.Request] {
			continue
		}
		seen[e.Waiter.Request] = true
		var member locksv1.LockRequest
		if err := d.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: e.Waiter.Request}, &member); err == nil {
			d.recorder.Eventf(&member, nil, "Warning", locksv1.ReasonDeadlock, "Deadlock",
				"in a deadlock cycle; %s was failed to break it: %s", lr.Name, msg)
		}
	}
	return nil
}

// countingBound is how many requests hold pl Shared and the lowest maxHolders among them, as pl
// records it (status.maxHolders), when every one it lists is live; (0, 0) when one is gone, as
// the record may be that holder's bound: a deadlock the detector cannot be sure of then waits
// for the lock controller's next write (missed for a scan, never named falsely).
func countingBound(pl *locksv1.ProjectLock, live map[string]bool) (int, int32) {
	for _, h := range pl.Status.SharedHolders {
		if !live[h.Request.UID] {
			return 0, 0
		}
	}
	return len(pl.Status.SharedHolders), pl.Status.MaxHolders
}

// keptOut reports whether a Shared waiter whose own maxHolders is own (0: none) is kept out of
// a key that count requests hold with holders the lowest maxHolders among them: whether the
// holders are as many as the lower of the two bounds allows, as the grant decision judges it
// (queue's withinBounds).
func keptOut(count int, holders, own int32) bool {
	low := own
	if holders > 0 && (low == 0 || holders < low) {
		low = holders
	}
	return low > 0 && int32(count) >= low
}

// sharedIdentities are the identities of pl's live shared holders (each once), and whether
// they hold as many requests as may hold a key shared (full).
func sharedIdentities(pl *locksv1.ProjectLock, live map[string]bool) (ids []deadlock.Identity, full bool) {
	seen := map[deadlock.Identity]bool{}
	n := 0
	for _, h := range pl.Status.SharedHolders {
		if !live[h.Request.UID] {
			continue
		}
		n++
		if id := h.ID(); !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids, n >= locksv1.MaxSharedHolders
}
