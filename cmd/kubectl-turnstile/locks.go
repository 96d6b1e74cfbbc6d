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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	reason      string
	from        string
	shared      bool
	maxHolders  int32
}

func (f *requestFlags) bind(fs *pflag.FlagSet) {
	fs.StringArrayVarP(&f.locks, "lock", "l", nil, "A lock to take, REPO:PATH[:WORKSPACE[:PROJECT]] (workspace defaults to \"default\"); repeat for several, taken in canonical order.")
	fs.StringVar(&f.name, "name", "", "Name of the LockRequest (default: generated).")
	fs.StringVar(&f.owner, "owner", defaultOwner(), "Who holds the lock (shown to everyone waiting).")
	fs.Int64Var(&f.pull, "pull", 0, "Pull request number; the same owner and pull re-enter a lock they hold.")
	fs.StringVar(&f.url, "url", "", "Link to the pull request or pipeline run, shown to people waiting.")
	fs.StringVar(&f.command, "command", "", "The command the lock is for (e.g. plan, apply), so a CommandLock can freeze it.")
	fs.Var(newEnum(&f.priority, string(locksv1.PriorityLow), string(locksv1.PriorityNormal), string(locksv1.PriorityHigh), string(locksv1.PriorityCritical)),
		"priority", "Low, Normal (default), High or Critical, in any case.")
	fs.DurationVar(&f.ttl, "ttl", 0, "How long the grant lasts (default: the operator's --default-ttl).")
	fs.DurationVar(&f.waitTimeout, "wait-timeout", 0, "Give up after waiting this long; 0s fails at once if the lock is busy (default: wait until interrupted).")
	fs.StringVar(&f.reason, "reason", "", "Why the lock is taken, told to everyone waiting: \"locked by pull #100 (alice): migrating state\".")
	fs.BoolVar(&f.shared, "shared", false, "Take every lock in Shared mode: held together with other shared requests (e.g. plans), while an exclusive one (an apply) waits for them and then holds alone; a shared request never passes an exclusive one waiting ahead of it.")
	fs.Int32Var(&f.maxHolders, "max-holders", 0, "Take every lock as a counting lock: Shared, held only while at most N requests hold it, this one included (--max-holders 3: at most three clusters upgrade at once); each holder gets a fencing token of its own. Implies --shared. 1 to 100.")
	bindFrom(fs, &f.from)
}

// bindFrom adds --from, which takes the request from a pipeline's own variables.
func bindFrom(fs *pflag.FlagSet, from *string) {
	fs.Var(newEnum(from, fromAtlantis, fromGitHubActions), "from", `Take the lock key, holder and command from a pipeline's variables: "atlantis" (in a repos.yaml
run step: BASE_REPO_OWNER/BASE_REPO_NAME, REPO_REL_DIR, WORKSPACE, PROJECT_NAME; PULL_AUTHOR, PULL_NUM,
PULL_URL; COMMAND_NAME) or "github-actions" (GITHUB_REPOSITORY, the pull request of GITHUB_REF or
GITHUB_EVENT_PATH, its author or GITHUB_ACTOR). Flags given explicitly win.`)
}

// defaultOwner is $TURNSTILE_OWNER; when it is unset, pkg/client fills in the user name the
// API server knows the caller by (client.WhoAmI), as the admission policies require.
func defaultOwner() string { return os.Getenv("TURNSTILE_OWNER") }

// resolve builds the request from the flags and the client, with its namespace, from the
// global flags: what every command that takes locks starts with.
func (f *requestFlags) resolve(cmd *cobra.Command, g *globals) (client.Request, ctrlclient.WithWatch, string, error) {
	r, err := f.request(cmd)
	if err != nil {
		return r, nil, "", err
	}
	c, ns, err := g.client()
	return r, c, ns, err
}

