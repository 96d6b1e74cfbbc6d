package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
	"github.com/turnstile-dev/turnstile/pkg/client"
)

// requestFlags describe a LockRequest on the command line.
type requestFlags struct {
	locks       []string
	name        string
	owner       string
	pull        int64
	url         string
	command     string
	priority    string
	ttl         time.Duration
	waitTimeout time.Duration
}

func (f *requestFlags) bind(fs *pflag.FlagSet) {
	fs.StringArrayVarP(&f.locks, "lock", "l", nil, "A lock to take, REPO:PATH[:WORKSPACE[:PROJECT]] (workspace defaults to \"default\"); repeat for several, taken in canonical order.")
	fs.StringVar(&f.name, "name", "", "Name of the LockRequest (default: generated).")
	fs.StringVar(&f.owner, "owner", defaultOwner(), "Who holds the lock (shown to everyone waiting).")
	fs.Int64Var(&f.pull, "pull", 0, "Pull request number; the same owner and pull re-enter a lock they hold.")
	fs.StringVar(&f.url, "url", "", "Link to the pull request or pipeline run, shown to people waiting.")
	fs.StringVar(&f.command, "command", "", "The command the lock is for (e.g. plan, apply), so a CommandLock can freeze it.")
	fs.StringVar(&f.priority, "priority", "", "Low, Normal (default), High or Critical.")
	fs.DurationVar(&f.ttl, "ttl", 0, "How long the grant lasts (default: the operator's --default-ttl).")
	fs.DurationVar(&f.waitTimeout, "wait-timeout", 0, "Give up after waiting this long; 0s fails at once if the lock is busy (default: wait until interrupted).")
}

func defaultOwner() string {
	for _, v := range []string{"TURNSTILE_OWNER", "USER", "LOGNAME"} {
		if s := os.Getenv(v); s != "" {
			return s
		}
	}
	return "kubectl-turnstile"
}

func (f *requestFlags) request(cmd *cobra.Command) (client.Request, error) {
	r := client.Request{
		Name: f.name, Holder: locksv1.Holder{Owner: f.owner, Pull: f.pull, URL: f.url},
		Command: f.command, Priority: locksv1.Priority(f.priority), TTL: f.ttl,
	}
	if len(f.locks) == 0 {
		return r, errors.New("name at least one lock with --lock REPO:PATH[:WORKSPACE[:PROJECT]]")
	}
	for _, l := range f.locks {
		t, err := parseTarget(l)
		if err != nil {
			return r, err
		}
		r.Locks = append(r.Locks, t)
	}
	if cmd.Flags().Changed("wait-timeout") {
		d := f.waitTimeout
		r.WaitTimeout = &d
	}
	return r, nil
}

// parseTarget reads REPO:PATH[:WORKSPACE[:PROJECT]].
func parseTarget(s string) (locksv1.LockTarget, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 4 || parts[0] == "" || parts[1] == "" {
		return locksv1.LockTarget{}, fmt.Errorf("--lock %q: want REPO:PATH[:WORKSPACE[:PROJECT]], e.g. acme/infra:modules/vpc:default", s)
	}
	t := locksv1.LockTarget{Repo: parts[0], Path: parts[1], Workspace: "default"}
	if len(parts) > 2 && parts[2] != "" {
		t.Workspace = parts[2]
	}
	if len(parts) > 3 {
		t.Project = parts[3]
	}
	return t, nil
}

func newLocksCmd(g *globals) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "locks",
		Short: "List lock keys: holder, fencing token, waiting requests, expiry",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, ns, err := g.client()
			if err != nil {
				return err
			}
			var opts []ctrlclient.ListOption
			if !all {
				opts = append(opts, ctrlclient.InNamespace(ns))
			}
			var pls locksv1.ProjectLockList
			if err := c.List(cmd.Context(), &pls, opts...); err != nil {
				return fmt.Errorf("list projectlocks: %w", err)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			if all {
				fmt.Fprint(w, "NAMESPACE\t")
			}
			fmt.Fprintln(w, "KEY\tHOLDER\tTOKEN\tWAITING\tEXPIRES")
			for _, pl := range pls.Items {
				holder, expires := "<free>", ""
				if h := pl.Status.Holder; h != nil {
					holder = locksv1.Holder{Owner: h.Owner, Pull: h.Pull}.Describe()
					if h.ExpiresAt != nil {
						expires = h.ExpiresAt.UTC().Format(time.RFC3339)
					}
				}
				if all {
					fmt.Fprintf(w, "%s\t", pl.Namespace)
				}
				fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\n", lockkey.String(pl.Spec.LockTarget), holder, pl.Status.FencingToken, pl.Status.QueueLength, expires)
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "List locks in every namespace.")
	return cmd
}

