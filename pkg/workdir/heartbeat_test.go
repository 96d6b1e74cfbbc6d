package workdir

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

var (
	testLease  = types.NamespacedName{Namespace: "team-a", Name: "turnstile-workdir-runner-0"}
	errAPIDown = errors.New("connection refused")
)

const testIdentity = "runner-0_0badcafe"

func withHostname(host string, err error) HeartbeatOption {
	return heartbeatOptionFunc(func(c *heartbeatConfig) {
		c.hostname = func() (string, error) { return host, err }
	})
}

func newTestHeartbeat(t *testing.T, store leaseStore, guards *Guards, clk *testingclock.FakeClock, extra ...HeartbeatOption) *Heartbeat {
	t.Helper()
	opts := append([]HeartbeatOption{
		WithClock(clk),
		WithNamespace(testLease.Namespace),
		WithIdentity(testIdentity),
		withHostname("runner-0", nil),
	}, extra...)
	hb, err := newHeartbeat(store, guards, opts...)
	if err != nil {
		t.Fatalf("newHeartbeat: %v", err)
	}
	if hb.Lease() != testLease {
		t.Fatalf("Lease() = %s, want %s", hb.Lease(), testLease)
	}
	return hb
}

// leaseView is the part of a Lease the tests assert on.
type leaseView struct {
	Labels      map[string]string
	Holder      string
	Duration    int32
	Acquired    time.Time
	Renewed     time.Time
	Transitions int32
	Guards      []guardEntry
	Truncated   string
}

func viewOf(t *testing.T, l *coordinationv1.Lease) leaseView {
	t.Helper()
	if l == nil {
		t.Fatal("no Lease")
	}
	v := leaseView{
		Labels:      l.Labels,
		Holder:      ptr.Deref(l.Spec.HolderIdentity, ""),
		Duration:    ptr.Deref(l.Spec.LeaseDurationSeconds, 0),
		Transitions: ptr.Deref(l.Spec.LeaseTransitions, -1),
		Truncated:   l.Annotations[AnnotationGuardsTruncated],
	}
	if l.Spec.AcquireTime != nil {
		v.Acquired = l.Spec.AcquireTime.UTC()
	}
	if l.Spec.RenewTime != nil {
		v.Renewed = l.Spec.RenewTime.UTC()
	}
	if a, ok := l.Annotations[AnnotationGuards]; ok {
		if err := json.Unmarshal([]byte(a), &v.Guards); err != nil {
			t.Fatalf("annotation %s: %v", AnnotationGuards, err)
		}
	}
	return v
}

func TestHeartbeatWritesLease(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	guards := NewGuards(WithClock(clk))
	store := newMemStore()
	hb := newTestHeartbeat(t, store, guards, clk)
	ctx := context.Background()

	mustTryLock(t, guards, vpcKey(), "plan")
	root := vpcKey()
	root.Path = "."
	unlockRoot := mustTryLock(t, guards, root, "apply")
	hb.step(ctx)
	want := leaseView{
		Labels:   map[string]string{LabelRole: RoleWorkdirGuard},
		Holder:   testIdentity,
		Duration: 15,
		Acquired: t0,
		Renewed:  t0,
		Guards:   entriesOf(guards.Held()),
	}
	if diff := cmp.Diff(want, viewOf(t, store.lease(testLease))); diff != "" {
		t.Errorf("created Lease mismatch (-want +got):\n%s", diff)
	}
	if !hb.Healthy() {
		t.Error("Healthy() = false after the Lease was created")
	}

	// A later renewal reflects guards taken and released since.
	unlockRoot()
	var unlocks []func()
	for i := range 120 {
		k := vpcKey()
		k.Pull = int64(100 + i)
		unlocks = append(unlocks, mustTryLock(t, guards, k, "plan"))
	}
	clk.Step(5 * time.Second)
	hb.step(ctx)
	want.Renewed = t0.Add(5 * time.Second)
	want.Guards = entriesOf(guards.Held()[:maxGuardEntries])
	want.Truncated = "21"
	if diff := cmp.Diff(want, viewOf(t, store.lease(testLease))); diff != "" {
		t.Errorf("renewed Lease mismatch (-want +got):\n%s", diff)
	}

	for _, u := range unlocks {
		u()
	}
	clk.Step(5 * time.Second)
	hb.step(ctx)
	want.Renewed = t0.Add(10 * time.Second)
	want.Guards = entriesOf(guards.Held())
	want.Truncated = ""
	if diff := cmp.Diff(want, viewOf(t, store.lease(testLease))); diff != "" {
		t.Errorf("Lease after releases mismatch (-want +got):\n%s", diff)
	}
}

