package queue

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

// judged is a window as the CommandLock reconciler writes it in status.
func judged(name string, action locksv1.WindowAction, active bool, scope locksv1.WindowScope) locksv1.FreezeWindowStatus {
	state := locksv1.WindowClosed
	if active {
		state = locksv1.WindowOpen
	}
	return locksv1.FreezeWindowStatus{Name: name, Action: action, State: state, WindowScope: scope}
}

func withWindows(cl locksv1.CommandLock, ws ...locksv1.FreezeWindowStatus) locksv1.CommandLock {
	cl.Status.Windows = ws
	return cl
}

func teamA() locksv1.WindowScope {
	return locksv1.WindowScope{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}}
}

func TestForRequestWindows(t *testing.T) {
	apply := wrappers.MakeLockRequest("r", "ns-a").Lock("acme/infra", "prod/net", "default").Command("apply")
	cases := map[string]struct {
		locks      []locksv1.CommandLock
		flags      FreezeFlags
		req        *locksv1.LockRequest
		ns         map[string]string
		wantFrozen bool
		wantSource string
	}{
		"no windows: not frozen": {
			locks: []locksv1.CommandLock{commandLock("apply", false, "", nil)},
			req:   apply.Obj(),
		},
		"a Deny window in force freezes": {
			locks:      []locksv1.CommandLock{withWindows(commandLock("apply", false, "", nil), judged("friday", locksv1.WindowDeny, true, locksv1.WindowScope{}))},
			req:        apply.Obj(),
			wantFrozen: true, wantSource: "commandlock/apply",
		},
		"a Deny window not in force does not": {
			locks: []locksv1.CommandLock{withWindows(commandLock("apply", false, "", nil), judged("friday", locksv1.WindowDeny, false, locksv1.WindowScope{}))},
			req:   apply.Obj(),
		},
		"a window of another command does not": {
			locks: []locksv1.CommandLock{withWindows(commandLock("plan", false, "", nil), judged("friday", locksv1.WindowDeny, true, locksv1.WindowScope{}))},
			req:   apply.Obj(),
		},
		"a window of all freezes apply": {
			locks:      []locksv1.CommandLock{withWindows(commandLock("all", false, "", nil), judged("friday", locksv1.WindowDeny, true, locksv1.WindowScope{}))},
			req:        apply.Obj(),
			wantFrozen: true, wantSource: "commandlock/all",
		},
		"outside every Allow window: frozen": {
			locks:      []locksv1.CommandLock{withWindows(commandLock("apply", false, "", nil), judged("maint", locksv1.WindowAllow, false, locksv1.WindowScope{}))},
			req:        apply.Obj(),
			wantFrozen: true, wantSource: "commandlock/apply",
		},
		"inside an Allow window: not frozen": {
			locks: []locksv1.CommandLock{withWindows(commandLock("apply", false, "", nil),
				judged("maint", locksv1.WindowAllow, false, locksv1.WindowScope{}), judged("maint2", locksv1.WindowAllow, true, locksv1.WindowScope{}))},
			req: apply.Obj(),
		},
		"Deny beats Allow when both are in force": {
			locks: []locksv1.CommandLock{withWindows(commandLock("apply", false, "", nil),
				judged("maint", locksv1.WindowAllow, true, locksv1.WindowScope{}), judged("friday", locksv1.WindowDeny, true, locksv1.WindowScope{}))},
			req:        apply.Obj(),
			wantFrozen: true, wantSource: "commandlock/apply",
		},
		"a manual freeze beats an open Allow window": {
			locks:      []locksv1.CommandLock{withWindows(commandLock("apply", true, "maintenance window", nil), judged("maint", locksv1.WindowAllow, true, locksv1.WindowScope{}))},
			req:        apply.Obj(),
			wantFrozen: true, wantSource: "commandlock/apply",
		},
		"an Allow window scoped to another repo leaves this one alone": {
			locks: []locksv1.CommandLock{withWindows(commandLock("apply", false, "", nil),
				judged("maint", locksv1.WindowAllow, false, locksv1.WindowScope{Repos: []string{"other/*"}}))},
			req: apply.Obj(),
		},
		"a Deny window scoped to the path glob freezes": {
			locks: []locksv1.CommandLock{withWindows(commandLock("apply", false, "", nil),
				judged("prod", locksv1.WindowDeny, true, locksv1.WindowScope{Repos: []string{"acme/*"}, Paths: []string{"prod/*"}}))},
			req:        apply.Obj(),
			wantFrozen: true, wantSource: "commandlock/apply",
		},
		"a Deny window scoped to other paths does not": {
			locks: []locksv1.CommandLock{withWindows(commandLock("apply", false, "", nil),
				judged("staging", locksv1.WindowDeny, true, locksv1.WindowScope{Paths: []string{"staging/*"}}))},
			req: apply.Obj(),
		},
		"one target of several in scope freezes the request": {
			locks: []locksv1.CommandLock{withWindows(commandLock("apply", false, "", nil),
				judged("staging", locksv1.WindowDeny, true, locksv1.WindowScope{Paths: []string{"staging/*"}}))},
			req:        wrappers.MakeLockRequest("r", "ns-a").Lock("acme/infra", "prod/net", "default").Lock("acme/infra", "staging/net", "default").Command("apply").Obj(),
			wantFrozen: true, wantSource: "commandlock/apply",
		},
		"a namespace selector matching the request's namespace freezes": {
			locks:      []locksv1.CommandLock{withWindows(commandLock("apply", false, "", nil), judged("team-a", locksv1.WindowDeny, true, teamA()))},
			req:        apply.Obj(),
			ns:         map[string]string{"team": "a"},
			wantFrozen: true, wantSource: "commandlock/apply",
		},
		"a namespace selector not matching the request's namespace does not": {
			locks: []locksv1.CommandLock{withWindows(commandLock("apply", false, "", nil), judged("team-a", locksv1.WindowDeny, true, teamA()))},
			req:   apply.Obj(),
			ns:    map[string]string{"team": "b"},
		},
		"a selector on the namespace name": {
			locks: []locksv1.CommandLock{withWindows(commandLock("apply", false, "", nil), judged("ns-a", locksv1.WindowDeny, true,
				locksv1.WindowScope{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "ns-a"}}}))},
			req:        apply.Obj(),
			wantFrozen: true, wantSource: "commandlock/apply",
		},
		"an invalid Deny window not in force freezes its scope (fail safe)": {
			locks: []locksv1.CommandLock{withWindows(commandLock("apply", false, "", nil),
				locksv1.FreezeWindowStatus{Name: "bad", Action: locksv1.WindowDeny, Invalid: "unknown time zone"})},
			req:        apply.Obj(),
			wantFrozen: true, wantSource: "commandlock/apply",
		},
		"an invalid window of another scope does not freeze this one": {
			locks: []locksv1.CommandLock{withWindows(commandLock("apply", false, "", nil),
				locksv1.FreezeWindowStatus{Name: "bad", Action: locksv1.WindowDeny, Invalid: "unknown time zone", WindowScope: locksv1.WindowScope{Repos: []string{"other/*"}}})},
			req: apply.Obj(),
		},
		"a malformed glob matches everything (fail safe)": {
			locks: []locksv1.CommandLock{withWindows(commandLock("apply", false, "", nil),
				judged("bad-glob", locksv1.WindowDeny, true, locksv1.WindowScope{Repos: []string{"acme/["}}))},
			req:        apply.Obj(),
			wantFrozen: true, wantSource: "commandlock/apply",
		},
		"bypassFreeze passes a Deny window": {
			locks: []locksv1.CommandLock{withWindows(commandLock("apply", false, "", nil), judged("friday", locksv1.WindowDeny, true, locksv1.WindowScope{}))},
			req:   bypass(apply.Obj()),
		},
		"bypassFreeze passes a manual freeze": {
			locks: []locksv1.CommandLock{commandLock("apply", true, "maintenance window", nil)},
			req:   bypass(apply.Obj()),
		},
		"bypassFreeze does not pass --disable-apply": {
			locks:      []locksv1.CommandLock{commandLock("apply", false, "", nil)},
			flags:      FreezeFlags{DisableApply: true},
			req:        bypass(apply.Obj()),
			wantFrozen: true, wantSource: "--disable-apply",
		},
		"--disable-global-apply-lock makes apply's windows inert": {
			locks: []locksv1.CommandLock{withWindows(commandLock("all", false, "", nil), judged("friday", locksv1.WindowDeny, true, locksv1.WindowScope{}))},
			flags: FreezeFlags{DisableGlobalApplyLock: true},
			req:   apply.Obj(),
		},
		"a request without a command is never frozen by windows": {
			locks: []locksv1.CommandLock{withWindows(commandLock("all", false, "", nil), judged("friday", locksv1.WindowDeny, true, locksv1.WindowScope{}))},
			req:   wrappers.MakeLockRequest("r", "ns-a").Lock("acme/infra", "prod/net", "default").Obj(),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f, _ := ResolveFreezes(tc.locks, tc.flags, t0)
			f = f.InNamespace(tc.ns)
			fr, frozen := f.ForRequest(tc.req)
			if frozen != tc.wantFrozen || fr.Source != tc.wantSource {
				t.Errorf("ForRequest = %+v, %v; want frozen %v by %q", fr, frozen, tc.wantFrozen, tc.wantSource)
			}
		})
	}
}

