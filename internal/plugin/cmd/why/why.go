// Package why is `why`: what a lock request waits for (who holds its locks, who is ahead,
// what freezes it), or what a write freeze's refusal means and how to get past it.
package why

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
	"github.com/turnstile-dev/turnstile/internal/plugin/cmd/util"
	"github.com/turnstile-dev/turnstile/internal/queue"
)

// NewCmdWhy is `why`: a request explained, or a write freeze's refusal.
func NewCmdWhy(g *util.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "why NAME | 'REFUSAL' | -",
		Short: "Explain a lock request (who holds its locks, who is ahead, what freezes it), or a write freeze's refusal",
		Long: `Says, each fact once: the request's state (with its fencing token and expiry when granted, or
why it ended), its reason, and for each of its locks who holds it (with their token, expiry
and reason) and who waits in which order, then any CommandLock that freezes its command.

Given the text of a refusal by a write freeze instead ("... writes are frozen by commandlock
weekend ...", as kubectl, Flux, Argo CD or Helm print it; "-" reads it from standard input), it
says what the CommandLock freezes, whether it is in force now and until when, and how to get
past it.`,
		Example: `  kubectl turnstile why vpc-1
  kubectl apply -f app.yaml 2>&1 | kubectl turnstile why -`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := g.Client()
			if err != nil {
				return err
			}
			text := args[0]
			if text == "-" {
				in, err := io.ReadAll(cmd.InOrStdin())
				if err != nil {
					return err
				}
				text = string(in)
			}
			if _, ok := refusedCommandLock(text); ok {
				return explainRefusal(cmd.Context(), c, text, cmd.OutOrStdout())
			}
			if text != args[0] {
				return fmt.Errorf("no write freeze's refusal in the input (it names \"frozen by commandlock NAME\")")
			}
			return explain(cmd.Context(), c, ns, args[0], cmd.OutOrStdout())
		},
	}
}

// explain writes why: a header with the request's own state, then one block per lock.
func explain(ctx context.Context, c ctrlclient.Client, ns, name string, out io.Writer) error {
	var lr locksv1.LockRequest
	if err := c.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: name}, &lr); err != nil {
		return err
	}
	if lr.Status.Phase.IsFinal() {
		explainHeader(out, &lr, false)
		return nil // its locks are no longer its business
	}
	// The locks are told first into body, so the header knows whether a queue listed below
	// already shows this request's place.
	var body bytes.Buffer
	listed := false
	perKey := map[string]locksv1.LockStatus{}
	for _, l := range lr.Status.Locks {
		perKey[l.Name] = l
	}
	refs := lockkey.Refs(lr.Spec.Locks)
	for _, ref := range refs {
		l, err := explainLock(ctx, c, &body, &lr, ref, perKey[ref.Name], len(refs) > 1)
		if err != nil {
			return err
		}
		listed = listed || l
	}
	explainHeader(out, &lr, listed)
	if _, err := body.WriteTo(out); err != nil {
		return err
	}
	var cls locksv1.CommandLockList
	if err := c.List(ctx, &cls); err != nil {
		return err
	}
	now := time.Now()
	for i := range cls.Items {
		cl := &cls.Items[i]
		if (cl.Name == lr.Spec.Command || cl.Name == locksv1.CommandAll) && queue.IsLockInForce(cl, now) {
			explainCommandLock(out, &lr, cl, now)
		}
	}
	for i := range cls.Items {
		cl := &cls.Items[i]
		if (cl.Name == lr.Spec.Command || cl.Name == locksv1.CommandAll) && cl.Labels[locksv1.LabelMirror] == locksv1.MirrorHub {
			explainMirrorWindows(out, &lr, cl)
		}
	}
	return nil
}

