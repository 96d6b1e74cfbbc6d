package queue

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
	"github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

func TestAgedPriority(t *testing.T) {
	step := 10 * time.Minute
	cases := map[string]struct {
		tc     locksv1.Priority
		waited time.Duration
		step   time.Duration
		want   locksv1.Priority
	}{
		"Low, not waited":                      {tc: locksv1.PriorityLow, waited: 0, step: step, want: locksv1.PriorityLow},
		"Low, just short of a step":            {tc: locksv1.PriorityLow, waited: step - time.Nanosecond, step: step, want: locksv1.PriorityLow},
		"Low, one step is Normal":              {tc: locksv1.PriorityLow, waited: step, step: step, want: locksv1.PriorityNormal},
		"Low, two steps is High":               {tc: locksv1.PriorityLow, waited: 2 * step, step: step, want: locksv1.PriorityHigh},
		"Low, forever stops at High":           {tc: locksv1.PriorityLow, waited: 1000 * step, step: step, want: locksv1.PriorityHigh},
		"Normal, one step is High":             {tc: locksv1.PriorityNormal, waited: step, step: step, want: locksv1.PriorityHigh},
		"High stays High":                      {tc: locksv1.PriorityHigh, waited: 1000 * step, step: step, want: locksv1.PriorityHigh},
		"Critical stays Critical":              {tc: locksv1.PriorityCritical, waited: 1000 * step, step: step, want: locksv1.PriorityCritical},
		"aging off":                            {tc: locksv1.PriorityLow, waited: 1000 * step, step: 0, want: locksv1.PriorityLow},
		"negative wait (clock skew) ages none": {tc: locksv1.PriorityLow, waited: -time.Hour, step: step, want: locksv1.PriorityLow},
		"unknown priority ranks as Normal":     {tc: "", waited: 0, step: step, want: locksv1.PriorityNormal},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want.Rank(), AgedPriority(tc.tc, tc.waited, tc.step)); diff != "" {
				t.Errorf("AgedPriority (-want +got):\n%s", diff)
			}
		})
	}
}

