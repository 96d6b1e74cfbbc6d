package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnstile-dev/turnstile/pkg/client"
	"github.com/turnstile-dev/turnstile/pkg/workdir"
)

// killGrace is how long a command gets between SIGTERM and SIGKILL once its lock is lost.
const killGrace = 10 * time.Second

func newRunCmd(g *globals) *cobra.Command {
	var (
		f             requestFlags
		leaseDuration time.Duration
	)
	cmd := &cobra.Command{
		Use:   "run --lock REPO:PATH[:WORKSPACE[:PROJECT]] ... -- COMMAND [ARGS...]",
		Short: "Run a command while holding locks (flock for Kubernetes)",
		Long: `Takes the locks, runs COMMAND with TURNSTILE_FENCING_TOKEN and TURNSTILE_LOCKREQUEST in its
environment, and releases the locks when it exits, with its exit status.

The locks are bound to a Lease this process renews (spec.holder.lease): if this process dies,
the Lease lapses and the locks pass on within --lease-duration, not at the end of the ttl. If
the locks are lost while COMMAND runs (expired, force-unlocked, or the Lease could not be
renewed), COMMAND gets SIGTERM (then SIGKILL after 10s) and run exits 1.`,
		Example: `  kubectl turnstile run -l acme/infra:modules/vpc --owner alice --pull 100 --command apply -- terraform apply -auto-approve`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, c, ns, err := f.resolve(cmd, g)
			if err != nil {
				return err
			}
			return runLocked(cmd, c, ns, r, leaseDuration, args)
		},
	}
	f.bind(cmd.Flags())
	cmd.Flags().DurationVar(&leaseDuration, "lease-duration", 15*time.Second, "Duration of the holder Lease: how soon the locks pass on if this process dies (whole seconds, at least 3s).")
	return cmd
}

func runLocked(cmd *cobra.Command, c ctrlclient.WithWatch, ns string, r client.Request, leaseDuration time.Duration, args []string) error {
	ctx := cmd.Context()
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	leaseName := "turnstile-run-" + hex.EncodeToString(suffix)
	host, _ := os.Hostname()

	// The holder Lease: renewed by this process, deleted when it exits cleanly.
	lost := make(chan error, 1)
	hb, err := workdir.NewHeartbeat(c, workdir.NewGuards(),
		workdir.WithNamespace(ns), workdir.WithLeaseName(leaseName),
		workdir.WithIdentity(fmt.Sprintf("%s/%d", host, os.Getpid())),
		workdir.WithLeaseDuration(leaseDuration),
		workdir.WithOnLost(func(err error) {
			select {
			case lost <- err:
			default:
			}
		}))
	if err != nil {
		return err
	}
	hbCtx, stopHB := context.WithCancel(context.WithoutCancel(ctx))
	hbDone := make(chan error, 1)
	go func() { hbDone <- hb.Run(hbCtx) }()
	defer func() {
		stopHB()
		if err := <-hbDone; err != nil {
			fmt.Fprintln(cmd.ErrOrStderr(), "warning:", err)
		}
	}()
	for !hb.Healthy() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-hbDone:
			return fmt.Errorf("holder lease %s/%s: %w", ns, leaseName, err)
		case <-time.After(20 * time.Millisecond):
		}
	}

	r.Holder.Lease = leaseName
	tc := client.New(c, ns)
	lock, err := acquire(cmd, c, tc, r)
	if err != nil {
		return err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := lock.Release(rctx); err != nil {
			fmt.Fprintln(cmd.ErrOrStderr(), "warning: release:", err)
		}
	}()
	fmt.Fprintf(cmd.ErrOrStderr(), "lockrequest/%s granted (fencing token %d); running %v\n", lock.Name, lock.FencingToken, args)

	child := exec.Command(args[0], args[1:]...)
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, cmd.OutOrStdout(), cmd.ErrOrStderr()
	child.Env = append(os.Environ(),
		fmt.Sprintf("TURNSTILE_FENCING_TOKEN=%d", lock.FencingToken),
		fmt.Sprintf("TURNSTILE_LOCKREQUEST=%s/%s", lock.Namespace, lock.Name),
		"TURNSTILE_HOLDER_LEASE="+ns+"/"+leaseName)
	if err := child.Start(); err != nil {
		return fmt.Errorf("start %s: %w", args[0], err)
	}
	var waitErr error
	exited := make(chan struct{})
	go func() {
		waitErr = child.Wait()
		close(exited)
	}()

	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	grantEnded := make(chan error, 1)
	go func() { grantEnded <- lock.WaitLost(watchCtx) }()

	var cause error
	select {
	case <-exited:
		return exitStatus(waitErr)
	case err := <-grantEnded:
		cause = fmt.Errorf("lock lost while the command ran: %w", err)
		if ctx.Err() != nil {
			cause = ctx.Err()
		}
	case err := <-lost:
		cause = fmt.Errorf("holder lease lost while the command ran: %w", err)
	case <-ctx.Done():
		cause = fmt.Errorf("interrupted: %w", ctx.Err())
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "stopping %s: %v\n", args[0], cause)
	_ = child.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(killGrace):
		_ = child.Process.Kill()
		<-exited
	}
	return cause
}

// exitStatus passes the command's exit status on.
func exitStatus(err error) error {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		return exitError{code: ee.ExitCode()}
	default:
		return err
	}
}
