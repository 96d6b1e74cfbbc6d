package sharding

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("team-%d/acme-infra-net-default-%04x", i%7, i)
	}
	return out
}

func TestOwner(t *testing.T) {
	cases := map[string]struct {
		members []string
		key     string
		want    string
	}{
		"no members":  {members: nil, key: "ns/k", want: ""},
		"one member":  {members: []string{"a"}, key: "ns/k", want: "a"},
		"order-blind": {members: []string{"b", "a", "c"}, key: "ns/k", want: Owner([]string{"a", "b", "c"}, "ns/k")},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Owner(tc.members, tc.key)); diff != "" {
				t.Errorf("Owner(%v, %q) (-want +got):\n%s", tc.members, tc.key, diff)
			}
		})
	}
}

// TestOwnerMoves checks rendezvous hashing's promise: a member leaving moves only its own keys,
// each to some survivor, and a member joining takes keys only for itself.
func TestOwnerMoves(t *testing.T) {
	all := []string{"mgr-a-1f2e3d", "mgr-b-0a0b0c", "mgr-c-777777"}
	ks := keys(3000)
	before := map[string]string{}
	counts := map[string]int{}
	for _, k := range ks {
		before[k] = Owner(all, k)
		counts[before[k]]++
	}
	for _, m := range all {
		// Each of 3 members owns about a third: allow ±15% of 1000.
		if counts[m] < 850 || counts[m] > 1150 {
			t.Errorf("member %s owns %d of %d keys; want about a third: %v", m, counts[m], len(ks), counts)
		}
	}
	survivors := all[:2]
	var moved, wrong int
	for _, k := range ks {
		after := Owner(survivors, k)
		switch {
		case before[k] == all[2]:
			moved++
		case after != before[k]:
			wrong++
		}
	}
	if wrong != 0 {
		t.Errorf("%d keys of surviving members changed owner when %s left; want 0", wrong, all[2])
	}
	if moved != counts[all[2]] {
		t.Errorf("moved %d keys, want the leaver's %d", moved, counts[all[2]])
	}
	// Joining is leaving in reverse: only keys that end up with the joiner change hands.
	for _, k := range ks {
		if was, now := Owner(survivors, k), Owner(all, k); was != now && now != all[2] {
			t.Fatalf("key %s moved from %s to %s when %s joined", k, was, now, all[2])
		}
	}
}

// TestRank: for every key the members' ranks are 0 (the owner, as Owner says), 1, 2: one
// backup per delay step, never two at once.
func TestRank(t *testing.T) {
	members := []string{"a", "b", "c"}
	for _, k := range keys(200) {
		var got []int
		for _, m := range members {
			r := Rank(members, m, k)
			if r == 0 && Owner(members, k) != m {
				t.Fatalf("key %s: %s ranks 0 but %s owns it", k, m, Owner(members, k))
			}
			got = append(got, r)
		}
		slices.Sort(got)
		if diff := cmp.Diff([]int{0, 1, 2}, got); diff != "" {
			t.Fatalf("key %s: ranks (-want +got):\n%s", k, diff)
		}
	}
	if r := Rank(members, "d", "ns/k"); r != 3 {
		t.Errorf("a non-member ranks %d, want 3 (after every member)", r)
	}
}

type fixedRouter map[string]time.Duration

func (f fixedRouter) Delay(key string) time.Duration { return f[key] }

// recordingQueue is a PriorityQueue that records what is added to it and what is marked done.
// It hands items out in the order they were added, as if each came due in turn.
type recordingQueue struct {
	priorityqueue.PriorityQueue[reconcile.Request]
	mu    sync.Mutex // adds may come from two goroutines (TestRerouteDuringAdd)
	adds  []priorityqueue.AddOpts
	due   []reconcile.Request
	dones []reconcile.Request
}

