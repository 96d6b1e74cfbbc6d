package controller

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/deadlock"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

var dlNow = time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)

func dlTarget(path string) locksv1.LockTarget {
	return locksv1.LockTarget{Repo: "acme/infra", Path: path, Workspace: "default"}
}

func dlKey(path string) string { return lockkey.String(dlTarget(path)) }

// dlReq is owner#pull's request name for the keys at paths, in that spec order, not seen by
// the controller yet. Its status-shaping calls (Held, Phase, QueuedAt(dlQueued(s))) queue it at
// dlNow unless told otherwise, with an arrival revision in the order requests were queued.
func dlReq(name, owner string, pull int64, paths ...string) *wrappers.LockRequestWrapper {
	ts := make([]locksv1.LockTarget, len(paths))
	for i, p := range paths {
		ts[i] = dlTarget(p)
	}
	return wrappers.MakeLockRequest(name, "team").UID("uid-"+name).Owner(owner, pull).Targets(ts...).
		SeenDefaults(dlNow, func(q time.Time) int64 { return 1000 - int64(dlNow.Sub(q)/time.Second) })
}

// dlQueued is s seconds before dlNow: when a request queued s seconds ago was queued.
func dlQueued(s int) time.Time { return dlNow.Add(-time.Duration(s) * time.Second) }

// dlLock is the ProjectLock of path held by owner#pull through the named requests.
func dlLock(path, owner string, pull int64, requests ...string) locksv1.ProjectLock {
	t := dlTarget(path)
	pl := locksv1.ProjectLock{ObjectMeta: metav1.ObjectMeta{Name: lockkey.Name(t), Namespace: "team"}}
	pl.Spec.LockTarget = t
	if owner != "" {
		h := &locksv1.LockHolder{Owner: owner, Pull: pull}
		for _, r := range requests {
			h.Requests = append(h.Requests, locksv1.HolderRequest{Name: r, UID: "uid-" + r})
		}
		pl.Status.Holder = h
	}
	return pl
}

// inCluster is pl with its holder in cluster (a fleet's spoke, docs/fleet.md).
func inCluster(pl locksv1.ProjectLock, cluster string) locksv1.ProjectLock {
	pl.Status.Holder.Cluster = cluster
	return pl
}

// keyView is a KeyState in short: the key, its holder, its queue as identity/request.
type keyView struct {
	Key    string
	Holder string
	Queue  []string
}

func viewKeys(states []deadlock.KeyState) []keyView {
	out := make([]keyView, 0, len(states))
	for _, s := range states {
		v := keyView{Key: s.Key}
		if s.Holder != nil {
			v.Holder = s.Holder.String()
		}
		for _, w := range s.Queue {
			v.Queue = append(v.Queue, w.Identity.String()+"/"+w.Request)
		}
		out = append(out, v)
	}
	return out
}