type hbStep struct {
	at          time.Duration // since t0
	fail        bool
	wantNext    time.Duration
	wantHealthy bool
	wantLost    int  // OnLost calls so far
	wantRefused bool // TryLock refused with ErrLeaseLost
}

func TestHeartbeatLostDetection(t *testing.T) {
	const s = time.Second
	cases := map[string]struct {
		steps           []hbStep
		wantTransitions int32
	}{
		"renewals keep it healthy": {
			steps: []hbStep{
				{at: 0, wantNext: 5 * s, wantHealthy: true},
				{at: 5 * s, wantNext: 5 * s, wantHealthy: true},
				{at: 10 * s, wantNext: 5 * s, wantHealthy: true},
			},
		},
		"failures while the lease runs are retried sooner and harmless": {
			steps: []hbStep{
				{at: 0, wantNext: 5 * s, wantHealthy: true},
				{at: 5 * s, fail: true, wantNext: 2500 * time.Millisecond, wantHealthy: true},
				{at: 7500 * time.Millisecond, fail: true, wantNext: 2500 * time.Millisecond, wantHealthy: true},
				{at: 10 * s, wantNext: 5 * s, wantHealthy: true},
			},
		},
		"lost once renewTime plus duration has passed, regained by a renewal": {
			steps: []hbStep{
				{at: 0, wantNext: 5 * s, wantHealthy: true},
				{at: 5 * s, fail: true, wantNext: 2500 * time.Millisecond, wantHealthy: true},
				{at: 10 * s, fail: true, wantNext: 2500 * time.Millisecond, wantHealthy: true},
				// The retry is pulled in to wake exactly at expiry.
				{at: 14 * s, fail: true, wantNext: 1 * s, wantHealthy: true},
				{at: 15*s - time.Millisecond, fail: true, wantNext: time.Millisecond, wantHealthy: true},
				{at: 15 * s, fail: true, wantNext: 2500 * time.Millisecond, wantLost: 1, wantRefused: true},
				{at: 17500 * time.Millisecond, fail: true, wantNext: 2500 * time.Millisecond, wantLost: 1, wantRefused: true},
				{at: 20 * s, wantNext: 5 * s, wantHealthy: true, wantLost: 1},
				{at: 25 * s, wantNext: 5 * s, wantHealthy: true, wantLost: 1},
			},
			// Regaining starts a new incarnation, so observers can tell.
			wantTransitions: 1,
		},
		"never renewed is not lost": {
			steps: []hbStep{
				{at: 0, fail: true, wantNext: 2500 * time.Millisecond},
				{at: 30 * s, fail: true, wantNext: 2500 * time.Millisecond},
				{at: 35 * s, wantNext: 5 * s, wantHealthy: true},
			},
		},
		"a wake-up after expiry is a loss even if the renewal then succeeds": {
			steps: []hbStep{
				{at: 0, wantNext: 5 * s, wantHealthy: true},
				{at: 20 * s, wantNext: 5 * s, wantHealthy: true, wantLost: 1},
			},
			wantTransitions: 1,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			clk := testingclock.NewFakeClock(t0)
			guards := NewGuards(WithClock(clk))
			store := newMemStore()
			var lost []error
			hb := newTestHeartbeat(t, store, guards, clk, WithOnLost(func(err error) { lost = append(lost, err) }))
			for i, st := range tc.steps {
				clk.SetTime(t0.Add(st.at))
				if st.fail {
					store.setFail(errAPIDown)
				} else {
					store.setFail(nil)
				}
				next := hb.step(context.Background())
				unlock, err := guards.TryLock(vpcKey(), "plan")
				unlock()
				got := hbStep{
					at: st.at, fail: st.fail, wantNext: next, wantHealthy: hb.Healthy(),
					wantLost: len(lost), wantRefused: errors.Is(err, ErrLeaseLost),
				}
				if diff := cmp.Diff(st, got, cmp.AllowUnexported(hbStep{})); diff != "" {
					t.Fatalf("step %d (at %s) mismatch (-want +got):\n%s", i, st.at, diff)
				}
			}
			for _, err := range lost {
				// The cause is the last renewal error, or the overdue wake-up itself.
				hasCause := errors.Is(err, errAPIDown) || strings.Contains(err.Error(), "renewal is overdue")
				if !errors.Is(err, ErrLeaseLost) || !hasCause {
					t.Errorf("OnLost got %v, want ErrLeaseLost with its cause", err)
				}
			}
			if got := viewOf(t, store.lease(testLease)).Transitions; got != tc.wantTransitions {
				t.Errorf("leaseTransitions = %d, want %d", got, tc.wantTransitions)
			}
		})
	}
}

