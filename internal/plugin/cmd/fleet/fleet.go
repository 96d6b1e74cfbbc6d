// Package fleet is `kubectl turnstile fleet`: the fleet at a glance, read on its hub from the
// Spokes the hub's manager keeps, and `fleet join` and `fleet leave`, the hub admin's commands
// that admit a cluster and remove it (docs/fleet.md).
package fleet

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/plugin/cmd/util"
)

// NewCmdFleet is `fleet`: each spoke's connection, heartbeat, clock skew, holders and waiters;
// and its subcommands join and leave, which admit and remove a cluster.
func NewCmdFleet(g *util.Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fleet",
		Short: "The fleet at a glance, on its hub: each spoke's connection, heartbeat, clock skew, holders and waiters",
		Long: `fleet lists the hub's Spokes, one per member of the fleet (turnstile-fleet/turnstile-fleet-members):
whether each is connected (a hub Lease of its agent is live), since when, its last heartbeat, the clock
skew its agent measured against the hub, and how many of the hub's requests it holds and waits for.
A spoke that is not Ready says why.

fleet join NAME admits a cluster (its membership, its ServiceAccount on the hub, and the hub
kubeconfig its agent runs with); fleet leave NAME removes it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, _, err := g.Client()
			if err != nil {
				return err
			}
			var spokes locksv1.SpokeList
			if err := c.List(cmd.Context(), &spokes); err != nil {
				if meta.IsNoMatchError(err) {
					return fmt.Errorf("this cluster serves no Spokes: it is not a fleet's hub, or its Turnstile predates the fleet view (docs/fleet.md)")
				}
				return fmt.Errorf("list spokes: %w", err)
			}
			return Print(cmd.OutOrStdout(), spokes.Items, time.Now())
		},
	}
	cmd.AddCommand(NewCmdJoin(g), NewCmdLeave(g))
	return cmd
}

// Print writes the fleet view of spokes at now: a row per spoke (by name), then a summary,
// then why each spoke that is not Ready is not.
func Print(out io.Writer, spokes []locksv1.Spoke, now time.Time) error {
	if len(spokes) == 0 {
		_, err := fmt.Fprintln(out, "No spokes: this hub's fleet has no members (kubectl -n turnstile-fleet get configmap turnstile-fleet-members).")
		return err
	}
	spokes = slices.Clone(spokes)
	slices.SortFunc(spokes, func(a, b locksv1.Spoke) int { return strings.Compare(a.Name, b.Name) })
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "CLUSTER\tCONNECTION\tSINCE\tHEARTBEAT\tSKEW\tHOLDERS\tWAITERS\tKEEP-RUNNING\tAGENT\tREADY")
	count := map[locksv1.SpokeConnection]int{}
	var holders, waiters, keep int32
	var notReady, keeping []string
	versions := map[string][]string{} // agent version: its clusters
	for i := range spokes {
		sp := &spokes[i]
		conn := sp.Status.Connection
		if conn == "" {
			conn = "Unknown" // not reconciled yet
		}
		count[conn]++
		holders += sp.Status.Holders
		waiters += sp.Status.Waiters
		keep += sp.Status.KeepRunning
		if sp.Status.KeepRunning > 0 && conn != locksv1.SpokeConnected {
			keeping = append(keeping, fmt.Sprintf("%s: %d held while cut off, keep-running: held until released in the spoke, or here by an admin (kubectl turnstile release -n NAMESPACE --cluster %s NAME)",
				sp.Name, sp.Status.KeepRunning, sp.Name))
		}
		ready := "Unknown"
		if c := meta.FindStatusCondition(sp.Status.Conditions, locksv1.ConditionReady); c != nil {
			ready = string(c.Status)
			if c.Status != metav1.ConditionTrue {
				notReady = append(notReady, fmt.Sprintf("%s: %s: %s", sp.Name, c.Reason, c.Message))
			}
		}
		if stalled := meta.FindStatusCondition(sp.Status.Conditions, locksv1.ConditionStalled); stalled != nil &&
			stalled.Status == metav1.ConditionTrue && stalled.Reason != locksv1.ReasonSpokeUnreachable {
			notReady = append(notReady, fmt.Sprintf("%s: %s: %s", sp.Name, stalled.Reason, stalled.Message))
		}
		skew := "-"
		if ms := sp.Status.ClockSkewMilliseconds; ms != nil {
			skew = fmt.Sprintf("%.3fs", float64(*ms)/1000)
		}
		agent := "-"
		if v := sp.Status.AgentVersion; v != "" {
			agent = v
			versions[v] = append(versions[v], sp.Name)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", sp.Name, conn, age(sp.Status.ConnectionSince, now), age(sp.Status.LastHeartbeat, now),
			skew, sp.Status.Holders, sp.Status.Waiters, sp.Status.KeepRunning, agent, ready)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\n%d spokes: %d connected, %d unreachable, %d never connected; %d holders (%d keep-running), %d waiters.\n",
		len(spokes), count[locksv1.SpokeConnected], count[locksv1.SpokeUnreachable], count[locksv1.SpokeNever], holders, keep, waiters)
	if len(versions) > 1 {
		var each []string
		for _, v := range slices.Sorted(maps.Keys(versions)) {
			each = append(each, v+" on "+strings.Join(versions[v], ", "))
		}
		fmt.Fprintf(out, "%d agent versions: %s.\n", len(versions), strings.Join(each, "; "))
	}
	for _, s := range keeping {
		fmt.Fprintln(out, s)
	}
	for _, s := range notReady {
		fmt.Fprintln(out, s)
	}
	return nil
}

// age is how long ago t was ("-" when unset), as kubectl prints ages.
func age(t *metav1.Time, now time.Time) string {
	if t == nil {
		return "-"
	}
	return duration.HumanDuration(max(now.Sub(t.Time), 0)) + " ago"
}
