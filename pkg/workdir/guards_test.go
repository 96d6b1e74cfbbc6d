package workdir

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	testingclock "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)

func vpcKey() Key {
	return Key{Repo: "acme/infra", Pull: 12, Workspace: "default", Path: "modules/vpc"}
}

// waitFor polls cond: the goroutines under test block on channels the test cannot see.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func mustTryLock(t *testing.T, g *Guards, k Key, holder string) func() {
	t.Helper()
	unlock, err := g.TryLock(k, holder)
	if err != nil {
		t.Fatalf("TryLock(%s, %s): %v", k, holder, err)
	}
	return unlock
}

func TestTryLockConflict(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	g := NewGuards(WithClock(clk))
	unlock := mustTryLock(t, g, vpcKey(), "plan")
	defer unlock()
	clk.Step(time.Minute)

	// The same directory spelled differently is the same guard.
	k := vpcKey()
	k.Path = "./modules/vpc/"
	got, err := g.TryLock(k, "apply")
	if err == nil {
		t.Fatal("second TryLock succeeded, want the working dir to be locked")
	}
	if got == nil {
		t.Fatal("TryLock returned a nil unlock on failure; callers defer it unconditionally")
	}
	got() // a no-op that must not release plan's guard
	if !errors.Is(err, ErrLocked) {
		t.Errorf("errors.Is(err, ErrLocked) = false for %v", err)
	}
	wantMsg := "the acme/infra#12/default/modules/vpc workspace is currently locked by another command that is running for this pull request (held by plan since 2026-03-14T09:26:53Z) - wait until the previous command is complete and try again"
	if err.Error() != wantMsg {
		t.Errorf("message:\n got %q\nwant %q", err.Error(), wantMsg)
	}
	if !strings.Contains(err.Error(), "workspace is currently locked by another command") {
		t.Errorf("message %q lacks the Atlantis wording", err)
	}
	var le *LockedError
	if !errors.As(err, &le) {
		t.Fatalf("error %T is not a *LockedError", err)
	}
	if diff := cmp.Diff(&LockedError{Key: vpcKey(), Holder: "plan", Since: t0}, le); diff != "" {
		t.Errorf("LockedError mismatch (-want +got):\n%s", diff)
	}
}

func TestTryLockIndependentKeys(t *testing.T) {
	cases := map[string]Key{
		"other path":               {Repo: "acme/infra", Pull: 12, Workspace: "default", Path: "modules/rds"},
		"parent path":              {Repo: "acme/infra", Pull: 12, Workspace: "default", Path: "modules"},
		"other workspace":          {Repo: "acme/infra", Pull: 12, Workspace: "staging", Path: "modules/vpc"},
		"other pull":               {Repo: "acme/infra", Pull: 13, Workspace: "default", Path: "modules/vpc"},
		"other repo":               {Repo: "acme/app", Pull: 12, Workspace: "default", Path: "modules/vpc"},
		"repo sharing the pull no": {Repo: "acme/infra2", Pull: 12, Workspace: "default", Path: "modules/vpc"},
	}
	for name, k := range cases {
		t.Run(name, func(t *testing.T) {
			g := NewGuards()
			defer mustTryLock(t, g, vpcKey(), "plan")()
			mustTryLock(t, g, k, "plan")()
		})
	}
}

func TestTryLockRejectsBadInput(t *testing.T) {
	cases := map[string]struct {
		key    Key
		holder string
	}{
		"no holder":    {key: vpcKey()},
		"no path":      {key: Key{Repo: "acme/infra", Pull: 12, Workspace: "default"}, holder: "plan"},
		"no workspace": {key: Key{Repo: "acme/infra", Pull: 12, Path: "."}, holder: "plan"},
		"escaping":     {key: Key{Repo: "acme/infra", Pull: 12, Workspace: "default", Path: "../x"}, holder: "plan"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			g := NewGuards()
			unlock, err := g.TryLock(tc.key, tc.holder)
			if err == nil {
				t.Fatal("TryLock succeeded")
			}
			unlock()
			if _, err := g.Lock(context.Background(), tc.key, tc.holder); err == nil {
				t.Fatal("Lock succeeded")
			}
			if held := g.Held(); len(held) != 0 {
				t.Errorf("Held() = %v, want none", held)
			}
		})
	}
}