func bypass(lr *locksv1.LockRequest) *locksv1.LockRequest {
	lr.Spec.BypassFreeze = &locksv1.FreezeBypass{Reason: "incident 4711"}
	return lr
}

func TestBypassed(t *testing.T) {
	friday := withWindows(commandLock("apply", false, "", nil), judged("friday", locksv1.WindowDeny, true, locksv1.WindowScope{}))
	req := wrappers.MakeLockRequest("r", "ns").Lock("acme/infra", ".", "default").Command("apply").Obj()
	cases := map[string]struct {
		locks []locksv1.CommandLock
		flags FreezeFlags
		req   *locksv1.LockRequest
		want  bool
	}{
		"a bypass past a window":                    {locks: []locksv1.CommandLock{friday}, req: bypass(req.DeepCopy()), want: true},
		"no bypass: nothing bypassed":               {locks: []locksv1.CommandLock{friday}, req: req.DeepCopy()},
		"a bypass with nothing to bypass":           {req: bypass(req.DeepCopy())},
		"a bypass that --disable-apply still holds": {locks: []locksv1.CommandLock{friday}, flags: FreezeFlags{DisableApply: true}, req: bypass(req.DeepCopy())},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f, _ := ResolveFreezes(tc.locks, tc.flags, t0)
			if _, got := f.Bypassed(tc.req); got != tc.want {
				t.Errorf("Bypassed = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestWindowsLockFreeze(t *testing.T) {
	cases := map[string]struct {
		name    string
		windows []locksv1.FreezeWindowStatus
		flags   FreezeFlags
		want    string
	}{
		"none": {name: "apply"},
		"a Deny window in force": {name: "apply", windows: []locksv1.FreezeWindowStatus{judged("friday", locksv1.WindowDeny, true, teamA())},
			want: "Apply commands are frozen by window friday of commandlock apply: Deny window in force (for namespaces team=a)"},
		"outside the Allow windows": {name: "all", windows: []locksv1.FreezeWindowStatus{judged("maint", locksv1.WindowAllow, false, locksv1.WindowScope{})},
			want: "All commands are frozen by window maint of commandlock all: outside every Allow window"},
		"inside an Allow window": {name: "apply", windows: []locksv1.FreezeWindowStatus{judged("maint", locksv1.WindowAllow, true, locksv1.WindowScope{})}},
		"an invalid window": {name: "apply", windows: []locksv1.FreezeWindowStatus{{Name: "bad", Action: locksv1.WindowAllow, Invalid: "window bad: unknown time zone \"X\""}},
			want: "Apply commands are frozen by window bad of commandlock apply: it cannot be evaluated, so it freezes its scope: window bad: unknown time zone \"X\""},
		"apply under --disable-global-apply-lock": {name: "apply", flags: FreezeFlags{DisableGlobalApplyLock: true},
			windows: []locksv1.FreezeWindowStatus{judged("friday", locksv1.WindowDeny, true, locksv1.WindowScope{})}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			fr, _ := WindowsLockFreeze(tc.name, tc.windows, tc.flags)
			if diff := cmp.Diff(tc.want, fr.Message); diff != "" {
				t.Errorf("message (-want +got):\n%s", diff)
			}
		})
	}
}

// TestThawedByWindow: a manual freeze whose until passed is thawed even while a window keeps
// the command Locked (reason Window).
func TestThawedByWindow(t *testing.T) {
	cl := commandLock("apply", true, "maintenance", at(t0))
	cl.Generation, cl.Status.ObservedGeneration = 1, 1
	cl.Status.Conditions = []metav1.Condition{{Type: locksv1.ConditionLocked, Status: metav1.ConditionTrue, Reason: locksv1.ReasonWindow}}
	if !Thawed(&cl) {
		t.Error("Thawed = false for Locked by a window after until, want true")
	}
}
