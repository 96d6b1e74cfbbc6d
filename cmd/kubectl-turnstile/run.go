package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/proctree"
	"github.com/turnstile-dev/turnstile/pkg/client"
	"github.com/turnstile-dev/turnstile/pkg/workdir"
)

// run's own exit codes (docs/run.md). Every other code is the command's: its exit status, or
// 128+N when signal N ended it.
const (
	// exitNotGranted: the locks were never granted (busy with --nonblock, --wait-timeout
	// elapsed, command frozen, deadlock victim, queue full). -E changes it, as flock's -E.
	exitNotGranted = 75
	// exitLost: the locks were lost while the command ran (renewals failed, expired,
	// force-unlocked); the command was stopped.
	exitLost = 76
	// exitRunFailed: run could not ask for the locks (API server unreachable within the
	// request timeout, namespace missing, refused by RBAC or admission, bad flags), as
	// timeout(1) and env(1) use 125 for their own failures.
	exitRunFailed = 125
	// exitCannotExecute and exitNotFound are the shell's codes for COMMAND itself.
	exitCannotExecute = 126
	exitNotFound      = 127
)

const (
	// stopMargin is how long before the server may consider the holder gone the command's last
	// process must have exited: it covers clock differences between this host and the manager
	// and the moments between the keeper's last reap and run's release.
	stopMargin = 3 * time.Second
	// releaseCallTimeout bounds one attempt to release; releaseBackoff is the first pause between
	// attempts, doubled up to a second.
	releaseCallTimeout = 5 * time.Second
	releaseBackoff     = 100 * time.Millisecond
	// defaultLeaseDuration is how long a crashed run keeps its locks: the Lease lapses, and the
	// next holder is granted, this long after the last renewal.
	defaultLeaseDuration = 40 * time.Second
	// defaultGrace is how long the command has between SIGTERM and SIGKILL. With the 40s lease
	// it leaves room for one failed renewal and its retry before the stop must begin (fits).
	defaultGrace = 15 * time.Second
	// defaultAskTimeout bounds asking for the locks (the holder Lease and the LockRequest)
	// when --request-timeout is not given.
	defaultAskTimeout = 15 * time.Second
)

// runOptions are run's flags beyond the request's.
type runOptions struct {
	leaseDuration  time.Duration
	grace          time.Duration
	nonblock       bool
	conflictCode   int
	keepOnFailure  bool
	keeper         bool
	session        string
	shareWithOwner bool
}

