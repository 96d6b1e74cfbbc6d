package workdir

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// deletionHolder names a running deletion where a holder is expected.
const deletionHolder = "deletion"

// Held is one held guard.
type Held struct {
	Key    Key
	Holder string
	Since  time.Time
}

// Option configures Guards.
type Option interface {
	applyToGuards(g *Guards)
}

// ClockOption sets the clock of Guards and of a Heartbeat; see WithClock.
type ClockOption struct {
	clock clock.Clock
}

func (o ClockOption) applyToGuards(g *Guards)             { g.clock = o.clock }
func (o ClockOption) applyToHeartbeat(c *heartbeatConfig) { c.clock = o.clock }

var _ interface {
	Option
	HeartbeatOption
} = ClockOption{}

// WithClock injects the clock, so tests control the Since of guards and the heartbeat's timers.
// One option value serves both NewGuards and NewHeartbeat.
func WithClock(c clock.Clock) ClockOption { return ClockOption{clock: c} }

// Guards is a replica's set of working-dir guards. The zero value is not usable; use NewGuards.
// It is safe for concurrent use.
type Guards struct {
	clock clock.PassiveClock

	mu    sync.Mutex
	pulls map[pullKey]*pullState
	// lost, when set, refuses new guards; it wraps ErrLeaseLost. Held guards stay held: the
	// commands under them are still running on this replica and the local exclusion between
	// them is still true — it is the cluster-wide claim that can no longer be trusted.
	lost error
}

// pullState groups everything of one pull request, because deletion and in-use checks ask
// about a whole pull request and should not scan every guard of the replica.
type pullState struct {
	guards    map[Key]*guard
	waiters   map[Key][]*waiter
	deletions []*deletion
}

type guard struct {
	key    Key
	holder string
	since  time.Time
}

type waiter struct {
	holder string
	// ready is closed once the waiter was granted (g set) or refused (err set), always under
	// Guards.mu, so a waiter that gives up can tell which happened.
	ready chan struct{}
	g     *guard
	err   error
}

type deletion struct {
	scope Key
	since time.Time
}

// NewGuards returns an empty guard set.
func NewGuards(opts ...Option) *Guards {
	g := &Guards{clock: clock.RealClock{}, pulls: map[pullKey]*pullState{}}
	for _, o := range opts {
		o.applyToGuards(g)
	}
	return g
}

func noop() {}