func TestWaitsFor(t *testing.T) {
	granted := locksv1.PhaseGranted
	a1 := dlReq("a1", "alice", 1, "k1").Held(dlTarget("k1")).Phase(granted)
	b1 := func() *wrappers.LockRequestWrapper {
		return dlReq("b1", "bob", 2, "k2").Held(dlTarget("k2")).Phase(granted)
	}
	a2 := dlReq("a2", "alice", 1, "k2").QueuedAt(dlQueued(20))
	b2 := func() *wrappers.LockRequestWrapper { return dlReq("b2", "bob", 2, "k1").QueuedAt(dlQueued(10)) }
	lockK1, lockK2 := dlLock("k1", "alice", 1, "a1"), dlLock("k2", "bob", 2, "b1")
	// k2Free is the classic deadlock's keys once bob#2 no longer holds k2: nobody holds it, and
	// no cycle is left.
	k2Free := []keyView{
		{Key: dlKey("k1"), Holder: "alice#1", Queue: []string{"bob#2/b2"}},
		{Key: dlKey("k2"), Queue: []string{"alice#1/a2"}},
	}
	applyFrozen, _ := queue.ResolveFreezes([]locksv1.CommandLock{{ObjectMeta: metav1.ObjectMeta{Name: "apply"}, Spec: locksv1.CommandLockSpec{Locked: true}}}, queue.FreezeFlags{}, dlNow)

	cases := map[string]struct {
		locks     []locksv1.ProjectLock
		reqs      []*wrappers.LockRequestWrapper
		freezes   queue.Freezes
		wantKeys  []keyView
		wantCycle string
	}{
		"the classic deadlock": {
			locks: []locksv1.ProjectLock{lockK1, lockK2},
			reqs:  []*wrappers.LockRequestWrapper{a1, b1(), a2, b2()},
			wantKeys: []keyView{
				{Key: dlKey("k1"), Holder: "alice#1", Queue: []string{"bob#2/b2"}},
				{Key: dlKey("k2"), Holder: "bob#2", Queue: []string{"alice#1/a2"}},
			},
			wantCycle: "deadlock: alice#1 waits for bob#2 on acme/infra/k2/default; bob#2 waits for alice#1 on acme/infra/k1/default",
		},
		"a holder whose request is deleted no longer holds, though its ProjectLock still says so": {
			locks:    []locksv1.ProjectLock{lockK1, lockK2},
			reqs:     []*wrappers.LockRequestWrapper{a1, a2, b2()},
			wantKeys: k2Free,
		},
		"a holder whose request is being deleted no longer holds": {
			locks:    []locksv1.ProjectLock{lockK1, lockK2},
			reqs:     []*wrappers.LockRequestWrapper{a1, b1().Deleting(dlNow), a2, b2()},
			wantKeys: k2Free,
		},
		"a holder that set spec.release no longer holds": {
			locks:    []locksv1.ProjectLock{lockK1, lockK2},
			reqs:     []*wrappers.LockRequestWrapper{a1, b1().Release(), a2, b2()},
			wantKeys: k2Free,
		},
		"a holder whose request finished no longer holds": {
			locks:    []locksv1.ProjectLock{lockK1, lockK2},
			reqs:     []*wrappers.LockRequestWrapper{a1, dlReq("b1", "bob", 2, "k2").Phase(locksv1.PhaseExpired), a2, b2()},
			wantKeys: k2Free,
		},
		"a holder being granted (its status not written yet) holds": {
			locks: []locksv1.ProjectLock{lockK1, lockK2},
			reqs:  []*wrappers.LockRequestWrapper{a1, dlReq("b1", "bob", 2, "k2").QueuedAt(dlQueued(30)), a2, b2()},
			wantKeys: []keyView{
				{Key: dlKey("k1"), Holder: "alice#1", Queue: []string{"bob#2/b2"}},
				{Key: dlKey("k2"), Holder: "bob#2", Queue: []string{"bob#2/b1", "alice#1/a2"}},
			},
			wantCycle: "deadlock: alice#1 waits for bob#2 on acme/infra/k2/default; bob#2 waits for alice#1 on acme/infra/k1/default",
		},
		"a frozen request waits on the freeze, not on anyone": {
			locks:    []locksv1.ProjectLock{lockK1, lockK2},
			reqs:     []*wrappers.LockRequestWrapper{a1, b1(), a2, b2().Command("apply")},
			freezes:  applyFrozen,
			wantKeys: []keyView{{Key: dlKey("k1"), Holder: "alice#1"}, {Key: dlKey("k2"), Holder: "bob#2", Queue: []string{"alice#1/a2"}}},
		},
		// A request whose spec.bypassFreeze lets it past its command's freeze is granted
		// through it (Freezes.ForRequest): it waits for the holder ahead of it like anyone, and
		// a cycle through it is a deadlock.
		"a request that bypasses its command's freeze waits on the holder": {
			locks: []locksv1.ProjectLock{lockK1, lockK2},
			reqs: []*wrappers.LockRequestWrapper{a1, b1(), a2, func() *wrappers.LockRequestWrapper {
				b := b2().Command("apply")
				b.Spec.BypassFreeze = &locksv1.FreezeBypass{Reason: "hotfix"}
				return b
			}()},
			freezes: applyFrozen,
			wantKeys: []keyView{
				{Key: dlKey("k1"), Holder: "alice#1", Queue: []string{"bob#2/b2"}},
				{Key: dlKey("k2"), Holder: "bob#2", Queue: []string{"alice#1/a2"}},
			},
			wantCycle: "deadlock: alice#1 waits for bob#2 on acme/infra/k2/default; bob#2 waits for alice#1 on acme/infra/k1/default",
		},
		// docs/fleet.md "Identity is per cluster": alice#1 in a spoke is one identity through
		// its requests and the ProjectLock it holds, and another than alice#1 of this cluster.
		"the classic deadlock of a holder in a spoke": {
			locks: []locksv1.ProjectLock{inCluster(dlLock("k1", "alice", 1, "a1"), "eu-west-1"), lockK2},
			reqs: []*wrappers.LockRequestWrapper{
				dlReq("a1", "alice", 1, "k1").Cluster("eu-west-1").Held(dlTarget("k1")).Phase(granted), b1(),
				dlReq("a2", "alice", 1, "k2").Cluster("eu-west-1").QueuedAt(dlQueued(20)), b2(),
			},
			wantKeys: []keyView{
				{Key: dlKey("k1"), Holder: "alice#1 in eu-west-1", Queue: []string{"bob#2/b2"}},
				{Key: dlKey("k2"), Holder: "bob#2", Queue: []string{"alice#1 in eu-west-1/a2"}},
			},
			wantCycle: "deadlock: alice#1 in eu-west-1 waits for bob#2 on acme/infra/k2/default; bob#2 waits for alice#1 in eu-west-1 on acme/infra/k1/default",
		},
		"alice#1 of another cluster holds: her namesake's wait closes no cycle": {
			locks: []locksv1.ProjectLock{inCluster(dlLock("k1", "alice", 1, "a1"), "us-east-1"), lockK2},
			reqs: []*wrappers.LockRequestWrapper{
				dlReq("a1", "alice", 1, "k1").Cluster("us-east-1").Held(dlTarget("k1")).Phase(granted), b1(),
				dlReq("a2", "alice", 1, "k2").Cluster("eu-west-1").QueuedAt(dlQueued(20)), b2(),
			},
			wantKeys: []keyView{
				{Key: dlKey("k1"), Holder: "alice#1 in us-east-1", Queue: []string{"bob#2/b2"}},
				{Key: dlKey("k2"), Holder: "bob#2", Queue: []string{"alice#1 in eu-west-1/a2"}},
			},
		},
		"a request with several keys waits on the first it does not hold": {
			locks: []locksv1.ProjectLock{dlLock("k1", "alice", 1, "m"), dlLock("k3", "carol", 3, "c1")},
			reqs: []*wrappers.LockRequestWrapper{
				dlReq("c1", "carol", 3, "k3").Held(dlTarget("k3")).Phase(granted),
				// Spec order k3, k1; canonical order k1, k3: holds k1, waits for k3.
				dlReq("m", "alice", 1, "k3", "k1").Held(dlTarget("k1")).QueuedAt(dlQueued(5)),
			},
			wantKeys: []keyView{{Key: dlKey("k1"), Holder: "alice#1"}, {Key: dlKey("k3"), Holder: "carol#3", Queue: []string{"alice#1/m"}}},
		},
		"finished, released and deleting requests wait for nothing; the queue is in grant order": {
			locks: []locksv1.ProjectLock{lockK1},
			reqs: []*wrappers.LockRequestWrapper{
				a1,
				dlReq("old", "dave", 4, "k1").QueuedAt(dlQueued(30)),
				dlReq("urgent", "erin", 5, "k1").QueuedAt(dlQueued(1)).Priority(locksv1.PriorityHigh),
				dlReq("failed", "fay", 6, "k1").QueuedAt(dlQueued(40)).Phase(locksv1.PhaseFailed),
				dlReq("leaving", "gus", 7, "k1").QueuedAt(dlQueued(50)).Release(),
				dlReq("deleted", "hal", 8, "k1").QueuedAt(dlQueued(60)).Deleting(dlNow),
				dlReq("new", "ivy", 9, "k1"),
			},
			wantKeys: []keyView{{Key: dlKey("k1"), Holder: "alice#1", Queue: []string{"erin#5/urgent", "dave#4/old"}}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			reqs := make([]locksv1.LockRequest, len(tc.reqs))
			for i, r := range tc.reqs {
				reqs[i] = *r.Obj()
			}
			cfg := queue.DefaultConfig()
			states := WaitsFor(tc.locks, reqs, tc.freezes, dlNow, cfg)
			if diff := cmp.Diff(tc.wantKeys, viewKeys(states)); diff != "" {
				t.Errorf("keys (-want +got):\n%s", diff)
			}
			cycle := ""
			if cs := deadlock.Build(states).FindCycles(); len(cs) > 0 {
				cycle = cs[0].String()
			}
			if diff := cmp.Diff(tc.wantCycle, cycle); diff != "" {
				t.Errorf("cycle (-want +got):\n%s", diff)
			}
		})
	}
}

