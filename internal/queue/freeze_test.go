package queue

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

const maintenance = "Apply commands are locked globally: maintenance window"

func commandLock(name string, locked bool, reason string, until *time.Time) locksv1.CommandLock {
	cl := locksv1.CommandLock{Spec: locksv1.CommandLockSpec{Locked: locked, Reason: reason}}
	cl.Name = name
	if until != nil {
		u := metav1.NewTime(*until)
		cl.Spec.Until = &u
	}
	return cl
}

func at(t time.Time) *time.Time { return &t }

// frozenBy asks f about each command and reports the ones frozen, with their freeze.
func frozenBy(f Freezes, commands ...string) map[string]Freeze {
	out := map[string]Freeze{}
	for _, c := range commands {
		if fr, ok := f.For(c); ok {
			out[c] = fr
		}
	}
	return out
}

var allCommands = []string{"apply", "plan", "destroy", ""}

// thawed is cl as its reconciler writes it once its clock passed spec.until: Locked=False,
// reason Thawed, for its generation.
func thawed(cl locksv1.CommandLock) locksv1.CommandLock {
	cl.Generation = 1
	cl.Status.ObservedGeneration = 1
	cl.Status.Conditions = []metav1.Condition{{Type: locksv1.ConditionLocked, Status: metav1.ConditionFalse, Reason: locksv1.ReasonThawed, Message: "not frozen"}}
	return cl
}

func TestResolveFreezes(t *testing.T) {
	applyFreeze := Freeze{Source: "commandlock/apply", Message: maintenance}
	allFreeze := Freeze{Source: "commandlock/all", Message: "All commands are locked globally: upgrade"}
	cases := map[string]struct {
		tc         []locksv1.CommandLock
		wantFrozen map[string]Freeze
		wantThaw   time.Time
	}{
		"apply locked freezes apply only": {
			tc:         []locksv1.CommandLock{commandLock("apply", true, "maintenance window", nil)},
			wantFrozen: map[string]Freeze{"apply": applyFreeze},
		},
		"all locked freezes every command, not requests without one": {
			tc:         []locksv1.CommandLock{commandLock("all", true, "upgrade", nil)},
			wantFrozen: map[string]Freeze{"apply": allFreeze, "plan": allFreeze, "destroy": allFreeze},
		},
		"a command's own lock speaks before all": {
			tc:         []locksv1.CommandLock{commandLock("all", true, "upgrade", nil), commandLock("apply", true, "maintenance window", nil)},
			wantFrozen: map[string]Freeze{"apply": applyFreeze, "plan": allFreeze, "destroy": allFreeze},
		},
		"unlocked freezes nothing": {
			tc:         []locksv1.CommandLock{commandLock("apply", false, "maintenance window", nil)},
			wantFrozen: map[string]Freeze{},
		},
		// R1 (issue #26 review): the thaw is a write. A freeze past its until holds grants
		// until its reconciler's status says thawed, whatever the deciding clock says.
		"until in the past, no thaw written yet: grants still wait, nothing to requeue for": {
			tc:         []locksv1.CommandLock{commandLock("apply", true, "maintenance window", at(t0.Add(-time.Second)))},
			wantFrozen: map[string]Freeze{"apply": applyFreeze},
		},
		"until exactly now, no thaw written yet: grants still wait": {
			tc:         []locksv1.CommandLock{commandLock("apply", true, "maintenance window", at(now))},
			wantFrozen: map[string]Freeze{"apply": applyFreeze},
		},
		"until in the past and the thaw written: not in force": {
			tc:         []locksv1.CommandLock{thawed(commandLock("apply", true, "maintenance window", at(t0.Add(-time.Second))))},
			wantFrozen: map[string]Freeze{},
		},
		"a thaw written for an earlier generation does not thaw this one": {
			tc: []locksv1.CommandLock{func() locksv1.CommandLock {
				cl := thawed(commandLock("apply", true, "maintenance window", at(t0.Add(-time.Second))))
				cl.Generation++
				return cl
			}()},
			wantFrozen: map[string]Freeze{"apply": applyFreeze},
		},
		"until in the future: in force, the earliest thaw returned": {
			tc: []locksv1.CommandLock{
				commandLock("apply", true, "maintenance window", at(t0.Add(time.Hour))),
				commandLock("all", true, "upgrade", at(t0.Add(30*time.Minute))),
			},
			wantFrozen: map[string]Freeze{"apply": applyFreeze, "plan": allFreeze, "destroy": allFreeze},
			wantThaw:   t0.Add(30 * time.Minute),
		},
		"a past until does not hide another's future one": {
			tc: []locksv1.CommandLock{
				thawed(commandLock("apply", true, "maintenance window", at(t0.Add(-time.Minute)))),
				commandLock("plan", true, "", at(t0.Add(2*time.Hour))),
				commandLock("destroy", false, "", at(t0.Add(time.Minute))),
			},
			wantFrozen: map[string]Freeze{"plan": {Source: "commandlock/plan", Message: "Plan commands are locked globally until they are unlocked"}},
			wantThaw:   t0.Add(2 * time.Hour),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f, thaw := ResolveFreezes(tc.tc, FreezeFlags{}, now)
			if diff := cmp.Diff(tc.wantFrozen, frozenBy(f, allCommands...)); diff != "" {
				t.Errorf("frozen (-want +got):\n%s", diff)
			}
			if !thaw.Equal(tc.wantThaw) {
				t.Errorf("next thaw = %v, want %v", thaw, tc.wantThaw)
			}
		})
	}
}

