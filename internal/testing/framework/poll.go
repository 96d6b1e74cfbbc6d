package framework

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// PhaseOf polls a LockRequest's phase, for Eventually and Consistently. A failed read is a
// phase "error: ..." that no expectation matches, and says why in the failure.
func PhaseOf(ctx context.Context, c client.Reader, namespace, name string) func() locksv1.LockRequestPhase {
	return func() locksv1.LockRequestPhase {
		var lr locksv1.LockRequest
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &lr); err != nil {
			return locksv1.LockRequestPhase("error: " + err.Error())
		}
		return lr.Status.Phase
	}
}