func TestHeartbeatRenewsWithOneUpdate(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	store := newMemStore()
	hb := newTestHeartbeat(t, store, NewGuards(WithClock(clk)), clk)
	ctx := context.Background()

	hb.step(ctx)
	if diff := cmp.Diff([]string{"get", "create"}, store.takeCalls()); diff != "" {
		t.Errorf("first renewal calls (-want +got):\n%s", diff)
	}

	clk.Step(5 * time.Second)
	hb.step(ctx)
	if diff := cmp.Diff([]string{"update"}, store.takeCalls()); diff != "" {
		t.Errorf("steady renewal calls (-want +got):\n%s", diff)
	}

	// Someone else wrote the Lease: the stale update conflicts, and the renewal re-reads and
	// keeps their change.
	other := store.lease(testLease)
	other.Annotations["example.com/note"] = "kept"
	store.put(other)
	clk.Step(5 * time.Second)
	hb.step(ctx)
	if diff := cmp.Diff([]string{"update", "get", "update"}, store.takeCalls()); diff != "" {
		t.Errorf("renewal after a conflict calls (-want +got):\n%s", diff)
	}
	got := store.lease(testLease)
	if got.Annotations["example.com/note"] != "kept" || !got.Spec.RenewTime.Time.Equal(t0.Add(10*time.Second)) {
		t.Errorf("Lease after the conflict: annotations %v, renewTime %v", got.Annotations, got.Spec.RenewTime)
	}

	// Deleted behind our back: created again.
	store.remove(testLease)
	clk.Step(5 * time.Second)
	hb.step(ctx)
	if diff := cmp.Diff([]string{"update", "get", "create"}, store.takeCalls()); diff != "" {
		t.Errorf("renewal after a deletion calls (-want +got):\n%s", diff)
	}
	if store.lease(testLease) == nil || !hb.Healthy() {
		t.Errorf("Lease not recreated (healthy %v)", hb.Healthy())
	}
}

func TestHeartbeatWaitsForAnotherHoldersLease(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	store := newMemStore()
	store.put(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: testLease.Namespace, Name: testLease.Name, Labels: map[string]string{LabelRole: RoleWorkdirGuard}},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To("runner-0_previous"),
			LeaseDurationSeconds: ptr.To[int32](15),
			AcquireTime:          ptr.To(metav1.NewMicroTime(t0.Add(-time.Hour))),
			RenewTime:            ptr.To(metav1.NewMicroTime(t0.Add(-5 * time.Second))),
			LeaseTransitions:     ptr.To[int32](3),
		},
	})
	hb := newTestHeartbeat(t, store, NewGuards(WithClock(clk)), clk)

	hb.step(context.Background())
	if hb.Healthy() {
		t.Error("Healthy() = true while another process holds the Lease")
	}
	if got := viewOf(t, store.lease(testLease)).Holder; got != "runner-0_previous" {
		t.Fatalf("holder = %q; the previous holder's Lease was taken before it lapsed", got)
	}

	clk.SetTime(t0.Add(10 * time.Second)) // the previous holder's Lease has lapsed
	hb.step(context.Background())
	want := leaseView{
		Labels:      map[string]string{LabelRole: RoleWorkdirGuard},
		Holder:      testIdentity,
		Duration:    15,
		Acquired:    t0.Add(10 * time.Second),
		Renewed:     t0.Add(10 * time.Second),
		Transitions: 4,
		Guards:      []guardEntry{},
	}
	if diff := cmp.Diff(want, viewOf(t, store.lease(testLease))); diff != "" {
		t.Errorf("taken-over Lease mismatch (-want +got):\n%s", diff)
	}
	if !hb.Healthy() {
		t.Error("Healthy() = false after taking the lapsed Lease over")
	}
}

// running is a Heartbeat whose Run is running, with its own fake clock, Lease store and guards.
type running struct {
	clk    *testingclock.FakeClock
	store  *memStore
	hb     *Heartbeat
	cancel func()
	done   <-chan error
}

// startHeartbeat makes a Heartbeat on a new store and runs it until its first renewal.
func startHeartbeat(t *testing.T) running {
	t.Helper()
	r := running{clk: testingclock.NewFakeClock(t0), store: newMemStore()}
	r.hb = newTestHeartbeat(t, r.store, NewGuards(WithClock(r.clk)), r.clk)
	r.cancel, r.done = runHeartbeat(t, r.hb, r.store, r.clk)
	return r
}

