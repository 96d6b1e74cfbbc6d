package controller

// The watchdog: a key with work that no decision reaches within a bound is noticed, decided
// from a live read, and reported (issue #47).

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/cache"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/sharding"
)

// ReasonUndecided is the reason of the Warning event the watchdog emits on a key it decided.
const ReasonUndecided = "Undecided"

// watchdogActsAtMost bounds the keys one look decides: after a cold start with a backlog, the
// watchdog adds a few decisions, not a second backlog.
const watchdogActsAtMost = 16

// Watchdog looks, every third of its bound, at the keys the cache shows with work — a request
// without a status, a holder asked to release or gone, a grant listed but not written, a grant
// past its expiry, a free key with a waiter queued behind nobody — and at how long each has
// shown it. A key that has shown work for longer than the bound has not been decided (a
// decision of any replica takes each of these away): the watchdog says so (a Warning event on
// the key, a log line, turnstile_undecided_keys_total by where the key was: queued, held by a
// worker, or neither) and decides it itself, from the ProjectLock and those requests read live,
// then wakes the key. Its look reads the cache only: the requests that hold a key or have no
// status (IndexWork), the ProjectLocks, and the requests of a free key that shows a queue; it
// costs no API call unless a key is found undecided.
//
// In active-active every replica looks; the key's owner acts at the bound, any other replica
// at twice the bound (the owner alive but its worker hung). Two replicas deciding one key is
// safe, as always: every write carries the resourceVersion it was decided on.
type Watchdog struct {
	r     *LockReconciler
	bound time.Duration
	// seen is when a look first saw each piece of work a key still shows (a busy key always
	// has some, but each piece is done by the next decision); acted, when the watchdog last
	// decided the key.
	seen  map[types.NamespacedName]map[string]time.Time
	acted map[types.NamespacedName]time.Time
}

// NewWatchdog is the watchdog of r's keys with bound (> 0); add it to the manager.
func NewWatchdog(r *LockReconciler, bound time.Duration) *Watchdog {
	return &Watchdog{r: r, bound: bound, seen: map[types.NamespacedName]map[string]time.Time{}, acted: map[types.NamespacedName]time.Time{}}
}

// Start looks at the keys every bound/3 until ctx ends.
func (w *Watchdog) Start(ctx context.Context) error {
	ctx = log.IntoContext(ctx, ctrl.Log.WithName("watchdog"))
	t := w.r.clock.NewTicker(w.bound / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			if err := w.Look(ctx); err != nil {
				log.FromContext(ctx).Error(err, "watchdog: looking at the keys with work")
			}
		}
	}
}

// keyWork is what the cache shows of one key with work: its ProjectLock and the requests that
// tell what the work is.
type keyWork struct {
	lock     *locksv1.ProjectLock
	requests []*locksv1.LockRequest
}

// Look looks at the keys once: it records which show work, and decides those that have shown
// it past the bound.
func (w *Watchdog) Look(ctx context.Context) error {
	now := w.r.clock.Now()
	keys, err := w.gather(ctx)
	if err != nil {
		return err
	}
	type late struct {
		key  types.NamespacedName
		age  time.Duration
		work []string
		kw   *keyWork
	}
	var due []late
	longest := time.Duration(0)
	seen := map[types.NamespacedName]map[string]time.Time{}
	for key, kw := range keys {
		work := PendingWork(key.Name, kw.lock, kw.requests, now)
		if len(work) == 0 {
			continue
		}
		// The key's age is its oldest piece of work's: when a look first saw it.
		seen[key] = map[string]time.Time{}
		age := time.Duration(0)
		for _, piece := range work {
			since, ok := w.seen[key][piece]
			if !ok {
				since = now
			}
			seen[key][piece] = since
			age = max(age, now.Sub(since))
		}
		longest = max(longest, age)
		if age <= w.bound {
			continue
		}
		j := sharding.Judge(w.r.router, key.String())
		if !j.Owner && age <= 2*w.bound {
			continue
		}
		if at, ok := w.acted[key]; ok && now.Sub(at) <= w.bound {
			continue
		}
		due = append(due, late{key, age, work, kw})
	}
	w.seen = seen
	for key, at := range w.acted {
		if now.Sub(at) > 2*w.bound {
			delete(w.acted, key)
		}
	}
	w.r.metrics.LongestUndecided.Set(longest.Seconds())
	sort.Slice(due, func(i, j int) bool { return due[i].age > due[j].age })
	for i, d := range due {
		if i == watchdogActsAtMost {
			break
		}
		w.acted[d.key] = now
		w.act(ctx, d.key, d.age, d.work, d.kw)
	}
	return nil
}