// BenchmarkCheck is the detector's work per check, cache reads aside: the snapshot of a
// namespace with 10,000 waiting requests over 1,000 keys (WaitsFor), the graph and its cycles.
func BenchmarkCheck(b *testing.B) {
	const keys, perKey = 1000, 10
	var locks []locksv1.ProjectLock
	var reqs []locksv1.LockRequest
	for k := 0; k < keys; k++ {
		path := fmt.Sprintf("k%04d", k)
		owner := fmt.Sprintf("owner-%04d", k)
		reqs = append(reqs, *dlReq("h-"+path, owner, 1, path).Held(dlTarget(path)).Phase(locksv1.PhaseGranted).Obj())
		locks = append(locks, dlLock(path, owner, 1, "h-"+path))
		// Waiters rank above the holder and queue lowest rank first, so every edge points to a
		// lower rank: no cycle, and every check searches the whole graph.
		ranks := make([]int, perKey)
		for i := range ranks {
			ranks[i] = k + 1 + (k*7+i*13)%(keys-k)
		}
		sort.Ints(ranks)
		for i, rank := range ranks {
			w := dlReq(fmt.Sprintf("w-%s-%d", path, i), fmt.Sprintf("owner-%04d", rank), 1, path).QueuedAt(dlQueued(perKey - i))
			reqs = append(reqs, *w.Obj())
		}
	}
	cfg := queue.DefaultConfig()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if cycles := deadlock.Build(WaitsFor(locks, reqs, queue.Freezes{}, dlNow, cfg)).FindCycles(); len(cycles) != 0 {
			b.Fatalf("want no cycle, got %v", cycles[0])
		}
	}
}

