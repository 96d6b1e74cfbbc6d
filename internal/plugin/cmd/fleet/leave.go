package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/fleet/members"
	"github.com/turnstile-dev/turnstile/internal/plugin/cmd/util"
	"github.com/turnstile-dev/turnstile/pkg/client"
)

// NewCmdLeave is `fleet leave NAME`: the inverse of join.
func NewCmdLeave(g *util.Globals) *cobra.Command {
	var releaseKeepRunning bool
	cmd := &cobra.Command{
		Use:   "leave NAME",
		Short: "Remove cluster NAME from the fleet (run against the hub): membership and its ServiceAccount, so its tokens stop working",
		Long: `leave removes cluster NAME from the fleet whose hub the current kubeconfig names: its key in the
members ConfigMap turnstile-fleet/turnstile-fleet-members (the hub's policies then refuse the
cluster's requests, and the hub's manager deletes its Spoke), and the ServiceAccount
turnstile-fleet/spoke-NAME (every token join gave it stops working within 10s, as long as the
API server caches a token's authentication).

What the spoke held: its agent can no longer renew its hub Leases, so they lapse
--hub-lease-duration (40s by default) after its last renewal, and the hub hands its locks on
(HolderLost), as for a spoke that died; the agent, cut off, stops its running holders before
that, as in a partition. Its requests on the hub are released then, not deleted.

A holder that opted out of that stop (fleet.turnstile.dev/on-partition: keep-running) names no
hub Lease: its lock never passes on by itself, and once the cluster has left nobody there can
release it. So leave first looks for the cluster's keep-running requests on the hub: those still
waiting it releases (they would be granted to a cluster that is gone); if one is granted, its
workload may still run, and leave changes nothing and lists them, unless
--release-keep-running says their workloads are stopped (leave then releases them too).

Running leave again, or for a cluster that is no member, changes nothing and says so.

leave needs, on the hub: get and update on configmaps turnstile-fleet-members, and delete on
serviceaccounts, in namespace turnstile-fleet; list on lockrequests in every namespace; and to
release keep-running requests, an admin's release (turnstile-admin where they are).`,
		Example: `  kubectl turnstile fleet leave eu-west-1
  kubectl turnstile fleet leave eu-west-1 --release-keep-running   # its keep-running workloads are stopped`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return leave(cmd.Context(), g, args[0], releaseKeepRunning, cmd.ErrOrStderr())
		},
	}
	cmd.Flags().BoolVar(&releaseKeepRunning, "release-keep-running", false,
		"Release the cluster's keep-running grants too (their workloads are stopped): without it, leave refuses while the cluster holds one.")
	return cmd
}

