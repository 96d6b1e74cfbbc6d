package queue

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

// scoped is cl scoped to the clusters names lists and selector selects.
func scoped(cl locksv1.CommandLock, names []string, selector *metav1.LabelSelector) locksv1.CommandLock {
	cl.Spec.Clusters = &locksv1.ClusterScope{Names: names, Selector: selector}
	return cl
}

func regionEU() *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"region": "eu"}}
}

// TestForRequestClusterScopes: a CommandLock's spec.clusters scopes its manual freeze and its
// windows to the requests of the clusters it names or selects (docs/fleet.md, "Freezes
// everywhere, also offline").
func TestForRequestClusterScopes(t *testing.T) {
	apply := func(cluster string) *locksv1.LockRequest {
		return wrappers.MakeLockRequest("r", "ns-a").Lock("acme/infra", "prod/net", "default").Command("apply").Cluster(cluster).Obj()
	}
	members := map[string]map[string]string{"eu-west-1": {"region": "eu"}, "eu-west-2": {"region": "eu", "tier": "prod"}, "us-east-1": {"region": "us"}}
	frozenApply := commandLock("apply", true, "weekend", nil)
	denyOpen := withWindows(commandLock("apply", false, "", nil), judged("friday", locksv1.WindowDeny, true, locksv1.WindowScope{}))
	allowClosed := withWindows(commandLock("apply", false, "", nil), judged("maint", locksv1.WindowAllow, false, locksv1.WindowScope{}))
	cases := map[string]struct {
		locks      []locksv1.CommandLock
		flags      FreezeFlags
		members    map[string]map[string]string
		req        *locksv1.LockRequest
		wantFrozen bool
		wantSource string
	}{
		"unscoped: the hub's own request is frozen": {
			locks: []locksv1.CommandLock{frozenApply}, members: members, req: apply(""),
			wantFrozen: true, wantSource: "commandlock/apply",
		},
		"unscoped: a spoke's request is frozen": {
			locks: []locksv1.CommandLock{frozenApply}, members: members, req: apply("us-east-1"),
			wantFrozen: true, wantSource: "commandlock/apply",
		},
		"by name: the named cluster's request is frozen": {
			locks: []locksv1.CommandLock{scoped(frozenApply, []string{"eu-west-1"}, nil)}, members: members, req: apply("eu-west-1"),
			wantFrozen: true, wantSource: "commandlock/apply",
		},
		"by name: another cluster's request is not": {
			locks: []locksv1.CommandLock{scoped(frozenApply, []string{"eu-west-1"}, nil)}, members: members, req: apply("eu-west-2"),
		},
		"by name: the hub's own request is in no cluster scope": {
			locks: []locksv1.CommandLock{scoped(frozenApply, []string{"eu-west-1"}, nil)}, members: members, req: apply(""),
		},
		"by label: a member with the labels is frozen": {
			locks: []locksv1.CommandLock{scoped(frozenApply, nil, regionEU())}, members: members, req: apply("eu-west-2"),
			wantFrozen: true, wantSource: "commandlock/apply",
		},
		"by label: a member without them is not": {
			locks: []locksv1.CommandLock{scoped(frozenApply, nil, regionEU())}, members: members, req: apply("us-east-1"),
		},
		"by label: a cluster that is no member has no labels": {
			locks: []locksv1.CommandLock{scoped(frozenApply, nil, regionEU())}, members: members, req: apply("ap-south-1"),
		},
		"by label, members unknown: frozen (fail safe)": {
			locks: []locksv1.CommandLock{scoped(frozenApply, nil, regionEU())}, members: nil, req: apply("us-east-1"),
			wantFrozen: true, wantSource: "commandlock/apply",
		},
		"by label, a selector that cannot be read: frozen (fail safe)": {
			locks:   []locksv1.CommandLock{scoped(frozenApply, nil, &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "region", Operator: "Near"}}})},
			members: members, req: apply("us-east-1"),
			wantFrozen: true, wantSource: "commandlock/apply",
		},
		"an empty selector: every member": {
			locks: []locksv1.CommandLock{scoped(frozenApply, nil, &metav1.LabelSelector{})}, members: members, req: apply("us-east-1"),
			wantFrozen: true, wantSource: "commandlock/apply",
		},
		"an empty selector: still not the hub's own request": {
			locks: []locksv1.CommandLock{scoped(frozenApply, nil, &metav1.LabelSelector{})}, members: members, req: apply(""),
		},
		"names or selector: a named cluster the selector misses is frozen": {
			locks: []locksv1.CommandLock{scoped(frozenApply, []string{"us-east-1"}, regionEU())}, members: members, req: apply("us-east-1"),
			wantFrozen: true, wantSource: "commandlock/apply",
		},
		"a scoped apply leaves the rest to an unscoped all": {
			locks:   []locksv1.CommandLock{scoped(frozenApply, []string{"eu-west-1"}, nil), commandLock("all", true, "", nil)},
			members: members, req: apply("us-east-1"),
			wantFrozen: true, wantSource: "commandlock/all",
		},
		"a scoped all does not freeze another cluster": {
			locks: []locksv1.CommandLock{scoped(commandLock("all", true, "", nil), []string{"eu-west-1"}, nil)}, members: members, req: apply("us-east-1"),
		},
		"a scoped all freezes its cluster": {
			locks: []locksv1.CommandLock{scoped(commandLock("all", true, "", nil), []string{"eu-west-1"}, nil)}, members: members, req: apply("eu-west-1"),
			wantFrozen: true, wantSource: "commandlock/all",
		},
		"--disable-apply freezes whatever the scope": {
			locks: []locksv1.CommandLock{scoped(frozenApply, []string{"eu-west-1"}, nil)}, flags: FreezeFlags{DisableApply: true},
			members: members, req: apply("us-east-1"),
			wantFrozen: true, wantSource: "--disable-apply",
		},
		"a Deny window of a scoped CommandLock freezes its cluster": {
			locks: []locksv1.CommandLock{scoped(denyOpen, nil, regionEU())}, members: members, req: apply("eu-west-1"),
			wantFrozen: true, wantSource: "commandlock/apply",
		},
		"a Deny window of a scoped CommandLock leaves another cluster": {
			locks: []locksv1.CommandLock{scoped(denyOpen, nil, regionEU())}, members: members, req: apply("us-east-1"),
		},
		"outside an Allow window of a scoped CommandLock: only its clusters are frozen": {
			locks: []locksv1.CommandLock{scoped(allowClosed, []string{"eu-west-1"}, nil)}, members: members, req: apply("eu-west-2"),
		},
		"outside an Allow window of a scoped CommandLock: its cluster is frozen": {
			locks: []locksv1.CommandLock{scoped(allowClosed, []string{"eu-west-1"}, nil)}, members: members, req: apply("eu-west-1"),
			wantFrozen: true, wantSource: "commandlock/apply",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f, _ := ResolveFreezes(tc.locks, tc.flags, time.Now())
			if tc.members != nil {
				f = f.InFleet(tc.members)
			}
			fr, frozen := f.ForRequest(tc.req)
			if frozen != tc.wantFrozen || fr.Source != tc.wantSource {
				t.Errorf("ForRequest = %+v, %v; want frozen %v by %q", fr, frozen, tc.wantFrozen, tc.wantSource)
			}
		})
	}
}

