package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// WindowAction says what a freeze window does while it is in force.
// +kubebuilder:validation:Enum=Deny;Allow
type WindowAction string

const (
	// WindowDeny freezes the command, for the window's scope, while the window is in force.
	WindowDeny WindowAction = "Deny"
	// WindowAllow lets the command run, for the window's scope, only while one of the Allow
	// windows whose scope matches is in force: outside all of them the command is frozen.
	WindowAllow WindowAction = "Allow"
)

// WindowState says whether a window is in force.
// +kubebuilder:validation:Enum=Open;Closed
type WindowState string

const (
	// WindowOpen means the window is in force (a Deny window freezes its scope, an Allow window lets
	// its scope run).
	WindowOpen WindowState = "Open"
	// WindowClosed means the window is not in force.
	WindowClosed WindowState = "Closed"
)

// WindowScope narrows a window to some requests. Every field that is set must match; an empty
// scope matches every request of the command. A request with several lock targets is frozen
// when any of its targets is.
type WindowScope struct {
	// namespaceSelector matches the labels of the request's namespace (every namespace carries
	// kubernetes.io/metadata.name=<its name>). Unset: every namespace.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// repos are glob patterns (Go path.Match: '*' does not cross '/') a target's repo must match
	// one of, e.g. "acme/*". Unset: every repo.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=200
	Repos []string `json:"repos,omitempty"`

	// paths are glob patterns (Go path.Match) a target's path must match one of, e.g.
	// "prod/*". Unset: every path.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	Paths []string `json:"paths,omitempty"`

	// clusters narrows the window to requests from the fleet's clusters it names or selects by
	// label (docs/fleet.md, "Freezes everywhere, also offline"), e.g. a weekend window for the
	// EU clusters only: a request's cluster is its spec.holder.cluster, and a request without
	// one (made in the hub itself) is in no cluster scope. The CommandLock's spec.clusters, when
	// set, still scopes every window: a window freezes the requests both hold. Unset: every
	// cluster the CommandLock freezes.
	// +optional
	Clusters *ClusterScope `json:"clusters,omitempty"`
}

// FreezeWindow is a recurring freeze (Deny) or a recurring maintenance window (Allow): it opens
// at every time its cron schedule names, in its time zone, and stays open for its duration,
// counted on that zone's wall clock (Friday 16:00 plus 64h is Monday 08:00 even across a
// daylight-saving change).
type FreezeWindow struct {
	// name identifies the window in status and messages.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="name must be lowercase letters, digits and '-', e.g. friday-freeze"
	Name string `json:"name"`

	// schedule is a standard five-field cron expression (minute hour day-of-month month
	// day-of-week) for when the window opens, e.g. "0 16 * * 5" (Fridays 16:00). Descriptors
	// such as @daily are accepted too.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.startsWith('@') || self.trim().split(' ').filter(f, f != '').size() == 5",message="schedule must be a five-field cron expression (minute hour day-of-month month day-of-week), e.g. \"0 16 * * 5\", or a descriptor such as @daily"
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9*/,?@ -]+$')",message="schedule may contain only digits, letters (month and day names), spaces and * / , - ? @"
	Schedule string `json:"schedule"`

	// duration is how long the window stays open each time, on the wall clock of timeZone,
	// e.g. "64h". More than 0s and at most 168h.
	// +required
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="duration must be a positive Go duration such as 20s, 2h or 64h"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || (duration(self) >= duration('1s') && duration(self) <= duration('168h'))",message="duration must be between 1s and 168h"
	Duration metav1.Duration `json:"duration"`

	// timeZone is the IANA time zone the schedule and the duration are read in, e.g.
	// "Europe/Berlin". Unset: UTC. An unknown zone makes the window invalid (see action).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*$')",message="timeZone must be an IANA zone name such as Europe/Berlin or UTC"
	TimeZone string `json:"timeZone,omitempty"`

	// action is Deny (frozen while the window is in force) or Allow (runs only while an Allow
	// window is in force). Deny beats Allow, and spec.locked beats both. A window the controller
	// cannot evaluate (an unparsable schedule, an unknown zone) freezes its scope, whatever its
	// action, and the condition Invalid names it: it fails safe, never open.
	// +required
	Action WindowAction `json:"action"`

	// scope narrows the window to some namespaces, repos and paths; empty: every request of the
	// command.
	// +optional
	WindowScope `json:",inline"`
}

// FreezeWindowStatus is one window as the controller judged it at its last transition.
type FreezeWindowStatus struct {
	// name is the window's name in spec.windows.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// action is the window's action.
	// +required
	Action WindowAction `json:"action"`

	// state is Open while the window is in force (a Deny window freezes its scope, an Allow
	// window lets its scope run) and Closed otherwise; unset for an invalid window.
	// +optional
	State WindowState `json:"state,omitempty"`

	// invalid says why the window cannot be evaluated; such a window freezes its scope.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Invalid string `json:"invalid,omitempty"`

	// nextTransition is when the window next opens or closes.
	// +optional
	NextTransition *metav1.Time `json:"nextTransition,omitempty"`

	// scope is the window's scope, as judged: the freeze check matches requests against it.
	// +optional
	WindowScope `json:",inline"`
}
