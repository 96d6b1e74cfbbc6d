package controller

import (
	"fmt"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/window"
)

// AdmissionStatus computes what the write-freeze policy (config/admission/freeze.yaml) reads of
// a CommandLock besides its spec: the windows judged ahead (so the API server flips them at
// their edges by its own clock, also while no manager runs), the time of that judgement (the
// clock a delete is judged by: it carries no time of its own) and the break-glass grants in
// force. Pure.
//
// The judgement is kept as it is stored until something makes it stale: a new spec
// generation, or an edge (a window's start or end, spec.until) between the judgement and now.
// Judged again at every reconcile, an interval in force would start at every now, and the
// status would be rewritten on every LockRequest event.
func AdmissionStatus(cl *locksv1.CommandLock, requests []locksv1.LockRequest, flags queue.FreezeFlags, now time.Time) *locksv1.AdmissionStatus {
	if cl.Spec.Admission == nil {
		return nil
	}
	stored := cl.Status.Admission
	st := &locksv1.AdmissionStatus{}
	if stored != nil {
		st = stored.DeepCopy()
	}
	// guard:admission-judged-at-edges
	if stale(cl, stored, now) {
		judged := metav1.NewTime(now.Truncate(time.Second))
		st.JudgedAt = &judged
		st.Intervals = nil
		for _, iv := range window.Intervals(cl.Spec.Windows, now) {
			out := locksv1.FreezeInterval{From: metav1.NewTime(iv.From), Window: iv.Window}
			if !iv.Until.IsZero() {
				out.Until = &metav1.Time{Time: iv.Until}
			}
			st.Intervals = append(st.Intervals, out)
		}
	}
	st.Bypasses = bypasses(cl, requests, flags, now)
	if len(st.Bypasses) == 0 {
		st.Bypasses = nil
	}
	return st
}

// rejudgeAfter is how old a judgement may grow before the manager makes it again, also when no
// edge passed: half the horizon, so that while a manager runs the policy never reaches the
// end of what was judged (past it, everything in scope is frozen) - a window whose next edge is
// weeks away is judged again every 4 days.
const rejudgeAfter = window.AheadHorizon / 2

// stale reports whether the stored judgement must be made again at now.
func stale(cl *locksv1.CommandLock, stored *locksv1.AdmissionStatus, now time.Time) bool {
	if stored == nil || stored.JudgedAt == nil || cl.Status.ObservedGeneration != cl.Generation {
		return true
	}
	judged := stored.JudgedAt.Time
	// guard:admission-rejudged-before-horizon
	if !now.Before(judged.Add(rejudgeAfter)) {
		return true
	}
	passed := func(t time.Time) bool { return t.After(judged) && !t.After(now) }
	if cl.Spec.Until != nil && passed(cl.Spec.Until.Time) {
		return true
	}
	for _, iv := range stored.Intervals {
		if passed(iv.From.Time) || (iv.Until != nil && passed(iv.Until.Time)) {
			return true
		}
	}
	return false
}

// bypasses are the break-glass grants in force: the granted requests of cl's command with
// spec.bypassFreeze, by namespace and name. Each lets its owner's writes in its namespace past
// the write freeze until it expires (the policy checks both).
func bypasses(cl *locksv1.CommandLock, requests []locksv1.LockRequest, flags queue.FreezeFlags, now time.Time) []locksv1.AdmissionBypass {
	var out []locksv1.AdmissionBypass
	for i := range requests {
		lr := &requests[i]
		// guard:break-glass-granted-only
		if lr.Spec.BypassFreeze == nil || lr.Status.Phase != locksv1.PhaseGranted || lr.Status.ExpiresAt == nil ||
			!lr.Status.ExpiresAt.After(now) || lr.Spec.Holder.Owner == "" || !queue.Governs(cl.Name, lr.Spec.Command, flags) {
			continue
		}
		out = append(out, locksv1.AdmissionBypass{
			User: lr.Spec.Holder.Owner, Namespace: lr.Namespace, Request: lr.Name,
			Until: *lr.Status.ExpiresAt, Reason: lr.Spec.BypassFreeze.Reason,
		})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Request < out[j].Request
	})
	if len(out) > 32 {
		out = out[:32] // the CRD's bound; the rest wait for a place (their owners are told by why)
	}
	return out
}

// admissionWakeUp is when cl's write freeze must be judged again by the clock alone (zero:
// never): rejudgeAfter past the stored judgement. The windows' edges wake the reconciler
// anyway (nextWakeUp).
func admissionWakeUp(cl *locksv1.CommandLock) time.Time {
	if a := cl.Status.Admission; cl.Spec.Admission != nil && a != nil && a.JudgedAt != nil {
		return a.JudgedAt.Add(rejudgeAfter)
	}
	return time.Time{}
}

// newBypasses are the grants in now that were not in before (by request and expiry): each is a
// break-glass event on the CommandLock.
func newBypasses(before, now *locksv1.AdmissionStatus) []locksv1.AdmissionBypass {
	if now == nil {
		return nil
	}
	var out []locksv1.AdmissionBypass
	for _, b := range now.Bypasses {
		seen := false
		if before != nil {
			for _, o := range before.Bypasses {
				if o.Namespace == b.Namespace && o.Request == b.Request && equality.Semantic.DeepEqual(o.Until, b.Until) {
					seen = true
					break
				}
			}
		}
		if !seen {
			out = append(out, b)
		}
	}
	return out
}

// recordBreakGlass records the break-glass grants a status write just listed: a Warning event
// on the CommandLock naming who may write where, until when and why, and
// turnstile_admission_bypasses_total.
func (r *CommandLockReconciler) recordBreakGlass(cl *locksv1.CommandLock, before *locksv1.AdmissionStatus) {
	for _, b := range newBypasses(before, cl.Status.Admission) {
		r.metrics.BreakGlass.WithLabelValues(cl.Name).Inc()
		r.recorder.Eventf(cl, nil, "Warning", locksv1.ReasonBreakGlass, "BreakGlass", "%s",
			fmt.Sprintf("break glass: %s may write in namespace %s past the write freeze until %s (lockrequest %s/%s): %s",
				b.User, b.Namespace, b.Until.UTC().Format(time.RFC3339), b.Namespace, b.Request, b.Reason))
	}
}
