// Command kubectl-turnstile is Turnstile's kubectl plugin: `kubectl turnstile locks | acquire |
// release | run -- CMD | freeze | thaw | why | dashboard`. Everything it does is plain LockRequest,
// ProjectLock, CommandLock and Lease objects, so it can be followed with `kubectl get locks`.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	turnstile "github.com/turnstile-dev/turnstile/pkg/client"
)

var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := locksv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()

// exitError carries the exit status of a command run by `run`.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRoot().ExecuteContext(ctx)
	stop()
	var ee exitError
	switch {
	case errors.As(err, &ee):
		os.Exit(ee.code)
	case err != nil:
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// globals are the standard kubectl connection flags every subcommand shares (--kubeconfig,
// --context, -n, --as, --token, --server, --request-timeout, ...), from k8s.io/cli-runtime as
// kubectl itself and its plugins use them.
type globals struct {
	flags *genericclioptions.ConfigFlags
}

func (g *globals) client() (ctrlclient.WithWatch, string, error) {
	cfg, err := g.flags.ToRESTConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	// A starting API server answers 503 Retry-After: 5; wait and run would sleep through it. A
	// server that is away (restarting) is tried again for a few seconds, not the manager's 30.
	turnstile.BoundRetryAfterAway(cfg, time.Second, 5*time.Second)
	ns, _, err := g.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("namespace: %w", err)
	}
	c, err := ctrlclient.NewWithWatch(cfg, ctrlclient.Options{Scheme: scheme})
	if err != nil {
		return nil, "", err
	}
	return c, ns, nil
}

func newRoot() *cobra.Command {
	g := &globals{flags: genericclioptions.NewConfigFlags(true)}
	root := &cobra.Command{
		Use:   "kubectl-turnstile",
		Short: "Locks for infrastructure automation, as Kubernetes resources",
		Long: `kubectl turnstile takes, waits for and releases Turnstile locks, runs a command while
holding one (flock for Kubernetes), freezes commands, and explains why a request waits.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	g.flags.AddFlags(root.PersistentFlags())

	root.AddCommand(newBreakGlassCmd(g), newLocksCmd(g), newAcquireCmd(g), newReleaseCmd(g), newRunCmd(g),
		newFreezeCmd(g), newThawCmd(g), newWhyCmd(g), newDashboardCmd(g))
	return root
}
