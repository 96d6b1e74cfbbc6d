package util

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/pkg/client"
)

// Acquire creates the request and waits for the grant, saying on stderr why it waits (once
// per change) from the wait's own watch: acquire's and break-glass's wait.
func Acquire(cmd *cobra.Command, tc *client.Client, r client.Request) (*client.Lock, error) {
	lr, err := tc.Create(cmd.Context(), r)
	if err != nil {
		return nil, err
	}
	return AwaitReporting(cmd.Context(), cmd.ErrOrStderr(), tc, lr)
}

// AwaitReporting waits for the grant, saying on w why it waits (once per change).
func AwaitReporting(ctx context.Context, w io.Writer, tc *client.Client, lr *locksv1.LockRequest) (*client.Lock, error) {
	last := ""
	return tc.Await(ctx, lr, client.OnChange(func(lr *locksv1.LockRequest) {
		if msg := waitingMessage(lr); msg != "" && msg != last {
			last = msg
			fmt.Fprintf(w, "lockrequest/%s waiting: %s\n", lr.Name, msg)
		}
	}))
}

// waitingMessage is why a pending request waits, from its Granted condition; "" once decided.
func waitingMessage(lr *locksv1.LockRequest) string {
	c := meta.FindStatusCondition(lr.Status.Conditions, locksv1.ConditionGranted)
	if c == nil || c.Status == metav1.ConditionTrue || lr.Status.Phase != locksv1.PhasePending {
		return ""
	}
	return c.Message
}

// OfAtMost is " of at most N" for a counting lock (a ProjectLock's status.maxHolders), else "".
func OfAtMost(maxHolders int32) string {
	if maxHolders == 0 {
		return ""
	}
	return fmt.Sprintf(" of at most %d", maxHolders)
}
