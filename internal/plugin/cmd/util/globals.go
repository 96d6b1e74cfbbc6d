// Package util is what every command of the kubectl plugin shares, as kubectl's own
// pkg/cmd/util: the connection flags and the client made from them (Globals), the exit status a
// command asks for (ExitError), the flags that describe a LockRequest (RequestFlags), enum flags,
// and the wait for a grant that says why it waits.
package util

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

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

// ExitError carries the exit status a command asks for (run's, or COMMAND's through run).
type ExitError struct{ Code int }

func (e ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// Globals are the standard kubectl connection flags every subcommand shares (--kubeconfig,
// --context, -n, --as, --token, --server, --request-timeout, ...), from k8s.io/cli-runtime as
// kubectl itself and its plugins use them.
type Globals struct {
	Flags *genericclioptions.ConfigFlags
	// checked: the API server's version was looked at (once a run).
	checked sync.Once
	// Warn is where a version outside the support range is said (stderr when nil).
	Warn io.Writer
}

// NewGlobals are the connection flags, not yet bound to a command line.
func NewGlobals() *Globals {
	return &Globals{Flags: genericclioptions.NewConfigFlags(true)}
}

// Client is a client for the API server the flags name, and the namespace they name. The
// first call says on stderr when the server's version is outside the support range.
func (g *Globals) Client() (ctrlclient.WithWatch, string, error) {
	cfg, err := g.Flags.ToRESTConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	g.checked.Do(func() { g.checkVersion(cfg) })
	cfg.QPS, cfg.Burst = 50, 100
	// A starting API server answers 503 Retry-After: 5; wait and run would sleep through it. A
	// server that is away (restarting) is tried again for a few seconds, not the manager's 30.
	turnstile.BoundRetryAfterAway(cfg, time.Second, 5*time.Second)
	ns, _, err := g.Flags.ToRawKubeConfigLoader().Namespace()
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
func (g *Globals) checkVersion(cfg *rest.Config) {
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

func (g *Globals) warnTo() io.Writer {
	if g.Warn != nil {
		return g.Warn
	}
	return os.Stderr
}

// Explain turns an error that means "Turnstile is not installed here" (the API server does not
// serve its kinds: client-go's "no matches for kind") into one that says so and what to do.
func (g *Globals) Explain(err error) error {
	if !meta.IsNoMatchError(err) {
		return err
	}
	cfg, cerr := g.Flags.ToRESTConfig()
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
