package locks

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/turnstile-dev/turnstile/internal/plugin/cmd/util"
	"github.com/turnstile-dev/turnstile/pkg/client"
)

// NewCmdAcquire is `acquire`: a LockRequest, and the wait for its grant.
func NewCmdAcquire(g *util.Globals) *cobra.Command {
	var f util.RequestFlags
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
			r, c, ns, err := f.Resolve(cmd, g)
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
			lock, err := util.Acquire(cmd, tc, r)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "lockrequest/%s granted: fencing token %d, expires %s\n",
				lock.Name, lock.FencingToken, lock.ExpiresAt.UTC().Format(time.RFC3339))
			return nil
		},
	}
	f.Bind(cmd.Flags())
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "Create the request and return; wait later with kubectl wait --for=condition=Granted.")
	return cmd
}