func newRunCmd(g *globals) *cobra.Command {
	var (
		f requestFlags
		o runOptions
	)
	cmd := &cobra.Command{
		Use:   "run --lock REPO:PATH[:WORKSPACE[:PROJECT]] ... -- COMMAND [ARGS...]",
		Short: "Run a command while holding locks (flock for Kubernetes)",
		Long: `Takes the locks, runs COMMAND with TURNSTILE_FENCING_TOKEN, TURNSTILE_LOCKREQUEST and
TURNSTILE_HOLDER_LEASE in its environment, and releases the locks when no process of COMMAND's
tree is left, exiting with COMMAND's status (128+N if signal N ended it).

The whole tree is under the lock: COMMAND runs in its own process group under a keeper process
that is a child subreaper, so processes that leave the group (setsid, double fork) are still
waited for. SIGTERM, SIGINT and SIGHUP are forwarded to every process of the tree, and what is
left after --grace gets SIGKILL; what COMMAND leaves running when it exits is stopped the same way.

Held while alive: run renews the holder Lease (--lease-duration: how soon the locks pass on if run
dies) and the grant's ttl (--ttl: how long a holder that stopped renewing keeps them), so a command
may run longer than its ttl. If renewals fail, the tree is stopped, grace included, before the
server may consider the holder gone, and run exits 76.

Exit codes: COMMAND's; 75 (-E) never granted; 76 lock lost while running; 125 run could not ask
for the locks within --request-timeout (default 15s) or was misused; 126/127 COMMAND cannot be
run / not found. See docs/run.md.`,
		Example: `  kubectl turnstile run -l acme/infra:modules/vpc --owner alice --pull 100 --command apply -- terraform apply -auto-approve
  kubectl turnstile run -l acme/infra:modules/vpc --nonblock -- make deploy     # flock -n
  kubectl turnstile run -l acme/infra:modules/vpc -w 10m -E 3 -- make deploy    # flock -w 600 -E 3`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError(cmd, errors.New("name the command to run after --, e.g. kubectl turnstile run -l acme/infra:vpc -- terraform apply"))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.keeper {
				return exitError{code: runKeeper(o.grace, args)}
			}
			return runCommand(cmd, g, &f, o, args)
		},
	}
	// run's request flags are acquire's, with -w for --wait-timeout as flock has it.
	req := pflag.NewFlagSet("request", pflag.ContinueOnError)
	f.bind(req)
	req.VisitAll(func(fl *pflag.Flag) {
		if fl.Name == "wait-timeout" {
			fl.Shorthand = "w"
			fl.Usage = "Give up after waiting this long for the locks, exiting with the -E code; 0s is --nonblock (default: wait until interrupted)."
		}
		if fl.Name == "ttl" {
			fl.Usage = "How long the locks stay granted after run stops renewing them (run renews while COMMAND lives; default: the operator's --default-ttl)."
		}
		cmd.Flags().AddFlag(fl)
	})
	fs := cmd.Flags()
	fs.DurationVar(&o.leaseDuration, "lease-duration", defaultLeaseDuration, "How soon the locks pass on if run dies: the holder Lease's duration (whole seconds, at least 3s).")
	fs.DurationVar(&o.grace, "grace", defaultGrace, "How long COMMAND's processes have between SIGTERM and SIGKILL when run is signalled or loses the locks; must fit in --lease-duration (grace + 3s <= lease-duration / 2).")
	fs.BoolVar(&o.nonblock, "nonblock", false, "Fail at once, with the -E code, if the locks are busy (flock's -n; -n is kubectl's --namespace).")
	fs.IntVarP(&o.conflictCode, "conflict-exit-code", "E", exitNotGranted, "Exit code when the locks are not granted (busy, wait timeout, frozen, deadlock victim).")
	fs.BoolVar(&o.keepOnFailure, "keep-on-failure", false, "If COMMAND fails, keep the locks (until released, or until --ttl runs out) and record why on the request, so the next run does not start on a broken state.")
	fs.StringVar(&o.session, "session", "", "Hold the locks as this session (spec.holder.session) instead of a fresh one: runs of one owner and pull that give the same --session share the locks; others wait for each other.")
	fs.BoolVar(&o.shareWithOwner, "share-with-same-owner", false, "Share the locks with every request of the same owner and pull that names no session (an earlier acquire, e.g. Atlantis's plan before apply), instead of waiting for them.")
	fs.BoolVar(&o.keeper, keeperFlag, false, "run's own keeper process (internal).")
	_ = fs.MarkHidden(keeperFlag)
	cmd.SetFlagErrorFunc(usageError)
	return cmd
}

// usageError prints err as every plugin error is printed and exits 125: run's own failure, not
// COMMAND's.
func usageError(cmd *cobra.Command, err error) error {
	fmt.Fprintln(cmd.ErrOrStderr(), "error:", err)
	return exitError{code: exitRunFailed}
}

// fitGrace says why grace cannot fit in a lease of d (""): the tree must be stopped, grace
// included, stopMargin before the Lease can lapse, and that point must leave room for one failed
// renewal and its retry (a third of the lease, then a sixth).
func fitGrace(what string, d, grace time.Duration) string {
	return fits(what, d, grace, 0)
}

// ttlSlack is what a grant's ttl loses against a lease: the controller counts a renewal from
// the second it sees it in (status.renewedAt is whole seconds), and run alternates the ttl with
// one a second shorter, as a renewal is a change of spec.ttl.
const ttlSlack = 2 * time.Second

// fitTTL is fitGrace for the grant's ttl, renewed every quarter of it.
func fitTTL(what string, ttl, grace time.Duration) string {
	return fits(what, ttl, grace, ttlSlack)
}

