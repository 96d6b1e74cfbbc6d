package run

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/plugin/cmd/util"
	"github.com/turnstile-dev/turnstile/internal/plugin/keeper"
	"github.com/turnstile-dev/turnstile/pkg/client"
	"github.com/turnstile-dev/turnstile/pkg/workdir"
)

// runner is one `run`: its holder Lease, its request and its keeper.
type runner struct {
	stderr io.Writer
	c      ctrlclient.WithWatch
	ns     string
	o      runOptions
	sigs   chan os.Signal

	hb  *workdir.Heartbeat
	sup *keeper.Supervisor

	mu        sync.Mutex
	expiresAt time.Time // the grant's expiry as last seen; zero if unknown
}

func (rn *runner) say(format string, a ...any) { fmt.Fprintf(rn.stderr, format+"\n", a...) }

// run asks, waits, runs and releases; it returns the exit code.
func (rn *runner) run(ctx context.Context, r client.Request, askTimeout time.Duration, args []string) int {
	leaseName := "turnstile-run-" + randomHex(4)
	lost, stopHB, stopLease, err := rn.startHeartbeat(ctx, leaseName)
	if err != nil {
		rn.say("error: %v", err)
		return exitRunFailed
	}

	// Asking is bounded: an unreachable API server, a missing namespace or a refusal is said
	// within askTimeout, not waited out.
	askCtx, cancelAsk := context.WithTimeout(ctx, askTimeout)
	defer cancelAsk()
	if code, ok := rn.leaseWritten(askCtx, leaseName, askTimeout, stopHB, stopLease); !ok {
		return code
	}
	r.Holder.Lease = leaseName
	tc := client.New(rn.c, rn.ns)
	lr, err := tc.Create(askCtx, r)
	if err != nil {
		stopLease()
		rn.say("error: %v", err)
		return exitRunFailed
	}
	cancelAsk()

	lock, code := rn.awaitGrant(ctx, tc, lr, r, askTimeout, stopLease)
	if lock == nil {
		return code
	}
	rn.setExpiry(lock.ExpiresAt)
	ttl := r.TTL
	if ttl == 0 {
		ttl = lock.ExpiresAt.Sub(lock.GrantedAt).Round(time.Second)
	}
	if why := keeper.FitTTL("the grant's ttl", ttl, rn.o.grace); why != "" {
		rn.release(lock)
		stopLease()
		rn.say("error: %s (set --ttl)", why)
		return exitRunFailed
	}
	rn.say("lockrequest/%s granted (fencing token %d); running %s", lock.Name, lock.FencingToken, shortCommand(args))

	code, keep := rn.runTree(ctx, lock, ttl, leaseName, lost, args)
	if keep {
		rn.keep(ctx, lock, code, leaseName, r.Holder.URL)
	} else {
		rn.release(lock)
	}
	stopLease()
	return code
}

// startHeartbeat starts the holder Lease: renewed by this process, deleted when it exits
// cleanly. lost says when it is lost; stopHB stops renewing it, stopLease also waits until it
// is given up.
func (rn *runner) startHeartbeat(ctx context.Context, leaseName string) (lost <-chan error, stopHB, stopLease func(), err error) {
	host, _ := os.Hostname()
	lostCh := make(chan error, 1)
	hb, err := workdir.NewHeartbeat(rn.c, workdir.NewGuards(),
		workdir.WithNamespace(rn.ns), workdir.WithLeaseName(leaseName),
		workdir.WithIdentity(fmt.Sprintf("%s/%d", host, os.Getpid())),
		workdir.WithLeaseDuration(rn.o.leaseDuration),
		workdir.WithOnLost(func(err error) {
			select {
			case lostCh <- err:
			default:
			}
		}))
	if err != nil {
		return nil, nil, nil, err
	}
	rn.hb = hb
	hbCtx, cancel := context.WithCancel(ctx)
	hbDone := make(chan error, 1)
	go func() { hbDone <- hb.Run(hbCtx) }()
	stopLease = func() {
		cancel()
		if err := <-hbDone; err != nil {
			rn.say("warning: %v", err)
		}
	}
	return lostCh, cancel, stopLease, nil
}

