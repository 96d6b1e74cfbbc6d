package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/dashboard"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
	"github.com/turnstile-dev/turnstile/internal/queue"
)

func newFreezeCmd(g *globals) *cobra.Command {
	var (
		reason string
		until  string
		drain  bool
		wait   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "freeze COMMAND",
		Short: "Freeze a command (e.g. apply, or all) cluster-wide; optionally wait until its holders drain",
		Long: `Creates or updates the CommandLock named COMMAND with locked: true. Requests for the command
wait (reason CommandLocked) until it is thawed or --until passes; holders already granted keep
their grant. With --wait-drained, returns once none of them is left: maintenance may start.`,
		Example: `  kubectl turnstile freeze apply --reason "maintenance window" --until 2h --wait-drained`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, _, err := g.client()
			if err != nil {
				return err
			}
			spec := locksv1.CommandLockSpec{Locked: true, Reason: reason}
			if until != "" {
				t, err := dashboard.ParseUntil(until, time.Now())
				if err != nil {
					return err
				}
				spec.Until = &metav1.Time{Time: t}
			}
			ctx := cmd.Context()
			if err := dashboard.FreezeCommand(ctx, c, args[0], spec); err != nil {
				return fmt.Errorf("freeze %s: %w", args[0], err)
			}
			var cl locksv1.CommandLock
			fmt.Fprintf(cmd.OutOrStdout(), "commandlock/%s frozen\n", args[0])
			if !drain {
				return nil
			}
			deadline := time.Now().Add(wait)
			last := int32(-1)
			for {
				if err := c.Get(ctx, ctrlclient.ObjectKey{Name: args[0]}, &cl); err != nil {
					return err
				}
				if cond := meta.FindStatusCondition(cl.Status.Conditions, locksv1.ConditionDrained); cond != nil &&
					cond.Status == metav1.ConditionTrue && cond.ObservedGeneration >= cl.Generation {
					fmt.Fprintf(cmd.OutOrStdout(), "commandlock/%s drained: no holder of %s is left\n", args[0], args[0])
					return nil
				}
				if cl.Status.ActiveHolders != last {
					last = cl.Status.ActiveHolders
					fmt.Fprintf(cmd.ErrOrStderr(), "waiting for %d active holder(s) to release\n", last)
				}
				if wait > 0 && time.Now().After(deadline) {
					return fmt.Errorf("commandlock/%s: still %d active holder(s) after %s", args[0], cl.Status.ActiveHolders, wait)
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(200 * time.Millisecond):
				}
			}
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "Shown to everyone who waits, e.g. \"maintenance window\".")
	cmd.Flags().StringVar(&until, "until", "", "Thaw automatically: an RFC 3339 time or a duration from now (e.g. 2h).")
	cmd.Flags().BoolVar(&drain, "wait-drained", false, "Wait until no granted holder of the command is left.")
	cmd.Flags().DurationVar(&wait, "timeout", 0, "With --wait-drained: give up after this long (default: wait until interrupted).")
	return cmd
}

func newThawCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "thaw COMMAND",
		Short: "Thaw a frozen command: its waiting requests are granted in queue order",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, _, err := g.client()
			if err != nil {
				return err
			}
			var cl locksv1.CommandLock
			if err := c.Get(cmd.Context(), ctrlclient.ObjectKey{Name: args[0]}, &cl); err != nil {
				if apierrors.IsNotFound(err) {
					fmt.Fprintf(cmd.OutOrStdout(), "commandlock/%s does not exist: %s is not frozen\n", args[0], args[0])
					return nil
				}
				return err
			}
			patch := ctrlclient.MergeFrom(cl.DeepCopy())
			cl.Spec.Locked = false
			if err := c.Patch(cmd.Context(), &cl, patch); err != nil {
				return fmt.Errorf("thaw %s: %w", args[0], err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "commandlock/%s thawed\n", args[0])
			return nil
		},
	}
}

func newWhyCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "why NAME",
		Short: "Explain a lock request: who holds its locks, who is ahead of it, what freezes it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := g.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			var lr locksv1.LockRequest
			if err := c.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: args[0]}, &lr); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			h := lr.Spec.Holder
			fmt.Fprintf(out, "lockrequest/%s for %s", lr.Name, locksv1.Holder{Owner: h.Owner, Pull: h.Pull}.Describe())
			if lr.Spec.Command != "" {
				fmt.Fprintf(out, ", command %s", lr.Spec.Command)
			}
			fmt.Fprintf(out, ": %s\n", orDefault(string(lr.Status.Phase), "not yet seen by the controller"))
			if cond := meta.FindStatusCondition(lr.Status.Conditions, locksv1.ConditionGranted); cond != nil {
				fmt.Fprintf(out, "  %s: %s\n", cond.Reason, cond.Message)
			}
			if lr.Status.FencingToken != 0 {
				fmt.Fprintf(out, "  fencing token %d", lr.Status.FencingToken)
				if lr.Status.ExpiresAt != nil {
					fmt.Fprintf(out, ", expires %s", lr.Status.ExpiresAt.UTC().Format(time.RFC3339))
				}
				fmt.Fprintln(out)
			}
			held := map[string]bool{}
			for _, l := range lr.Status.Locks {
				held[l.Name] = l.Held
			}
			for _, ref := range lockkey.Refs(lr.Spec.Locks) {
				fmt.Fprintf(out, "  lock %s", ref.Key)
				if held[ref.Name] {
					fmt.Fprint(out, " (held by this request)")
				}
				fmt.Fprintln(out)
				var pl locksv1.ProjectLock
				if err := c.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: ref.Name}, &pl); err != nil {
					if apierrors.IsNotFound(err) {
						fmt.Fprintln(out, "    projectlock not created: nobody holds it")
						continue
					}
					return err
				}
				if hh := pl.Status.Holder; hh != nil {
					names := make([]string, 0, len(hh.Requests))
					for _, r := range hh.Requests {
						names = append(names, r.Name)
					}
					fmt.Fprintf(out, "    held by %s via %s (token %d", locksv1.Holder{Owner: hh.Owner, Pull: hh.Pull}.Describe(), strings.Join(names, ", "), pl.Status.FencingToken)
					if hh.ExpiresAt != nil {
						fmt.Fprintf(out, ", until %s", hh.ExpiresAt.UTC().Format(time.RFC3339))
					}
					fmt.Fprintln(out, ")")
				} else {
					fmt.Fprintln(out, "    free")
				}
				for i, q := range pl.Status.Queue {
					marker := ""
					if q.Request == lr.Name {
						marker = "  <- this request"
					}
					fmt.Fprintf(out, "    %d. %s %s (%s)%s\n", i+1, q.Request, locksv1.Holder{Owner: q.Owner, Pull: q.Pull}.Describe(), q.Priority, marker)
				}
				if rest := int(pl.Status.QueueLength) - len(pl.Status.Queue); rest > 0 {
					fmt.Fprintf(out, "    ... and %d more waiting\n", rest)
				}
			}
			var cls locksv1.CommandLockList
			if err := c.List(ctx, &cls); err != nil {
				return err
			}
			for i := range cls.Items {
				cl := &cls.Items[i]
				if (cl.Name == lr.Spec.Command || cl.Name == locksv1.CommandAll) && queue.IsLockInForce(cl, time.Now()) {
					fmt.Fprintf(out, "  commandlock/%s freezes it: %s\n", cl.Name, orDefault(cl.Spec.Reason, "no reason given"))
				}
			}
			return nil
		},
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
