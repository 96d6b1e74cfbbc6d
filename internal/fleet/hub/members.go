package hub

import (
	"encoding/json"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
)

const (
	// Namespace is the hub's fleet namespace: the spokes' ServiceAccounts, the members
	// ConfigMap and the spokes' heartbeat Leases (config/fleet).
	Namespace = "turnstile-fleet"
	// MembersConfigMap lists the fleet's members: one key per cluster name, its labels as a JSON
	// object. The admission policy turnstile-fleet-members reads it; the hub's manager makes a
	// Spoke for each key.
	MembersConfigMap = "turnstile-fleet-members"
)

// Member is one member cluster as the members ConfigMap declares it.
type Member struct {
	// Labels are the cluster's labels; nil when none, or when they cannot be read.
	Labels map[string]string
	// Problem says why the entry's labels cannot be read; "" when they can.
	Problem string
}

// Members reads the members ConfigMap: each key a member. A nil cm (no fleet on this hub) has
// none. An entry whose value is not a JSON object of strings is still a member (the admission
// policy admits it: the key alone is the membership), with a Problem.
func Members(cm *corev1.ConfigMap) map[string]Member {
	out := map[string]Member{}
	if cm == nil {
		return out
	}
	for name, v := range cm.Data {
		m := Member{}
		if v != "" {
			var labels map[string]string
			if err := json.Unmarshal([]byte(v), &labels); err != nil {
				m.Problem = fmt.Sprintf("the entry of cluster %s in configmap %s/%s is not a JSON object of strings (%v): fix it, e.g. "+
					`kubectl -n %s patch configmap %s --type merge -p '{"data":{"%s":"{\"region\":\"eu\"}"}}'`,
					name, Namespace, MembersConfigMap, err, Namespace, MembersConfigMap, name)
			} else if len(labels) > 0 {
				m.Labels = maps.Clone(labels)
			}
		}
		out[name] = m
	}
	return out
}