// TryLock takes the guard for key on behalf of holder (the command, e.g. "plan", or a runner id)
// or fails at once. On success the returned unlock releases the guard; calling it more than once
// is harmless, so it can be both deferred and called early. On failure unlock is a no-op, never
// nil, and the error matches ErrLocked (a *LockedError says who holds it) or ErrLeaseLost.
func (g *Guards) TryLock(key Key, holder string) (unlock func(), err error) {
	k, err := validate(key, holder)
	if err != nil {
		return noop, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lost != nil {
		return noop, fmt.Errorf("lock working dir %s: %w", k, g.lost)
	}
	ps := g.pullState(k.pullKey())
	if err := ps.busy(k); err != nil {
		g.gc(k.pullKey(), ps)
		return noop, err
	}
	return g.unlockFunc(ps.grant(k, holder, g.clock.Now())), nil
}

// Lock is TryLock that waits, in arrival order, until the guard is free or ctx is done. A holder
// hands the guard straight to the first waiter, so a TryLock arriving at the moment of release
// cannot barge ahead of those already waiting. Waiting ends with an error matching ErrLeaseLost
// when the replica's lease is lost meanwhile. When ctx ends first the error wraps ctx's error
// and, when known, the *LockedError of whoever held the guard.
func (g *Guards) Lock(ctx context.Context, key Key, holder string) (unlock func(), err error) {
	k, err := validate(key, holder)
	if err != nil {
		return noop, err
	}
	if err := ctx.Err(); err != nil {
		return noop, fmt.Errorf("wait for working dir %s: %w", k, err)
	}
	pk := k.pullKey()

	g.mu.Lock()
	if g.lost != nil {
		g.mu.Unlock()
		return noop, fmt.Errorf("lock working dir %s: %w", k, g.lost)
	}
	ps := g.pullState(pk)
	if ps.busy(k) == nil {
		gd := ps.grant(k, holder, g.clock.Now())
		g.mu.Unlock()
		return g.unlockFunc(gd), nil
	}
	w := &waiter{holder: holder, ready: make(chan struct{})}
	ps.waiters[k] = append(ps.waiters[k], w)
	g.mu.Unlock()

	select {
	case <-w.ready:
	case <-ctx.Done():
		g.mu.Lock()
		select {
		case <-w.ready:
			// Granted or refused while we were giving up. A grant is returned rather than
			// kept: the caller has already been told (by ctx) to stop.
			if w.g != nil {
				g.release(w.g)
			}
			g.mu.Unlock()
		default:
			ps := g.pulls[pk] // still present: it holds our waiter
			busy := ps.busy(k)
			ps.waiters[k] = slices.DeleteFunc(ps.waiters[k], func(o *waiter) bool { return o == w })
			if len(ps.waiters[k]) == 0 {
				delete(ps.waiters, k)
			}
			g.gc(pk, ps)
			g.mu.Unlock()
			if busy != nil {
				return noop, fmt.Errorf("wait for working dir %s: %w: %w", k, context.Cause(ctx), busy)
			}
		}
		return noop, fmt.Errorf("wait for working dir %s: %w", k, context.Cause(ctx))
	}
	if w.err != nil {
		return noop, w.err
	}
	return g.unlockFunc(w.g), nil
}

// InUse reports whether a guard is held, or a deletion runs, inside scope: a whole pull request
// (Workspace and Path empty), one workspace of it (Path empty), or a directory together with
// everything below and above it — a command running in modules/ reads modules/vpc, and one
// running in modules/vpc is broken by deleting modules/.
func (g *Guards) InUse(scope Key) bool {
	s, err := scope.scope()
	if err != nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	ps := g.pulls[s.pullKey()]
	return ps != nil && len(ps.heldIn(s)) > 0
}

// Remove runs del, which deletes the working dirs of scope, only when no guard is held inside
// scope and no other deletion of an overlapping scope runs; otherwise it returns an error
// matching ErrInUse and does not call del. While del runs, TryLock on a key inside scope fails
// with a *LockedError whose Deleting is set, and Lock waits until del returns: a command that
// raced the deletion must not start in a directory that is disappearing under it.
func (g *Guards) Remove(scope Key, del func() error) error {
	s, err := scope.scope()
	if err != nil {
		return fmt.Errorf("delete working dirs of %s: %w", scope, err)
	}
	pk := s.pullKey()

	g.mu.Lock()
	ps := g.pullState(pk)
	if holders := ps.heldIn(s); len(holders) > 0 {
		g.gc(pk, ps)
		g.mu.Unlock()
		return &InUseError{Scope: s, Holders: holders}
	}
	d := &deletion{scope: s, since: g.clock.Now()}
	ps.deletions = append(ps.deletions, d)
	g.mu.Unlock()

	// Deferred so that a panicking del does not leave the pull request blocked forever.
	defer func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		ps := g.pulls[pk] // still present: it holds our deletion
		ps.deletions = slices.DeleteFunc(ps.deletions, func(o *deletion) bool { return o == d })
		for k := range ps.waiters {
			if s.overlaps(k) {
				g.grantNext(ps, k)
			}
		}
		g.gc(pk, ps)
	}()
	if err := del(); err != nil {
		return fmt.Errorf("delete working dirs of %s: %w", s, err)
	}
	return nil
}

// RemoveAll is Remove with os.RemoveAll(dir).
func (g *Guards) RemoveAll(scope Key, dir string) error {
	// The caller computes dir; an empty or root dir is a bug there, and RemoveAll would do
	// nothing or, worse, everything.
	if c := filepath.Clean(dir); dir == "" || c == string(filepath.Separator) || c == filepath.VolumeName(c)+string(filepath.Separator) {
		return fmt.Errorf("delete working dirs of %s: refusing to remove %q", scope, dir)
	}
	return g.Remove(scope, func() error { return os.RemoveAll(dir) })
}

// DeletePull is Remove for every working dir of one pull request, the Atlantis clean-up after a
// pull request is merged or closed.
func (g *Guards) DeletePull(repo string, pull int64, del func() error) error {
	return g.Remove(Key{Repo: repo, Pull: pull}, del)
}

// Held returns the held guards in key order.
func (g *Guards) Held() []Held {
	g.mu.Lock()
	var out []Held
	for _, ps := range g.pulls {
		for _, gd := range ps.guards {
			out = append(out, Held{Key: gd.key, Holder: gd.holder, Since: gd.since})
		}
	}
	g.mu.Unlock()
	slices.SortFunc(out, func(a, b Held) int { return compareKeys(a.Key, b.Key) })
	return out
}

