package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AdmissionMode says what the API server does with a write a freeze covers.
// +kubebuilder:validation:Enum=Deny;Warn
type AdmissionMode string

const (
	// AdmissionDeny refuses the write, with a message that names the CommandLock.
	AdmissionDeny AdmissionMode = "Deny"
	// AdmissionWarn admits the write and returns a warning "this would have been refused by ..."
	// (kubectl prints it as "Warning: ..."), and records it in the audit log: try a freeze
	// before enforcing it, as Kubernetes rolls policies out.
	AdmissionWarn AdmissionMode = "Warn"
)

// AdmissionFreeze makes a CommandLock's freeze (spec.locked, or a window) also freeze writes to
// the cluster: while the freeze is in force, the API server refuses create, update and delete
// of the resources in scope, in the namespaces in scope, by the subjects in scope, for every
// client (Flux, Argo CD, Helm, kubectl), also while no Turnstile manager runs. The cluster's own
// writes are never frozen (docs/freeze-admission.md lists them).
type AdmissionFreeze struct {
	// mode is Deny (refuse; the default) or Warn (admit with a warning, to try a freeze first).
	// +optional
	// +kubebuilder:default=Deny
	Mode AdmissionMode `json:"mode,omitempty"`

	// resources are the kinds frozen, by API group. Unset: every kind (except the cluster's
	// own: docs/freeze-admission.md).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Resources []AdmissionResources `json:"resources,omitempty"`

	// namespaceSelector selects the namespaces whose objects are frozen, by their labels (every
	// namespace has kubernetes.io/metadata.name=<its name>). Unset: every namespace, and
	// cluster-scoped objects too; set: only namespaced objects in the namespaces it selects.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// subjects are who is frozen: a write by any of them is refused. Unset: everyone.
	// +optional
	Subjects *AdmissionSubjects `json:"subjects,omitempty"`

	// except are who is never frozen by this CommandLock (a break-glass group), even when
	// subjects name them. Their writes pass and are recorded in the API server's audit log.
	// +optional
	Except *AdmissionSubjects `json:"except,omitempty"`

	// bypass tells a refused writer how to get past the freeze, e.g. "page #platform-oncall";
	// shown in every refusal. Unset: the refusal says how to break glass with kubectl turnstile.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.matches('\\\\p{Cc}')",message="bypass must be one line: no control characters"
	Bypass string `json:"bypass,omitempty"`
}

// AdmissionResources are kinds of one or more API groups.
type AdmissionResources struct {
	// apiGroups are the groups: "" is the core group (ConfigMap, Secret, Service, ...), "apps"
	// has Deployment, "*" is every group.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	APIGroups []string `json:"apiGroups"`

	// kinds are the kinds in those groups, e.g. Deployment, as in an object's kind. Unset or
	// "*": every kind of the groups.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=63
	Kinds []string `json:"kinds,omitempty"`
}

// AdmissionSubjects are users, groups and ServiceAccounts. A write's author is one of them when
// any entry names it.
type AdmissionSubjects struct {
	// users are user names as the API server authenticates them, e.g. alice@example.com.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=253
	Users []string `json:"users,omitempty"`

	// groups are group names, e.g. platform:break-glass or system:serviceaccounts:argocd.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=253
	Groups []string `json:"groups,omitempty"`

	// serviceAccounts are NAMESPACE/NAME, or NAMESPACE/* for every ServiceAccount of a
	// namespace, e.g. flux-system/kustomize-controller or argocd/*.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=317
	// +kubebuilder:validation:items:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?/([*]|[a-z0-9]([-a-z0-9.]*[a-z0-9])?)$')",message="a ServiceAccount is NAMESPACE/NAME or NAMESPACE/*, e.g. flux-system/kustomize-controller"
	ServiceAccounts []string `json:"serviceAccounts,omitempty"`
}

// AdmissionStatus is what the admission policy reads besides the spec: the windows' freezes
// judged ahead, so that the API server flips them on time by its own clock, and the break-glass
// grants in force.
type AdmissionStatus struct {
	// judgedAt is when the manager last judged the windows. A delete carries no time of its
	// own, so the API server judges it as of judgedAt, and an update as of judgedAt and the
	// time it stamps on it: a window that opens while no manager runs refuses deletes only once
	// a manager judges again, and one that closes keeps refusing updates and deletes until then
	// (docs/freeze-admission.md).
	// +optional
	JudgedAt *metav1.Time `json:"judgedAt,omitempty"`

	// intervals are the times the windows freeze, earliest first, from the one in force at
	// judgedAt on, up to 16 of them or 8 days ahead. The last one has no until when the
	// windows freeze for good (an invalid window), and past the 8 days an interval without
	// until freezes what nobody judged.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Intervals []FreezeInterval `json:"intervals,omitempty"`

	// manager is the user name the Turnstile manager writes as: its own writes (it ungates Pods
	// and Jobs) pass every write freeze. Named here by the manager, not by a permission: Flux's
	// and Argo CD's controllers often have cluster-admin, which has every permission.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Manager string `json:"manager,omitempty"`

	// bypasses are the break-glass grants in force: granted LockRequests of this command with
	// spec.bypassFreeze. Their owners' writes in their namespace pass until the grant expires.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Bypasses []AdmissionBypass `json:"bypasses,omitempty"`
}

// FreezeInterval is a time the windows freeze.
type FreezeInterval struct {
	// from is when it starts.
	// +required
	From metav1.Time `json:"from"`

	// until is when it ends. Unset: until the manager judges the windows again.
	// +optional
	Until *metav1.Time `json:"until,omitempty"`

	// window names the window that freezes (several: the first), or says why the freeze has no
	// end ("not judged past ...").
	// +required
	// +kubebuilder:validation:MaxLength=128
	Window string `json:"window"`
}

// AdmissionBypass is a break-glass grant: a granted LockRequest with spec.bypassFreeze.
type AdmissionBypass struct {
	// user is the request's owner: the writes that pass are theirs.
	// +required
	// +kubebuilder:validation:MaxLength=253
	User string `json:"user"`

	// namespace is the request's namespace: only writes there pass.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`

	// request is the LockRequest's name.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Request string `json:"request"`

	// until is when the grant expires.
	// +required
	Until metav1.Time `json:"until"`

	// reason is the request's spec.bypassFreeze.reason.
	// +required
	// +kubebuilder:validation:MaxLength=256
	Reason string `json:"reason"`
}