// leave removes cluster name from the members and deletes its ServiceAccount, after releasing
// its keep-running requests that wait (and, with releaseGranted, those granted), or refusing to
// leave one granted behind.
func leave(ctx context.Context, g *util.Globals, name string, releaseGranted bool, stderr io.Writer) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	c, _, err := g.Client()
	if err != nil {
		return err
	}
	if err := checkRights(ctx, c, "leave", []right{
		{"get", "configmaps", "", members.ConfigMap}, {"update", "configmaps", "", members.ConfigMap},
		{"delete", "serviceaccounts", "", serviceAccount(name)},
	}); err != nil {
		return err
	}
	kept, err := keepRunningOf(ctx, c, name)
	if err != nil {
		return err
	}
	var granted []string
	for i := range kept {
		if kept[i].Status.Phase == locksv1.PhaseGranted {
			granted = append(granted, kept[i].Namespace+"/"+kept[i].Name)
		}
	}
	// guard:fleet-leave-keep-running-refused
	if len(granted) > 0 && !releaseGranted {
		return fmt.Errorf("cluster %s holds %d keep-running grant(s) on the hub (%s): they name no hub Lease, so they never pass on by themselves, and once it has left nobody there can release them; "+
			"stop their workloads in %s, then run leave again with --release-keep-running (or release each: kubectl turnstile release -n NAMESPACE --cluster %s NAME); nothing was changed",
			name, len(granted), strings.Join(clipList(granted, 5), ", "), name, name)
	}
	_, changed, err := updateMembers(ctx, c, stderr, name, func(cm *corev1.ConfigMap) (bool, map[string]string, error) {
		// guard:fleet-leave-members
		if _, ok := cm.Data[name]; !ok {
			return false, nil, nil
		}
		delete(cm.Data, name)
		return true, nil, nil
	})
	if err != nil {
		return err
	}
	if changed {
		fmt.Fprintf(stderr, "cluster %s is no member of the fleet any more: the hub refuses its requests, and its Spoke goes\n", name)
	} else {
		fmt.Fprintf(stderr, "cluster %s was no member of the fleet: unchanged\n", name)
	}
	sa := serviceAccount(name)
	// guard:fleet-leave-revokes
	err = c.Delete(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: members.Namespace, Name: sa}})
	switch {
	case err == nil:
		fmt.Fprintf(stderr, "serviceaccount %s/%s deleted: its tokens stop authenticating within 10s (the API server's token cache)\n", members.Namespace, sa)
	case apierrors.IsNotFound(err):
		fmt.Fprintf(stderr, "serviceaccount %s/%s was gone already\n", members.Namespace, sa)
	default:
		return permission(err, "delete", "serviceaccounts", sa)
	}
	// Released once the cluster can write no more (a release it made meanwhile is not undone).
	var errs []error
	for i := range kept {
		lr := &kept[i]
		if err := client.New(c, lr.Namespace).LockFor(lr).Release(ctx); err != nil && !errors.Is(err, client.ErrLost) {
			errs = append(errs, fmt.Errorf("release the keep-running request %s/%s: %w", lr.Namespace, lr.Name, err))
			continue
		}
		was := "waiting"
		if lr.Status.Phase == locksv1.PhaseGranted {
			was = "granted"
		}
		fmt.Fprintf(stderr, "lockrequest %s/%s released: a keep-running request of %s (%s)\n", lr.Namespace, lr.Name, name, was)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cluster %s has left the fleet, but: %w", name, err)
	}
	fmt.Fprintf(stderr, "its hub Leases lapse %s (--hub-lease-duration, by default) after its agent's last renewal, and the hub hands its locks on\n", defaultHubLease)
	return nil
}

// keepRunningOf are the hub requests of cluster that opted out of the partition stop and are
// not over: spec.holder.cluster the cluster's, no holder Lease, the annotation, not final nor
// being released. Read from every namespace (a spoke's requests are in its fleet namespaces).
func keepRunningOf(ctx context.Context, c ctrlclient.Client, cluster string) ([]locksv1.LockRequest, error) {
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Group: locksv1.GroupVersion.Group, Resource: "lockrequests"}}}
	if err := c.Create(ctx, review); err == nil && !review.Status.Allowed {
		return nil, fmt.Errorf("you may not list lockrequests in every namespace on the hub: fleet leave needs it to find cluster %s's keep-running requests, which never pass on by themselves; nothing was changed", cluster)
	}
	var list locksv1.LockRequestList
	if err := c.List(ctx, &list, ctrlclient.MatchingLabels{labelCluster: cluster}); err != nil {
		return nil, fmt.Errorf("list cluster %s's requests on the hub: %w", cluster, err)
	}
	var out []locksv1.LockRequest
	for _, lr := range list.Items {
		if lr.Spec.Holder.Cluster == cluster && lr.Spec.Holder.Lease == "" && locksv1.KeepsRunning(lr.Annotations) &&
			!lr.Status.Phase.IsFinal() && !lr.Spec.Release && lr.DeletionTimestamp == nil {
			out = append(out, lr)
		}
	}
	return out, nil
}

// clipList is the first n of s, and how many more.
func clipList(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(s[:n:n], fmt.Sprintf("and %d more", len(s)-n))
}