// gather reads from the cache every key that may have work, with the objects that show it.
func (w *Watchdog) gather(ctx context.Context) (map[types.NamespacedName]*keyWork, error) {
	c := w.r.client
	keys := map[types.NamespacedName]*keyWork{}
	at := func(ns, name string) *keyWork {
		k := types.NamespacedName{Namespace: ns, Name: name}
		if keys[k] == nil {
			keys[k] = &keyWork{}
		}
		return keys[k]
	}
	for _, v := range []string{workUndecided, workHolding} {
		var list locksv1.LockRequestList
		if err := c.List(ctx, &list, client.MatchingFields{IndexWork: v}, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("list requests with work: %w", err)
		}
		for i := range list.Items {
			lr := &list.Items[i]
			for _, name := range lockkey.Names(lr.Spec.Locks) {
				kw := at(lr.Namespace, name)
				kw.requests = append(kw.requests, lr)
			}
		}
	}
	var locks locksv1.ProjectLockList
	if err := c.List(ctx, &locks, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list projectlocks: %w", err)
	}
	for i := range locks.Items {
		pl := &locks.Items[i]
		holders := pl.Status.HolderRequests()
		// A free key, or a counting one that may have a free place, that shows a queue.
		free := (!pl.Status.Held() || hasPlace(pl, pl.Status.MaxHolders)) && pl.Status.QueueLength > 0
		if len(holders) == 0 && !free {
			if kw := keys[types.NamespacedName{Namespace: pl.Namespace, Name: pl.Name}]; kw != nil {
				kw.lock = pl
			}
			continue
		}
		kw := at(pl.Namespace, pl.Name)
		kw.lock = pl
		if free {
			// The waiters of a free key that shows a queue: is one queued behind nobody?
			var list locksv1.LockRequestList
			if err := c.List(ctx, &list, client.InNamespace(pl.Namespace), client.MatchingFields{cache.KeyIndex: pl.Name}, client.UnsafeDisableDeepCopy); err != nil {
				return nil, fmt.Errorf("list requests for %s/%s: %w", pl.Namespace, pl.Name, err)
			}
			for j := range list.Items {
				kw.requests = appendOnce(kw.requests, &list.Items[j])
			}
			continue
		}
		// A listed holder the cache has not among the key's holding requests: gone, or no
		// longer (or not yet) holding. Read it from the cache by name.
		for _, h := range holders {
			if slices.ContainsFunc(kw.requests, func(lr *locksv1.LockRequest) bool { return string(lr.UID) == h.UID }) {
				continue
			}
			var lr locksv1.LockRequest
			if err := c.Get(ctx, types.NamespacedName{Namespace: pl.Namespace, Name: h.Name}, &lr); client.IgnoreNotFound(err) != nil {
				return nil, fmt.Errorf("get holder %s/%s: %w", pl.Namespace, h.Name, err)
			} else if err == nil && string(lr.UID) == h.UID {
				kw.requests = append(kw.requests, &lr)
			}
		}
	}
	return keys, nil
}

func appendOnce(reqs []*locksv1.LockRequest, lr *locksv1.LockRequest) []*locksv1.LockRequest {
	if slices.ContainsFunc(reqs, func(o *locksv1.LockRequest) bool { return o.UID == lr.UID }) {
		return reqs
	}
	return append(reqs, lr)
}

// PendingWork is the work a decision of key name would do, as lock and reqs (the requests that
// show it: the key's undecided and holding requests, the holders lock lists that exist, and a
// free key's waiters) say at now; none when a decision would only refresh positions. Each
// entry says what the work is, for a person.
func PendingWork(name string, lock *locksv1.ProjectLock, reqs []*locksv1.LockRequest, now time.Time) []string {
	var work []string
	byUID := map[string]*locksv1.LockRequest{}
	for _, lr := range reqs {
		byUID[string(lr.UID)] = lr
		if lr.Status.Phase.IsFinal() {
			continue
		}
		ref, waits := queue.FirstUnheld(lr)
		held := holds(lr, name)
		switch {
		// guard:watchdog-undecided-request
		case lr.Status.Phase == "" && waits && ref.Name == name:
			work = append(work, "the first status of "+lr.Name)
		// A spoke's grant released waits for its spoke, or its hub Lease's lapse (a Lease event):
		// no decision has work for it until then.
		// guard:watchdog-release
		// guard:watchdog-release-awaits-spoke
		case held && lr.Spec.Release && !queue.AwaitsSpoke(lr):
			work = append(work, "the release of "+lr.Name)
		// guard:watchdog-expiry
		case lr.Status.Phase == locksv1.PhaseGranted && held && lr.Status.ExpiresAt != nil && !now.Before(lr.Status.ExpiresAt.Time):
			work = append(work, "the expiry of "+lr.Name)
		}
	}
	if lock == nil {
		return work
	}
	for _, h := range lock.Status.HolderRequests() {
		lr, ok := byUID[h.UID]
		switch {
		// guard:watchdog-gone-holder
		case !ok:
			work = append(work, "the release of "+h.Name+" (gone)")
		// guard:watchdog-final-holder
		case lr.Status.Phase.IsFinal():
			work = append(work, "the release of "+h.Name+" ("+string(lr.Status.Phase)+", still listed)")
		// guard:watchdog-unwritten-grant
		case !lr.Status.Phase.IsFinal() && !holds(lr, name):
			work = append(work, "the grant of "+lr.Name+" (listed by the ProjectLock, not written)")
		}
	}
	// A key shared holders hold is not free: Holder is the exclusive one.
	// guard:watchdog-free-key
	if !lock.Status.Held() {
		for _, lr := range reqs {
			if queuedBehindNobody(lr, name) {
				work = append(work, "a holder for the free key ("+lr.Name+" queued)")
				break
			}
		}
	} else if lock.Status.Holder == nil {
		// A counting key (maxHolders) with a place free lets in the shared waiter next in line.
		// guard:watchdog-counting-free-place
		for _, lr := range reqs {
			if lr.Status.QueuePosition == 1 && queue.SharedOn(lr, name) && queuedBehindNobody(lr, name) && countingPlaceFree(lock, lr, name) {
				work = append(work, "a holder for a free place of the counting key ("+lr.Name+" queued)")
				break
			}
		}
	}
	return work
}

