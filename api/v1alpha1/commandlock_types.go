package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CommandAll is the CommandLock name that freezes every command.
const CommandAll = "all"

// CommandLockSpec freezes a command cluster-wide (on a fleet's hub: fleet-wide, or in the
// clusters spec.clusters names).
// +kubebuilder:validation:XValidation:rule="!has(self.admission) || !has(self.clusters)",message="spec.admission freezes writes to this cluster's API server, which spec.clusters cannot scope: use a CommandLock without spec.clusters for the write freeze"
// +kubebuilder:validation:XValidation:rule="!has(self.admission) || !has(self.windows) || self.windows.all(w, !has(w.namespaceSelector) && !has(w.repos) && !has(w.paths) && !has(w.clusters))",message="the windows of a CommandLock with spec.admission must not be scoped (namespaceSelector, repos, paths, clusters): scope the write freeze with spec.admission, or use a CommandLock of its own for it"
type CommandLockSpec struct {
	// locked freezes the command: requests for it are not granted until it is false again.
	// Holders already granted keep their grant.
	// +optional
	Locked bool `json:"locked,omitempty"`

	// reason is shown to everyone who waits, e.g. "maintenance window until 18:00 UTC".
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`

	// until thaws the command automatically at this time. Unset: frozen until unlocked.
	// +optional
	Until *metav1.Time `json:"until,omitempty"`

	// windows are recurring freezes (action Deny) and maintenance windows (action Allow), each
	// with a cron schedule, a duration, a time zone and a scope. spec.locked beats every window,
	// Deny beats Allow, and when Allow windows match a request, it is frozen outside all of
	// them. The controller judges them by its clock and writes the result in status.windows at
	// every transition; grants follow what that status says (docs/operations.md, "Freeze
	// windows").
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Windows []FreezeWindow `json:"windows,omitempty"`

	// admission makes the freeze also freeze writes to the cluster, enforced by the API server
	// (a ValidatingAdmissionPolicy that reads this CommandLock) for every client: the resources,
	// namespaces and subjects it names, while spec.locked or a window freezes
	// (docs/freeze-admission.md). The windows of a CommandLock with admission must not be
	// scoped: their scopes name Terraform repos and paths, not Kubernetes objects.
	// +optional
	Admission *AdmissionFreeze `json:"admission,omitempty"`

	// clusters scopes the whole freeze (spec.locked and every window) to requests from the
	// fleet's clusters it names or selects by label (docs/fleet.md, "Freezes everywhere, also
	// offline"): a request's cluster is its spec.holder.cluster. A request without one (made in
	// the hub itself) is never in a cluster scope. Unset: every request, whatever its cluster. A
	// window may be scoped to clusters of its own (spec.windows[].clusters).
	// +optional
	Clusters *ClusterScope `json:"clusters,omitempty"`
}

// ClusterScope names the fleet clusters a CommandLock (spec.clusters) or one of its windows
// (spec.windows[].clusters) freezes: a request's cluster is in scope when names lists it or
// selector matches its labels (the labels the hub's admin gives each member: docs/fleet.md). At
// least one of the two.
// +kubebuilder:validation:XValidation:rule="(has(self.names) && size(self.names) > 0) || has(self.selector)",message="a cluster scope names the clusters it freezes (names) or selects them by label (selector); remove it (spec.clusters, or a window's clusters) to freeze every cluster"
type ClusterScope struct {
	// names are cluster names (each spoke's --cluster-name, a DNS-1123 label).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Names []string `json:"names,omitempty"`

	// selector matches the labels of a member cluster (an empty selector: every member, the hub's
	// own requests still not). A member whose labels the hub cannot read is matched (a scope
	// that cannot be judged freezes more, never less).
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// CommandLockStatus reports the freeze and how many holders still run the command.
type CommandLockStatus struct {
	// activeHolders counts granted requests of this command (all commands for "all").
	// +optional
	ActiveHolders int32 `json:"activeHolders,omitempty"`

	// blockedRequests counts requests waiting because of this freeze.
	// +optional
	BlockedRequests int32 `json:"blockedRequests,omitempty"`

	// observedGeneration is the spec generation this status describes.
	// 0 until the controller first writes the status.
	// +optional
	// +kubebuilder:default=0
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// windows are the spec's windows as the controller judged them last: whether each is in
	// force, when it next changes, and its scope. Grants follow them, not any other clock.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Windows []FreezeWindowStatus `json:"windows,omitempty"`

	// nextTransition is the earliest time a window opens or closes; the controller wakes up then.
	// +optional
	NextTransition *metav1.Time `json:"nextTransition,omitempty"`

	// admission is what the admission policy reads for spec.admission: the windows judged
	// ahead and the break-glass grants in force. Written by the manager.
	// +optional
	Admission *AdmissionStatus `json:"admission,omitempty"`

	// conditions are Locked (the freeze is in force), Drained (no granted holder of the command
	// is left: maintenance may start), and for kstatus and Argo CD Reconciling (True while a
	// freeze in force drains) and Ready (True once drained, or when not frozen).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// CommandLock freezes one command (named after it, e.g. "apply"; "all" freezes every command)
// across the cluster. Its name is the command: a DNS label starting with a letter, the same rule
// LockRequest.spec.command follows. Freeze with
// `kubectl patch commandlock apply --type merge -p '{"spec":{"locked":true}}'`.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=cl,categories=locks
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 63",message="a CommandLock is named after the command it freezes (e.g. apply, or all): at most 63 lowercase letters, digits and '-', starting with a letter and not ending with '-'"
// +kubebuilder:printcolumn:name="Locked",type=boolean,JSONPath=`.spec.locked`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.spec.reason`
// +kubebuilder:printcolumn:name="Until",type=string,JSONPath=`.spec.until`
// +kubebuilder:printcolumn:name="Clusters",type=string,JSONPath=`.spec.clusters.names`
// +kubebuilder:printcolumn:name="Cluster-Selector",type=string,JSONPath=`.spec.clusters.selector`,priority=1
// +kubebuilder:printcolumn:name="Next",type=date,JSONPath=`.status.nextTransition`,priority=1
// +kubebuilder:printcolumn:name="Active",type=integer,JSONPath=`.status.activeHolders`
// +kubebuilder:printcolumn:name="Blocked",type=integer,JSONPath=`.status.blockedRequests`
// +kubebuilder:printcolumn:name="Drained",type=string,JSONPath=`.status.conditions[?(@.type=="Drained")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type CommandLock struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the object's standard metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the freeze.
	// +optional
	Spec CommandLockSpec `json:"spec,omitempty"`

	// status reports the freeze's effect. Until the controller first writes it, it reads
	// {observedGeneration: 0}: behind metadata.generation, so kstatus (Flux, kpt) reads the
	// object as InProgress, never Current, before anything was decided.
	// +optional
	// +kubebuilder:default={}
	Status CommandLockStatus `json:"status,omitempty"`
}

// CommandLockList is a list of CommandLocks.
// +kubebuilder:object:root=true
type CommandLockList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CommandLock `json:"items"`
}
