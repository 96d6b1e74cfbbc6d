// Command kubectl-turnstile is Turnstile's kubectl plugin: `kubectl turnstile locks | acquire |
// release | run -- CMD | freeze | thaw | why | dashboard`. Everything it does is plain LockRequest,
// ProjectLock, CommandLock and Lease objects, so it can be followed with `kubectl get locks`.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/compat"
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
	g := &globals{flags: genericclioptions.NewConfigFlags(true)}
	err := newRootWith(g).ExecuteContext(ctx)
	stop()
	var ee exitError
	switch {
	case errors.As(err, &ee):
		os.Exit(ee.code)
	case err != nil:
		fmt.Fprintln(os.Stderr, "error:", g.explain(err))
		os.Exit(1)
	}
}

// globals are the standard kubectl connection flags every subcommand shares (--kubeconfig,
// --context, -n, --as, --token, --server, --request-timeout, ...), from k8s.io/cli-runtime as
// kubectl itself and its plugins use them.
type globals struct {
	flags *genericclioptions.ConfigFlags
	// checked: the API server's version was looked at (once a run).
	checked sync.Once
	// warn is where a version outside the support range is said (stderr).
	warn io.Writer
}

func (g *globals) client() (ctrlclient.WithWatch, string, error) {
	cfg, err := g.flags.ToRESTConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	g.checked.Do(func() { g.checkVersion(cfg) })
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

// checkVersion says in one line on stderr when the API server is outside the support range
// (compat.MinMinor to compat.MaxMinor). A server that does not answer says nothing here: the
// command's own request will fail and say why.
func (g *globals) checkVersion(cfg *rest.Config) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return
	}
	info, err := dc.ServerVersion()
	if err != nil {
		return
	}
	v, err := compat.ParseVersion(info)
	if err != nil {
		fmt.Fprintln(g.warnTo(), "warning:", err)
		return
	}
	if w := v.Warning(); w != "" {
		fmt.Fprintln(g.warnTo(), "warning:", w)
	}
}

func (g *globals) warnTo() io.Writer {
	if g.warn != nil {
		return g.warn
	}
	return os.Stderr
}

// explain turns an error that means "Turnstile is not installed here" (the API server does not
// serve its kinds: client-go's "no matches for kind") into one that says so and what to do.
func (g *globals) explain(err error) error {
	if !meta.IsNoMatchError(err) {
		return err
	}
	cfg, cerr := g.flags.ToRESTConfig()
	if cerr != nil {
		return err
	}
	dc, cerr := discovery.NewDiscoveryClientForConfig(cfg)
	if cerr != nil {
		return err
	}
	cluster, cerr := compat.Discover(dc)
	if cerr != nil {
		return err
	}
	if ierr := cluster.CheckInstalled(); ierr != nil {
		return ierr
	}
	return err
}

func newRoot() *cobra.Command {
	return newRootWith(&globals{flags: genericclioptions.NewConfigFlags(true)})
}

func newRootWith(g *globals) *cobra.Command {
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
		newFreezeCmd(g), newThawCmd(g), newWhyCmd(g), newDashboardCmd(g), newVersionCmd())
	return root
}