// The grant order.
func TestOrder(t *testing.T) {
	aging := testConfig()
	aging.AgingStep = 10 * time.Minute
	sameSecond := t0.Add(-time.Minute)
	cases := map[string]struct {
		tc           []*wrappers.LockRequestWrapper
		cfg          Config
		wantNames    []string
		wantPriority []int
	}{
		"Critical > High > Normal > Low": {
			tc: []*wrappers.LockRequestWrapper{
				makeReq("low").Priority(locksv1.PriorityLow).QueuedAt(t0.Add(-4 * time.Minute)),
				makeReq("normal").QueuedAt(t0.Add(-3 * time.Minute)),
				makeReq("high").Priority(locksv1.PriorityHigh).QueuedAt(t0.Add(-2 * time.Minute)),
				makeReq("critical").Priority(locksv1.PriorityCritical).QueuedAt(t0.Add(-time.Minute)),
			},
			cfg:          aging,
			wantNames:    []string{"critical", "high", "normal", "low"},
			wantPriority: []int{3, 2, 1, 0},
		},
		"FIFO by queuedAt within a priority, microseconds count": {
			tc: []*wrappers.LockRequestWrapper{
				makeReq("a").QueuedAt(t0.Add(2 * time.Microsecond)),
				makeReq("b").QueuedAt(t0.Add(time.Microsecond)),
				makeReq("c").QueuedAt(t0),
			},
			cfg:          testConfig(),
			wantNames:    []string{"c", "b", "a"},
			wantPriority: []int{1, 1, 1},
		},
		"the API server's order, not the order a manager saw them in: an older request not yet seen goes first": {
			tc: []*wrappers.LockRequestWrapper{
				makeReq("z-new").Creation(t0.Add(-time.Hour)),
				makeReq("a-seen").QueuedAt(now),
			},
			cfg:          testConfig(),
			wantNames:    []string{"z-new", "a-seen"},
			wantPriority: []int{1, 1},
		},
		"within one creation second the arrival revision decides, whoever's clock stamped queuedAt": {
			tc: []*wrappers.LockRequestWrapper{
				// b was queued by a manager whose clock is ahead: a later queuedAt, an earlier revision.
				makeReq("a").QueuedAt(t0.Add(-time.Minute)).Creation(t0.Add(-time.Minute)),
				makeReq("b").QueuedAt(t0.Add(-time.Minute + time.Hour)).Creation(t0.Add(-time.Minute)),
			},
			cfg:          testConfig(),
			wantNames:    []string{"a", "b"},
			wantPriority: []int{1, 1},
		},
		"unseen requests: creation second, then resourceVersion as a number, then name": {
			tc: []*wrappers.LockRequestWrapper{
				makeReq("a").Creation(sameSecond).ResourceVersion("10"),
				makeReq("b").Creation(sameSecond).ResourceVersion("9"),
				makeReq("c").Creation(sameSecond.Add(-time.Second)).ResourceVersion("20"),
				makeReq("d").Creation(sameSecond).ResourceVersion("9"),
			},
			cfg:          testConfig(),
			wantNames:    []string{"c", "b", "d", "a"},
			wantPriority: []int{1, 1, 1, 1},
		},
		"one aging step lifts Low to Normal, then arrival decides": {
			tc: []*wrappers.LockRequestWrapper{
				makeReq("normal").QueuedAt(now.Add(-5 * time.Minute)),
				makeReq("low").Priority(locksv1.PriorityLow).QueuedAt(now.Add(-10 * time.Minute)),
			},
			cfg:          aging,
			wantNames:    []string{"low", "normal"},
			wantPriority: []int{1, 1},
		},
		"just short of a step Low stays behind": {
			tc: []*wrappers.LockRequestWrapper{
				makeReq("normal").QueuedAt(now.Add(-5 * time.Minute)),
				makeReq("low").Priority(locksv1.PriorityLow).QueuedAt(now.Add(-10*time.Minute + time.Microsecond)),
			},
			cfg:          aging,
			wantNames:    []string{"normal", "low"},
			wantPriority: []int{1, 0},
		},
		"aging never passes High, Critical unaffected": {
			tc: []*wrappers.LockRequestWrapper{
				makeReq("high").Priority(locksv1.PriorityHigh).QueuedAt(now.Add(-time.Minute)),
				makeReq("low").Priority(locksv1.PriorityLow).QueuedAt(now.Add(-10 * time.Hour)),
				makeReq("critical").Priority(locksv1.PriorityCritical).QueuedAt(now),
			},
			cfg:          aging,
			wantNames:    []string{"critical", "low", "high"},
			wantPriority: []int{3, 2, 2},
		},
		"without aging Low waits behind later Normal": {
			tc: []*wrappers.LockRequestWrapper{
				makeReq("normal").QueuedAt(now.Add(-time.Minute)),
				makeReq("low").Priority(locksv1.PriorityLow).QueuedAt(now.Add(-10 * time.Hour)),
			},
			cfg:          testConfig(),
			wantNames:    []string{"normal", "low"},
			wantPriority: []int{1, 0},
		},
		"requests for other keys are left out": {
			tc: []*wrappers.LockRequestWrapper{
				makeReq("other").Targets(tgt2).QueuedAt(t0.Add(-time.Hour)),
				makeReq("mine").QueuedAt(t0),
			},
			cfg:          testConfig(),
			wantNames:    []string{"mine"},
			wantPriority: []int{1},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Order(name1, reqs(tc.tc...), now, tc.cfg)
			var gotNames []string
			var gotPriority []int
			for _, w := range got {
				gotNames = append(gotNames, w.Request.Name)
				gotPriority = append(gotPriority, w.Priority)
			}
			if diff := cmp.Diff(tc.wantNames, gotNames); diff != "" {
				t.Errorf("order (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantPriority, gotPriority); diff != "" {
				t.Errorf("priorities (-want +got):\n%s", diff)
			}
		})
	}
}