func TestScopedFreezeMessage(t *testing.T) {
	cl := scoped(commandLock("apply", true, "weekend freeze", nil), []string{"eu-west-1", "eu-west-2"}, regionEU())
	f, _ := ResolveFreezes([]locksv1.CommandLock{cl}, FreezeFlags{}, time.Now())
	fr, ok := f.For("apply")
	want := "Apply commands are locked in clusters eu-west-1,eu-west-2 or clusters labelled region=eu: weekend freeze"
	if !ok || fr.Message != want {
		t.Errorf("For(apply) = %+v, %v; want message %q", fr, ok, want)
	}
}

func TestNeedsClusterLabels(t *testing.T) {
	for name, tc := range map[string]struct {
		locks []locksv1.CommandLock
		want  bool
	}{
		"no scope":          {locks: []locksv1.CommandLock{commandLock("apply", true, "", nil)}},
		"names only":        {locks: []locksv1.CommandLock{scoped(commandLock("apply", true, "", nil), []string{"a"}, nil)}},
		"a selector":        {locks: []locksv1.CommandLock{scoped(commandLock("apply", false, "", nil), nil, regionEU())}, want: true},
		"an empty selector": {locks: []locksv1.CommandLock{scoped(commandLock("all", true, "", nil), nil, &metav1.LabelSelector{})}, want: true},
	} {
		f, _ := ResolveFreezes(tc.locks, FreezeFlags{}, time.Now())
		if got := f.NeedsClusterLabels(); got != tc.want {
			t.Errorf("%s: NeedsClusterLabels = %v, want %v", name, got, tc.want)
		}
	}
}