func TestCannotCloseCycle(t *testing.T) {
	granted, pending := locksv1.PhaseGranted, locksv1.PhasePending
	// w is carol#3's new request for k1, at the back of its queue unless a case says otherwise.
	w := func() *wrappers.LockRequestWrapper { return dlReq("w", "carol", 3, "k1").Phase(pending) }

	cases := map[string]struct {
		w     *wrappers.LockRequestWrapper
		last  bool
		other []*wrappers.LockRequestWrapper // the other requests of carol#3
		want  bool
	}{
		"a newcomer at the back, its identity's only request: nobody can wait for it": {
			w: w(), last: true, want: true,
		},
		"somebody waits behind it": {
			w: w(), last: false, want: false,
		},
		"it holds one of its keys already": {
			w:    dlReq("w", "carol", 3, "k1", "k2").Held(dlTarget("k1")).Phase(pending),
			last: true, want: false,
		},
		"its identity holds another key": {
			w: w(), last: true,
			other: []*wrappers.LockRequestWrapper{dlReq("held", "carol", 3, "k2").Held(dlTarget("k2")).Phase(granted)},
			want:  false,
		},
		"its identity waits in another queue": {
			w: w(), last: true,
			other: []*wrappers.LockRequestWrapper{dlReq("queued", "carol", 3, "k2").Phase(pending)},
			want:  false,
		},
		"its identity's other request is not seen by the controller yet": {
			w: w(), last: true,
			other: []*wrappers.LockRequestWrapper{dlReq("new", "carol", 3, "k2")},
			want:  false,
		},
		"its identity's other requests are finished, released or being deleted": {
			w: w(), last: true,
			other: []*wrappers.LockRequestWrapper{
				dlReq("done", "carol", 3, "k2").Phase(locksv1.PhaseReleased),
				dlReq("leaving", "carol", 3, "k3").Held(dlTarget("k3")).Phase(granted).Release(),
				dlReq("deleted", "carol", 3, "k4").Held(dlTarget("k4")).Phase(granted).Deleting(dlNow),
			},
			want: true,
		},
		"it no longer waits (granted since)": {
			w: w().Held(dlTarget("k1")).Phase(granted), last: false, want: true,
		},
		"it failed since": {
			w: w().Phase(locksv1.PhaseFailed), last: false, want: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			lr := *tc.w.Obj()
			same := []locksv1.LockRequest{lr}
			for _, o := range tc.other {
				same = append(same, *o.Obj())
			}
			if got := cannotCloseCycle(&lr, tc.last, same); got != tc.want {
				t.Errorf("cannotCloseCycle = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestCannotCloseCycleIsSound checks the skip against the graph itself on random namespaces:
// whenever cannotCloseCycle lets a waiter go unchecked, nobody in WaitsFor waits for its
// identity and no cycle passes through it.
func TestCannotCloseCycleIsSound(t *testing.T) {
	const rounds = 3000
	rng := rand.New(rand.NewPCG(7, 27))
	owners := []string{"alice", "bob", "carol", "dave", "erin"}
	paths := []string{"k1", "k2", "k3", "k4"}
	phases := []locksv1.LockRequestPhase{locksv1.PhasePending, locksv1.PhasePending, locksv1.PhasePending, locksv1.PhaseGranted, locksv1.PhaseReleased, ""}
	skipped, withCycle := 0, 0 // skips of live waiters; namespaces with a cycle
	for round := range rounds {
		// Requests with random identities, keys, holds and phases; a key's first holder in the
		// list is its ProjectLock's holder.
		var reqs []locksv1.LockRequest
		holders := map[string]int{} // path -> index in reqs
		for i := range 2 + rng.IntN(10) {
			o := rng.IntN(len(owners))
			phase := phases[rng.IntN(len(phases))]
			queued, release, deleting := rng.IntN(100), rng.IntN(12) == 0, rng.IntN(12) == 0
			var rPaths []string
			var held []locksv1.LockTarget
			for _, p := range rng.Perm(len(paths))[:1+rng.IntN(2)] {
				rPaths = append(rPaths, paths[p])
				holds := phase == locksv1.PhaseGranted || (phase == locksv1.PhasePending && rng.IntN(3) == 0)
				if holds {
					held = append(held, dlTarget(paths[p]))
				}
				if _, taken := holders[paths[p]]; holds && !taken {
					holders[paths[p]] = i
				}
			}
			r := dlReq(fmt.Sprintf("r%d", i), owners[o], int64(o+1), rPaths...)
			if phase != "" { // a request the controller has seen; only those hold
				r.QueuedAt(dlQueued(queued)).Held(held...).Phase(phase)
			}
			if release {
				r.Release()
			}
			if deleting {
				r.Deleting(dlNow)
			}
			reqs = append(reqs, *r.Obj())
		}
		var locks []locksv1.ProjectLock
		for p, i := range holders {
			h := reqs[i]
			locks = append(locks, dlLock(p, h.Spec.Holder.Owner, h.Spec.Holder.Pull, h.Name))
		}
		states := WaitsFor(locks, reqs, queue.Freezes{}, dlNow, queue.DefaultConfig())
		graph := deadlock.Build(states)

		for i := range reqs {
			w := &reqs[i]
			ref, waits := queue.FirstUnheld(w)
			last := false
			for _, s := range states {
				if waits && s.Key == ref.Key && len(s.Queue) > 0 && s.Queue[len(s.Queue)-1].Request == w.Name {
					last = true
				}
			}
			var same []locksv1.LockRequest
			for j := range reqs {
				if reqs[j].Spec.Holder.ID() == w.Spec.Holder.ID() {
					same = append(same, reqs[j])
				}
			}
			if !cannotCloseCycle(w, last, same) {
				continue
			}
			if w.Status.Phase != locksv1.PhasePending || !isLive(w) {
				// Skipped because it waits for nobody: it must stand in no queue.
				for _, s := range states {
					for _, q := range s.Queue {
						if q.Request == w.Name {
							t.Fatalf("round %d: %s was skipped as waiting for nobody, yet it queues on %s", round, w.Name, s.Key)
						}
					}
				}
				continue
			}
			// Skipped as a waiter nobody can wait for.
			skipped++
			id := w.Spec.Holder.ID()
			for _, s := range states {
				behind := false
				for _, q := range s.Queue {
					if behind && q.Identity != id {
						t.Fatalf("round %d: %s was skipped, yet %s waits behind it on %s", round, w.Name, q.Identity, s.Key)
					}
					behind = behind || q.Identity == id
				}
				if s.Holder != nil && *s.Holder == id && len(s.Queue) > 0 {
					t.Fatalf("round %d: %s was skipped, yet %s holds %s with %d waiting", round, w.Name, id, s.Key, len(s.Queue))
				}
			}
			if cs := graph.CyclesThrough(id); cs != nil {
				t.Fatalf("round %d: %s was skipped, yet it is on the cycle %s", round, w.Name, cs[0])
			}
		}
		if len(graph.FindCycles()) > 0 {
			withCycle++
		}
	}
	// The generator must make live waiters that are skipped and namespaces with cycles, or the
	// property says little.
	if skipped < rounds/10 || withCycle < rounds/50 {
		t.Fatalf("weak generator: %d skipped live waiters and %d namespaces with a cycle in %d rounds", skipped, withCycle, rounds)
	}
	t.Logf("%d skipped live waiters checked; %d of %d namespaces had a cycle", skipped, withCycle, rounds)
}

// Hole D of issue #26: the victim is a function of what the store says of the cycle's members,
// whatever priorities and arrivals the detector's own clock and cache gave the waiters: each
// stored priority is aged to the newest status.queuedAt in the cycle, and arrival is queuedAt.
func TestStoredVictim(t *testing.T) {
	const step = 10 * time.Minute
	req := func(name string, p locksv1.Priority, queued time.Time) *locksv1.LockRequest {
		lr := &locksv1.LockRequest{}
		lr.Name = name
		lr.Spec.Priority = p
		q := metav1.NewMicroTime(queued)
		lr.Status.QueuedAt = &q
		return lr
	}
	alice, bob := locksv1.HolderID{Owner: "alice", Pull: 1}, locksv1.HolderID{Owner: "bob", Pull: 2}
	cycle := func(pa, pb int, at, bt time.Time) deadlock.Cycle {
		return deadlock.Cycle{Edges: []deadlock.Edge{
			{From: alice, To: bob, Key: "two", Holds: true, Waiter: deadlock.Waiter{Identity: alice, Request: "a2", Priority: pa, Arrival: at}},
			{From: bob, To: alice, Key: "one", Holds: true, Waiter: deadlock.Waiter{Identity: bob, Request: "b2", Priority: pb, Arrival: bt}},
		}}
	}
	cases := map[string]struct {
		live map[string]*locksv1.LockRequest
		want string
	}{
		"Low against Normal, queued 2 s apart: Low": {
			live: map[string]*locksv1.LockRequest{"a2": req("a2", locksv1.PriorityLow, dlNow), "b2": req("b2", locksv1.PriorityNormal, dlNow.Add(2*time.Second))},
			want: "a2",
		},
		"Low queued a step before Normal has aged level with it: the newest goes": {
			live: map[string]*locksv1.LockRequest{"a2": req("a2", locksv1.PriorityLow, dlNow), "b2": req("b2", locksv1.PriorityNormal, dlNow.Add(step))},
			want: "b2",
		},
	}
	for name, tc := range cases {
		// The detectors' views: one by a clock before a2's aging step, one after, one with
		// a stale cache that had b2 at High.
		views := []deadlock.Cycle{
			cycle(0, 1, dlNow, dlNow.Add(2*time.Second)),
			cycle(1, 1, dlNow, dlNow.Add(2*time.Second)),
			cycle(0, 3, dlNow.Add(-time.Hour), dlNow),
		}
		for _, p := range []deadlock.Policy{deadlock.PolicyLowestPriority} {
			for i, c := range views {
				if got := StoredVictim(p, c, tc.live, step).Waiter.Request; got != tc.want {
					t.Errorf("%s, view %d: victim %s, want %s", name, i, got, tc.want)
				}
			}
		}
	}
}

// TestSharedIdentitiesFull: a key is full for the deadlock graph when MaxSharedHolders live
// requests hold it shared, whatever their identities; departed holders do not count.
func TestSharedIdentitiesFull(t *testing.T) {
	pl := &locksv1.ProjectLock{}
	live := map[string]bool{}
	for i := range locksv1.MaxSharedHolders {
		uid := fmt.Sprint("r", i)
		pl.Status.SharedHolders = append(pl.Status.SharedHolders, locksv1.SharedHolder{
			Request: locksv1.HolderRequest{Name: uid, UID: uid}, Owner: []string{"alice", "bob"}[i%2], Pull: 1})
		live[uid] = i > 0
	}
	ids, full := sharedIdentities(pl, live)
	if len(ids) != 2 || full {
		t.Fatalf("99 live of 100 listed: identities %v, full %v; want 2, not full", ids, full)
	}
	live["r0"] = true
	if _, full := sharedIdentities(pl, live); !full {
		t.Fatalf("100 live shared holders: not full")
	}
}

// TestKeptOut: a Shared waiter is kept out of a counting key when its holders are as many as the
// lower of its own maxHolders and theirs allows; a departed holder makes the count unsure, and
// nobody is kept out on it.
func TestKeptOut(t *testing.T) {
	cases := map[string]struct {
		count        int
		holders, own int32
		want         bool
	}{
		"at a bound everyone agrees on":            {count: 2, holders: 2, own: 2, want: true},
		"below it":                                 {count: 1, holders: 2, own: 2},
		"its own bound, holders without one":       {count: 2, own: 2, want: true},
		"the holders' bound, a waiter without one": {count: 3, holders: 3, want: true},
		"the holders' bound with room":             {count: 2, holders: 3},
		"its own bound is the lower":               {count: 2, holders: 3, own: 1, want: true},
		"the holders' bound is the lower":          {count: 2, holders: 2, own: 5, want: true},
		"no bound at all":                          {count: 7},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := keptOut(tc.count, tc.holders, tc.own); got != tc.want {
				t.Errorf("keptOut(%d, %d, %d) = %v, want %v", tc.count, tc.holders, tc.own, got, tc.want)
			}
		})
	}
	pl := &locksv1.ProjectLock{}
	pl.Status.MaxHolders = 2
	for _, uid := range []string{"r0", "r1"} {
		pl.Status.SharedHolders = append(pl.Status.SharedHolders, locksv1.SharedHolder{
			Request: locksv1.HolderRequest{Name: uid, UID: uid}, Owner: "alice", Pull: 1})
	}
	if n, b := countingBound(pl, map[string]bool{"r0": true, "r1": true}); n != 2 || b != 2 {
		t.Errorf("countingBound, both live = (%d, %d), want (2, 2)", n, b)
	}
	if n, b := countingBound(pl, map[string]bool{"r0": true}); n != 0 || b != 0 {
		t.Errorf("countingBound, one gone = (%d, %d), want (0, 0)", n, b)
	}
}
