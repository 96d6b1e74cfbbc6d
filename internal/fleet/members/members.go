// Package members reads one entry of the fleet's members ConfigMap (config/fleet/members.yaml,
// turnstile-fleet/turnstile-fleet-members): its key is a member cluster's name, its value the
// JSON object {"labels": {...}} ("{}" for none). The admission policies read the keys alone (the
// membership); the hub's managers read the labels, for CommandLock scopes by cluster label
// (internal/controller) and the Spokes' spec.labels (internal/fleet/hub), through this one
// reader so that both read one form.
package members

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// SpokeHeld says whether lr, a request on the hub, is a spoke's grant tied to its hub Lease:
// for a holder in its spec.holder.cluster, naming that spoke's hub Lease spoke-<cluster> (which
// the holder-Lease protection keeps to the spoke: a request names only a Lease its own creator
// made), by an agent that says its stops (locksv1.AnnotationConfirmsStops). Such a grant ends
// only once the spoke has stopped it or its Lease has lapsed (locksv1.AnnotationSpokeStopped). A
// keep-running grant names no Lease: it is not one.
func SpokeHeld(lr *locksv1.LockRequest) bool {
	c := lr.Spec.Holder.Cluster
	// guard:spoke-held-only-if-it-says-stops
	return c != "" && lr.Spec.Holder.Lease == "spoke-"+c && lr.Annotations[locksv1.AnnotationConfirmsStops] == "true"
}

const (
	// Namespace is the hub's fleet namespace (config/fleet).
	Namespace = "turnstile-fleet"
	// ConfigMap is the members ConfigMap's name.
	ConfigMap = "turnstile-fleet-members"
)

// Entry is the value of a cluster's key in the members ConfigMap.
type Entry struct {
	// Labels are the cluster's labels.
	Labels map[string]string `json:"labels,omitempty"`
}

// Labels reads cluster's entry: its labels (an empty map for none, or for an empty value), or an error that names the
// cluster and shows the form. Pure.
func Labels(cluster, value string) (map[string]string, error) {
	if strings.TrimSpace(value) == "" { // what the key alone says: a member, no labels
		return map[string]string{}, nil
	}
	var e Entry
	dec := json.NewDecoder(bytes.NewReader([]byte(value)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return nil, fmt.Errorf(`member %s: its value must be a JSON object {"labels": {"key": "value"}} ({} for none), e.g. `+
			`kubectl -n %s patch configmap %s --type merge -p '{"data":{"%s":"{\"labels\":{\"region\":\"eu\"}}"}}': %w`,
			cluster, Namespace, ConfigMap, cluster, err)
	}
	if e.Labels == nil {
		e.Labels = map[string]string{}
	}
	return e.Labels, nil
}
