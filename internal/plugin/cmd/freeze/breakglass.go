package freeze

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
	"github.com/turnstile-dev/turnstile/internal/plugin/cmd/util"
	"github.com/turnstile-dev/turnstile/pkg/client"
)

// NewCmdBreakGlass is `break-glass`: a LockRequest that bypasses a write freeze in one namespace
// for a while, recorded.
func NewCmdBreakGlass(g *util.Globals) *cobra.Command {
	var (
		reason string
		ttl    time.Duration
		lock   string
	)
	cmd := &cobra.Command{
		Use:   "break-glass FREEZE --reason WHY",
		Short: "Write past a write freeze in this namespace for a while, recorded (needs the bypassfreeze permission)",
		Long: `Takes a break-glass grant: a LockRequest of the frozen command with spec.bypassFreeze, which
only a holder of the bypassfreeze permission on lockrequests in the namespace may create (the
turnstile-admin role). Once it is granted, your writes in this namespace pass the CommandLock's
write freeze until it expires (--ttl) or you release it; the grant is recorded as a BreakGlass
event on the CommandLock and in turnstile_admission_bypasses_total, and each write in the API
server's audit log.`,
		Example: `  kubectl turnstile break-glass weekend -n shop --reason "incident 4711: roll back the checkout" --ttl 30m
  kubectl apply -n shop -f checkout.yaml
  kubectl turnstile release -n shop <the request it printed>`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(reason) == "" {
				return errors.New("--reason is required: say why you break the glass (it is recorded)")
			}
			c, ns, err := g.Client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			user, err := client.WhoAmI(ctx, c)
			if err != nil {
				return err
			}
			command := args[0]
			if command == locksv1.CommandAll {
				command = "break-glass" // "all" governs every command; a request may not name it
			}
			r := client.Request{GenerateName: "break-glass-", Command: command, Reason: reason, TTL: ttl, BypassFreeze: reason,
				Holder: locksv1.Holder{Owner: user}}
			t := locksv1.LockTarget{Repo: "break-glass/" + args[0], Path: lockPath(user), Workspace: "default"}
			if lock != "" {
				if t, err = lockkey.Parse(lock); err != nil {
					return fmt.Errorf("--lock %w", err)
				}
			}
			r.Locks = []locksv1.LockTarget{t}
			l, err := util.Acquire(cmd, client.New(c, ns), r)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "lockrequest/%s granted: %s may write in namespace %s past commandlock %s until %s; release it when done: kubectl turnstile release -n %s %s\n",
				l.Name, user, ns, args[0], l.ExpiresAt.UTC().Format(time.RFC3339), ns, l.Name)
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "Why, recorded in the event and the request (required).")
	cmd.Flags().DurationVar(&ttl, "ttl", 30*time.Minute, "How long the grant lasts.")
	cmd.Flags().StringVar(&lock, "lock", "", "The lock to hold meanwhile, REPO:PATH[:WORKSPACE] (default break-glass/FREEZE:YOUR-NAME).")
	return cmd
}

var unsafePath = regexp.MustCompile(`[^A-Za-z0-9_.@+=~-]+`)

// lockPath is a user name as a lock path segment.
func lockPath(user string) string {
	p := strings.Trim(unsafePath.ReplaceAllString(user, "."), ".")
	if p == "" || p == "." {
		return "user"
	}
	return p
}