func fits(what string, d, grace, slack time.Duration) string {
	// guard:run-grace-unchecked
	if grace+stopMargin+slack <= d/2 {
		return ""
	}
	return fmt.Sprintf("--grace %s does not fit in %s %s: the command must be stopped, grace included, %s before the locks can pass on, with room for a failed renewal and its retry; use %s of at least %s, or --grace of at most %s",
		grace, what, d, stopMargin, what, 2*(grace+stopMargin+slack), max(0, d/2-stopMargin-slack))
}

// runCommand is `run` itself; the error it returns is an exitError.
func runCommand(cmd *cobra.Command, g *globals, f *requestFlags, o runOptions, args []string) error {
	stderr := cmd.ErrOrStderr()
	fail := func(code int, format string, a ...any) error {
		fmt.Fprintf(stderr, "error: "+format+"\n", a...)
		return exitError{code: code}
	}
	if why := fitGrace("--lease-duration", o.leaseDuration, o.grace); why != "" {
		return fail(exitRunFailed, "%s", why)
	}
	if f.ttl > 0 {
		if why := fitTTL("--ttl", f.ttl, o.grace); why != "" {
			return fail(exitRunFailed, "%s", why)
		}
	}
	if o.nonblock {
		if cmd.Flags().Changed("wait-timeout") && f.waitTimeout != 0 {
			return fail(exitRunFailed, "--nonblock is --wait-timeout 0s; give one of them")
		}
		f.waitTimeout = 0
		_ = cmd.Flags().Set("wait-timeout", "0s")
	}
	// run is a subreaper too: if its keeper is killed, the tree is re-parented to run, which
	// then stops it before releasing (runTree). Outside Linux this fails, before anything is asked.
	if err := proctree.BecomeSubreaper(); err != nil {
		return fail(exitRunFailed, "%v", err)
	}
	// A command that cannot run is known before asking for anything.
	if _, err := exec.LookPath(args[0]); err != nil {
		return fail(lookPathCode(err), "%v", err)
	}
	r, c, ns, err := f.resolve(cmd, g)
	if err != nil {
		return fail(exitRunFailed, "%v", err)
	}
	if r.Holder.Session, err = holderSession(o); err != nil {
		return fail(exitRunFailed, "%v", err)
	}
	askTimeout := defaultAskTimeout
	if s := ptrString(g.flags.Timeout); s != "" && s != "0" {
		d, err := time.ParseDuration(s)
		if err != nil {
			if n, nerr := strconv.Atoi(s); nerr == nil {
				d, err = time.Duration(n)*time.Second, nil
			}
		}
		if err != nil || d <= 0 {
			return fail(exitRunFailed, "--request-timeout %q: want a duration such as 10s", s)
		}
		askTimeout = d
	}

	// Signals from here on are run's to handle: while waiting they withdraw the request, while
	// the command runs they are forwarded to its tree.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	base := context.WithoutCancel(cmd.Context())

	rn := &runner{stderr: stderr, c: c, ns: ns, o: o, sigs: sigs}
	tstp := make(chan os.Signal, 1)
	signal.Notify(tstp, syscall.SIGTSTP)
	defer signal.Stop(tstp)
	go rn.jobControl(tstp)
	return exitError{code: rn.run(base, r, askTimeout, args)}
}

// jobControl is Ctrl-Z (SIGTSTP from the terminal): run suspends the command's tree through its
// keeper, as the terminal would suspend a foreground job, then stops itself, so the shell gets
// its prompt back; fg or bg continues run, which resumes the tree. The keeper, in a session of
// its own, is not stopped: it still stops the tree at the deadline run gave it, so a job
// suspended longer than the lease allows loses its locks without outliving them (docs/run.md,
// "Job control").
func (rn *runner) jobControl(tstp <-chan os.Signal) {
	for range tstp {
		k := rn.currentKeeper()
		if k != nil {
			k.send("suspend")
		}
		_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		// Continued (fg, bg or a SIGCONT).
		if k != nil {
			k.send("resume")
		}
	}
}

func (rn *runner) currentKeeper() *keeper {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	return rn.k
}