// Freezes.For keeps Atlantis's CheckApplyLock order: --disable-apply, then
// --disable-global-apply-lock, then the CommandLock.
func TestFreezesForPrecedence(t *testing.T) {
	disabled := Freeze{Source: "--disable-apply", Message: "Apply commands are disabled on this server (--disable-apply)"}
	applyFreeze := Freeze{Source: "commandlock/apply", Message: maintenance}
	allFreeze := Freeze{Source: "commandlock/all", Message: "All commands are locked globally: upgrade"}
	applyLocked := []locksv1.CommandLock{commandLock("apply", true, "maintenance window", nil)}
	allLocked := []locksv1.CommandLock{commandLock("all", true, "upgrade", nil)}
	cases := map[string]struct {
		tc         FreezeFlags
		locks      []locksv1.CommandLock
		wantFrozen map[string]Freeze
	}{
		"no flags: the apply CommandLock freezes apply": {
			locks:      applyLocked,
			wantFrozen: map[string]Freeze{"apply": applyFreeze},
		},
		"DisableApply freezes apply with no CommandLock at all": {
			tc:         FreezeFlags{DisableApply: true},
			wantFrozen: map[string]Freeze{"apply": disabled},
		},
		"DisableApply speaks before the apply CommandLock": {
			tc:         FreezeFlags{DisableApply: true},
			locks:      applyLocked,
			wantFrozen: map[string]Freeze{"apply": disabled},
		},
		"DisableApply beats DisableGlobalApplyLock": {
			tc:         FreezeFlags{DisableApply: true, DisableGlobalApplyLock: true},
			locks:      applyLocked,
			wantFrozen: map[string]Freeze{"apply": disabled},
		},
		"DisableApply leaves plan to the CommandLocks": {
			tc:         FreezeFlags{DisableApply: true},
			locks:      allLocked,
			wantFrozen: map[string]Freeze{"apply": disabled, "plan": allFreeze, "destroy": allFreeze},
		},
		"DisableGlobalApplyLock ignores the apply CommandLock": {
			tc:         FreezeFlags{DisableGlobalApplyLock: true},
			locks:      applyLocked,
			wantFrozen: map[string]Freeze{},
		},
		"DisableGlobalApplyLock ignores all for apply, not for plan": {
			tc:         FreezeFlags{DisableGlobalApplyLock: true},
			locks:      allLocked,
			wantFrozen: map[string]Freeze{"plan": allFreeze, "destroy": allFreeze},
		},
		"an apply lock does not freeze plan": {
			locks:      applyLocked,
			wantFrozen: map[string]Freeze{"apply": applyFreeze},
		},
		"no flags and no CommandLock: nothing is frozen": {
			wantFrozen: map[string]Freeze{},
		},
		"DisableGlobalApplyLock alone freezes nothing": {
			tc:         FreezeFlags{DisableGlobalApplyLock: true},
			wantFrozen: map[string]Freeze{},
		},
		"DisableApply freezes apply though its CommandLock is unlocked": {
			tc:         FreezeFlags{DisableApply: true},
			locks:      []locksv1.CommandLock{commandLock("apply", false, "", nil)},
			wantFrozen: map[string]Freeze{"apply": disabled},
		},
		"DisableApply freezes apply though its CommandLock's until has passed": {
			tc:         FreezeFlags{DisableApply: true},
			locks:      []locksv1.CommandLock{commandLock("apply", true, "maintenance window", at(now.Add(-time.Second)))},
			wantFrozen: map[string]Freeze{"apply": disabled},
		},
		"DisableGlobalApplyLock leaves the other commands' locks in force": {
			tc:         FreezeFlags{DisableGlobalApplyLock: true},
			locks:      append(applyLocked, commandLock("plan", true, "", nil)),
			wantFrozen: map[string]Freeze{"plan": {Source: "commandlock/plan", Message: "Plan commands are locked globally until they are unlocked"}},
		},
		"the flags never freeze a request without a command": {
			tc:         FreezeFlags{DisableApply: true},
			locks:      allLocked,
			wantFrozen: map[string]Freeze{"apply": disabled, "plan": allFreeze, "destroy": allFreeze},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f, _ := ResolveFreezes(tc.locks, tc.tc, now)
			if diff := cmp.Diff(tc.wantFrozen, frozenBy(f, allCommands...)); diff != "" {
				t.Errorf("frozen (-want +got):\n%s", diff)
			}
		})
	}
	if _, ok := (Freezes{}).For("apply"); ok {
		t.Errorf("the zero Freezes froze apply")
	}
}

