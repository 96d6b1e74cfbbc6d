package queue

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// Cluster scopes, per request (docs/fleet.md, "Freezes everywhere, also offline"): a CommandLock
// with spec.clusters freezes, manually and by its windows, only the requests whose
// spec.holder.cluster it names or whose cluster's labels its selector matches; a window with
// clusters of its own (spec.windows[].clusters) freezes only theirs, within the CommandLock's.
// A request without a cluster (made in the hub itself) is in no cluster scope. A CommandLock
// without spec.clusters freezes every request, as in one cluster.

// addScope records cl's cluster scope (called by resolve for every CommandLock).
func (f *Freezes) addScope(cl *locksv1.CommandLock) {
	if cl.Spec.Clusters == nil {
		return
	}
	if f.scopes == nil {
		f.scopes = map[string]*locksv1.ClusterScope{}
	}
	f.scopes[cl.Name] = cl.Spec.Clusters
}

// NeedsClusterLabels reports whether a CommandLock in f, or one of its windows, selects
// clusters by label, so that the caller must give the fleet's members' labels (InFleet).
func (f Freezes) NeedsClusterLabels() bool {
	for _, s := range f.scopes {
		if s.Selector != nil {
			return true
		}
	}
	for _, ws := range f.windows {
		for _, w := range ws.windows {
			if w.Clusters != nil && w.Clusters.Selector != nil {
				return true
			}
		}
	}
	return false
}

// InFleet returns f with the labels of the fleet's member clusters, by cluster name. Without
// them (nil) a selector matches every cluster: a scope that cannot be judged freezes more,
// never less.
func (f Freezes) InFleet(members map[string]map[string]string) Freezes {
	f.members = members
	return f
}

// forCluster is For for a request of cluster: the command's own manual freeze when its scope
// holds the cluster, else "all"'s when its scope does.
func (f Freezes) forCluster(command, cluster string) (Freeze, bool) {
	if command == "" {
		return Freeze{}, false
	}
	if command == CommandApply && (f.flags.DisableApply || f.flags.DisableGlobalApplyLock) {
		return f.For(command) // the flags speak whatever the scopes say
	}
	// guard:fleet-manual-cluster-scope
	if fr, ok := f.byCommand[command]; ok && f.inClusterScope(command, cluster) {
		return fr, true
	}
	if f.all != nil && f.inClusterScope(locksv1.CommandAll, cluster) {
		return *f.all, true
	}
	return Freeze{}, false
}

// inClusterScope reports whether the CommandLock named name covers a request of cluster.
func (f Freezes) inClusterScope(name, cluster string) bool {
	s, ok := f.scopes[name]
	if !ok {
		return true
	}
	return f.clusterScopeHolds(s, cluster)
}

// clusterScopeHolds reports whether scope s (a CommandLock's, or a window's) holds a request of
// cluster, by the members' labels f was given.
func (f Freezes) clusterScopeHolds(s *locksv1.ClusterScope, cluster string) bool {
	return ClusterScopeMatches(s, cluster, f.members[cluster], f.members == nil)
}

// ClusterScopeMatches reports whether scope s holds a request of cluster, whose labels are
// clusterLabels. unknown says the labels could not be read: a selector then matches (fail
// safe), as does a selector that cannot be parsed. A request without a cluster is in no scope.
// A nil scope holds every request. Pure.
func ClusterScopeMatches(s *locksv1.ClusterScope, cluster string, clusterLabels map[string]string, unknown bool) bool {
	if s == nil {
		return true
	}
	// guard:fleet-scope-hub-own-requests
	if cluster == "" {
		return false
	}
	if slices.Contains(s.Names, cluster) {
		return true
	}
	if s.Selector == nil {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(s.Selector)
	// guard:fleet-scope-selector-fails-safe
	if err != nil || unknown {
		return true
	}
	return sel.Matches(labels.Set(clusterLabels))
}

// ClusterScopeText describes s for messages and `why`: "clusters eu-west-1,eu-west-2 or
// clusters labelled region=eu"; "" for no scope.
func ClusterScopeText(s *locksv1.ClusterScope) string {
	if s == nil {
		return ""
	}
	var parts []string
	if len(s.Names) > 0 {
		parts = append(parts, "clusters "+strings.Join(s.Names, ","))
	}
	if s.Selector != nil {
		sel := metav1.FormatLabelSelector(s.Selector)
		if sel == "<none>" || sel == "" {
			sel = "anything (every member)"
		}
		parts = append(parts, fmt.Sprintf("clusters labelled %s", sel))
	}
	return strings.Join(parts, " or ")
}

// scopedFreezeMessage is FreezeMessage for a CommandLock scoped to clusters: "Apply commands are
// locked in clusters eu-west-1: maintenance window".
func scopedFreezeMessage(command, reason string, s *locksv1.ClusterScope) string {
	msg := strings.Replace(FreezeMessage(command, reason), " locked globally", " locked in "+ClusterScopeText(s), 1)
	return msg
}