// countingPlaceFree says whether shared holders hold lock's key with a counting bound (theirs,
// status.maxHolders, or the waiter's own maxHolders) that leaves a place for one more.
func countingPlaceFree(lock *locksv1.ProjectLock, waiter *locksv1.LockRequest, name string) bool {
	bound := lock.Status.MaxHolders
	if b := queue.MaxHoldersOn(waiter, name); b > 0 && (bound == 0 || b < bound) {
		bound = b
	}
	return hasPlace(lock, bound)
}

// hasPlace says whether lock's key, held by no exclusive holder, has fewer shared holders than
// a counting bound (0: no bound, no place to count).
func hasPlace(lock *locksv1.ProjectLock, bound int32) bool {
	return lock.Status.Holder == nil && bound > 0 && int32(len(lock.Status.SharedHolders)) < bound
}

// queuedBehindNobody says whether lr waits in key name queued behind a holder (reason Queued),
// not behind a freeze, a window or a cycle: on a free key, the decision would let it in.
func queuedBehindNobody(lr *locksv1.LockRequest, name string) bool {
	if lr.Status.Phase != locksv1.PhasePending {
		return false
	}
	if ref, ok := queue.FirstUnheld(lr); !ok || ref.Name != name {
		return false
	}
	c := meta.FindStatusCondition(lr.Status.Conditions, locksv1.ConditionGranted)
	return c != nil && c.Reason == locksv1.ReasonQueued
}

// act reports a key found undecided and decides it from a live read.
func (w *Watchdog) act(ctx context.Context, key types.NamespacedName, age time.Duration, work []string, kw *keyWork) {
	req := reconcile.Request{NamespacedName: key}
	where := "idle"
	due, held := w.r.keys.where(req)
	switch {
	case !held.IsZero():
		where = "working"
	case !due.IsZero():
		where = "queued"
	}
	w.r.metrics.UndecidedKeys.WithLabelValues(where).Inc()
	msg := fmt.Sprintf("work for %s without a decision (%s; the key was %s): decided from a live read",
		age.Round(time.Second), strings.Join(work, ", "), whereText(where, due, held, w.r.clock.Now()))
	logger := log.FromContext(ctx).WithValues("key", key.String())
	logger.Info("watchdog: a key with work went undecided past the bound", "work", work, "undecidedFor", age, "where", where, "bound", w.bound)
	var regarding runtime.Object = kw.lock
	if kw.lock == nil && len(kw.requests) > 0 {
		regarding = kw.requests[0]
	}
	if regarding != nil {
		w.r.recorder.Eventf(regarding, nil, "Warning", ReasonUndecided, "Watchdog", "%s", msg)
	}
	// A write that hangs here would hang the watchdog with it: the decision gets a bound's time.
	dctx, cancel := context.WithTimeout(ctx, w.bound)
	defer cancel()
	// guard:watchdog-decides-live
	if _, err := w.r.decide(dctx, req, true); err != nil {
		logger.Error(err, "watchdog: deciding the key from a live read")
	}
	// And the next decision is the workers' again, whatever became of this one.
	w.r.keys.wake(req)
}

func whereText(where string, due, held, now time.Time) string {
	switch where {
	case "working":
		return fmt.Sprintf("held by a worker for %s", now.Sub(held).Round(time.Millisecond))
	case "queued":
		return fmt.Sprintf("queued, due %s ago", now.Sub(due).Round(time.Millisecond))
	}
	return "neither queued nor held by a worker: nothing would have decided it"
}
