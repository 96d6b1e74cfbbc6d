package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/fleet/members"
	"github.com/turnstile-dev/turnstile/internal/queue"
)

// The fleet's members and their labels (docs/fleet.md, "Freezes everywhere, also offline"): a
// CommandLock's spec.clusters.selector matches them. They live where the fleet's membership
// lives, the ConfigMap turnstile-fleet/turnstile-fleet-members that the spoke admission policy
// reads (config/fleet/members.yaml): one key per cluster, its value {"labels": {...}}. This is
// the one place that reads them, so that the source can move (to a Spoke resource) alone.
const (
	FleetMembersNamespace = members.Namespace
	FleetMembersName      = members.ConfigMap
)

// fleetMembers reads the fleet's members' labels by cluster name, past the cache (one object,
// read only while a CommandLock selects clusters by label: a manager outside a fleet never
// watches ConfigMaps). nil when they cannot be known: no members ConfigMap (no fleet), no
// right to read it, or a value that is not a member's JSON — a selector then matches every
// cluster (queue.ClusterScopeMatches: a scope that cannot be judged freezes more, never less).
func fleetMembers(ctx context.Context, r client.Reader) (map[string]map[string]string, error) {
	if r == nil {
		return nil, nil
	}
	var cm corev1.ConfigMap
	err := r.Get(ctx, client.ObjectKey{Namespace: FleetMembersNamespace, Name: FleetMembersName}, &cm)
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsForbidden(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read the fleet's members for cluster scopes: %w", err)
	}
	members, err := ParseFleetMembers(cm.Data)
	if err != nil {
		logf.FromContext(ctx).Info("cluster selectors match every cluster until the members are fixed", "configmap", FleetMembersNamespace+"/"+FleetMembersName, "error", err.Error())
		return nil, nil
	}
	return members, nil
}

// ParseFleetMembers reads the members ConfigMap's data: each value a JSON object
// {"labels": {...}} ({} for none). A value that is not is an error naming its cluster. Pure.
func ParseFleetMembers(data map[string]string) (map[string]map[string]string, error) {
	out := make(map[string]map[string]string, len(data))
	for cluster, v := range data {
		labels, err := members.Labels(cluster, v)
		if err != nil {
			return nil, err
		}
		out[cluster] = labels
	}
	return out, nil
}

// inFleet gives freezes the fleet's members' labels when a CommandLock selects clusters by
// label.
func inFleet(ctx context.Context, r client.Reader, freezes *queue.Freezes) error {
	if !freezes.NeedsClusterLabels() {
		return nil
	}
	members, err := fleetMembers(ctx, r)
	if err != nil {
		return err
	}
	*freezes = freezes.InFleet(members)
	return nil
}

// scopeMembers is fleetMembers when cl selects clusters by label, else nil (its names need no
// labels).
func scopeMembers(ctx context.Context, r client.Reader, cl *locksv1.CommandLock) (map[string]map[string]string, error) {
	if cl.Spec.Clusters == nil || cl.Spec.Clusters.Selector == nil {
		return nil, nil
	}
	return fleetMembers(ctx, r)
}

// inClusterScope is the requests of reqs that scope s holds (all of them when s is nil): a
// CommandLock scoped to clusters counts, and drains, only their requests. It reuses reqs'
// array.
func inClusterScope(s *locksv1.ClusterScope, reqs []locksv1.LockRequest, members map[string]map[string]string) []locksv1.LockRequest {
	if s == nil {
		return reqs
	}
	out := reqs[:0]
	for i := range reqs {
		c := reqs[i].Spec.Holder.Cluster
		if queue.ClusterScopeMatches(s, c, members[c], members == nil) {
			out = append(out, reqs[i])
		}
	}
	return out
}
