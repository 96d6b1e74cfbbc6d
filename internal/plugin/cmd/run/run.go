// Package run is `kubectl turnstile run -- COMMAND`: flock for Kubernetes. It takes the locks
// (a holder Lease renewed by this process, and a LockRequest), runs COMMAND's whole process tree
// under them through package keeper, renews the grant while the tree lives, and releases (or,
// with --keep-on-failure, keeps) the locks once no process of the tree is left. docs/run.md.
package run

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/turnstile-dev/turnstile/internal/plugin/cmd/util"
	"github.com/turnstile-dev/turnstile/internal/plugin/keeper"
)

// run's own exit codes (docs/run.md). Every other code is the command's: its exit status, or
// 128+N when signal N ended it; 126 and 127 (COMMAND cannot be run, not found) are the
// keeper's (keeper.ExitCannotExecute, keeper.ExitNotFound).
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
	exitRunFailed = keeper.ExitRunFailed
)

const (
	// releaseCallTimeout bounds one attempt to release; releaseBackoff is the first pause between
	// attempts, doubled up to a second.
	releaseCallTimeout = 5 * time.Second
	releaseBackoff     = 100 * time.Millisecond
	// defaultLeaseDuration is how long a crashed run keeps its locks: the Lease lapses, and the
	// next holder is granted, this long after the last renewal.
	defaultLeaseDuration = 40 * time.Second
	// defaultGrace is how long the command has between SIGTERM and SIGKILL. With the 40s lease
	// it leaves room for one failed renewal and its retry before the stop must begin
	// (keeper.FitGrace).
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

// NewCmdRun is `run`.
func NewCmdRun(g *util.Globals) *cobra.Command {
	var (
		f util.RequestFlags
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
				return util.ExitError{Code: keeper.Main(o.grace, args)}
			}
			return runCommand(cmd, g, &f, o, args)
		},
	}
	// run's request flags are acquire's, with -w for --wait-timeout as flock has it.
	req := pflag.NewFlagSet("request", pflag.ContinueOnError)
	f.Bind(req)
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
	fs.BoolVar(&o.keeper, keeper.Flag, false, "run's own keeper process (internal).")
	_ = fs.MarkHidden(keeper.Flag)
	cmd.SetFlagErrorFunc(usageError)
	return cmd
}

// usageError prints err as every plugin error is printed and exits 125: run's own failure, not
// COMMAND's.
func usageError(cmd *cobra.Command, err error) error {
	fmt.Fprintln(cmd.ErrOrStderr(), "error:", err)
	return util.ExitError{Code: exitRunFailed}
}

// runCommand is `run` itself; the error it returns is a util.ExitError.
func runCommand(cmd *cobra.Command, g *util.Globals, f *util.RequestFlags, o runOptions, args []string) error {
	stderr := cmd.ErrOrStderr()
	fail := func(code int, format string, a ...any) error {
		fmt.Fprintf(stderr, "error: "+format+"\n", a...)
		return util.ExitError{Code: code}
	}
	if why := keeper.FitGrace("--lease-duration", o.leaseDuration, o.grace); why != "" {
		return fail(exitRunFailed, "%s", why)
	}
	if f.TTL > 0 {
		if why := keeper.FitTTL("--ttl", f.TTL, o.grace); why != "" {
			return fail(exitRunFailed, "%s", why)
		}
	}
	if o.nonblock {
		if cmd.Flags().Changed("wait-timeout") && f.WaitTimeout != 0 {
			return fail(exitRunFailed, "--nonblock is --wait-timeout 0s; give one of them")
		}
		f.WaitTimeout = 0
		_ = cmd.Flags().Set("wait-timeout", "0s")
	}
	// run is a subreaper too: if its keeper is killed, the tree is re-parented to run, which
	// then stops it before releasing (keeper.Supervisor). Outside Linux this fails, before
	// anything is asked.
	sup, err := keeper.NewSupervisor()
	if err != nil {
		return fail(exitRunFailed, "%v", err)
	}
	// A command that cannot run is known before asking for anything.
	if _, err := exec.LookPath(args[0]); err != nil {
		return fail(keeper.LookPathCode(err), "%v", err)
	}
	r, c, ns, err := f.Resolve(cmd, g)
	if err != nil {
		return fail(exitRunFailed, "%v", err)
	}
	if r.Holder.Session, err = holderSession(o); err != nil {
		return fail(exitRunFailed, "%v", err)
	}
	askTimeout := defaultAskTimeout
	if s := ptrString(g.Flags.Timeout); s != "" && s != "0" {
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

	rn := &runner{stderr: stderr, c: c, ns: ns, o: o, sigs: sigs, sup: sup}
	tstp := make(chan os.Signal, 1)
	notifyStop(tstp)
	defer signal.Stop(tstp)
	go sup.JobControl(tstp)
	return util.ExitError{Code: rn.run(base, r, askTimeout, args)}
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