// explainMirrorWindows says, in a fleet's spoke, whether the windows of the hub's CommandLock
// cl (a mirror) freeze lr, as the mirror's status judges them: the hub's judgement, or the
// spoke's own by its clock once the hub's ran out (the JudgedInSpoke condition: the agent
// holds a hub grant back while they freeze it). Namespace selectors see only the namespace's
// name here.
func explainMirrorWindows(out io.Writer, lr *locksv1.LockRequest, cl *locksv1.CommandLock) {
	windowsOnly := *cl.DeepCopy()
	windowsOnly.Spec.Locked = false // the manual freeze is told by explainCommandLock
	f, _ := queue.ResolveFreezes([]locksv1.CommandLock{windowsOnly}, queue.FreezeFlags{}, time.Time{})
	cluster := cl.Annotations[locksv1.AnnotationMirrorCluster]
	if v, ok := cl.Annotations[locksv1.AnnotationMirrorClusterLabels]; ok {
		labels := map[string]string{}
		if json.Unmarshal([]byte(v), &labels) == nil {
			f = f.InFleet(map[string]map[string]string{cluster: labels})
		}
	}
	r := lr.DeepCopy()
	r.Spec.Holder.Cluster = cluster // the spoke's requests are its cluster's on the hub
	fr, frozen := f.ForRequest(r)
	if !frozen {
		return
	}
	fmt.Fprintf(out, "  %s\n", fr.Message)
	if c := meta.FindStatusCondition(cl.Status.Conditions, locksv1.ConditionJudgedInSpoke); c != nil && c.Status == "True" {
		fmt.Fprintf(out, "    %s\n", c.Message)
		return
	}
	fmt.Fprintf(out, "    as the hub judged the windows (the hub's CommandLock, mirrored in this spoke)\n")
}

// explainCommandLock says what the CommandLock cl in force does to lr: whether its cluster
// scope holds lr's cluster, and, in a fleet's spoke, that cl is the hub's, as last seen when.
func explainCommandLock(out io.Writer, lr *locksv1.LockRequest, cl *locksv1.CommandLock, now time.Time) {
	reason := orDefault(cl.Spec.Reason, "no reason given")
	mirror := cl.Labels[locksv1.LabelMirror] == locksv1.MirrorHub
	cluster := lr.Spec.Holder.Cluster
	if mirror {
		cluster = cl.Annotations[locksv1.AnnotationMirrorCluster] // the spoke's requests are its cluster's on the hub
	}
	switch s := cl.Spec.Clusters; {
	case s == nil:
		fmt.Fprintf(out, "  commandlock/%s freezes it: %s\n", cl.Name, reason)
	case lr.Status.BlockedBy == "commandlock/"+cl.Name:
		fmt.Fprintf(out, "  commandlock/%s freezes it (it freezes %s; cluster %s is one): %s\n", cl.Name, queue.ClusterScopeText(s), cluster, reason)
	case cluster == "":
		fmt.Fprintf(out, "  commandlock/%s does not freeze it: it freezes %s, and this request was made in the hub, in no cluster\n", cl.Name, queue.ClusterScopeText(s))
	case slices.Contains(s.Names, cluster):
		fmt.Fprintf(out, "  commandlock/%s freezes it (it freezes %s; cluster %s is one): %s\n", cl.Name, queue.ClusterScopeText(s), cluster, reason)
	case s.Selector == nil:
		fmt.Fprintf(out, "  commandlock/%s does not freeze it: it freezes %s, not cluster %s\n", cl.Name, queue.ClusterScopeText(s), cluster)
	default:
		fmt.Fprintf(out, "  commandlock/%s freezes %s: %s; whether cluster %s is one is the hub's to judge, by the labels it gives its members (the request's status says the hub's verdict)\n",
			cl.Name, queue.ClusterScopeText(s), reason, cluster)
	}
	if !mirror {
		return
	}
	seen, err := time.Parse(time.RFC3339, cl.Annotations[locksv1.AnnotationHubSeenAt])
	switch {
	case err != nil:
		fmt.Fprintf(out, "    the hub's CommandLock, mirrored in this spoke (not yet dated: the agent has not read the hub since it started)\n")
	case now.Sub(seen) > mirrorStale:
		fmt.Fprintf(out, "    the hub's CommandLock, as last seen from the hub at %s (%s ago): this spoke has not heard from the hub since, so this is the freeze as it was then; nothing new is granted here until it hears again\n",
			seen.UTC().Format(time.RFC3339), now.Sub(seen).Truncate(time.Second))
	default:
		fmt.Fprintf(out, "    the hub's CommandLock, as last seen from the hub at %s\n", seen.UTC().Format(time.RFC3339))
	}
}