func TestUnlockIsIdempotent(t *testing.T) {
	g := NewGuards()
	unlockA := mustTryLock(t, g, vpcKey(), "a")
	unlockA()
	unlockA()
	unlockB := mustTryLock(t, g, vpcKey(), "b")
	defer unlockB()
	// A stale unlock must not free the guard of whoever holds the key now.
	unlockA()
	if _, err := g.TryLock(vpcKey(), "c"); !errors.Is(err, ErrLocked) {
		t.Fatalf("TryLock after a stale unlock: err = %v, want ErrLocked", err)
	}
	if diff := cmp.Diff([]string{"b"}, holders(g.Held())); diff != "" {
		t.Errorf("holders mismatch (-want +got):\n%s", diff)
	}
}

func holders(held []Held) []string {
	out := []string{}
	for _, h := range held {
		out = append(out, h.Holder)
	}
	return out
}

// TestConcurrentMutualExclusion hammers eight keys from many goroutines, mixing TryLock, Lock,
// double unlocks and pull deletions, and checks that no key ever has two holders and that no
// deletion ever runs while a guard of its pull is held.
func TestConcurrentMutualExclusion(t *testing.T) {
	const goroutines, iterations = 64, 500
	var keys []Key
	for _, pull := range []int64{1, 2} {
		for _, ws := range []string{"default", "staging"} {
			for _, p := range []string{".", "modules/vpc"} {
				keys = append(keys, Key{Repo: "acme/infra", Pull: pull, Workspace: ws, Path: p})
			}
		}
	}
	g := NewGuards()
	inside := make([]atomic.Int32, len(keys))
	var acquired, refused, deletions atomic.Int64

	stop := make(chan struct{})
	var deleters sync.WaitGroup
	for d := range 4 {
		deleters.Go(func() {
			pull := int64(d%2 + 1)
			for {
				// Paced: a deleter spinning on the mutex starves the workers, and real
				// clean-ups are rare next to commands.
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Microsecond):
				}
				_ = g.DeletePull("acme/infra", pull, func() error {
					deletions.Add(1)
					for i, k := range keys {
						if k.Pull == pull && inside[i].Load() != 0 {
							t.Errorf("deletion of pull %d runs while %s is held", pull, k)
						}
					}
					return nil
				})
			}
		})
	}

	var workers sync.WaitGroup
	for w := range goroutines {
		workers.Go(func() {
			for i := range iterations {
				ki := (w*7 + i) % len(keys)
				holder := fmt.Sprintf("runner-%d", w)
				var unlock func()
				var err error
				if w%2 == 0 {
					unlock, err = g.TryLock(keys[ki], holder)
				} else {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					unlock, err = g.Lock(ctx, keys[ki], holder)
					cancel()
				}
				if err != nil {
					if !errors.Is(err, ErrLocked) {
						t.Errorf("%s: unexpected error %v", holder, err)
					}
					refused.Add(1)
					continue
				}
				if n := inside[ki].Add(1); n != 1 {
					t.Errorf("%s has %d holders", keys[ki], n)
				}
				acquired.Add(1)
				if i%3 == 0 {
					runtime.Gosched()
				}
				inside[ki].Add(-1)
				unlock()
				if i%5 == 0 {
					unlock()
				}
			}
		})
	}
	workers.Wait()
	close(stop)
	deleters.Wait()

	if acquired.Load() == 0 || deletions.Load() == 0 {
		t.Fatalf("acquired %d guards and ran %d deletions; the test exercised nothing", acquired.Load(), deletions.Load())
	}
	t.Logf("acquired %d, refused %d, deletions %d", acquired.Load(), refused.Load(), deletions.Load())
	if held := g.Held(); len(held) != 0 {
		t.Errorf("Held() after all unlocks = %v", held)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.pulls) != 0 {
		t.Errorf("%d pull states left behind after all unlocks", len(g.pulls))
	}
}

