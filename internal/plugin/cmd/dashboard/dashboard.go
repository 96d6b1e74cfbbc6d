// Package dashboard is `dashboard`: the live web page of internal/dashboard, served on loopback
// as the user.
package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"runtime"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnstile-dev/turnstile/internal/dashboard"
	"github.com/turnstile-dev/turnstile/internal/plugin/cmd/util"
)

// NewCmdDashboard is `dashboard`.
func NewCmdDashboard(g *util.Globals) *cobra.Command {
	var (
		address     string
		port        int
		open        bool
		allowRemote bool
		agingStep   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve a live web page of every lock, queue, freeze and deadlock, as you",
		Long: `Serves a web page on 127.0.0.1 that shows every lock key with its holder, fencing token, expiry
and queue, the frozen commands, and recent deadlocks, expiries and force-unlocks, updated from
watches as they happen. It talks to the API server with your kubeconfig, like kubectl proxy:
what you may not list, it says so; its buttons (release your request, force-unlock, freeze,
thaw) are plain API calls as you, and the API server's answer is shown as it is.

The URL carries a random token for this run: only someone with it can use the page. It listens
on loopback only unless --allow-remote is given.`,
		Example: `  kubectl turnstile dashboard --open
  kubectl turnstile dashboard -n team-a --port 8765`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			warning, err := dashboard.CheckListenAddress(address, allowRemote)
			if err != nil {
				return err
			}
			if warning != "" {
				fmt.Fprintln(cmd.ErrOrStderr(), warning)
			}
			c, ns, err := g.Client()
			if err != nil {
				return err
			}
			token, err := dashboard.NewToken()
			if err != nil {
				return err
			}
			return serveDashboard(cmd, c, dashboard.Options{
				Token: token, Loopback: warning == "", DefaultNamespace: ns, AgingStep: agingStep,
			}, address, port, open)
		},
	}
	cmd.Flags().StringVar(&address, "address", "127.0.0.1", "The IP address to serve on; anything but loopback needs --allow-remote.")
	cmd.Flags().IntVar(&port, "port", 0, "The port to serve on; 0 picks a free one.")
	cmd.Flags().BoolVar(&open, "open", false, "Open the page in a browser.")
	cmd.Flags().BoolVar(&allowRemote, "allow-remote", false, "Allow a non-loopback --address: anyone who reaches it with the URL acts as you.")
	cmd.Flags().DurationVar(&agingStep, "aging-step", 10*time.Minute, "The manager's --aging-step, to show the aged priority of waiters the controller has not placed yet.")
	return cmd
}

func serveDashboard(cmd *cobra.Command, c ctrlclient.WithWatch, opts dashboard.Options, address string, port int, open bool) error {
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	ln, err := net.Listen("tcp", net.JoinHostPort(address, strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	s := dashboard.New(ctx, c, opts)
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	url := dashboard.URL(address, ln.Addr().(*net.TCPAddr).Port, opts.Token)
	out := cmd.OutOrStdout()
	if u := s.User(); u != "" {
		fmt.Fprintf(out, "Acting as %s.\n", u)
	}
	fmt.Fprintf(out, "Serving the Turnstile dashboard at %s\nPress Ctrl-C to stop.\n", url)
	if open {
		if err := openBrowser(url); err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "could not open a browser (%v): open the URL above\n", err)
		}
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("dashboard: %w", err)
	case <-ctx.Done():
	}
	// The event streams end with ctx; then the server closes its idle connections.
	cancel()
	shutdown, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// openBrowser opens url with the desktop's handler; --open is best effort.
func openBrowser(url string) error {
	var cmd *exec.Cmd
	switch runtime.GOOS {
	case "darwin":
		cmd = exec.Command("open", url)
	case "windows":
		cmd = exec.Command("rundll32", "url.dll,FileProtocolHandler", url)
	default:
		cmd = exec.Command("xdg-open", url)
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { _ = cmd.Wait() }()
	return nil
}
