package queue

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// GitOps tools judge a LockRequest by its conditions with their own code: kstatus
// (sigs.k8s.io/cli-utils pkg/kstatus, used by Flux's wait and healthChecks, kpt and Config Sync)
// reads Stalled=True as Failed, Reconciling=True as InProgress, then Ready=True as Current and
// Ready=False as InProgress. A finished request must not read InProgress, or a pipeline that
// waits on it hangs until its own timeout. So, once finished:
//
//   - a voluntary release (spec.release, deletion) is where its owner wanted it: Ready=True, so
//     it reads Current;
//   - an involuntary end (Expired, ForceUnlocked, HolderLost) took the lock from a holder that
//     may still be working: Stalled=True, so it reads Failed and the waiting pipeline stops;
//   - a failure (phase Failed) already has Stalled=True.
//
// Granted stays False in all three: `kubectl wait --for=condition=Granted` is unaffected.

// voluntary reports whether a request that finished with reason ended because its owner asked.
func voluntary(reason string) bool { return reason == locksv1.ReasonReleased }

// kstatusFinished sets Ready or Stalled on a finished request's status as described above.
func kstatusFinished(st *locksv1.LockRequestStatus, phase locksv1.LockRequestPhase, reason, message string, now time.Time) {
	g := st.ObservedGeneration
	switch {
	case phase == locksv1.PhaseFailed:
		// Stalled is True already.
	case voluntary(reason):
		SetCondition(&st.Conditions, locksv1.ConditionReady, metav1.ConditionTrue, reason, message, g, now)
	default:
		SetCondition(&st.Conditions, locksv1.ConditionStalled, metav1.ConditionTrue, reason, message, g, now)
	}
}