func TestLockHonoursContext(t *testing.T) {
	cases := map[string]struct {
		ctx     func() (context.Context, context.CancelFunc)
		cancel  bool
		wantErr error
	}{
		"cancelled while waiting": {
			ctx:     func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) },
			cancel:  true,
			wantErr: context.Canceled,
		},
		"deadline while waiting": {
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 20*time.Millisecond)
			},
			wantErr: context.DeadlineExceeded,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			g := NewGuards()
			unlockPlan := mustTryLock(t, g, vpcKey(), "plan")
			ctx, cancel := tc.ctx()
			defer cancel()
			errc := make(chan error, 1)
			go func() {
				unlock, err := g.Lock(ctx, vpcKey(), "apply")
				unlock()
				errc <- err
			}()
			waitFor(t, "the waiter to queue", func() bool { return g.waiting(vpcKey()) == 1 })
			if tc.cancel {
				cancel()
			}
			err := <-errc
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("Lock error = %v, want %v", err, tc.wantErr)
			}
			if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "held by plan") {
				t.Errorf("Lock error %q should say who held the working dir", err)
			}
			if n := g.waiting(vpcKey()); n != 0 {
				t.Errorf("%d waiters left after cancellation", n)
			}
			unlockPlan()
			// Had the abandoned waiter been handed the guard, this would fail.
			mustTryLock(t, g, vpcKey(), "next")()
		})
	}
}

func TestLockWithDoneContextFails(t *testing.T) {
	g := NewGuards()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := g.Lock(ctx, vpcKey(), "plan"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock with a done context: err = %v, want context.Canceled", err)
	}
	if held := g.Held(); len(held) != 0 {
		t.Errorf("Held() = %v, want none", held)
	}
}

func TestLockWaitersAreServedInArrivalOrder(t *testing.T) {
	const waiters = 10
	g := NewGuards()
	unlockFirst := mustTryLock(t, g, vpcKey(), "first")
	order := make(chan int, waiters)
	var wg sync.WaitGroup
	for i := range waiters {
		wg.Go(func() {
			unlock, err := g.Lock(context.Background(), vpcKey(), fmt.Sprint(i))
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			order <- i
			unlock()
		})
		waitFor(t, fmt.Sprintf("waiter %d to queue", i), func() bool { return g.waiting(vpcKey()) == i+1 })
	}
	unlockFirst()
	wg.Wait()
	close(order)
	var got []int
	for i := range order {
		got = append(got, i)
	}
	want := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("grant order mismatch (-want +got):\n%s", diff)
	}
}

func TestUnlockHandsOffWithoutBarging(t *testing.T) {
	g := NewGuards()
	unlockA := mustTryLock(t, g, vpcKey(), "a")
	got := make(chan func(), 1)
	go func() {
		unlock, err := g.Lock(context.Background(), vpcKey(), "waiter")
		if err != nil {
			t.Errorf("Lock: %v", err)
		}
		got <- unlock
	}()
	waitFor(t, "the waiter to queue", func() bool { return g.waiting(vpcKey()) == 1 })
	unlockA()
	_, err := g.TryLock(vpcKey(), "barger")
	var le *LockedError
	if !errors.As(err, &le) || le.Holder != "waiter" {
		t.Fatalf("TryLock right after release: err = %v, want locked by the waiter", err)
	}
	(<-got)()
}

func TestHeldIsSortedWithClockTimes(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	g := NewGuards(WithClock(clk))
	k := func(pull int64, ws, p string) Key { return Key{Repo: "acme/infra", Pull: pull, Workspace: ws, Path: p} }
	mustTryLock(t, g, k(13, "default", "."), "apply")
	clk.Step(time.Second)
	mustTryLock(t, g, k(12, "staging", "."), "plan")
	clk.Step(time.Second)
	mustTryLock(t, g, k(12, "default", "modules/vpc"), "plan")
	clk.Step(time.Second)
	unlock := mustTryLock(t, g, k(12, "default", "modules/rds"), "plan")
	unlock()

	want := []Held{
		{Key: k(12, "default", "modules/vpc"), Holder: "plan", Since: t0.Add(2 * time.Second)},
		{Key: k(12, "staging", "."), Holder: "plan", Since: t0.Add(time.Second)},
		{Key: k(13, "default", "."), Holder: "apply", Since: t0},
	}
	if diff := cmp.Diff(want, g.Held()); diff != "" {
		t.Errorf("Held() mismatch (-want +got):\n%s", diff)
	}
}