// Decide stamps first-seen requests with distinct microsecond arrivals in grant order,
// and ProjectLock.status.queue shows the aged priority.
func TestDecideStampsArrivals(t *testing.T) {
	h := aliceHolder().Obj()
	cfg := testConfig()
	cfg.AgingStep = 10 * time.Minute
	sameSecond := t0.Add(-time.Minute)
	in := Input{Now: now, Name: name1, Lock: aliceLock(h), Config: cfg, Requests: []*locksv1.LockRequest{
		h,
		makeReq("a").Owner("bob", 1).Creation(sameSecond).ResourceVersion("10").Obj(),
		makeReq("b").Owner("carol", 2).Creation(sameSecond).ResourceVersion("9").Obj(),
		makeReq("low").Owner("dave", 3).Priority(locksv1.PriorityLow).QueuedAt(t0.Add(-15 * time.Minute)).Obj(),
	}}
	d := Decide(in)

	type stamp struct {
		Name     string
		QueuedAt time.Time
		Refresh  bool
		Position int32
	}
	var got []stamp
	for _, u := range d.Waiting {
		got = append(got, stamp{u.Request.Name, u.Status.QueuedAt.UTC(), u.Refresh, u.Status.QueuePosition})
	}
	us := now.Truncate(time.Microsecond)
	want := []stamp{
		{"low", t0.Add(-15 * time.Minute), true, 1},
		{"b", us, false, 2},
		{"a", us.Add(time.Microsecond), false, 3},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("waiting updates (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"low", "b", "a"}, names(d.Queue)); diff != "" {
		t.Errorf("Queue (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"low:Normal", "b:Normal", "a:Normal"}, lockViewOf(d.Lock).Queue); diff != "" {
		t.Errorf("ProjectLock queue (-want +got):\n%s", diff)
	}
	// The next aging step of "low" (queued at t0-15m, 10m steps) is at t0+5m: nearer than the
	// holder's expiry.
	if diff := cmp.Diff(untilFromNow(t0.Add(5*time.Minute)), d.RequeueAfter); diff != "" {
		t.Errorf("RequeueAfter (-want +got):\n%s", diff)
	}
}

// The ProjectLock shows at most HeadSize queue entries but counts them all.
func TestDecideQueueHead(t *testing.T) {
	h := aliceHolder().Obj()
	cfg := testConfig()
	cfg.HeadSize = 2
	in := Input{Now: now, Name: name1, Lock: aliceLock(h), Config: cfg, Requests: []*locksv1.LockRequest{
		h,
		makeReq("w1").QueuedAt(t0.Add(-3 * time.Minute)).Obj(),
		makeReq("w2").QueuedAt(t0.Add(-2 * time.Minute)).Obj(),
		makeReq("w3").QueuedAt(t0.Add(-1 * time.Minute)).Obj(),
	}}
	got := lockViewOf(Decide(in).Lock)
	if diff := cmp.Diff([]string{"w1:Normal", "w2:Normal"}, got.Queue); diff != "" {
		t.Errorf("queue head (-want +got):\n%s", diff)
	}
	if got.Length != 3 {
		t.Errorf("QueueLength = %d, want 3", got.Length)
	}
}

func TestFirstUnheld(t *testing.T) {
	cases := map[string]struct {
		tc      *wrappers.LockRequestWrapper
		wantKey string
		wantOK  bool
	}{
		"nothing held: the first key in canonical order, not spec order": {
			tc:      makeReq("m").Targets(tgt2, tgt1),
			wantKey: key1, wantOK: true,
		},
		"first held: the second": {
			tc:      makeReq("m").Targets(tgt2, tgt1).Held(tgt1),
			wantKey: key2, wantOK: true,
		},
		"only the second held: still the first": {
			tc:      makeReq("m").Targets(tgt2, tgt1).Held(tgt2),
			wantKey: key1, wantOK: true,
		},
		"all held": {
			tc:     makeReq("m").Targets(tgt2, tgt1).Held(tgt1, tgt2),
			wantOK: false,
		},
		"single target, granted": {
			tc:     makeReq("m").Granted(t0, 1),
			wantOK: false,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ref, ok := FirstUnheld(tc.tc.Obj())
			if diff := cmp.Diff(tc.wantOK, ok); diff != "" {
				t.Errorf("ok (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantKey, ref.Key); diff != "" {
				t.Errorf("key (-want +got):\n%s", diff)
			}
			if ok && ref.Name != lockkey.Name(ref.Target) {
				t.Errorf("ref.Name = %q, want the ProjectLock name of its target %q", ref.Name, lockkey.Name(ref.Target))
			}
		})
	}
}

func TestTTL(t *testing.T) {
	cfg := testConfig()
	if got := TTL(makeReq("a").Obj(), cfg); got != cfg.DefaultTTL {
		t.Errorf("TTL without spec.ttl = %s, want the default %s", got, cfg.DefaultTTL)
	}
	if got := TTL(makeReq("a").TTL(time.Hour).Obj(), cfg); got != time.Hour {
		t.Errorf("TTL with spec.ttl 1h = %s", got)
	}
}

// Two managers whose clocks fall on either side of a waiter's aging step agree once one of them
// has written the key: aging is a ratchet (agedAsShown). Without it each writes its own queue
// over the other's for as long as their clocks disagree.
func TestAgingIsARatchetAcrossManagers(t *testing.T) {
	cfg := testConfig()
	cfg.AgingStep = 30 * time.Second
	ahead, behind := now.Add(2*time.Second), now.Add(-2*time.Second)
	// x is Low and was queued one aging step before now: Normal by the clock ahead, Low by the
	// one behind. y is Normal, created and queued after x.
	x := func() *locksv1.LockRequest {
		return makeReq("x").Owner("xavier", 1).Priority(locksv1.PriorityLow).Creation(t0.Add(-time.Minute)).QueuedAt(now.Add(-cfg.AgingStep)).Obj()
	}
	y := func() *locksv1.LockRequest {
		return makeReq("y").Owner("yvonne", 2).Creation(t0.Add(-30 * time.Second)).QueuedAt(now.Add(-10 * time.Second)).Obj()
	}
	cases := map[string]struct {
		waiters []*locksv1.LockRequest
		first   time.Time // the clock of the manager that decides first
		want    []string  // the ProjectLock's queue once both have decided
	}{
		"one waiter's step between the clocks, the manager ahead first": {
			waiters: []*locksv1.LockRequest{x()}, first: ahead, want: []string{"x:Normal"},
		},
		"one waiter's step between the clocks, the manager behind first": {
			waiters: []*locksv1.LockRequest{x()}, first: behind, want: []string{"x:Normal"},
		},
		"two waiters trade places between the clocks": {
			waiters: []*locksv1.LockRequest{x(), y()}, first: behind, want: []string{"x:Normal", "y:Normal"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			w.add(aliceHolder().Obj())
			w.locks[name1] = aliceLock(w.get("h"))
			for _, r := range tc.waiters {
				w.add(r)
			}
			second := ahead
			if tc.first.Equal(ahead) {
				second = behind
			}
			w.decide(name1, tc.first, cfg)
			w.decide(name1, second, cfg)
			for i := range 6 {
				at := []time.Time{tc.first, second}[i%2]
				if d := w.decide(name1, at, cfg); !empty(d) {
					t.Fatalf("decision %d at now%+v writes again: %s", i+3, at.Sub(now), describeDecision(d))
				}
			}
			if diff := cmp.Diff(tc.want, lockViewOf(&w.locks[name1].Status).Queue); diff != "" {
				t.Errorf("ProjectLock queue (-want +got):\n%s", diff)
			}
		})
	}
}

// The ratchet closes a gap between clocks, no more: a rank the ProjectLock shows more than one
// aging step above the deciding clock's (a request that reuses the name of one that waited
// long) is not taken.
func TestAgedAsShownTakesOneStepAtMost(t *testing.T) {
	cfg := testConfig()
	cfg.AgingStep = 30 * time.Second
	h := aliceHolder().Obj()
	lock := aliceLock(h)
	lock.Status.Queue = []locksv1.QueueEntry{{Request: "x", Owner: "xavier", Pull: 1, Priority: locksv1.PriorityHigh}}
	x := makeReq("x").Owner("xavier", 1).Priority(locksv1.PriorityLow).QueuedAt(now.Add(-time.Second)).Obj()
	d := Decide(Input{Now: now, Name: name1, Lock: lock, Config: cfg, Requests: []*locksv1.LockRequest{h, x}})
	if diff := cmp.Diff([]string{"x:Low"}, lockViewOf(d.Lock).Queue); diff != "" {
		t.Errorf("ProjectLock queue (-want +got):\n%s", diff)
	}
	// One step above, it is taken: another manager's clock passed x's first step.
	lock.Status.Queue[0].Priority = locksv1.PriorityNormal
	d = Decide(Input{Now: now, Name: name1, Lock: lock, Config: cfg, Requests: []*locksv1.LockRequest{h, x}})
	st := &lock.Status // unchanged if nothing is written
	if d.Lock != nil {
		st = d.Lock
	}
	if diff := cmp.Diff([]string{"x:Normal"}, lockViewOf(st).Queue); diff != "" {
		t.Errorf("ProjectLock queue, one step above (-want +got):\n%s", diff)
	}
}