// runHeartbeat starts Run and waits until it has written the Lease and sleeps on its timer.
func runHeartbeat(t *testing.T, hb *Heartbeat, store *memStore, clk *testingclock.FakeClock) (cancel func(), done <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- hb.Run(ctx) }()
	waitFor(t, "the first renewal", func() bool { return store.lease(testLease) != nil && clk.HasWaiters() })
	return cancel, errc
}

func TestHeartbeatRunRenewsAndGivesUp(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	store := newMemStore()
	guards := NewGuards(WithClock(clk))
	hb := newTestHeartbeat(t, store, guards, clk)
	unlock := mustTryLock(t, guards, vpcKey(), "plan")
	defer unlock()

	cancel, done := runHeartbeat(t, hb, store, clk)
	defer cancel()
	if err := hb.Run(context.Background()); err == nil {
		t.Error("a second concurrent Run succeeded")
	}
	clk.Step(5 * time.Second)
	waitFor(t, "the timed renewal", func() bool {
		l := store.lease(testLease)
		return l != nil && l.Spec.RenewTime.Time.Equal(t0.Add(5*time.Second))
	})
	if !hb.Healthy() {
		t.Error("Healthy() = false while renewing")
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
	if l := store.lease(testLease); l != nil {
		t.Errorf("Lease still exists after shutdown: %v", l)
	}
	if hb.Healthy() {
		t.Error("Healthy() = true after shutdown")
	}
	if _, err := guards.TryLock(Key{Repo: "acme/infra", Pull: 1, Workspace: "default", Path: "."}, "plan"); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("TryLock after shutdown: err = %v, want ErrLeaseLost", err)
	}
}

func TestHeartbeatGiveUpSparesAnotherHoldersLease(t *testing.T) {
	r := startHeartbeat(t)
	stolen := r.store.lease(testLease)
	stolen.Spec.HolderIdentity = ptr.To("someone-else")
	r.store.put(stolen)
	r.cancel()
	if err := <-r.done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if l := r.store.lease(testLease); l == nil || *l.Spec.HolderIdentity != "someone-else" {
		t.Errorf("another holder's Lease was deleted: %v", l)
	}
}

func TestHeartbeatGiveUpReportsFailure(t *testing.T) {
	r := startHeartbeat(t)
	r.store.setFail(errAPIDown)
	r.cancel()
	if err := <-r.done; !errors.Is(err, errAPIDown) {
		t.Fatalf("Run = %v, want the deletion's failure", err)
	}
}

func TestNewHeartbeatOptions(t *testing.T) {
	guards := NewGuards()
	cases := map[string]struct {
		noGuards     bool
		opts         []HeartbeatOption
		wantErr      string
		wantLease    types.NamespacedName
		wantIdentity string // a regexp
	}{
		"defaults from the host name": {
			opts:         []HeartbeatOption{WithNamespace("team-a"), withHostname("Runner-0.Pool_A", nil)},
			wantLease:    types.NamespacedName{Namespace: "team-a", Name: "turnstile-workdir-runner-0.pool-a"},
			wantIdentity: `^Runner-0\.Pool_A_[0-9a-f]{8}$`,
		},
		"explicit name and identity": {
			opts:         []HeartbeatOption{WithNamespace("team-a"), WithLeaseName("ci-7"), WithIdentity("ci-7"), withHostname("", errors.New("no hostname"))},
			wantLease:    types.NamespacedName{Namespace: "team-a", Name: "ci-7"},
			wantIdentity: `^ci-7$`,
		},
		"no guards":             {noGuards: true, opts: []HeartbeatOption{WithNamespace("team-a")}, wantErr: "guards are required"},
		"no namespace":          {opts: []HeartbeatOption{withHostname("runner-0", nil)}, wantErr: "namespace is required"},
		"fractional duration":   {opts: []HeartbeatOption{WithNamespace("a"), WithLeaseDuration(1500 * time.Millisecond)}, wantErr: "whole seconds"},
		"too short duration":    {opts: []HeartbeatOption{WithNamespace("a"), WithLeaseDuration(2 * time.Second)}, wantErr: "at least 3s"},
		"invalid name":          {opts: []HeartbeatOption{WithNamespace("a"), WithLeaseName("Bad_Name")}, wantErr: `lease name "Bad_Name"`},
		"host name unavailable": {opts: []HeartbeatOption{WithNamespace("a"), withHostname("", errors.New("no hostname"))}, wantErr: "no hostname"},
		"host name unusable":    {opts: []HeartbeatOption{WithNamespace("a"), withHostname("___", nil)}, wantErr: "gives no valid lease name"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			g := guards
			if tc.noGuards {
				g = nil
			}
			opts := append([]HeartbeatOption{withHostname("runner-0", nil)}, tc.opts...)
			hb, err := newHeartbeat(newMemStore(), g, opts...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("newHeartbeat error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("newHeartbeat: %v", err)
			}
			if hb.Lease() != tc.wantLease {
				t.Errorf("Lease() = %s, want %s", hb.Lease(), tc.wantLease)
			}
			if !regexp.MustCompile(tc.wantIdentity).MatchString(hb.Identity()) {
				t.Errorf("Identity() = %q, want a match of %s", hb.Identity(), tc.wantIdentity)
			}
			if hb.NeedLeaderElection() {
				t.Error("NeedLeaderElection() = true; every replica needs its own heartbeat")
			}
		})
	}
}