// setLost refuses new guards until clearLost, and fails every waiting Lock: a waiter that was
// granted after the loss would start a command whose LockRequest may already be released.
func (g *Guards) setLost(cause error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lost = cause
	for pk, ps := range g.pulls {
		for k, ws := range ps.waiters {
			for _, w := range ws {
				w.err = fmt.Errorf("wait for working dir %s: %w", k, cause)
				close(w.ready)
			}
			delete(ps.waiters, k)
		}
		g.gc(pk, ps)
	}
}

func (g *Guards) clearLost() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lost = nil
}

// waiting counts the Lock calls waiting for key; tests use it to order their waiters.
func (g *Guards) waiting(key Key) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	ps := g.pulls[key.pullKey()]
	if ps == nil {
		return 0
	}
	return len(ps.waiters[key])
}

func validate(key Key, holder string) (Key, error) {
	k, err := key.guardKey()
	if err != nil {
		return Key{}, fmt.Errorf("lock working dir %s: %w", key, err)
	}
	if holder == "" {
		return Key{}, fmt.Errorf("lock working dir %s: holder is required", key)
	}
	return k, nil
}

// pullState returns the state of pk, creating it; callers hand it back to gc when done.
func (g *Guards) pullState(pk pullKey) *pullState {
	ps := g.pulls[pk]
	if ps == nil {
		ps = &pullState{guards: map[Key]*guard{}, waiters: map[Key][]*waiter{}}
		g.pulls[pk] = ps
	}
	return ps
}

// gc drops an empty pull state, so a long-running replica does not keep one per pull request
// it has ever seen.
func (g *Guards) gc(pk pullKey, ps *pullState) {
	if len(ps.guards) == 0 && len(ps.waiters) == 0 && len(ps.deletions) == 0 {
		delete(g.pulls, pk)
	}
}

func (g *Guards) unlockFunc(gd *guard) func() {
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.release(gd)
	}
}

// release frees gd and hands it on. Matching on the guard itself rather than its key is what
// makes unlock idempotent: a second call finds another guard, or none, and does nothing.
func (g *Guards) release(gd *guard) {
	pk := gd.key.pullKey()
	ps := g.pulls[pk]
	if ps == nil || ps.guards[gd.key] != gd {
		return
	}
	delete(ps.guards, gd.key)
	g.grantNext(ps, gd.key)
	g.gc(pk, ps)
}

// grantNext gives a free key to its first waiter, if nothing blocks it.
func (g *Guards) grantNext(ps *pullState, k Key) {
	ws := ps.waiters[k]
	if len(ws) == 0 || g.lost != nil || ps.busy(k) != nil {
		return
	}
	w := ws[0]
	if len(ws) == 1 {
		delete(ps.waiters, k)
	} else {
		ps.waiters[k] = ws[1:]
	}
	w.g = ps.grant(k, w.holder, g.clock.Now())
	close(w.ready)
}

func (ps *pullState) grant(k Key, holder string, now time.Time) *guard {
	gd := &guard{key: k, holder: holder, since: now}
	ps.guards[k] = gd
	return gd
}

// busy says why k cannot be granted now, or nil. Waiters need no check of their own: they only
// exist while a holder or a deletion blocks the key, because whoever ends either hands the key
// to the first waiter at once (grantNext), and a lost lease fails them all.
func (ps *pullState) busy(k Key) error {
	for _, d := range ps.deletions {
		if d.scope.overlaps(k) {
			return &LockedError{Key: k, Holder: deletionHolder + " of " + d.scope.String(), Since: d.since, Deleting: true}
		}
	}
	if gd := ps.guards[k]; gd != nil {
		return &LockedError{Key: k, Holder: gd.holder, Since: gd.since}
	}
	return nil
}

// heldIn lists, in key order, the guards and running deletions that overlap scope s.
func (ps *pullState) heldIn(s Key) []Held {
	var out []Held
	for k, gd := range ps.guards {
		if s.overlaps(k) {
			out = append(out, Held{Key: k, Holder: gd.holder, Since: gd.since})
		}
	}
	for _, d := range ps.deletions {
		if s.overlaps(d.scope) {
			out = append(out, Held{Key: d.scope, Holder: deletionHolder, Since: d.since})
		}
	}
	slices.SortFunc(out, func(a, b Held) int { return compareKeys(a.Key, b.Key) })
	return out
}