func TestRemoveAllIsRefusedWhileInUse(t *testing.T) {
	k := func(pull int64, ws, p string) Key { return Key{Repo: "acme/infra", Pull: pull, Workspace: ws, Path: p} }
	cases := map[string]struct {
		held        Key
		scope       Key
		wantHolders []Held // nil: the deletion goes ahead
	}{
		"guard in the pull": {
			held: k(12, "default", "."), scope: Key{Repo: "acme/infra", Pull: 12},
			wantHolders: []Held{{Key: k(12, "default", "."), Holder: "plan", Since: t0}},
		},
		"guard below the directory": {
			held: k(12, "default", "modules/vpc"), scope: k(12, "default", "modules"),
			wantHolders: []Held{{Key: k(12, "default", "modules/vpc"), Holder: "plan", Since: t0}},
		},
		"guard above the directory": {
			held: k(12, "default", "."), scope: k(12, "default", "modules/vpc"),
			wantHolders: []Held{{Key: k(12, "default", "."), Holder: "plan", Since: t0}},
		},
		"guard in any workspace": {
			held: k(12, "staging", "modules"), scope: k(12, "", "modules"),
			wantHolders: []Held{{Key: k(12, "staging", "modules"), Holder: "plan", Since: t0}},
		},
		"guard in another pull":      {held: k(13, "default", "."), scope: Key{Repo: "acme/infra", Pull: 12}},
		"guard in another workspace": {held: k(12, "staging", "."), scope: k(12, "default", "")},
		"guard in a sibling":         {held: k(12, "default", "modules/vpc2"), scope: k(12, "default", "modules/vpc")},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			g := NewGuards(WithClock(testingclock.NewFakeClock(t0)))
			dir := filepath.Join(t.TempDir(), "checkout")
			if err := os.MkdirAll(filepath.Join(dir, "modules"), 0o755); err != nil {
				t.Fatal(err)
			}
			unlock := mustTryLock(t, g, tc.held, "plan")

			wantInUse := tc.wantHolders != nil
			if got := g.InUse(tc.scope); got != wantInUse {
				t.Errorf("InUse(%s) = %v, want %v", tc.scope, got, wantInUse)
			}
			err := g.RemoveAll(tc.scope, dir)
			_, statErr := os.Stat(dir)
			if !wantInUse {
				if err != nil || !os.IsNotExist(statErr) {
					t.Fatalf("RemoveAll = %v, dir stat = %v; want the dir deleted", err, statErr)
				}
				return
			}
			if !errors.Is(err, ErrInUse) {
				t.Fatalf("RemoveAll = %v, want ErrInUse", err)
			}
			if statErr != nil {
				t.Fatalf("the dir was touched although in use: %v", statErr)
			}
			var iu *InUseError
			if !errors.As(err, &iu) {
				t.Fatalf("error %T is not an *InUseError", err)
			}
			if diff := cmp.Diff(tc.wantHolders, iu.Holders); diff != "" {
				t.Errorf("holders mismatch (-want +got):\n%s", diff)
			}

			unlock()
			if g.InUse(tc.scope) {
				t.Errorf("InUse(%s) after unlock = true", tc.scope)
			}
			if err := g.RemoveAll(tc.scope, dir); err != nil {
				t.Fatalf("RemoveAll after unlock: %v", err)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("dir still there after RemoveAll: %v", err)
			}
		})
	}
}

func TestRemoveAllRefusesRoot(t *testing.T) {
	g := NewGuards()
	for _, dir := range []string{"", "/", "//"} {
		if err := g.RemoveAll(Key{Repo: "acme/infra", Pull: 12}, dir); err == nil {
			t.Errorf("RemoveAll(%q) succeeded", dir)
		}
	}
}

