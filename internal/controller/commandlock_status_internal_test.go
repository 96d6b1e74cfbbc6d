package controller

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/queue"
)

// clReq is a request of command in phase; blockedBy, when set, makes it a request waiting with
// reason CommandLocked on that freeze source.
func clReq(command string, phase locksv1.LockRequestPhase, blockedBy string) locksv1.LockRequest {
	lr := locksv1.LockRequest{}
	lr.Spec.Command = command
	lr.Status.Phase = phase
	if blockedBy != "" {
		lr.Status.BlockedBy = blockedBy
		lr.Status.Conditions = []metav1.Condition{{Type: locksv1.ConditionGranted, Status: metav1.ConditionFalse, Reason: locksv1.ReasonCommandLocked}}
	}
	return lr
}

type clView struct {
	Active, Blocked int32
	Generation      int64
	Locked, Drained string
	// Ready and Reconciling are what kstatus and Argo CD read: InProgress while draining.
	Ready, Reconciling string
}

func viewCommandLock(st locksv1.CommandLockStatus) clView {
	cond := func(typ string) string {
		c := meta.FindStatusCondition(st.Conditions, typ)
		if c == nil {
			return "<none>"
		}
		if c.ObservedGeneration != st.ObservedGeneration {
			return "stale observedGeneration"
		}
		return fmt.Sprintf("%s/%s: %s", c.Status, c.Reason, c.Message)
	}
	return clView{Active: st.ActiveHolders, Blocked: st.BlockedRequests, Generation: st.ObservedGeneration,
		Locked: cond(locksv1.ConditionLocked), Drained: cond(locksv1.ConditionDrained),
		Ready: cond(locksv1.ConditionReady), Reconciling: cond(locksv1.ConditionReconciling)}
}

