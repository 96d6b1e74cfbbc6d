package locks

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/fleet/spoke"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
	"github.com/turnstile-dev/turnstile/internal/plugin/ci"
	"github.com/turnstile-dev/turnstile/internal/plugin/cmd/util"
	"github.com/turnstile-dev/turnstile/pkg/client"
)

// NewCmdRelease is `release`: one request by name, or every request of a pull request.
func NewCmdRelease(g *util.Globals) *cobra.Command {
	var (
		del     bool
		pull    int64
		repo    string
		from    string
		cluster string
	)
	cmd := &cobra.Command{
		Use:   "release NAME | --pull N --repo OWNER/NAME | --from atlantis|github-actions",
		Short: "Release a lock (spec.release, keeping the record; --delete to delete the request), or every lock of a pull request",
		Long: `Releases the LockRequest NAME: it is kept as Released and the next waiter is granted.

With --pull and --repo instead of NAME, releases every unfinished request in the namespace of that
pull request whose locks are in that repository, and says which: what to run when a pull request
is closed (Atlantis's "unlock by pull"). --from takes the pull and the repository from a
pipeline's variables.

On a fleet's hub, --cluster names the spoke a request came from, and NAME is its name in that
spoke: the hub's request <cluster>.<NAME> is released (an admin's release, the "override"
permission: turnstile-admin). That is how a lock held by a holder that opted out of the
partition stop (fleet.turnstile.dev/on-partition: keep-running) is let go while its spoke is
cut off or gone; its workload, if it still runs, is stopped once the spoke hears the hub again.`,
		Example: `  kubectl turnstile release lock-x7k2p
  kubectl turnstile release --pull 100 --repo acme/infra
  kubectl turnstile release --from github-actions      # in a pull_request "closed" job
  kubectl turnstile release -n team-a --cluster eu-west-1 job-migrate   # on a fleet's hub`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			byPull := from != "" || cmd.Flags().Changed("pull") || cmd.Flags().Changed("repo")
			switch {
			case len(args) == 1 && byPull:
				return errors.New("give either NAME or --pull/--repo/--from, not both")
			case len(args) == 0 && !byPull:
				return errors.New("name the LockRequest to release, or give --pull N --repo OWNER/NAME")
			case byPull && cluster != "":
				return errors.New("--cluster releases one request by NAME, as its spoke names it; a pull request's requests in the hub are released with --pull and --repo alone")
			case byPull && del:
				return errors.New("--delete releases one request by NAME; to delete a pull request's requests use kubectl delete lr -l " + client.LabelPull + "=N")
			}
			c, ns, err := g.Client()
			if err != nil {
				return err
			}
			if byPull {
				return releasePull(cmd, client.New(c, ns), from, repo, pull)
			}
			return releaseOne(cmd, c, ns, args[0], cluster, del)
		},
	}
	cmd.Flags().BoolVar(&del, "delete", false, "Delete the LockRequest instead of keeping it as Released.")
	cmd.Flags().Int64Var(&pull, "pull", 0, "Release every request of this pull request (with --repo).")
	cmd.Flags().StringVar(&repo, "repo", "", "The repository of the pull request, OWNER/NAME.")
	cmd.Flags().StringVar(&cluster, "cluster", "", "On a fleet's hub: the spoke NAME comes from (--cluster-name of its agent); releases the hub's request <cluster>.<NAME>.")
	util.BindFrom(cmd.Flags(), &from)
	return cmd
}

// releaseOne releases (or, with del, deletes) the request named arg in ns; with cluster, the
// hub's request of that spoke's request arg (<cluster>.<arg>), which must be that cluster's.
func releaseOne(cmd *cobra.Command, c ctrlclient.WithWatch, ns, arg, cluster string, del bool) error {
	name := arg
	if cluster != "" {
		name = spoke.HubName(cluster, name)
	}
	var lr locksv1.LockRequest
	if err := c.Get(cmd.Context(), ctrlclient.ObjectKey{Namespace: ns, Name: name}, &lr); err != nil {
		if apierrors.IsNotFound(err) && cluster != "" {
			return fmt.Errorf("lockrequest %s/%s not found: no request %s of cluster %s on this hub (kubectl get lockrequests -n %s -l %s=%s lists them)",
				ns, name, arg, cluster, ns, spoke.LabelCluster, cluster)
		}
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("lockrequest %s/%s not found", ns, name)
		}
		return err
	}
	if cluster != "" && lr.Spec.Holder.Cluster != cluster {
		return fmt.Errorf("lockrequest %s/%s is not cluster %s's (its holder is in %q): release it by its own name, without --cluster", ns, name, cluster, lr.Spec.Holder.Cluster)
	}
	lock := client.New(c, ns).LockFor(&lr)
	var err error
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
	did := "released"
	if del {
		did = "deleted"
	}
	fmt.Fprintf(cmd.OutOrStdout(), "lockrequest/%s %s\n", name, did)
	return nil
}

// releasePull releases every request of a pull request and says which, one line each.
func releasePull(cmd *cobra.Command, tc *client.Client, from, repo string, pull int64) error {
	if from != "" {
		env, err := ci.FromEnv(from, os.Getenv)
		if err != nil {
			return err
		}
		if !cmd.Flags().Changed("pull") {
			pull = env.Holder.Pull
		}
		if !cmd.Flags().Changed("repo") && env.Target != nil {
			repo = env.Target.Repo
		}
	}
	switch {
	case pull <= 0:
		return ci.ErrNoPull
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
		fmt.Fprintf(out, "lockrequest/%s released (%s, was %s): %s\n", lr.Name, locksv1.Holder{Owner: lr.Spec.Holder.Owner, Pull: lr.Spec.Holder.Pull, Cluster: lr.Spec.Holder.Cluster}.Describe(), was, strings.Join(keys, ", "))
	}
	if len(released) == 0 && err == nil {
		fmt.Fprintf(out, "no unfinished lock request of pull #%d in %s in namespace %s\n", pull, repo, tc.Namespace())
	}
	return err
}