func newAcquireCmd(g *globals) *cobra.Command {
	var f requestFlags
	var noWait bool
	cmd := &cobra.Command{
		Use:   "acquire --lock REPO:PATH[:WORKSPACE[:PROJECT]] ...",
		Short: "Request locks and wait for the grant",
		Long: `Creates a LockRequest and waits until it is granted, printing its fencing token. While it
waits it says who holds the lock and its place in the queue. Interrupting the wait deletes the
request, so nothing is left queued. Release with "kubectl turnstile release NAME".`,
		Example: `  kubectl turnstile acquire -l acme/infra:modules/vpc --owner alice --pull 100 --command plan
  kubectl turnstile acquire -l acme/infra:modules/vpc --wait-timeout 0s   # fail at once if busy`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := f.request(cmd)
			if err != nil {
				return err
			}
			c, ns, err := g.client()
			if err != nil {
				return err
			}
			tc := client.New(c, ns)
			if noWait {
				lr, err := tc.Create(cmd.Context(), r)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "lockrequest/%s created\n", lr.Name)
				return nil
			}
			lock, err := acquire(cmd, c, tc, r)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "lockrequest/%s granted: fencing token %d, expires %s\n",
				lock.Name, lock.FencingToken, lock.ExpiresAt.UTC().Format(time.RFC3339))
			return nil
		},
	}
	f.bind(cmd.Flags())
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "Create the request and return; wait later with kubectl wait --for=condition=Granted.")
	return cmd
}

// acquire creates the request and waits, reporting on stderr why it waits (once per change)
// from the wait's own watch.
func acquire(cmd *cobra.Command, _ ctrlclient.Client, tc *client.Client, r client.Request) (*client.Lock, error) {
	lr, err := tc.Create(cmd.Context(), r)
	if err != nil {
		return nil, err
	}
	last := ""
	report := client.OnChange(func(lr *locksv1.LockRequest) {
		c := meta.FindStatusCondition(lr.Status.Conditions, locksv1.ConditionGranted)
		if c != nil && c.Status != "True" && lr.Status.Phase == locksv1.PhasePending && c.Message != last {
			last = c.Message
			fmt.Fprintf(cmd.ErrOrStderr(), "lockrequest/%s waiting: %s\n", lr.Name, c.Message)
		}
	})
	return tc.Await(cmd.Context(), lr, report)
}

func newReleaseCmd(g *globals) *cobra.Command {
	var del bool
	cmd := &cobra.Command{
		Use:   "release NAME",
		Short: "Release a lock (spec.release, keeping the record; --delete to delete the request)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := g.client()
			if err != nil {
				return err
			}
			var lr locksv1.LockRequest
			if err := c.Get(cmd.Context(), ctrlclient.ObjectKey{Namespace: ns, Name: args[0]}, &lr); err != nil {
				if apierrors.IsNotFound(err) {
					return fmt.Errorf("lockrequest %s/%s not found", ns, args[0])
				}
				return err
			}
			lock := client.New(c, ns).LockFor(&lr)
			if del {
				err = lock.Delete(cmd.Context())
			} else {
				err = lock.Release(cmd.Context())
			}
			if err != nil && !errors.Is(err, client.ErrLost) {
				return err
			}
			if err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "note: %v\n", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "lockrequest/%s released\n", args[0])
			return nil
		},
	}
	cmd.Flags().BoolVar(&del, "delete", false, "Delete the LockRequest instead of keeping it as Released.")
	return cmd
}