func TestCommandLockStatus(t *testing.T) {
	now := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	cl := func(name string, locked bool) *locksv1.CommandLock {
		c := &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 3}}
		c.Spec.Locked, c.Spec.Reason = locked, "maintenance window"
		return c
	}
	granted, pending := locksv1.PhaseGranted, locksv1.PhasePending
	const (
		applyFrozen = "True/Frozen: Apply commands are locked globally: maintenance window"
		thawed      = "False/Thawed: not frozen"
		drained     = "True/NoActiveHolders: no granted request of this command is left"
		// kstatus: Current once drained, or when not frozen.
		readyDrained  = "True/NoActiveHolders: frozen and drained: no granted request of this command is left"
		notReconDrain = "False/NoActiveHolders: frozen and drained"
		readyThawed   = "True/Thawed: not frozen"
		notReconThaw  = "False/Thawed: not frozen"
	)
	mixed := []locksv1.LockRequest{
		clReq("apply", granted, ""),
		clReq("apply", granted, ""),
		clReq("apply", pending, "commandlock/apply"),
		clReq("apply", pending, ""), // queued behind a holder, not (yet) on the freeze
		clReq("apply", locksv1.PhaseReleased, ""),
		clReq("plan", granted, ""),
		clReq("plan", pending, "commandlock/all"),
		clReq("", granted, ""),
	}
	cases := map[string]struct {
		tc       *locksv1.CommandLock
		reqs     []locksv1.LockRequest
		flags    queue.FreezeFlags
		granting int
		want     clView
	}{
		"a frozen apply counts its granted holders and the requests it blocks": {
			tc: cl("apply", true), reqs: mixed,
			want: clView{Active: 2, Blocked: 1, Generation: 3, Locked: applyFrozen,
				Drained:     "False/ActiveHolders: 2 granted request(s) of this command still hold their locks",
				Ready:       "False/ActiveHolders: draining: 2 granted request(s) of this command still hold their locks",
				Reconciling: "True/ActiveHolders: draining: 2 granted request(s) of this command still hold their locks"},
		},
		"drained once no holder of the command is left": {
			tc: cl("apply", true), reqs: []locksv1.LockRequest{clReq("apply", pending, "commandlock/apply"), clReq("plan", granted, "")},
			want: clView{Blocked: 1, Generation: 3, Locked: applyFrozen, Drained: drained, Ready: readyDrained, Reconciling: notReconDrain},
		},
		"a frozen command with a request being granted (not in the cache yet) still drains": {
			tc: cl("apply", true), granting: 1,
			want: clView{Generation: 3, Locked: applyFrozen,
				Drained:     "False/ActiveHolders: 1 request(s) of this command are being granted",
				Ready:       "False/ActiveHolders: draining: 1 request(s) of this command are being granted",
				Reconciling: "True/ActiveHolders: draining: 1 request(s) of this command are being granted"},
		},
		"unlocked: nothing blocked, though a request still shows the old freeze": {
			tc: cl("apply", false), reqs: []locksv1.LockRequest{clReq("apply", pending, "commandlock/apply")},
			want: clView{Generation: 3, Locked: thawed, Drained: drained, Ready: readyThawed, Reconciling: notReconThaw},
		},
		"all counts every command's holders, not requests without a command, and only its own blocked": {
			tc: cl("all", true), reqs: mixed,
			want: clView{Active: 3, Blocked: 1, Generation: 3, Locked: "True/Frozen: All commands are locked globally: maintenance window",
				Drained:     "False/ActiveHolders: 3 granted request(s) of this command still hold their locks",
				Ready:       "False/ActiveHolders: draining: 3 granted request(s) of this command still hold their locks",
				Reconciling: "True/ActiveHolders: draining: 3 granted request(s) of this command still hold their locks"},
		},
		"--disable-apply: an unlocked apply CommandLock reports the flag's freeze": {
			tc: cl("apply", false), flags: queue.FreezeFlags{DisableApply: true},
			reqs: []locksv1.LockRequest{clReq("apply", pending, "--disable-apply"), clReq("apply", pending, "commandlock/apply")},
			want: clView{Blocked: 1, Generation: 3, Locked: "True/Frozen: Apply commands are disabled on this server (--disable-apply)", Drained: drained,
				Ready: readyDrained, Reconciling: notReconDrain},
		},
		"--disable-global-apply-lock: a locked apply CommandLock is not in force": {
			tc: cl("apply", true), flags: queue.FreezeFlags{DisableGlobalApplyLock: true},
			reqs: []locksv1.LockRequest{clReq("apply", granted, "")},
			// Holders still run, but nothing is frozen, so nothing drains: Current.
			want: clView{Active: 1, Generation: 3, Locked: thawed,
				Drained: "False/ActiveHolders: 1 granted request(s) of this command still hold their locks",
				Ready:   readyThawed, Reconciling: notReconThaw},
		},
		"until reached: thawed": {
			tc: func() *locksv1.CommandLock {
				c := cl("apply", true)
				c.Spec.Until = &metav1.Time{Time: now}
				return c
			}(),
			want: clView{Generation: 3, Locked: thawed, Drained: drained, Ready: readyThawed, Reconciling: notReconThaw},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := CommandLockStatus(tc.tc, tc.reqs, tc.flags, now, tc.granting)
			if diff := cmp.Diff(tc.want, viewCommandLock(got)); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}

	// A condition whose status does not change keeps its transition time.
	frozenAt := metav1.NewTime(now.Add(-time.Hour))
	c := cl("apply", true)
	c.Status.Conditions = []metav1.Condition{{Type: locksv1.ConditionLocked, Status: metav1.ConditionTrue, Reason: locksv1.ReasonFrozen, LastTransitionTime: frozenAt}}
	got := CommandLockStatus(c, nil, queue.FreezeFlags{}, now, 0)
	if lt := meta.FindStatusCondition(got.Conditions, locksv1.ConditionLocked).LastTransitionTime; !lt.Equal(&frozenAt) {
		t.Errorf("Locked lastTransitionTime = %v, want it kept at %v", lt, frozenAt)
	}
}
