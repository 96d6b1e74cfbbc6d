// Package freeze is the commands that stop commands and writes: `freeze` (a CommandLock locked
// now, or in recurring windows, and optionally a write freeze refused at admission), `thaw`, and
// `break-glass` (writing past a write freeze, recorded).
package freeze

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/dashboard"
	"github.com/turnstile-dev/turnstile/internal/plugin/cmd/util"
)

// NewCmdFreeze is `freeze`: a CommandLock locked now, or a window added to it, and optionally a
// write freeze (spec.admission).
func NewCmdFreeze(g *util.Globals) *cobra.Command {
	var (
		reason string
		until  string
		drain  bool
		wait   time.Duration
		newCmd bool
		win    windowFlags
		adm    admissionFlags
	)
	cmd := &cobra.Command{
		Use:   "freeze COMMAND",
		Short: "Freeze a command (e.g. apply, or all) cluster-wide, now or in recurring windows; optionally wait until its holders drain",
		Long: `Creates or updates the CommandLock named COMMAND with locked: true. Requests for the command
wait (reason CommandLocked) until it is thawed or --until passes; holders already granted keep
their grant. With --wait-drained, returns once none of them is left: maintenance may start.
COMMAND is a command Turnstile knows (` + "all, apply, plan, import, state, ..." + `) or one an existing
CommandLock names; any other name is refused (a typo would freeze nothing) unless --new-command.

With --window (or --schedule and --duration) it adds or replaces one recurring window in
spec.windows instead, and leaves spec.locked alone: ` + windowHelp + `

` + admissionHelp,
		Example: `  kubectl turnstile freeze apply --reason "maintenance window" --until 2h --wait-drained
  kubectl turnstile freeze apply --window 'Fri 16:00 -> Mon 08:00 Europe/Berlin' --window-name friday
  kubectl turnstile freeze apply --window-name maint --schedule '0 22 * * *' --duration 4h --action Allow --repo 'acme/*'
  kubectl turnstile freeze weekend --window 'Fri 18:00 -> Mon 06:00 Europe/Berlin' --window-name weekend \
    --enforce-namespaces env=prod --service-account flux-system/kustomize-controller --service-account argocd/argocd-application-controller`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, _, err := g.Client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			enforce, err := adm.build()
			if err != nil {
				return err
			}
			// A write freeze is what a name of its own is for: any name will do.
			if !newCmd && enforce == nil {
				if err := checkCommandName(ctx, c, args[0]); err != nil {
					return err
				}
			}
			if win.set() {
				if err := addWindow(ctx, c, args[0], win, cmd.OutOrStdout()); err != nil {
					return err
				}
			} else if err := freezeNow(ctx, c, args[0], reason, until, cmd.OutOrStdout()); err != nil {
				return err
			}
			if enforce != nil {
				if err := setAdmission(ctx, c, args[0], enforce, cmd.OutOrStdout()); err != nil {
					return err
				}
			}
			if !drain {
				return nil
			}
			return waitDrained(ctx, c, args[0], wait, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "Shown to everyone who waits, e.g. \"maintenance window\".")
	cmd.Flags().StringVar(&until, "until", "", "Thaw automatically: an RFC 3339 time or a duration from now (e.g. 2h).")
	cmd.Flags().BoolVar(&drain, "wait-drained", false, "Wait until no granted holder of the command is left.")
	cmd.Flags().BoolVar(&newCmd, "new-command", false, "Freeze COMMAND although it is neither a known command nor an existing CommandLock (a command of your own pipelines).")
	cmd.Flags().DurationVar(&wait, "timeout", 0, "With --wait-drained: give up after this long (default: wait until interrupted).")
	win.register(cmd)
	adm.register(cmd)
	return cmd
}

// freezeNow freezes the CommandLock name by hand (spec.locked), up to --until when given.
func freezeNow(ctx context.Context, c ctrlclient.Client, name, reason, until string, out io.Writer) error {
	spec := locksv1.CommandLockSpec{Locked: true, Reason: reason}
	if until != "" {
		t, err := dashboard.ParseUntil(until, time.Now())
		if err != nil {
			return err
		}
		spec.Until = &metav1.Time{Time: t}
	}
	if err := dashboard.FreezeCommand(ctx, c, name, spec); err != nil {
		return fmt.Errorf("freeze %s: %w", name, err)
	}
	fmt.Fprintf(out, "commandlock/%s frozen\n", name)
	return nil
}

// checkCommandName refuses a name that is neither a known command nor an existing CommandLock:
// a typo would freeze nothing.
func checkCommandName(ctx context.Context, c ctrlclient.Client, name string) error {
	if slices.Contains(knownCommands, name) {
		return nil
	}
	var existing locksv1.CommandLockList
	if err := c.List(ctx, &existing); err != nil {
		return fmt.Errorf("freeze %s: list CommandLocks to check the name: %w", name, err)
	}
	var names []string
	for _, cl := range existing.Items {
		names = append(names, cl.Name)
	}
	if !slices.Contains(names, name) {
		return unknownCommand(name, names)
	}
	return nil
}

// waitDrained polls the CommandLock name until its Drained condition is True for its current
// generation, or wait (when positive) runs out.
func waitDrained(ctx context.Context, c ctrlclient.Client, name string, wait time.Duration, out, errOut io.Writer) error {
	deadline := time.Now().Add(wait)
	last := int32(-1)
	for {
		var cl locksv1.CommandLock
		if err := c.Get(ctx, ctrlclient.ObjectKey{Name: name}, &cl); err != nil {
			return err
		}
		if cond := meta.FindStatusCondition(cl.Status.Conditions, locksv1.ConditionDrained); cond != nil &&
			cond.Status == metav1.ConditionTrue && cond.ObservedGeneration >= cl.Generation {
			fmt.Fprintf(out, "commandlock/%s drained: no holder of %s is left\n", name, name)
			return nil
		}
		if cl.Status.ActiveHolders != last {
			last = cl.Status.ActiveHolders
			fmt.Fprintf(errOut, "waiting for %d active holder(s) to release\n", last)
		}
		if wait > 0 && time.Now().After(deadline) {
			return fmt.Errorf("commandlock/%s: still %d active holder(s) after %s", name, cl.Status.ActiveHolders, wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// NewCmdThaw is `thaw`: a CommandLock unlocked, or one of its windows removed.
func NewCmdThaw(g *util.Globals) *cobra.Command {
	var win string
	cmd := &cobra.Command{
		Use:   "thaw COMMAND",
		Short: "Thaw a frozen command: its waiting requests are granted in queue order",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, _, err := g.Client()
			if err != nil {
				return err
			}
			if win != "" {
				return removeWindow(cmd.Context(), c, args[0], win, cmd.OutOrStdout())
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
	cmd.Flags().StringVar(&win, "window", "", "Remove this window (by name) from spec.windows instead; spec.locked stays as it is.")
	return cmd
}

// knownCommands are the command names Turnstile's users lock for: Atlantis' commands (its
// COMMAND_NAME, with "_" as "-", as --from atlantis writes it), and "all", the CommandLock that freezes every command.
var knownCommands = []string{"all", "apply", "approve-policies", "import", "plan", "policy-check", "state", "unlock", "version"}

// unknownCommand is freeze's refusal of a name that is neither a known command nor an existing
// CommandLock: a typo would freeze nothing anyone uses.
func unknownCommand(name string, existing []string) error {
	candidates := slices.Concat(knownCommands, existing)
	hint := ""
	if near := util.Closest(name, candidates); near != "" {
		hint = " did you mean " + near + "?"
	}
	return fmt.Errorf("freeze %q: no such command:%s Known commands are %s; existing CommandLocks: %s. "+
		"To freeze a command of your own by this name, add --new-command",
		name, hint, strings.Join(knownCommands, ", "), orNone(existing))
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
