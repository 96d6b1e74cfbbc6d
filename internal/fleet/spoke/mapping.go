// Package spoke is a fleet's spoke agent (docs/fleet.md): it mirrors every LockRequest of the
// spoke cluster to the hub, where the hub's managers decide it, renews the spoke's holder Lease
// on the hub in each namespace it uses, and copies the hub's decision back into the spoke
// request's status, which the gated workload controller and kubectl read as in one cluster.
package spoke

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// The labels and annotations of a hub request (docs/fleet.md "A request on the hub").
const (
	// LabelCluster names the spoke a hub request (or Lease) belongs to: the agent watches its own
	// requests by it, and the hub's admission policy keeps each spoke to its own.
	LabelCluster = "fleet.turnstile.dev/cluster"
	// AnnotationSpokeUID is the spoke request's UID: a spoke request deleted and re-created under
	// its name is a new hub request.
	AnnotationSpokeUID = "fleet.turnstile.dev/spoke-uid"
	// AnnotationSpokeName is the spoke request's name (the hub name may be shortened by a hash).
	AnnotationSpokeName = "fleet.turnstile.dev/spoke-name"
	// AnnotationSpokeGeneration is the spoke request's generation that the hub request's spec
	// reflects: the spoke's status.observedGeneration once the hub has decided on it.
	AnnotationSpokeGeneration = "fleet.turnstile.dev/spoke-generation"
	// RoleSpoke is the locks.turnstile.dev/role of a spoke's hub Lease: the hub's holder-Lease
	// rule protects it as it protects every labelled holder Lease.
	RoleSpoke = "spoke"
	// AnnotationClockSkew is the clock skew bound the agent measured against the hub (seconds,
	// FormatSkew), which it writes on its hub Leases with each renewal for the hub's fleet view
	// (internal/fleet/hub): a spoke may write only its own Leases there.
	AnnotationClockSkew = "fleet.turnstile.dev/clock-skew"
	// AnnotationAgentVersion is the agent's version (its manager's release, or "(devel)"), which
	// it writes on its hub Leases with each renewal, beside the clock skew, for the hub's fleet
	// view: which spokes run an older agent than the hub.
	AnnotationAgentVersion = "fleet.turnstile.dev/agent-version"
	// FleetNamespace is the hub's fleet namespace (config/fleet): the spokes' ServiceAccounts,
	// the members ConfigMap, and each spoke's heartbeat Lease spoke-<cluster>, which the agent
	// renews whether or not it holds anything, so the hub tells an idle spoke from a lost one.
	FleetNamespace = "turnstile-fleet"
	// maxName is the longest object name (a DNS subdomain).
	maxName = 253
)

// HubName is the name of the hub request that mirrors the spoke request name of cluster:
// "<cluster>.<name>", shortened with a hash of name when that is longer than a name may be.
func HubName(cluster, name string) string {
	full := cluster + "." + name
	if len(full) <= maxName {
		return full
	}
	sum := sha256.Sum256([]byte(name))
	suffix := "-" + hex.EncodeToString(sum[:])[:16]
	keep := strings.TrimRight(full[:maxName-len(suffix)], ".-")
	return keep + suffix
}

// FormatSkew writes a skew bound as AnnotationClockSkew's value: seconds, to the millisecond.
func FormatSkew(d time.Duration) string {
	return strconv.FormatFloat(d.Round(time.Millisecond).Seconds(), 'f', 3, 64)
}

// versionPattern is a version as the agent publishes it (AnnotationAgentVersion): a release
// (v0.5.0, v0.5.0-rc.1+build.7), a Go pseudo-version, or "(devel)".
var versionPattern = regexp.MustCompile(`^(\(devel\)|v?[0-9A-Za-z][0-9A-Za-z.+_-]*)$`)

// IsVersion says whether v is a version the agent publishes and the hub shows: versionPattern,
// at most 64 characters (the Spoke field's limit).
func IsVersion(v string) bool { return len(v) <= 64 && versionPattern.MatchString(v) }

// LeaseName is the spoke's holder Lease on the hub, one in each namespace it uses.
func LeaseName(cluster string) string { return "spoke-" + cluster }

