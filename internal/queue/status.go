package queue

import (
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// Times are built at the precision the API server keeps (seconds for metav1.Time, microseconds
// for MicroTime), so a status read back compares equal to the one written and an unchanged
// decision writes nothing.

func newTime(t time.Time) metav1.Time { return metav1.NewTime(t.Truncate(time.Second)) }

func newMicroTime(t time.Time) metav1.MicroTime {
	return metav1.NewMicroTime(t.Truncate(time.Microsecond))
}

// SetCondition sets one condition of a Turnstile status, stamped at the API server's precision:
// the one condition setter of the queue's statuses, the deadlock victim's and CommandLock's.
func SetCondition(conds *[]metav1.Condition, typ string, status metav1.ConditionStatus, reason, msg string, gen int64, now time.Time) {
	meta.SetStatusCondition(conds, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: msg,
		ObservedGeneration: gen, LastTransitionTime: newTime(now),
	})
}

func findCond(conds []metav1.Condition, typ string) *metav1.Condition {
	return meta.FindStatusCondition(conds, typ)
}

func equalStatus(a, b locksv1.LockRequestStatus) bool {
	// The fields a refresh changes first, cheaply: most differing statuses differ here.
	if a.Phase != b.Phase || a.QueuePosition != b.QueuePosition || a.BlockedBy != b.BlockedBy ||
		a.FencingToken != b.FencingToken || a.ObservedGeneration != b.ObservedGeneration ||
		len(a.Conditions) != len(b.Conditions) || len(a.Locks) != len(b.Locks) {
		return false
	}
	return equality.Semantic.DeepEqual(a, b)
}

func statusEqual(a, b locksv1.ProjectLockStatus) bool { return equality.Semantic.DeepEqual(a, b) }
