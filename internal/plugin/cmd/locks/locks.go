// Package locks is the commands of a lock's life: `locks` lists the keys, `acquire` takes
// locks and waits for the grant, `release` gives them back (one request, or every request of a
// pull request).
package locks

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
	"github.com/turnstile-dev/turnstile/internal/plugin/cmd/util"
)

// NewCmdLocks is `locks`: the lock keys with their holders, tokens, queues and expiry.
func NewCmdLocks(g *util.Globals) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "locks",
		Short: "List lock keys: holder, fencing token, waiting requests, expiry",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, ns, err := g.Client()
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
					holder = locksv1.Holder{Owner: h.Owner, Pull: h.Pull, Cluster: h.Cluster}.Describe()
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
		names = append(names, locksv1.Holder{Owner: h.Owner, Pull: h.Pull, Cluster: h.Cluster}.Describe())
		if h.ExpiresAt != nil && (latest == nil || h.ExpiresAt.After(latest.Time)) {
			latest = h.ExpiresAt
		}
		if reason == "" {
			reason = reasons[ctrlclient.ObjectKey{Namespace: ns, Name: h.Request.Name}]
		}
	}
	holder = fmt.Sprintf("shared by %d%s: %s", len(hs), util.OfAtMost(maxHolders), strings.Join(names, ", "))
	if latest != nil {
		expires = latest.UTC().Format(time.RFC3339)
	}
	return holder, expires, reason
}