func TestLeaseNameFor(t *testing.T) {
	cases := map[string]struct {
		host string
		want string
	}{
		"pod name":          {host: "runner-0", want: "turnstile-workdir-runner-0"},
		"fqdn mixed case":   {host: "Runner-0.Example.COM", want: "turnstile-workdir-runner-0.example.com"},
		"underscores":       {host: "ci_box_7", want: "turnstile-workdir-ci-box-7"},
		"trailing dot":      {host: "runner-0.", want: "turnstile-workdir-runner-0"},
		"nothing usable":    {host: "___", want: ""},
		"too long is cut":   {host: strings.Repeat("a", 300), want: "turnstile-workdir-" + strings.Repeat("a", 253-len("turnstile-workdir-"))},
		"cut at separator":  {host: strings.Repeat("a", 253-len("turnstile-workdir-")-1) + "-b", want: "turnstile-workdir-" + strings.Repeat("a", 253-len("turnstile-workdir-")-1)},
		"empty label in it": {host: "a..b", want: ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := leaseNameFor(tc.host); got != tc.want {
				t.Errorf("leaseNameFor(%q) = %q, want %q", tc.host, got, tc.want)
			}
		})
	}
}

// TestHeartbeatHealthyIsSafeForConcurrentUse reads the health state while Run writes it.
func TestHeartbeatHealthyIsSafeForConcurrentUse(t *testing.T) {
	r := startHeartbeat(t)
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 1000 {
			_ = r.hb.Healthy()
		}
	})
	for range 20 {
		waitFor(t, "the heartbeat to sleep", r.clk.HasWaiters)
		r.clk.Step(5 * time.Second)
	}
	wg.Wait()
	r.cancel()
	if err := <-r.done; err != nil {
		t.Fatal(err)
	}
}

// TestHeartbeatRecreatesUnlabelledLease: a lapsed Lease of the heartbeat's name without the
// label locks.turnstile.dev/role (made by hand) is deleted and created anew, labelled, not
// labelled in place: the admission policies protect only a Lease created with the label (they
// refuse adding it later), and the operator grants only on a protected one.
func TestHeartbeatRecreatesUnlabelledLease(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	store := newMemStore()
	store.put(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: testLease.Namespace, Name: testLease.Name, UID: "by-hand"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To("someone"),
			LeaseDurationSeconds: ptr.To[int32](15),
			RenewTime:            ptr.To(metav1.NewMicroTime(t0.Add(-time.Minute))),
			LeaseTransitions:     ptr.To[int32](3),
		},
	})
	hb := newTestHeartbeat(t, store, NewGuards(WithClock(clk)), clk)
	store.takeCalls()
	hb.step(context.Background())
	if !hb.Healthy() {
		t.Fatal("Healthy() = false after re-creating the lapsed unlabelled Lease")
	}
	if diff := cmp.Diff([]string{"get", "delete", "get", "create"}, store.takeCalls()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	got := store.lease(testLease)
	if got.UID == "by-hand" {
		t.Errorf("the unlabelled Lease was updated in place, not re-created")
	}
	want := leaseView{
		Labels:   map[string]string{LabelRole: RoleWorkdirGuard},
		Holder:   testIdentity,
		Duration: 15,
		Acquired: t0,
		Renewed:  t0,
		Guards:   []guardEntry{},
	}
	if diff := cmp.Diff(want, viewOf(t, got)); diff != "" {
		t.Errorf("re-created Lease mismatch (-want +got):\n%s", diff)
	}
}
