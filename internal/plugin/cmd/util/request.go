package util

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
	"github.com/turnstile-dev/turnstile/internal/plugin/ci"
	"github.com/turnstile-dev/turnstile/pkg/client"
)

// RequestFlags describe a LockRequest on the command line: acquire's and run's flags.
type RequestFlags struct {
	locks       []string
	name        string
	owner       string
	pull        int64
	url         string
	command     string
	priority    string
	TTL         time.Duration
	WaitTimeout time.Duration
	reason      string
	from        string
	shared      bool
	maxHolders  int32
}

// Bind adds the flags to fs.
func (f *RequestFlags) Bind(fs *pflag.FlagSet) {
	fs.StringArrayVarP(&f.locks, "lock", "l", nil, "A lock to take, "+lockkey.Syntax+" (workspace defaults to \"default\"); repeat for several, taken in canonical order.")
	fs.StringVar(&f.name, "name", "", "Name of the LockRequest (default: generated).")
	fs.StringVar(&f.owner, "owner", defaultOwner(), "Who holds the lock (shown to everyone waiting).")
	fs.Int64Var(&f.pull, "pull", 0, "Pull request number; the same owner and pull re-enter a lock they hold.")
	fs.StringVar(&f.url, "url", "", "Link to the pull request or pipeline run, shown to people waiting.")
	fs.StringVar(&f.command, "command", "", "The command the lock is for (e.g. plan, apply), so a CommandLock can freeze it.")
	fs.Var(NewEnum(&f.priority, string(locksv1.PriorityLow), string(locksv1.PriorityNormal), string(locksv1.PriorityHigh), string(locksv1.PriorityCritical)),
		"priority", "Low, Normal (default), High or Critical, in any case.")
	fs.DurationVar(&f.TTL, "ttl", 0, "How long the grant lasts (default: the operator's --default-ttl).")
	fs.DurationVar(&f.WaitTimeout, "wait-timeout", 0, "Give up after waiting this long; 0s fails at once if the lock is busy (default: wait until interrupted).")
	fs.StringVar(&f.reason, "reason", "", "Why the lock is taken, told to everyone waiting: \"locked by pull #100 (alice): migrating state\".")
	fs.BoolVar(&f.shared, "shared", false, "Take every lock in Shared mode: held together with other shared requests (e.g. plans), while an exclusive one (an apply) waits for them and then holds alone; a shared request never passes an exclusive one waiting ahead of it.")
	fs.Int32Var(&f.maxHolders, "max-holders", 0, "Take every lock as a counting lock: Shared, held only while at most N requests hold it, this one included (--max-holders 3: at most three clusters upgrade at once); each holder gets a fencing token of its own. Implies --shared. 1 to 100.")
	BindFrom(fs, &f.from)
}

// BindFrom adds --from, which takes the request from a pipeline's own variables.
func BindFrom(fs *pflag.FlagSet, from *string) {
	fs.Var(NewEnum(from, ci.Atlantis, ci.GitHubActions), "from", `Take the lock key, holder and command from a pipeline's variables: "atlantis" (in a repos.yaml
run step: BASE_REPO_OWNER/BASE_REPO_NAME, REPO_REL_DIR, WORKSPACE, PROJECT_NAME; PULL_AUTHOR, PULL_NUM,
PULL_URL; COMMAND_NAME) or "github-actions" (GITHUB_REPOSITORY, the pull request of GITHUB_REF or
GITHUB_EVENT_PATH, its author or GITHUB_ACTOR). Flags given explicitly win.`)
}

// defaultOwner is $TURNSTILE_OWNER; when it is unset, pkg/client fills in the user name the
// API server knows the caller by (client.WhoAmI), as the admission policies require.
func defaultOwner() string { return os.Getenv("TURNSTILE_OWNER") }

// Resolve builds the request from the flags and the client, with its namespace, from the
// global flags: what every command that takes locks starts with.
func (f *RequestFlags) Resolve(cmd *cobra.Command, g *Globals) (client.Request, ctrlclient.WithWatch, string, error) {
	r, err := f.Request(cmd)
	if err != nil {
		return r, nil, "", err
	}
	c, ns, err := g.Client()
	return r, c, ns, err
}

// Request builds the request from the flags (and, with --from, the pipeline's variables).
func (f *RequestFlags) Request(cmd *cobra.Command) (client.Request, error) {
	r := client.Request{
		Name: f.name, Holder: locksv1.Holder{Owner: f.owner, Pull: f.pull, URL: f.url},
		Command: f.command, Priority: locksv1.Priority(f.priority), TTL: f.TTL, Reason: f.reason,
	}
	var fromKey *locksv1.LockTarget
	if f.from != "" {
		env, err := ci.FromEnv(f.from, os.Getenv)
		if err != nil {
			return r, err
		}
		changed := cmd.Flags().Changed
		if !changed("owner") {
			r.Holder.Owner = env.Holder.Owner
		}
		if !changed("pull") {
			r.Holder.Pull = env.Holder.Pull
		}
		if !changed("url") {
			r.Holder.URL = env.Holder.URL
		}
		if !changed("command") {
			r.Command = env.Command
		}
		if r.Name == "" {
			r.GenerateName = env.Prefix
		}
		fromKey = env.Target
	}
	switch {
	case len(f.locks) > 0:
		for _, l := range f.locks {
			t, err := lockkey.Parse(l)
			if err != nil {
				return r, fmt.Errorf("--lock %w", err)
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
		d := f.WaitTimeout
		r.WaitTimeout = &d
	}
	return r, nil
}