// mirrorStale is how old a CommandLock mirror's last sight of the hub may be before why says
// the spoke has not heard from the hub: the agent reads the hub every 30 s and dates the mirror
// once a minute (internal/fleet/spoke, MirrorRefresh), so 3 minutes is three missed dates.
const mirrorStale = 3 * time.Minute

// explainHeader writes the request's own state; listed says a queue below shows its place.
func explainHeader(out io.Writer, lr *locksv1.LockRequest, listed bool) {
	st := lr.Status
	cond := meta.FindStatusCondition(st.Conditions, locksv1.ConditionGranted)
	h := lr.Spec.Holder
	fmt.Fprintf(out, "lockrequest/%s for %s", lr.Name, locksv1.Holder{Owner: h.Owner, Pull: h.Pull, Cluster: h.Cluster}.Describe())
	if lr.Spec.Command != "" {
		fmt.Fprintf(out, ", command %s", lr.Spec.Command)
	}
	switch st.Phase {
	case "":
		fmt.Fprint(out, ": not yet seen by the controller")
	case locksv1.PhaseGranted:
		fmt.Fprintf(out, ": Granted, fencing token %d", st.FencingToken)
		if st.ExpiresAt != nil {
			fmt.Fprintf(out, ", expires %s", st.ExpiresAt.UTC().Format(time.RFC3339))
		}
	case locksv1.PhasePending:
		// Who holds or is ahead is said per lock below; only what no lock says is said here
		// (its position, when no listed queue shows it).
		fmt.Fprint(out, ": Pending")
		if st.QueuePosition > 0 && !listed {
			fmt.Fprintf(out, ", position %d", st.QueuePosition)
		}
		if cond != nil && cond.Reason != locksv1.ReasonQueued {
			fmt.Fprintf(out, " (%s)", cond.Reason)
		}
	default:
		fmt.Fprintf(out, ": %s", st.Phase)
		if cond != nil {
			fmt.Fprintf(out, " (%s): %s", cond.Reason, cond.Message)
		}
	}
	fmt.Fprintln(out)
	if st.Phase == locksv1.PhasePending && cond != nil && cond.Reason == locksv1.ReasonFrozenInSpoke {
		fmt.Fprintf(out, "  %s\n", cond.Message)
	}
	if lr.Spec.Reason != "" {
		fmt.Fprintf(out, "  reason: %s\n", lr.Spec.Reason)
	}
}

