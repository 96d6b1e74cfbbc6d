package hub

import (
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"

	"github.com/turnstile-dev/turnstile/internal/fleet/members"
)

const (
	// Namespace is the hub's fleet namespace: the spokes' ServiceAccounts, the members
	// ConfigMap and the spokes' heartbeat Leases (config/fleet).
	Namespace = members.Namespace
	// MembersConfigMap lists the fleet's members: one key per cluster name, its value
	// {"labels": {...}} (internal/fleet/members). The admission policy turnstile-fleet-members reads it; the hub's manager makes a
	// Spoke for each key.
	MembersConfigMap = members.ConfigMap
)

// Member is one member cluster as the members ConfigMap declares it.
type Member struct {
	// Labels are the cluster's labels; nil when none, or when they cannot be read.
	Labels map[string]string
	// Problem says why the entry's labels cannot be read; "" when they can.
	Problem string
}

// Members reads the members ConfigMap: each key a member. A nil cm (no fleet on this hub) has
// none. An entry whose value is not {"labels": {...}} is still a member (the admission
// policy admits it: the key alone is the membership), with a Problem.
func Members(cm *corev1.ConfigMap) map[string]Member {
	out := map[string]Member{}
	if cm == nil {
		return out
	}
	for name, v := range cm.Data {
		m := Member{}
		labels, err := members.Labels(name, v)
		if err != nil {
			m.Problem = fmt.Sprintf("the entry of cluster %s in configmap %s/%s cannot be read: %v", name, Namespace, MembersConfigMap, err)
		} else if len(labels) > 0 {
			m.Labels = maps.Clone(labels)
		}
		out[name] = m
	}
	return out
}