// leaseWritten waits until the holder Lease is written. If it cannot be (refused, no answer
// within askTimeout, or a signal), it says why and returns the exit code and false.
func (rn *runner) leaseWritten(askCtx context.Context, leaseName string, askTimeout time.Duration, stopHB, stopLease func()) (int, bool) {
	for !rn.hb.Healthy() {
		if _, lerr := rn.hb.LastRenew(); refused(lerr) {
			stopHB() // never written: nothing to give up, no need to wait for it
			rn.say("error: could not write the holder Lease %s/%s: %v", rn.ns, leaseName, lerr)
			return exitRunFailed, false
		}
		select {
		case <-askCtx.Done():
			_, lerr := rn.hb.LastRenew()
			if lerr == nil {
				lerr = errors.New("no answer from the API server")
			}
			stopHB()
			rn.say("error: could not write the holder Lease %s/%s within %s (--request-timeout): %v", rn.ns, leaseName, askTimeout, lerr)
			return exitRunFailed, false
		case s := <-rn.sigs:
			stopLease()
			return 128 + int(s.(syscall.Signal)), false
		case <-time.After(20 * time.Millisecond):
		}
	}
	return 0, true
}

// awaitGrant waits as long as the server lets it (spec.waitTimeout), or until a signal. The
// client's own bound only matters if the server cannot answer. Without a grant it stops the
// Lease, says why and returns the exit code.
func (rn *runner) awaitGrant(ctx context.Context, tc *client.Client, lr *locksv1.LockRequest, r client.Request, askTimeout time.Duration, stopLease func()) (*client.Lock, int) {
	waitCtx, cancelWait := context.WithCancel(ctx)
	if r.WaitTimeout != nil {
		waitCtx, cancelWait = context.WithTimeout(ctx, *r.WaitTimeout+askTimeout)
	}
	var gotSig syscall.Signal
	waited := make(chan struct{})
	go func() {
		select {
		case s := <-rn.sigs:
			gotSig = s.(syscall.Signal)
			cancelWait()
		case <-waited:
		}
	}()
	lock, err := util.AwaitReporting(waitCtx, rn.stderr, tc, lr)
	close(waited)
	cancelWait()
	if err == nil {
		return lock, 0
	}
	stopLease()
	switch {
	case gotSig != 0:
		rn.say("lockrequest/%s withdrawn: %v", lr.Name, gotSig)
		return nil, 128 + int(gotSig)
	case errors.Is(err, client.ErrInvalid):
		rn.say("error: %v", err)
		return nil, exitRunFailed
	case errors.Is(err, client.ErrBusy), errors.Is(err, client.ErrTimeout), errors.Is(err, client.ErrCommandLocked),
		errors.Is(err, client.ErrDeadlock), errors.Is(err, client.ErrQueueFull), errors.Is(err, client.ErrReleased),
		errors.Is(err, context.DeadlineExceeded):
		rn.say("not granted: %v", err)
		if self := (locksv1.Holder{Owner: lr.Spec.Holder.Owner, Pull: lr.Spec.Holder.Pull}).Describe(); errors.Is(err, client.ErrBusy) &&
			r.Holder.Session != "" && strings.Contains(err.Error(), "locked by "+self) {
			rn.say("hint: each run is a holder of its own (session %s); to share a lock %s already holds, give --share-with-same-owner", r.Holder.Session, self)
		}
		return nil, rn.o.conflictCode
	}
	rn.say("error: %v", err)
	return nil, exitRunFailed
}

func (rn *runner) setExpiry(t time.Time) {
	rn.mu.Lock()
	rn.expiresAt = t
	rn.mu.Unlock()
}

// deadline is when the keeper must begin stopping the tree (keeper.StopAt).
func (rn *runner) deadline() time.Time {
	last, _ := rn.hb.LastRenew()
	rn.mu.Lock()
	exp := rn.expiresAt
	rn.mu.Unlock()
	return keeper.StopAt(last, exp, rn.o.leaseDuration, rn.o.grace)
}

// deadlineCause says why the keeper stopped the tree at the deadline.
func (rn *runner) deadlineCause() error {
	last, lerr := rn.hb.LastRenew()
	rn.mu.Lock()
	exp := rn.expiresAt
	rn.mu.Unlock()
	if !exp.IsZero() && exp.Before(last.Add(rn.o.leaseDuration)) {
		return fmt.Errorf("the grant could not be renewed before it expires at %s: stopped the command so it is gone before the locks can pass on", exp.Format(time.RFC3339))
	}
	if lerr == nil {
		lerr = errors.New("no answer")
	}
	return fmt.Errorf("the holder Lease could not be renewed since %s (%w): stopped the command so it is gone before the locks can pass on", last.Format(time.RFC3339Nano), lerr)
}