// explainLock writes one lock's block: who holds it and its queue. It returns whether the
// queue lists the request.
func explainLock(ctx context.Context, c ctrlclient.Client, body io.Writer, lr *locksv1.LockRequest, ref lockkey.Ref, mine locksv1.LockStatus, several bool) (bool, error) {
	fmt.Fprintf(body, "  lock %s: ", ref.Key)
	var pl locksv1.ProjectLock
	if err := c.Get(ctx, ctrlclient.ObjectKey{Namespace: lr.Namespace, Name: ref.Name}, &pl); err != nil {
		if apierrors.IsNotFound(err) {
			fmt.Fprintln(body, "nobody holds it (no ProjectLock yet)")
			return false, nil
		}
		return false, err
	}
	hh := pl.Status.Holder
	switch {
	case mine.Held:
		fmt.Fprint(body, "held by this request")
		if others := otherRequests(hh, lr.Name) + otherShared(pl.Status.SharedHolders, lr.Name); others != "" {
			fmt.Fprintf(body, " and %s", others)
		}
		if several {
			// The header's token is the highest of them; each key has its own.
			fmt.Fprintf(body, " (token %d)", mine.FencingToken)
		}
		fmt.Fprintln(body)
	case hh != nil:
		names := make([]string, 0, len(hh.Requests))
		for _, r := range hh.Requests {
			names = append(names, r.Name)
		}
		fmt.Fprintf(body, "held by %s via %s (token %d", locksv1.Holder{Owner: hh.Owner, Pull: hh.Pull, Cluster: hh.Cluster}.Describe(), strings.Join(names, ", "), pl.Status.FencingToken)
		if hh.ExpiresAt != nil {
			fmt.Fprintf(body, ", until %s", hh.ExpiresAt.UTC().Format(time.RFC3339))
		}
		fmt.Fprint(body, ")")
		if r := requestReason(ctx, c, lr.Namespace, hh); r != "" {
			fmt.Fprintf(body, ": %s", r)
		}
		fmt.Fprintln(body)
	case len(pl.Status.SharedHolders) > 0:
		explainShared(body, pl.Status.SharedHolders, pl.Status.MaxHolders)
	default:
		fmt.Fprintln(body, "free")
	}
	listed := false
	for i, q := range pl.Status.Queue {
		marker := ""
		if q.Request == lr.Name {
			marker = "  <- this request"
			listed = true
		}
		fmt.Fprintf(body, "    %d. %s %s (%s)%s\n", i+1, q.Request, locksv1.Holder{Owner: q.Owner, Pull: q.Pull, Cluster: q.Cluster}.Describe(), q.Priority, marker)
	}
	if rest := int(pl.Status.QueueLength) - len(pl.Status.Queue); rest > 0 {
		fmt.Fprintf(body, "    ... and %d more waiting\n", rest)
	}
	return listed, nil
}

// explainShared writes a key's shared holders, each with its own token, and for a counting lock
// how many may hold it.
func explainShared(body io.Writer, hs []locksv1.SharedHolder, maxHolders int32) {
	fmt.Fprintf(body, "held shared by %d%s:", len(hs), util.OfAtMost(maxHolders))
	for i, h := range hs {
		sep := ","
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(body, "%s %s via %s (token %d", sep, locksv1.Holder{Owner: h.Owner, Pull: h.Pull, Cluster: h.Cluster}.Describe(), h.Request.Name, h.FencingToken)
		if h.ExpiresAt != nil {
			fmt.Fprintf(body, ", until %s", h.ExpiresAt.UTC().Format(time.RFC3339))
		}
		fmt.Fprint(body, ")")
	}
	fmt.Fprintln(body)
}

// otherShared names the shared holders other than self, "" when none: "alice via r1, bob via r2".
func otherShared(hs []locksv1.SharedHolder, self string) string {
	var names []string
	for _, h := range hs {
		if h.Request.Name != self {
			names = append(names, locksv1.Holder{Owner: h.Owner, Pull: h.Pull, Cluster: h.Cluster}.Describe()+" via "+h.Request.Name)
		}
	}
	if len(names) == 0 {
		return ""
	}
	return "shared with " + strings.Join(names, ", ")
}

// otherRequests names the holder's requests other than self ("b, c"), or "".
func otherRequests(h *locksv1.LockHolder, self string) string {
	if h == nil {
		return ""
	}
	var names []string
	for _, r := range h.Requests {
		if r.Name != self {
			names = append(names, r.Name)
		}
	}
	return strings.Join(names, ", ")
}

// requestReason is the spec.reason of the first of the holder's requests that gives one. A
// request that cannot be read gives none: why explains what it can.
func requestReason(ctx context.Context, c ctrlclient.Client, ns string, h *locksv1.LockHolder) string {
	for _, r := range h.Requests {
		var lr locksv1.LockRequest
		if err := c.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: r.Name}, &lr); err == nil && lr.Spec.Reason != "" {
			return lr.Spec.Reason
		}
	}
	return ""
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