// CommandLockFreeze is what a CommandLock's status reports: its own freeze, after the flags.
func TestCommandLockFreeze(t *testing.T) {
	disabled := Freeze{Source: "--disable-apply", Message: "Apply commands are disabled on this server (--disable-apply)"}
	cases := map[string]struct {
		tc         locksv1.CommandLock
		flags      FreezeFlags
		wantFreeze *Freeze
	}{
		"locked apply": {
			tc:         commandLock("apply", true, "maintenance window", nil),
			wantFreeze: &Freeze{Source: "commandlock/apply", Message: maintenance},
		},
		"unlocked apply": {
			tc: commandLock("apply", false, "maintenance window", nil),
		},
		"apply past its until": {
			tc: commandLock("apply", true, "maintenance window", at(now)),
		},
		"unlocked apply under DisableApply reports the flag's freeze": {
			tc: commandLock("apply", false, "", nil), flags: FreezeFlags{DisableApply: true},
			wantFreeze: &disabled,
		},
		"locked apply under DisableGlobalApplyLock is inert": {
			tc: commandLock("apply", true, "maintenance window", nil), flags: FreezeFlags{DisableGlobalApplyLock: true},
		},
		"DisableApply beats DisableGlobalApplyLock": {
			tc: commandLock("apply", true, "maintenance window", nil), flags: FreezeFlags{DisableApply: true, DisableGlobalApplyLock: true},
			wantFreeze: &disabled,
		},
		"all is not apply: the flags leave it alone": {
			tc: commandLock("all", true, "upgrade", nil), flags: FreezeFlags{DisableApply: true, DisableGlobalApplyLock: true},
			wantFreeze: &Freeze{Source: "commandlock/all", Message: "All commands are locked globally: upgrade"},
		},
		"plan is not apply: DisableApply does not freeze it": {
			tc: commandLock("plan", false, "", nil), flags: FreezeFlags{DisableApply: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			fr, ok := CommandLockFreeze(&tc.tc, tc.flags, now)
			var got *Freeze
			if ok {
				got = &fr
			}
			if diff := cmp.Diff(tc.wantFreeze, got); diff != "" {
				t.Errorf("CommandLockFreeze (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFreezeMessage(t *testing.T) {
	cases := map[string]struct {
		tc      string
		reason  string
		wantMsg string
	}{
		"apply with a reason": {tc: "apply", reason: "maintenance window", wantMsg: maintenance},
		"all":                 {tc: "all", reason: "upgrade", wantMsg: "All commands are locked globally: upgrade"},
		"blank reason":        {tc: "plan", reason: "  ", wantMsg: "Plan commands are locked globally until they are unlocked"},
		"one-letter command":  {tc: "x", reason: "r", wantMsg: "X commands are locked globally: r"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.wantMsg, FreezeMessage(tc.tc, tc.reason)); diff != "" {
				t.Errorf("FreezeMessage (-want +got):\n%s", diff)
			}
		})
	}
}

func TestIsLockInForce(t *testing.T) {
	cases := map[string]struct {
		tc   locksv1.CommandLock
		want bool
	}{
		"locked, no until":      {tc: commandLock("apply", true, "", nil), want: true},
		"locked, until ahead":   {tc: commandLock("apply", true, "", at(now.Add(time.Nanosecond))), want: true},
		"locked, until reached": {tc: commandLock("apply", true, "", at(now)), want: false},
		"unlocked":              {tc: commandLock("apply", false, "", at(now.Add(time.Hour))), want: false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := IsLockInForce(&tc.tc, now); got != tc.want {
				t.Errorf("IsLockInForce = %v, want %v", got, tc.want)
			}
		})
	}
}

// In Decide, a frozen request waits in its place without blocking the requests behind
// it; holders keep their grant; try-once requests fail at once.
func TestDecideFreezes(t *testing.T) {
	applyFrozen, _ := ResolveFreezes([]locksv1.CommandLock{commandLock("apply", true, "maintenance window", nil)}, FreezeFlags{}, now)
	allFrozen, _ := ResolveFreezes([]locksv1.CommandLock{commandLock("all", true, "upgrade", nil)}, FreezeFlags{}, now)
	grant30 := t0.Add(30 * time.Minute)
	hExpires := t0.Add(25 * time.Minute)
	h := aliceHolder().Obj()
	hApply := aliceHolder().Command("apply").Obj()
	freeLock := makeLock(tgt1).token(41).Obj()
	applyWaits := func() *wrappers.LockRequestWrapper {
		return makeReq("a").Owner("bob", 1).Command("apply").QueuedAt(t0.Add(-2 * time.Minute))
	}
	planWaits := func() *wrappers.LockRequestWrapper {
		return makeReq("p").Owner("carol", 2).Command("plan").QueuedAt(t0.Add(-time.Minute))
	}
	frozenView := func(msg string, pos int32, event string) reqView {
		return reqView{Phase: locksv1.PhasePending, Reason: locksv1.ReasonCommandLocked, Message: msg, Position: pos, Held: "0", True: truePending, Event: event}
	}
	granted := func(key string, token int64, event string) reqView {
		return reqView{Phase: locksv1.PhaseGranted, Reason: locksv1.ReasonGranted, Message: grantedMsg(key, token, grant30), Token: token, Held: "1", True: trueGranted, Event: event}
	}

	cases := map[string]decideCase{
		"a frozen apply keeps its place while the plan behind it is granted": {
			lock:       freeLock,
			reqs:       reqs(applyWaits(), planWaits()),
			freezes:    applyFrozen,
			wantHolder: "carol#2",
			wantLock: &lockView{Holder: "pull #2 (carol)", Requests: []string{"p"}, Token: 42, Queue: []string{"a:Normal"}, Length: 1,
				Expires: grant30},
			wantGrant:   map[string]reqView{"p": granted(key1, 42, locksv1.ReasonGranted)},
			wantWaiting: map[string]reqView{"a": frozenView(maintenance+"; position 1 of 1", 1, "")},
			wantQueue:   []string{"a"},
			wantRequeue: untilFromNow(grant30),
		},
		"behind a holder the frozen apply stays ahead of a later plan": {
			lock:       aliceLock(h),
			reqs:       reqs(aliceHolder(), planWaits(), applyWaits()),
			freezes:    applyFrozen,
			wantHolder: "alice#100",
			wantLock: &lockView{Holder: "pull #100 (alice)", Requests: []string{"h"}, Token: 41, Queue: []string{"a:Normal", "p:Normal"}, Length: 2,
				Expires: hExpires},
			wantWaiting: map[string]reqView{
				"a": frozenView(maintenance+"; position 1 of 2", 1, ""),
				"p": {Phase: locksv1.PhasePending, Reason: locksv1.ReasonQueued, Message: lockedByAlice + "; position 2 of 2", Position: 2, Held: "0", True: truePending},
			},
			wantQueue:   []string{"a", "p"},
			wantRequeue: untilFromNow(hExpires),
		},
		"a newly frozen request says so in its first event": {
			lock:       aliceLock(h),
			reqs:       reqs(aliceHolder(), makeReq("n").Owner("bob", 1).Command("apply")),
			freezes:    applyFrozen,
			wantHolder: "alice#100",
			wantLock: &lockView{Holder: "pull #100 (alice)", Requests: []string{"h"}, Token: 41, Queue: []string{"n:Normal"}, Length: 1,
				Expires: hExpires},
			wantWaiting: map[string]reqView{"n": frozenView(maintenance+"; position 1 of 1", 1, locksv1.ReasonCommandLocked)},
			wantQueue:   []string{"n"},
			wantRequeue: untilFromNow(hExpires),
		},
		"a granted apply keeps its grant under the freeze": {
			lock:        aliceLock(hApply),
			reqs:        []*locksv1.LockRequest{hApply},
			freezes:     applyFrozen,
			wantHolder:  "alice#100",
			wantRequeue: untilFromNow(hExpires),
		},
		"the holder's own frozen apply does not re-enter": {
			lock:       aliceLock(h),
			reqs:       reqs(aliceHolder(), makeReq("r").Owner("alice", 100).Command("apply").QueuedAt(t0.Add(-time.Minute))),
			freezes:    applyFrozen,
			wantHolder: "alice#100",
			wantLock: &lockView{Holder: "pull #100 (alice)", Requests: []string{"h"}, Token: 41, Queue: []string{"r:Normal"}, Length: 1,
				Expires: hExpires},
			wantWaiting: map[string]reqView{"r": frozenView(maintenance+"; position 1 of 1", 1, "")},
			wantQueue:   []string{"r"},
			wantRequeue: untilFromNow(hExpires),
		},
		"waitTimeout 0s and frozen fails CommandLocked at once, even on a free key": {
			lock:    freeLock,
			reqs:    reqs(makeReq("n").Owner("bob", 1).Command("apply").WaitTimeout(0)),
			freezes: applyFrozen,
			wantFinish: map[string]reqView{"n": {Phase: locksv1.PhaseFailed, Reason: locksv1.ReasonCommandLocked, Message: maintenance,
				Held: "0", True: trueFailed, Event: locksv1.ReasonCommandLocked}},
		},
		"a request without a command is not frozen by all": {
			lock:        freeLock,
			reqs:        reqs(makeReq("n").Owner("bob", 1)),
			freezes:     allFrozen,
			wantHolder:  "bob#1",
			wantLock:    &lockView{Holder: "pull #1 (bob)", Requests: []string{"n"}, Token: 42, Expires: grant30},
			wantGrant:   map[string]reqView{"n": granted(key1, 42, locksv1.ReasonGranted)},
			wantRequeue: untilFromNow(grant30),
		},
	}
	runDecideCases(t, cases)

	// The frozen waiter names the freeze as what blocks it.
	d := Decide(decideCase{lock: freeLock, reqs: reqs(applyWaits()), freezes: applyFrozen}.input())
	if len(d.Waiting) != 1 || d.Waiting[0].Status.BlockedBy != "commandlock/apply" {
		t.Errorf("BlockedBy: want commandlock/apply, got:\n%s", describeDecision(d))
	}
}