func (f *requestFlags) request(cmd *cobra.Command) (client.Request, error) {
	r := client.Request{
		Name: f.name, Holder: locksv1.Holder{Owner: f.owner, Pull: f.pull, URL: f.url},
		Command: f.command, Priority: locksv1.Priority(f.priority), TTL: f.ttl, Reason: f.reason,
	}
	var fromKey *locksv1.LockTarget
	if f.from != "" {
		ci, err := fromEnv(f.from, os.Getenv)
		if err != nil {
			return r, err
		}
		changed := cmd.Flags().Changed
		if !changed("owner") {
			r.Holder.Owner = ci.holder.Owner
		}
		if !changed("pull") {
			r.Holder.Pull = ci.holder.Pull
		}
		if !changed("url") {
			r.Holder.URL = ci.holder.URL
		}
		if !changed("command") {
			r.Command = ci.command
		}
		if r.Name == "" {
			r.GenerateName = ci.prefix
		}
		fromKey = ci.target
	}
	switch {
	case len(f.locks) > 0:
		for _, l := range f.locks {
			t, err := parseTarget(l)
			if err != nil {
				return r, err
			}
			r.Locks = append(r.Locks, t)
		}
	case fromKey != nil:
		r.Locks = []locksv1.LockTarget{*fromKey}
	default:
		return r, errors.New("name at least one lock with --lock REPO:PATH[:WORKSPACE[:PROJECT]] (or take it from a pipeline with --from)")
	}
	if cmd.Flags().Changed("max-holders") && (f.maxHolders < 1 || f.maxHolders > locksv1.MaxSharedHolders) {
		return r, fmt.Errorf("--max-holders %d: want 1 to %d, the most requests that may hold a lock at once", f.maxHolders, locksv1.MaxSharedHolders)
	}
	if f.shared || f.maxHolders > 0 {
		for i := range r.Locks {
			r.Locks[i].Mode = locksv1.ModeShared
			r.Locks[i].MaxHolders = f.maxHolders
		}
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
			// The holders' reasons are on their requests (spec.reason); someone who may list
			// the locks but not the requests still gets the locks, without reasons.
			var lrs locksv1.LockRequestList
			if err := c.List(cmd.Context(), &lrs, opts...); err != nil && !apierrors.IsForbidden(err) {
				return fmt.Errorf("list lockrequests: %w", err)
			}
			reasons := map[ctrlclient.ObjectKey]string{}
			for _, lr := range lrs.Items {
				if lr.Spec.Reason != "" {
					reasons[ctrlclient.ObjectKeyFromObject(&lr)] = lr.Spec.Reason
				}
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			if all {
				fmt.Fprint(w, "NAMESPACE\t")
			}
			fmt.Fprintln(w, "KEY\tHOLDER\tTOKEN\tWAITING\tEXPIRES\tREASON")
			for _, pl := range pls.Items {
				holder, expires, reason := "<free>", "", ""
				if h := pl.Status.Holder; h != nil {
					holder = locksv1.Holder{Owner: h.Owner, Pull: h.Pull}.Describe()
					if h.ExpiresAt != nil {
						expires = h.ExpiresAt.UTC().Format(time.RFC3339)
					}
					reason = holderReason(h, pl.Namespace, reasons)
				}
				if len(pl.Status.SharedHolders) > 0 {
					holder, expires, reason = sharedHoldersText(pl.Status.SharedHolders, pl.Status.MaxHolders, pl.Namespace, reasons)
				}
				if all {
					fmt.Fprintf(w, "%s\t", pl.Namespace)
				}
				fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\t%s\n", lockkey.String(pl.Spec.LockTarget), holder, pl.Status.FencingToken, pl.Status.QueueLength, expires, reason)
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "List locks in every namespace.")
	return cmd
}

// holderReason is the spec.reason of the first of the holder's requests that gives one.
func holderReason(h *locksv1.LockHolder, ns string, reasons map[ctrlclient.ObjectKey]string) string {
	for _, r := range h.Requests {
		if s := reasons[ctrlclient.ObjectKey{Namespace: ns, Name: r.Name}]; s != "" {
			return s
		}
	}
	return ""
}

// sharedHoldersText is what `locks` shows of a key held in Shared mode: every holder (and, for a
// counting lock, how many may hold it), the latest expiry and the first reason given.
func sharedHoldersText(hs []locksv1.SharedHolder, maxHolders int32, ns string, reasons map[ctrlclient.ObjectKey]string) (holder, expires, reason string) {
	names := make([]string, 0, len(hs))
	var latest *metav1.Time
	for _, h := range hs {
		names = append(names, locksv1.Holder{Owner: h.Owner, Pull: h.Pull}.Describe())
		if h.ExpiresAt != nil && (latest == nil || h.ExpiresAt.After(latest.Time)) {
			latest = h.ExpiresAt
		}
		if reason == "" {
			reason = reasons[ctrlclient.ObjectKey{Namespace: ns, Name: h.Request.Name}]
		}
	}
	holder = fmt.Sprintf("shared by %d%s: %s", len(hs), ofAtMost(maxHolders), strings.Join(names, ", "))
	if latest != nil {
		expires = latest.UTC().Format(time.RFC3339)
	}
	return holder, expires, reason
}

// ofAtMost is " of at most N" for a counting lock (a ProjectLock's status.maxHolders), else "".
func ofAtMost(maxHolders int32) string {
	if maxHolders == 0 {
		return ""
	}
	return fmt.Sprintf(" of at most %d", maxHolders)
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
			r, c, ns, err := f.resolve(cmd, g)
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
	var (
		del  bool
		pull int64
		repo string
		from string
	)
	cmd := &cobra.Command{
		Use:   "release NAME | --pull N --repo OWNER/NAME | --from atlantis|github-actions",
		Short: "Release a lock (spec.release, keeping the record; --delete to delete the request), or every lock of a pull request",
		Long: `Releases the LockRequest NAME: it is kept as Released and the next waiter is granted.

With --pull and --repo instead of NAME, releases every unfinished request in the namespace of that
pull request whose locks are in that repository, and says which: what to run when a pull request
is closed (Atlantis's "unlock by pull"). --from takes the pull and the repository from a
pipeline's variables.`,
		Example: `  kubectl turnstile release lock-x7k2p
  kubectl turnstile release --pull 100 --repo acme/infra
  kubectl turnstile release --from github-actions      # in a pull_request "closed" job`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			byPull := from != "" || cmd.Flags().Changed("pull") || cmd.Flags().Changed("repo")
			switch {
			case len(args) == 1 && byPull:
				return errors.New("give either NAME or --pull/--repo/--from, not both")
			case len(args) == 0 && !byPull:
				return errors.New("name the LockRequest to release, or give --pull N --repo OWNER/NAME")
			case byPull && del:
				return errors.New("--delete releases one request by NAME; to delete a pull request's requests use kubectl delete lr -l " + client.LabelPull + "=N")
			}
			c, ns, err := g.client()
			if err != nil {
				return err
			}
			if byPull {
				return releasePull(cmd, client.New(c, ns), from, repo, pull)
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
	cmd.Flags().Int64Var(&pull, "pull", 0, "Release every request of this pull request (with --repo).")
	cmd.Flags().StringVar(&repo, "repo", "", "The repository of the pull request, OWNER/NAME.")
	bindFrom(cmd.Flags(), &from)
	return cmd
}

// releasePull releases every request of a pull request and says which, one line each.
func releasePull(cmd *cobra.Command, tc *client.Client, from, repo string, pull int64) error {
	if from != "" {
		ci, err := fromEnv(from, os.Getenv)
		if err != nil {
			return err
		}
		if !cmd.Flags().Changed("pull") {
			pull = ci.holder.Pull
		}
		if !cmd.Flags().Changed("repo") && ci.target != nil {
			repo = ci.target.Repo
		}
	}
	switch {
	case pull <= 0:
		return errNoPull
	case repo == "":
		return errors.New("--repo OWNER/NAME is required with --pull: pull request numbers are per repository")
	}
	released, err := tc.ReleaseByPull(cmd.Context(), repo, pull)
	out := cmd.OutOrStdout()
	for _, lr := range released {
		keys := make([]string, 0, len(lr.Spec.Locks))
		for _, t := range lr.Spec.Locks {
			keys = append(keys, lockkey.String(t))
		}
		was := string(lr.Status.Phase)
		if was == "" {
			was = "not yet seen"
		}
		fmt.Fprintf(out, "lockrequest/%s released (%s, was %s): %s\n", lr.Name, locksv1.Holder{Owner: lr.Spec.Holder.Owner, Pull: lr.Spec.Holder.Pull}.Describe(), was, strings.Join(keys, ", "))
	}
	if len(released) == 0 && err == nil {
		fmt.Fprintf(out, "no unfinished lock request of pull #%d in %s in namespace %s\n", pull, repo, tc.Namespace())
	}
	return err
}