func (rn *runner) setKeeper(k *keeper) {
	rn.mu.Lock()
	rn.k = k
	rn.mu.Unlock()
}

// keeperStopped continues the keeper if something stopped it (a SIGSTOP by pid): stopped, it
// could not stop the tree at the deadline should run stop too, or its renewals fail.
func (rn *runner) keeperStopped(k *keeper) {
	p, err := proctree.Read(k.cmd.Process.Pid)
	// guard:run-keeper-continued
	if err == nil && p.State == 'T' {
		rn.say("warning: the keeper (pid %d) was stopped; continuing it: it stops the command if the locks cannot be renewed", p.PID)
		_ = syscall.Kill(p.PID, syscall.SIGCONT)
	}
}

// holderSession is the run's spec.holder.session. One run, one holder: a fresh session unless
// sharing is asked for by name (--session NAME, or none with --share-with-same-owner).
func holderSession(o runOptions) (string, error) {
	switch {
	case o.shareWithOwner && o.session != "":
		return "", errors.New("--session and --share-with-same-owner: give one of them")
	case o.session != "":
		return o.session, nil
	case o.shareWithOwner:
		return "", nil
	}
	// guard:run-shared-session
	return "run-" + randomHex(6), nil
}

// refused is an answer that asking again will not change: a missing namespace, a refusal by
// RBAC or admission, bad credentials.
func refused(err error) bool {
	return err != nil && (apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) ||
		apierrors.IsInvalid(err) || apierrors.IsBadRequest(err))
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func ptrString(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// runner is one `run`: its holder Lease, its request and its keeper.
type runner struct {
	stderr io.Writer
	c      ctrlclient.WithWatch
	ns     string
	o      runOptions
	sigs   chan os.Signal

	hb *workdir.Heartbeat

	mu        sync.Mutex
	expiresAt time.Time // the grant's expiry as last seen; zero if unknown
	k         *keeper   // the keeper while the command runs
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
	if why := fitTTL("the grant's ttl", ttl, rn.o.grace); why != "" {
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
	lock, err := awaitReporting(waitCtx, rn.stderr, tc, lr)
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

// awaitReporting waits for the grant, saying on stderr why it waits (once per change).
func awaitReporting(ctx context.Context, w io.Writer, tc *client.Client, lr *locksv1.LockRequest) (*client.Lock, error) {
	last := ""
	return tc.Await(ctx, lr, client.OnChange(func(lr *locksv1.LockRequest) {
		if msg := waitingMessage(lr); msg != "" && msg != last {
			last = msg
			fmt.Fprintf(w, "lockrequest/%s waiting: %s\n", lr.Name, msg)
		}
	}))
}

func (rn *runner) setExpiry(t time.Time) {
	rn.mu.Lock()
	rn.expiresAt = t
	rn.mu.Unlock()
}

// deadline is when the keeper must begin stopping the tree (stopAt).
func (rn *runner) deadline() time.Time {
	last, _ := rn.hb.LastRenew()
	rn.mu.Lock()
	exp := rn.expiresAt
	rn.mu.Unlock()
	return stopAt(last, exp, rn.o.leaseDuration, rn.o.grace)
}

// stopAt is when the tree must begin to stop so that its last process has exited, grace
// included, stopMargin before the server may consider this holder gone: its Lease lapsing
// (last renewal + lease duration) or its grant expiring (expiresAt; zero when unknown).
func stopAt(lastRenew, expiresAt time.Time, lease, grace time.Duration) time.Time {
	d := lastRenew.Add(lease - stopMargin)
	// guard:run-deadline-ignores-expiry
	if exp := expiresAt.Add(-stopMargin); !expiresAt.IsZero() && exp.Before(d) {
		d = exp
	}
	return d.Add(-grace)
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

// runTree starts the keeper and follows it until the whole tree is gone. It returns the exit
// code, and whether the locks are to be kept (--keep-on-failure and COMMAND failed).
func (rn *runner) runTree(ctx context.Context, lock *client.Lock, ttl time.Duration, leaseName string, lost <-chan error, args []string) (int, bool) {
	env := append(os.Environ(),
		fmt.Sprintf("TURNSTILE_FENCING_TOKEN=%d", lock.FencingToken),
		fmt.Sprintf("TURNSTILE_LOCKREQUEST=%s/%s", lock.Namespace, lock.Name),
		"TURNSTILE_HOLDER_LEASE="+rn.ns+"/"+leaseName)
	k, err := startKeeper(rn.o.grace, args, env)
	if err != nil {
		rn.say("error: %v", err)
		return exitRunFailed, false
	}
	rn.setKeeper(k)
	defer rn.setKeeper(nil)
	sent := rn.deadline()
	k.send("deadline %d", sent.UnixNano())

	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	go rn.renewTTL(runCtx, lock, ttl)
	grantEnded := make(chan error, 1)
	go func() { grantEnded <- lock.WaitLost(runCtx) }()
	lines := make(chan string, 8)
	go func() {
		for k.status.Scan() {
			lines <- k.status.Text()
		}
		close(lines)
	}()

	t := &tree{rn: rn, k: k, command: args[0], status: -1}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
loop:
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				break loop
			}
			t.said(line)
		case s := <-rn.sigs:
			k.send("signal %d", int(s.(syscall.Signal)))
		case err := <-grantEnded:
			if runCtx.Err() == nil {
				t.stop(fmt.Errorf("lock lost while the command ran: %w", err))
			}
		case err := <-lost:
			t.stop(fmt.Errorf("holder lease lost while the command ran: %w", err))
		case <-tick.C:
			rn.keeperStopped(k)
			if d := rn.deadline(); !d.Equal(sent) {
				sent = d
				k.send("deadline %d", d.UnixNano())
			}
		}
	}
	_ = k.ctl.Close()
	werr := k.cmd.Wait()
	stopRun()
	if werr != nil {
		// The keeper did not finish its job (killed): what it kept is re-parented to run, the
		// next subreaper up. Kill it all and wait until it is gone before releasing.
		rn.say("warning: the keeper ended early (%v); killing what is left of the command", werr)
		rn.killOrphans(t.pgid)
	}
	return t.result()
}

// tree is what run has heard of the command's tree from its keeper.
type tree struct {
	rn        *runner
	k         *keeper
	command   string
	pgid      int
	execCode  int
	status    int // -1 until the command has ended
	lostCause error
	stopped   bool
}

// stop tells the keeper to stop the tree (once), for why.
func (t *tree) stop(why error) {
	if t.lostCause == nil {
		t.lostCause = why
	}
	if !t.stopped {
		t.stopped = true
		t.rn.say("stopping %s: %v", t.command, why)
		t.k.send("stop")
	}
}

// said takes in one line from the keeper.
func (t *tree) said(line string) {
	verb, rest, _ := strings.Cut(line, " ")
	switch verb {
	case "started":
		t.pgid, _ = strconv.Atoi(rest)
	case "exec":
		c, msg, _ := strings.Cut(rest, " ")
		t.execCode, _ = strconv.Atoi(c)
		t.rn.say("error: %s", msg)
	case "exited":
		t.status, _ = strconv.Atoi(rest)
	case "signaled":
		n, _ := strconv.Atoi(rest)
		t.status = 128 + n
	case "deadline":
		if t.lostCause == nil {
			t.lostCause = t.rn.deadlineCause()
			t.rn.say("stopping %s: %v", t.command, t.lostCause)
		}
		t.stopped = true
	}
}

// result is run's exit code, and whether the locks are to be kept.
func (t *tree) result() (int, bool) {
	switch {
	case t.execCode != 0:
		return t.execCode, false
	case t.lostCause != nil:
		return exitLost, false
	case t.status < 0:
		return exitRunFailed, false
	}
	return t.status, t.status != 0 && t.rn.o.keepOnFailure
}

// killOrphans SIGKILLs run's descendants (the command's tree, re-parented to run) until none is
// alive, and reaps them.
func (rn *runner) killOrphans(pgid int) {
	for {
		n, err := proctree.Signal(os.Getpid(), pgid, false, syscall.SIGKILL)
		proctree.ReapAll()
		if err != nil || n == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
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