// shortCommand is args for a message, cut to one short line.
func shortCommand(args []string) string {
	s := strings.Join(args, " ")
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " ..."
	}
	if len(s) > 100 {
		s = s[:100] + " ..."
	}
	return s
}

// renewTTL keeps the grant from expiring while the command runs: every quarter of the ttl it
// changes spec.ttl (a renewal is a change of the spec, so it alternates between ttl and ttl-1s),
// and the controller runs the new ttl from then.
func (rn *runner) renewTTL(ctx context.Context, lock *client.Lock, ttl time.Duration) {
	period := ttl / 4
	next := ttl - time.Second
	wait := period
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		rctx, cancel := context.WithTimeout(ctx, period)
		exp, err := lock.Renew(rctx, next)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && !exp.IsZero():
			rn.say("warning: renewal refused: %v", err) // the grant keeps its expiry
			rn.setExpiry(exp)
			wait = period
		case err != nil:
			wait = period / 2
		default:
			rn.setExpiry(exp)
			wait = period
			if next == ttl {
				next = ttl - time.Second
			} else {
				next = ttl
			}
		}
	}
}

// runTree runs the command's tree under the keeper until the whole tree is gone, and tells it
// what the locks say meanwhile: renewals keep the grant, and a lost grant or holder Lease stops
// the tree. It returns the exit code, and whether the locks are to be kept (--keep-on-failure
// and COMMAND failed).
func (rn *runner) runTree(ctx context.Context, lock *client.Lock, ttl time.Duration, leaseName string, lost <-chan error, args []string) (int, bool) {
	env := append(os.Environ(),
		fmt.Sprintf("TURNSTILE_FENCING_TOKEN=%d", lock.FencingToken),
		fmt.Sprintf("TURNSTILE_LOCKREQUEST=%s/%s", lock.Namespace, lock.Name),
		"TURNSTILE_HOLDER_LEASE="+rn.ns+"/"+leaseName)
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	go rn.renewTTL(runCtx, lock, ttl)
	ended := make(chan error, 2)
	go func() {
		if err := lock.WaitLost(runCtx); runCtx.Err() == nil {
			ended <- fmt.Errorf("lock lost while the command ran: %w", err)
		}
	}()
	go func() {
		select {
		case err := <-lost:
			ended <- fmt.Errorf("holder lease lost while the command ran: %w", err)
		case <-runCtx.Done():
		}
	}()
	out, err := rn.sup.Run(rn.o.grace, args, env, keeper.Watch{
		Signals: rn.sigs, Lost: ended, Deadline: rn.deadline, DeadlineCause: rn.deadlineCause, Say: rn.say,
	})
	if err != nil {
		rn.say("error: %v", err)
		return exitRunFailed, false
	}
	return result(out, rn.o.keepOnFailure)
}

// result is run's exit code for how the tree ended, and whether the locks are to be kept.
func result(o keeper.Outcome, keepOnFailure bool) (int, bool) {
	switch {
	case o.ExecCode != 0:
		return o.ExecCode, false
	case o.Lost != nil:
		return exitLost, false
	case o.Status < 0:
		return exitRunFailed, false
	}
	return o.Status, o.Status != 0 && keepOnFailure
}

// release gives the locks back, retrying until the API server acknowledges it: the next holder
// should not wait for the holder Lease to lapse because one write, or its answer, was lost to a
// partition. A release is idempotent. It gives up after --lease-duration: a run cut off from the
// API server that long cannot renew the Lease either, so the locks pass on by then anyway.
func (rn *runner) release(lock *client.Lock) {
	deadline := time.Now().Add(rn.o.leaseDuration)
	backoff := releaseBackoff
	for attempt := 0; ; attempt++ {
		rctx, cancel := context.WithTimeout(context.Background(), min(releaseCallTimeout, time.Until(deadline)))
		err := lock.Release(rctx)
		cancel()
		var ng *client.NotGrantedError
		if err == nil || errors.As(err, &ng) {
			if attempt > 0 {
				rn.say("released after %d attempts", attempt+1)
			}
			return
		}
		if time.Now().Add(backoff).After(deadline) {
			rn.say("warning: release: %v (the locks pass on when the holder Lease lapses)", err)
			return
		}
		if attempt == 0 {
			rn.say("warning: release: %v; retrying for up to %s", err, time.Until(deadline).Round(time.Second))
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, time.Second)
	}
}