// HubRequest is the hub request that mirrors spoke, the request of cluster: its spec with the
// holder's cluster and the spoke's hub Lease, the request's locks.turnstile.dev labels, and
// the annotations that tie it to spoke.
func HubRequest(cluster string, spoke *locksv1.LockRequest) *locksv1.LockRequest {
	hub := &locksv1.LockRequest{ObjectMeta: metav1.ObjectMeta{
		Name:        HubName(cluster, spoke.Name),
		Namespace:   spoke.Namespace,
		Labels:      map[string]string{},
		Annotations: map[string]string{},
	}}
	for k, v := range spoke.Labels {
		if strings.HasPrefix(k, "locks.turnstile.dev/") {
			hub.Labels[k] = v
		}
	}
	hub.Labels[LabelCluster] = cluster
	hub.Annotations[AnnotationSpokeUID] = string(spoke.UID)
	hub.Annotations[AnnotationSpokeName] = spoke.Name
	hub.Annotations[AnnotationSpokeGeneration] = itoa(spoke.Generation)
	hub.Annotations[locksv1.AnnotationConfirmsStops] = "true" // this agent says its stops (letgo.go)
	spoke.Spec.DeepCopyInto(&hub.Spec)
	hub.Spec.Holder.Cluster = cluster
	hub.Spec.Holder.Lease = LeaseName(cluster)
	// A holder that opted out of the partition stop names no hub Lease: the hub keeps its lock
	// across any partition and any death of the spoke, until released (docs/fleet.md "Opting
	// out"). The hub's policy accepts a spoke's request without its Lease only so annotated.
	// guard:spoke-keep-running-no-lease
	if KeepRunning(spoke) {
		hub.Annotations[locksv1.AnnotationOnPartition] = locksv1.OnPartitionKeepRunning
		hub.Spec.Holder.Lease = ""
	}
	return hub
}

// KeepRunning says whether spoke's holder opted out of the partition stop
// (fleet.turnstile.dev/on-partition: keep-running, which the spoke's admission policy allows
// only to users with the keeprunning verb, and which no one changes after creation). A request
// with a ttl does not, whatever it says (the policy refuses the two together): the hub hands
// its lock on when its grant ends, which a spoke cut off cannot renew, so it is stopped before,
// as any other.
func KeepRunning(spoke *locksv1.LockRequest) bool {
	// guard:spoke-keep-running-without-ttl
	return locksv1.KeepsRunning(spoke.Annotations) && spoke.Spec.TTL == nil
}

// SpecUpdate is the hub request's spec once the spoke request's changes are carried over, and
// whether any was: the fields a request may change after creation (release, ttl, priority,
// waitTimeout, reason). The rest is immutable on both sides.
func SpecUpdate(spoke, hub *locksv1.LockRequest) (locksv1.LockRequestSpec, bool) {
	out := *hub.Spec.DeepCopy()
	out.Release = out.Release || spoke.Spec.Release // a release is never undone
	out.TTL = spoke.Spec.TTL.DeepCopy()
	out.Priority = spoke.Spec.Priority
	out.WaitTimeout = spoke.Spec.WaitTimeout.DeepCopy()
	out.Reason = spoke.Spec.Reason
	changed := out.Release != hub.Spec.Release || !durEqual(out.TTL, hub.Spec.TTL) || out.Priority != hub.Spec.Priority ||
		!durEqual(out.WaitTimeout, hub.Spec.WaitTimeout) || out.Reason != hub.Spec.Reason
	return out, changed
}

// SpokeStatus is the spoke request's status that shows the hub's decision: the hub request's
// status as it is (phase, locks and tokens, position, blockedBy, the times, fences, the
// conditions with the hub's reasons and messages), with the spoke's own observedGeneration: the
// spoke generation the hub request's spec reflects, once the hub has decided on that spec, else
// what the spoke showed.
func SpokeStatus(spoke, hub *locksv1.LockRequest) locksv1.LockRequestStatus {
	out := *hub.Status.DeepCopy()
	observed := spoke.Status.ObservedGeneration
	if hub.Status.ObservedGeneration >= hub.Generation && hub.Generation > 0 {
		if g, ok := atoi(hub.Annotations[AnnotationSpokeGeneration]); ok {
			observed = g
		}
	}
	out.ObservedGeneration = observed
	for i := range out.Conditions {
		out.Conditions[i].ObservedGeneration = observed
	}
	return out
}

func durEqual(a, b *metav1.Duration) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Duration == b.Duration
}
