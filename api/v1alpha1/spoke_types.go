package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SpokeConnection is how the hub last heard from a spoke's agent (docs/fleet.md, "The fleet at
// a glance").
// +kubebuilder:validation:Enum=Connected;Unreachable;Never
type SpokeConnection string

const (
	// SpokeConnected means at least one of the spoke's hub Leases is live by the hub's clock.
	SpokeConnected SpokeConnection = "Connected"
	// SpokeUnreachable means the spoke renewed hub Leases once, and every one of them has lapsed:
	// its locks have passed on (or will, as the hub's lock controllers see the lapse).
	SpokeUnreachable SpokeConnection = "Unreachable"
	// SpokeNever means the spoke's agent has never renewed a hub Lease (a member that has not joined
	// yet, or whose agent is refused).
	SpokeNever SpokeConnection = "Never"
)

// Spoke condition reasons (condition Ready, and Reconciling / Stalled for kstatus).
const (
	// ReasonSpokeConnected: a hub Lease of the spoke is live.
	ReasonSpokeConnected = "Connected"
	// ReasonSpokeUnreachable: every hub Lease of the spoke has lapsed.
	ReasonSpokeUnreachable = "Unreachable"
	// ReasonSpokeNeverConnected: the spoke's agent has not renewed a hub Lease yet.
	ReasonSpokeNeverConnected = "NeverConnected"
)

// SpokeSpec is a member of the fleet as the hub's admin declared it. The hub's manager writes it
// from the members ConfigMap (turnstile-fleet/turnstile-fleet-members), which stays the list the
// admission policies read: edit the ConfigMap, not the Spoke.
type SpokeSpec struct {
	// labels are the cluster's labels from its entry in the members ConfigMap (a JSON object),
	// for CommandLock scopes by cluster labels.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Labels map[string]string `json:"labels,omitempty"`
}

// SpokeStatus is the fleet view of one spoke, kept by the hub's manager from the spoke's hub
// Leases (spoke-<cluster> in every namespace where it holds or waits, and in turnstile-fleet,
// its heartbeat) and the hub's requests of its holders. Nothing in it is written by the spoke.
type SpokeStatus struct {
	// observedGeneration is the spec generation this status describes. 0 until the hub's
	// manager first writes the status.
	// +optional
	// +kubebuilder:default=0
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// connection is Connected while a hub Lease of the spoke is live by the hub's clock,
	// Unreachable once all have lapsed, Never before the first renewal.
	// +optional
	Connection SpokeConnection `json:"connection,omitempty"`

	// connectionSince is when the connection became what it is: the last renewal of the Lease
	// that lapsed last for Unreachable, the first live renewal seen for Connected.
	// +optional
	ConnectionSince *metav1.Time `json:"connectionSince,omitempty"`

	// lastHeartbeat is the latest renewTime among the spoke's hub Leases (written by the spoke's
	// clock, which the clock skew measures against the hub's).
	// +optional
	LastHeartbeat *metav1.Time `json:"lastHeartbeat,omitempty"`

	// clockSkewMilliseconds is the clock skew bound, in milliseconds, the spoke's agent measured
	// against the hub from its renewals' round trips (internal/fleet/skew), as it published it on
	// its heartbeat Lease (annotation fleet.turnstile.dev/clock-skew). Unset before the first
	// measure.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ClockSkewMilliseconds *int64 `json:"clockSkewMilliseconds,omitempty"`

	// agentVersion is the version of the spoke's agent (its manager's release, or "(devel)"), as
	// it published it on its hub Leases (annotation fleet.turnstile.dev/agent-version), from the
	// latest renewal that carried one. Unset before the first, or while the agent publishes none
	// (an agent older than the annotation). It is the spoke's own claim, shown as such.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	AgentVersion string `json:"agentVersion,omitempty"`

	// leases counts the spoke's hub Leases, live or lapsed.
	// +optional
	Leases int32 `json:"leases,omitempty"`

	// holders counts the hub's granted requests whose holder is in this cluster
	// (spec.holder.cluster).
	// +optional
	Holders int32 `json:"holders,omitempty"`

	// waiters counts the hub's pending requests whose holder is in this cluster.
	// +optional
	Waiters int32 `json:"waiters,omitempty"`

	// keepRunning counts the holders among them that opted out of the partition stop
	// (fleet.turnstile.dev/on-partition: keep-running; their hub requests name no holder Lease):
	// the hub keeps their locks while the spoke is unreachable, until they are released in the
	// spoke or by an admin on the hub.
	// +optional
	KeepRunning int32 `json:"keepRunning,omitempty"`

	// conditions are Ready (True while Connected), Reconciling (True before the first connection:
	// kstatus InProgress) and Stalled (True while Unreachable: kstatus Failed).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Spoke is one member cluster of a fleet, on its hub (docs/fleet.md): made, updated and deleted
// by the hub's manager to match the members ConfigMap turnstile-fleet/turnstile-fleet-members,
// with the spoke's connection, heartbeat, clock skew, holders and waiters in its status.
// `kubectl get spokes` is the fleet at a glance.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=spk,categories=fleet
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 63",message="a Spoke is named after its cluster's --cluster-name: a DNS-1123 label (at most 63 lowercase letters, digits and '-')"
// +kubebuilder:printcolumn:name="Connection",type=string,JSONPath=`.status.connection`
// +kubebuilder:printcolumn:name="Since",type=date,JSONPath=`.status.connectionSince`
// +kubebuilder:printcolumn:name="Heartbeat",type=date,JSONPath=`.status.lastHeartbeat`
// +kubebuilder:printcolumn:name="Skew-ms",type=integer,JSONPath=`.status.clockSkewMilliseconds`
// +kubebuilder:printcolumn:name="Holders",type=integer,JSONPath=`.status.holders`
// +kubebuilder:printcolumn:name="Waiters",type=integer,JSONPath=`.status.waiters`
// +kubebuilder:printcolumn:name="Keep-Running",type=integer,JSONPath=`.status.keepRunning`
// +kubebuilder:printcolumn:name="Leases",type=integer,JSONPath=`.status.leases`,priority=1
// +kubebuilder:printcolumn:name="Agent",type=string,JSONPath=`.status.agentVersion`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Spoke struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the object's standard metadata. Its name is the cluster's name.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the member as declared in the members ConfigMap.
	// +optional
	Spec SpokeSpec `json:"spec,omitempty"`

	// status is the hub's view of the spoke. Until the hub's manager first writes it, it reads
	// {observedGeneration: 0}, so kstatus reads the Spoke as InProgress.
	// +optional
	// +kubebuilder:default={}
	Status SpokeStatus `json:"status,omitempty"`
}

// SpokeList is a list of Spokes.
// +kubebuilder:object:root=true
type SpokeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Spoke `json:"items"`
}