func (q *recordingQueue) AddWithOpts(o priorityqueue.AddOpts, items ...reconcile.Request) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, item := range items {
		o.Priority = nil
		q.adds = append(q.adds, o)
		q.due = append(q.due, item)
	}
}

func (q *recordingQueue) GetWithPriority() (reconcile.Request, int, bool) {
	if len(q.due) == 0 {
		return reconcile.Request{}, 0, true // shut down: nothing more will come
	}
	item := q.due[0]
	q.due = q.due[1:]
	return item, 0, false
}

func (q *recordingQueue) Done(item reconcile.Request) { q.dones = append(q.dones, item) }

func TestRoutedQueue(t *testing.T) {
	owned := reconcile.Request{}
	owned.Namespace, owned.Name = "ns", "owned"
	other := reconcile.Request{}
	other.Namespace, other.Name = "ns", "other"
	router := fixedRouter{"ns/other": 300 * time.Millisecond}
	cases := map[string]struct {
		add  func(q *routedQueue)
		want []priorityqueue.AddOpts
	}{
		"an event on an owned key is ready at once": {
			add:  func(q *routedQueue) { q.Add(owned) },
			want: []priorityqueue.AddOpts{{}},
		},
		"an event on another's key waits the backup delay": {
			add:  func(q *routedQueue) { q.Add(other) },
			want: []priorityqueue.AddOpts{{After: 300 * time.Millisecond}},
		},
		"a deadline of an owned key is kept": {
			add:  func(q *routedQueue) { q.AddAfter(owned, time.Minute) },
			want: []priorityqueue.AddOpts{{After: time.Minute}},
		},
		"a backup's deadline comes the backup delay later": {
			add:  func(q *routedQueue) { q.AddAfter(other, time.Minute) },
			want: []priorityqueue.AddOpts{{After: time.Minute + 300*time.Millisecond}},
		},
		"handler adds with options are routed per item": {
			add: func(q *routedQueue) {
				q.AddWithOpts(priorityqueue.AddOpts{After: time.Second}, owned, other)
			},
			want: []priorityqueue.AddOpts{{After: time.Second}, {After: 1300 * time.Millisecond}},
		},
		"retries after an error are not delayed": {
			add:  func(q *routedQueue) { q.AddWithOpts(priorityqueue.AddOpts{RateLimited: true}, other) },
			want: []priorityqueue.AddOpts{{RateLimited: true}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rec := &recordingQueue{}
			q := newRoutedQueue(rec, router)
			tc.add(q)
			if diff := cmp.Diff(tc.want, rec.adds); diff != "" {
				t.Errorf("adds (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewQueueFuncNilRouter(t *testing.T) {
	if NewQueueFunc(nil) != nil {
		t.Fatal("NewQueueFunc(nil) is not nil: without a router the controllers must keep controller-runtime's own queue")
	}
}

// TestReroute: a key delayed as a backup is made ready at once when this replica comes to own
// it, and a key handed out since is not added again.
func TestReroute(t *testing.T) {
	a := reconcile.Request{}
	a.Namespace, a.Name = "ns", "a"
	b := reconcile.Request{}
	b.Namespace, b.Name = "ns", "b"
	router := fixedRouter{"ns/a": time.Second, "ns/b": time.Second}
	rec := &recordingQueue{}
	q := newRoutedQueue(rec, router)
	q.Add(a)
	q.AddAfter(b, time.Minute)
	q.reroute() // nothing owned yet
	router["ns/a"], router["ns/b"] = 0, 0
	q.reroute()
	q.reroute() // once only
	want := []priorityqueue.AddOpts{{After: time.Second}, {After: time.Minute + time.Second}, {}, {}}
	if diff := cmp.Diff(want, rec.adds); diff != "" {
		t.Errorf("adds (-want +got):\n%s", diff)
	}
}

// progressAt is a Progress whose keys were last decided at fixed times.
type progressAt map[string]time.Time

func (p progressAt) LastDecided(key string) time.Time { return p[key] }

// TestBackupDefersWhileOwnerDecides: a backup's item that comes due is decided here only if
// nobody decided its key since the item was due for the owner; otherwise it waits one more
// backup delay, and comes out once the owner has stopped deciding the key (it died, hung or
// was cut off).
func TestBackupDefersWhileOwnerDecides(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 1, 0, 0, 0, time.UTC)
	const delay = 300 * time.Millisecond
	key := reconcile.Request{}
	key.Namespace, key.Name = "ns", "k"
	at := func(d time.Duration) *time.Duration { return &d }
	type want struct {
		adds     []priorityqueue.AddOpts
		deferred int // items marked done without being handed out
	}
	cases := map[string]struct {
		owned    bool
		ownLater bool // this replica comes to own the key before it comes due
		add      func(q *routedQueue)
		decided  *time.Duration // when, after the add, a decision's write was seen; nil: never
		want     want
	}{
		"nobody decided the key: the backup decides it when due": {
			add:  func(q *routedQueue) { q.Add(key) },
			want: want{adds: []priorityqueue.AddOpts{{After: delay}}},
		},
		"a write seen before the event does not count": {
			add: func(q *routedQueue) { q.Add(key) }, decided: at(-time.Millisecond),
			want: want{adds: []priorityqueue.AddOpts{{After: delay}}},
		},
		"the owner decided the key since: one more backup delay, then the backup decides it": {
			add: func(q *routedQueue) { q.Add(key) }, decided: at(100 * time.Millisecond),
			want: want{adds: []priorityqueue.AddOpts{{After: delay}, {After: delay}}, deferred: 1},
		},
		"a deadline counts from when it was due for the owner, not from the requeue": {
			add: func(q *routedQueue) { q.AddAfter(key, time.Minute) }, decided: at(30 * time.Second),
			want: want{adds: []priorityqueue.AddOpts{{After: time.Minute + delay}}},
		},
		"an owned key is never held back": {
			owned: true, add: func(q *routedQueue) { q.Add(key) }, decided: at(100 * time.Millisecond),
			want: want{adds: []priorityqueue.AddOpts{{}}},
		},
		"a key this replica came to own is decided at once": {
			ownLater: true, add: func(q *routedQueue) { q.Add(key) }, decided: at(100 * time.Millisecond),
			want: want{adds: []priorityqueue.AddOpts{{After: delay}}},
		},
		"a retry after an error is not held back": {
			add: func(q *routedQueue) { q.AddWithOpts(priorityqueue.AddOpts{RateLimited: true}, key) }, decided: at(100 * time.Millisecond),
			want: want{adds: []priorityqueue.AddOpts{{RateLimited: true}}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			router := fixedRouter{"ns/k": delay}
			if tc.owned {
				router["ns/k"] = 0
			}
			clk := clocktesting.NewFakePassiveClock(t0)
			progress := progressAt{}
			if tc.decided != nil {
				progress["ns/k"] = t0.Add(*tc.decided)
			}
			rec := &recordingQueue{}
			q := newRoutedQueue(rec, router, WithProgress(progress), WithQueueClock(clk))
			tc.add(q)
			if tc.ownLater {
				router["ns/k"] = 0
			}
			clk.SetTime(t0.Add(delay)) // it comes due
			item, _, shutdown := q.GetWithPriority()
			if shutdown || item != key {
				t.Fatalf("GetWithPriority = %v, shutdown %t; want %v handed out", item, shutdown, key)
			}
			got := want{adds: rec.adds, deferred: len(rec.dones)}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if _, ok := q.delayed[key]; ok {
				t.Errorf("the handed-out item is still recorded as delayed")
			}
		})
	}
}

// blockingRouter answers its first Delay only when released, as a membership view that changes
// while an add is between reading the delay and recording it.
type blockingRouter struct {
	mu       sync.Mutex
	delay    time.Duration
	calls    int
	entered  chan struct{}
	released chan struct{}
}

func (r *blockingRouter) Delay(string) time.Duration {
	r.mu.Lock()
	r.calls++
	first, d := r.calls == 1, r.delay
	r.mu.Unlock()
	if first {
		close(r.entered)
		<-r.released
	}
	return d
}

func (r *blockingRouter) own() { r.mu.Lock(); r.delay = 0; r.mu.Unlock() }

// TestRerouteDuringAdd: this replica comes to own a key while an add of it has read the old
// (backup) delay but not yet recorded it. The reroute that follows the ownership change must
// still find the key and make it ready at once, not leave it waiting out the backup delay.
func TestRerouteDuringAdd(t *testing.T) {
	key := reconcile.Request{}
	key.Namespace, key.Name = "ns", "k"
	router := &blockingRouter{delay: time.Second, entered: make(chan struct{}), released: make(chan struct{})}
	rec := &recordingQueue{}
	q := newRoutedQueue(rec, router)

	added := make(chan struct{})
	go func() { q.Add(key); close(added) }()
	<-router.entered // the add has read the backup delay
	router.own()
	rerouted := make(chan struct{})
	go func() { q.reroute(); close(rerouted) }()
	// A reroute that could run now, between the add's read and its record, would find nothing
	// to do; give it the chance before the add goes on (with the guard it waits for the add).
	select {
	case <-rerouted:
	case <-time.After(100 * time.Millisecond):
	}
	close(router.released)
	<-added
	<-rerouted

	rec.mu.Lock()
	defer rec.mu.Unlock()
	if !slices.Contains(rec.adds, priorityqueue.AddOpts{}) {
		t.Errorf("adds %+v: the key was never made ready at once after this replica came to own it", rec.adds)
	}
}

// busyProgress is an owner seen deciding a key again in every backup delay, for a while: each
// look at its progress finds a decision newer than the last deferral, until it has been looked
// at stopAfter times.
type busyProgress struct {
	clk       *clocktesting.FakePassiveClock
	delay     time.Duration
	looks     int
	stopAfter int
}

func (p *busyProgress) LastDecided(string) time.Time {
	p.looks++
	if p.looks > p.stopAfter {
		return time.Time{}
	}
	// A backup delay goes by (the item waited it out) and the owner wrote meanwhile.
	p.clk.SetTime(p.clk.Now().Add(p.delay))
	return p.clk.Now().Add(-time.Millisecond)
}

// TestBackupDefersOnce: an owner that keeps writing statuses of a key (another key's queue
// refreshing a multi-lock request, say) but never the decision a waiter needs must not hold
// the backup off for longer than one more backup delay: a due item is deferred at most once,
// so the key is decided within two backup delays of being due for its owner.
func TestBackupDefersOnce(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 1, 0, 0, 0, time.UTC)
	const delay = 300 * time.Millisecond
	key := reconcile.Request{}
	key.Namespace, key.Name = "ns", "k"
	clk := clocktesting.NewFakePassiveClock(t0)
	progress := &busyProgress{clk: clk, delay: delay, stopAfter: 20}
	rec := &recordingQueue{}
	q := newRoutedQueue(rec, fixedRouter{"ns/k": delay}, WithProgress(progress), WithQueueClock(clk))
	before := testutil.ToFloat64(BackupDeferrals)
	q.Add(key)
	clk.SetTime(t0.Add(delay))
	item, _, shutdown := q.GetWithPriority()
	if shutdown || item != key {
		t.Fatalf("GetWithPriority = %v, shutdown %t; want %v handed out", item, shutdown, key)
	}
	if len(rec.dones) != 1 {
		t.Errorf("the item was deferred %d times before it was handed out; want once (the owner wrote in every one of those delays)", len(rec.dones))
	}
	if got := testutil.ToFloat64(BackupDeferrals) - before; got != 1 {
		t.Errorf("turnstile_backup_deferrals_total rose by %v; want 1", got)
	}
}
