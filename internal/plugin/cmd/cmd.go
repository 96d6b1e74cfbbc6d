// Package cmd is the kubectl plugin's command tree, laid out as kubectl's own pkg/cmd: a
// package per command under it (locks, run, freeze, why, dashboard), what they share in util.
// cmd/kubectl-turnstile is a few lines around Main.
package cmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/turnstile-dev/turnstile/internal/plugin/cmd/dashboard"
	"github.com/turnstile-dev/turnstile/internal/plugin/cmd/fleet"
	"github.com/turnstile-dev/turnstile/internal/plugin/cmd/freeze"
	"github.com/turnstile-dev/turnstile/internal/plugin/cmd/locks"
	"github.com/turnstile-dev/turnstile/internal/plugin/cmd/run"
	"github.com/turnstile-dev/turnstile/internal/plugin/cmd/util"
	"github.com/turnstile-dev/turnstile/internal/plugin/cmd/version"
	"github.com/turnstile-dev/turnstile/internal/plugin/cmd/why"
)

// Main runs `kubectl turnstile` with args (os.Args[1:]) and returns its exit status: the one a
// command asks for (util.ExitError: run's, or its COMMAND's), 1 for any other error, said on
// stderr.
func Main(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	g := util.NewGlobals()
	root := NewCmdRoot(g)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	stop()
	var ee util.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.Code
	case err != nil:
		fmt.Fprintln(os.Stderr, "error:", g.Explain(err))
		return 1
	}
	return 0
}

// NewDefaultCommand is the plugin's root command with fresh connection flags.
func NewDefaultCommand() *cobra.Command {
	return NewCmdRoot(util.NewGlobals())
}

// NewCmdRoot is the plugin's root command: g's connection flags on every subcommand.
func NewCmdRoot(g *util.Globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "kubectl-turnstile",
		Short: "Locks for infrastructure automation, as Kubernetes resources",
		Long: `kubectl turnstile takes, waits for and releases Turnstile locks, runs a command while
holding one (flock for Kubernetes), freezes commands, and explains why a request waits.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	g.Flags.AddFlags(root.PersistentFlags())

	root.AddCommand(freeze.NewCmdBreakGlass(g), locks.NewCmdLocks(g), locks.NewCmdAcquire(g), locks.NewCmdRelease(g), run.NewCmdRun(g),
		freeze.NewCmdFreeze(g), freeze.NewCmdThaw(g), why.NewCmdWhy(g), dashboard.NewCmdDashboard(g), fleet.NewCmdFleet(g), version.NewCmdVersion())
	return root
}