func TestDeletePullHoldsOffNewGuards(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	g := NewGuards(WithClock(clk))
	key13 := vpcKey()
	key13.Pull = 13

	started, finish := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- g.DeletePull("acme/infra", 12, func() error {
			close(started)
			<-finish
			return nil
		})
	}()
	<-started
	clk.Step(time.Second)

	_, err := g.TryLock(vpcKey(), "plan")
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("TryLock during the deletion: err = %v, want ErrLocked", err)
	}
	var le *LockedError
	if !errors.As(err, &le) || !le.Deleting {
		t.Fatalf("TryLock during the deletion: err = %#v, want a LockedError with Deleting", err)
	}
	wantMsg := "the acme/infra#12/default/modules/vpc workspace is being deleted (deletion of acme/infra#12 since 2026-03-14T09:26:53Z) - wait until the deletion is complete and try again"
	if err.Error() != wantMsg {
		t.Errorf("message:\n got %q\nwant %q", err, wantMsg)
	}

	// Another pull request is not affected.
	mustTryLock(t, g, key13, "plan")()

	// Nor can a second deletion of the same pull start.
	err = g.DeletePull("acme/infra", 12, func() error {
		t.Error("second deletion ran concurrently with the first")
		return nil
	})
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "in use by deletion on acme/infra#12") {
		t.Errorf("second DeletePull = %v, want ErrInUse naming the running deletion", err)
	}

	// A waiting Lock gets the guard once the deletion is over.
	got := make(chan error, 1)
	go func() {
		unlock, err := g.Lock(context.Background(), vpcKey(), "apply")
		if err == nil {
			if diff := cmp.Diff([]string{"apply"}, holders(g.Held())); diff != "" {
				err = fmt.Errorf("holders mismatch (-want +got):\n%s", diff)
			}
			// Unlock before reporting, so the TryLock below cannot race it.
			unlock()
		}
		got <- err
	}()
	waitFor(t, "Lock to wait for the deletion", func() bool { return g.waiting(vpcKey()) == 1 })
	close(finish)
	if err := <-done; err != nil {
		t.Fatalf("DeletePull: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("Lock after the deletion: %v", err)
	}
	mustTryLock(t, g, vpcKey(), "plan")()
}

func TestRemoveReleasesTheScopeWhenDeletionFails(t *testing.T) {
	cases := map[string]func() error{
		"error": func() error { return errors.New("disk on fire") },
		"panic": func() error { panic("disk on fire") },
	}
	for name, del := range cases {
		t.Run(name, func(t *testing.T) {
			g := NewGuards()
			err := func() (err error) {
				defer func() {
					if r := recover(); r != nil {
						err = fmt.Errorf("panic: %v", r)
					}
				}()
				return g.DeletePull("acme/infra", 12, del)
			}()
			if err == nil || !strings.Contains(err.Error(), "disk on fire") {
				t.Fatalf("DeletePull = %v, want the deletion's failure", err)
			}
			mustTryLock(t, g, vpcKey(), "plan")()
		})
	}
}

func TestLostLeaseRefusesNewGuards(t *testing.T) {
	g := NewGuards()
	other := vpcKey()
	other.Path = "modules/rds"
	unlockPlan := mustTryLock(t, g, vpcKey(), "plan")

	waitErr := make(chan error, 1)
	go func() {
		_, err := g.Lock(context.Background(), vpcKey(), "apply")
		waitErr <- err
	}()
	waitFor(t, "the waiter to queue", func() bool { return g.waiting(vpcKey()) == 1 })

	g.setLost(fmt.Errorf("%w: renewal failed", ErrLeaseLost))
	if err := <-waitErr; !errors.Is(err, ErrLeaseLost) {
		t.Errorf("waiting Lock: err = %v, want ErrLeaseLost", err)
	}
	if _, err := g.TryLock(other, "plan"); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("TryLock while lost: err = %v, want ErrLeaseLost", err)
	}
	if _, err := g.Lock(context.Background(), other, "plan"); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("Lock while lost: err = %v, want ErrLeaseLost", err)
	}
	// The running command keeps its guard; deletion stays refused under it.
	if diff := cmp.Diff([]string{"plan"}, holders(g.Held())); diff != "" {
		t.Errorf("holders mismatch (-want +got):\n%s", diff)
	}
	if err := g.DeletePull("acme/infra", 12, func() error { return nil }); !errors.Is(err, ErrInUse) {
		t.Errorf("DeletePull while lost and held: err = %v, want ErrInUse", err)
	}
	unlockPlan()

	g.clearLost()
	mustTryLock(t, g, vpcKey(), "plan")()
}
