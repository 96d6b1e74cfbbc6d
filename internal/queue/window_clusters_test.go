package queue

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

// verdict is ForRequest's answer, for cmp.
type verdict struct {
	Frozen bool
	Freeze Freeze
}

// TestForRequestWindowClusterScopes: a window's own cluster scope (spec.windows[].clusters)
// narrows that window alone to the requests of the clusters it names or selects, within the
// CommandLock's spec.clusters when that is set too (docs/fleet.md, "Freezes everywhere, also
// offline"): "Deny applies on Saturday in the EU clusters".
func TestForRequestWindowClusterScopes(t *testing.T) {
	apply := func(cluster string) *locksv1.LockRequest {
		return wrappers.MakeLockRequest("r", "ns-a").Lock("acme/infra", "prod/net", "default").Command("apply").Cluster(cluster).Obj()
	}
	members := map[string]map[string]string{"eu-west-1": {"region": "eu"}, "eu-west-2": {"region": "eu"}, "us-east-1": {"region": "us"}}
	eu := locksv1.WindowScope{Clusters: &locksv1.ClusterScope{Selector: regionEU()}}
	euWest1 := locksv1.WindowScope{Clusters: &locksv1.ClusterScope{Names: []string{"eu-west-1"}}}
	unreadable := locksv1.WindowScope{Clusters: &locksv1.ClusterScope{Selector: &metav1.LabelSelector{
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "region", Operator: "Near"}}}}}
	saturday := func(scope locksv1.WindowScope, open bool) locksv1.CommandLock {
		return withWindows(commandLock("apply", false, "", nil), judged("saturday", locksv1.WindowDeny, open, scope))
	}
	frozen := func(window, why string) verdict {
		return verdict{Frozen: true, Freeze: Freeze{Source: "commandlock/apply",
			Message: "Apply commands are frozen by window " + window + " of commandlock apply: " + why}}
	}
	cases := map[string]struct {
		locks   []locksv1.CommandLock
		members map[string]map[string]string
		req     *locksv1.LockRequest
		want    verdict
	}{
		"a Deny window for the EU clusters freezes an EU cluster's request": {
			locks: []locksv1.CommandLock{saturday(eu, true)}, members: members, req: apply("eu-west-2"),
			want: frozen("saturday", "Deny window in force"),
		},
		"it leaves another cluster's request": {
			locks: []locksv1.CommandLock{saturday(eu, true)}, members: members, req: apply("us-east-1"),
		},
		"it leaves the hub's own request (no cluster: in no cluster scope)": {
			locks: []locksv1.CommandLock{saturday(eu, true)}, members: members, req: apply(""),
		},
		"closed, it freezes nobody": {
			locks: []locksv1.CommandLock{saturday(eu, false)}, members: members, req: apply("eu-west-1"),
		},
		"by name": {
			locks: []locksv1.CommandLock{saturday(euWest1, true)}, members: members, req: apply("eu-west-1"),
			want: frozen("saturday", "Deny window in force"),
		},
		"by name, another cluster": {
			locks: []locksv1.CommandLock{saturday(euWest1, true)}, members: members, req: apply("eu-west-2"),
		},
		"members unknown: a selector matches (fail safe)": {
			locks: []locksv1.CommandLock{saturday(eu, true)}, members: nil, req: apply("us-east-1"),
			want: frozen("saturday", "Deny window in force"),
		},
		"a selector that cannot be read matches (fail safe)": {
			locks: []locksv1.CommandLock{saturday(unreadable, true)}, members: members, req: apply("us-east-1"),
			want: frozen("saturday", "Deny window in force"),
		},
		"the CommandLock's scope still holds: a window for the EU in a CommandLock for us-east-1 freezes neither": {
			locks: []locksv1.CommandLock{scoped(saturday(eu, true), []string{"us-east-1"}, nil)}, members: members, req: apply("eu-west-1"),
		},
		"both scopes hold the request: frozen": {
			locks: []locksv1.CommandLock{scoped(saturday(eu, true), []string{"eu-west-1"}, nil)}, members: members, req: apply("eu-west-1"),
			want: frozen("saturday", "Deny window in force"),
		},
		"an Allow window for the EU: an EU request outside it is frozen": {
			locks:   []locksv1.CommandLock{withWindows(commandLock("apply", false, "", nil), judged("maint", locksv1.WindowAllow, false, eu))},
			members: members, req: apply("eu-west-1"),
			want: frozen("maint", "outside every Allow window"),
		},
		"an Allow window for the EU does not hold another cluster's requests to it": {
			locks:   []locksv1.CommandLock{withWindows(commandLock("apply", false, "", nil), judged("maint", locksv1.WindowAllow, false, eu))},
			members: members, req: apply("us-east-1"),
		},
		"an invalid window for the EU freezes only the EU (fail safe within its scope)": {
			locks: []locksv1.CommandLock{withWindows(commandLock("apply", false, "", nil),
				locksv1.FreezeWindowStatus{Name: "saturday", Action: locksv1.WindowDeny, Invalid: "unknown time zone", WindowScope: eu})},
			members: members, req: apply("us-east-1"),
		},
		"one window per region: each freezes its own": {
			locks: []locksv1.CommandLock{withWindows(commandLock("apply", false, "", nil),
				judged("eu-saturday", locksv1.WindowDeny, false, eu),
				judged("us-saturday", locksv1.WindowDeny, true, locksv1.WindowScope{Clusters: &locksv1.ClusterScope{Names: []string{"us-east-1"}}}))},
			members: members, req: apply("us-east-1"),
			want: frozen("us-saturday", "Deny window in force"),
		},
		"a manual freeze of the CommandLock is not narrowed by a window's scope": {
			locks:   []locksv1.CommandLock{func() locksv1.CommandLock { cl := saturday(eu, true); cl.Spec.Locked = true; return cl }()},
			members: members, req: apply("us-east-1"),
			want: verdict{Frozen: true, Freeze: Freeze{Source: "commandlock/apply", Message: "Apply commands are locked globally until they are unlocked"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f, _ := ResolveFreezes(tc.locks, FreezeFlags{}, time.Now())
			if tc.members != nil {
				f = f.InFleet(tc.members)
			}
			fr, ok := f.ForRequest(tc.req)
			if diff := cmp.Diff(tc.want, verdict{Frozen: ok, Freeze: fr}); diff != "" {
				t.Errorf("ForRequest (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWindowClusterScopeNeedsLabels: a window that selects clusters by label makes the caller
// read the members' labels; one that names them does not.
func TestWindowClusterScopeNeedsLabels(t *testing.T) {
	for name, tc := range map[string]struct {
		scope locksv1.WindowScope
		want  bool
	}{
		"names":       {scope: locksv1.WindowScope{Clusters: &locksv1.ClusterScope{Names: []string{"eu-west-1"}}}},
		"a selector":  {scope: locksv1.WindowScope{Clusters: &locksv1.ClusterScope{Selector: regionEU()}}, want: true},
		"no clusters": {scope: locksv1.WindowScope{}},
	} {
		cl := withWindows(commandLock("apply", false, "", nil), judged("w", locksv1.WindowDeny, true, tc.scope))
		f, _ := ResolveFreezes([]locksv1.CommandLock{cl}, FreezeFlags{}, time.Now())
		if got := f.NeedsClusterLabels(); got != tc.want {
			t.Errorf("%s: NeedsClusterLabels = %v, want %v", name, got, tc.want)
		}
	}
}

// TestWindowsLockFreezeNamesTheClusters: the CommandLock's own status says which clusters a
// window freezes.
func TestWindowsLockFreezeNamesTheClusters(t *testing.T) {
	ws := []locksv1.FreezeWindowStatus{judged("saturday", locksv1.WindowDeny, true, locksv1.WindowScope{Clusters: &locksv1.ClusterScope{Selector: regionEU()}})}
	fr, ok := WindowsLockFreeze("apply", ws, FreezeFlags{})
	want := verdict{Frozen: true, Freeze: Freeze{Source: "commandlock/apply",
		Message: "Apply commands are frozen by window saturday of commandlock apply: Deny window in force (for clusters labelled region=eu)"}}
	if diff := cmp.Diff(want, verdict{Frozen: ok, Freeze: fr}); diff != "" {
		t.Errorf("WindowsLockFreeze (-want +got):\n%s", diff)
	}
}
