package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Priority orders a lock queue: Critical before High before Normal before Low; within one
// priority, first come first served.
// +kubebuilder:validation:Enum=Low;Normal;High;Critical
type Priority string

// Priorities, lowest first.
const (
	PriorityLow      Priority = "Low"
	PriorityNormal   Priority = "Normal"
	PriorityHigh     Priority = "High"
	PriorityCritical Priority = "Critical"
)

// Rank maps a priority to a number that sorts it: higher is served first. Unknown values rank as
// Normal, the API default.
func (p Priority) Rank() int {
	switch p {
	case PriorityLow:
		return 0
	case PriorityHigh:
		return 2
	case PriorityCritical:
		return 3
	default:
		return 1
	}
}

// LockRequestPhase is where a request is in its life.
// +kubebuilder:validation:Enum=Pending;Granted;Released;Expired;Failed
type LockRequestPhase string

// Phases of a LockRequest. Released, Expired and Failed are final.
const (
	// PhasePending: waiting in the queue of at least one of its locks.
	PhasePending LockRequestPhase = "Pending"
	// PhaseGranted: holds every lock it asked for.
	PhaseGranted LockRequestPhase = "Granted"
	// PhaseReleased: gave its locks back (spec.release, force-unlock, holder lost).
	PhaseReleased LockRequestPhase = "Released"
	// PhaseExpired: its grant outlived spec.ttl.
	PhaseExpired LockRequestPhase = "Expired"
	// PhaseFailed: never granted (timeout, deadlock victim, queue full, invalid).
	PhaseFailed LockRequestPhase = "Failed"
)

// IsFinal reports whether the phase can no longer change.
func (p LockRequestPhase) IsFinal() bool {
	return p == PhaseReleased || p == PhaseExpired || p == PhaseFailed
}

// LockRequestSpec asks for one or more locks.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.command) || (has(self.command) && self.command == oldSelf.command)",message="command is immutable"
// +kubebuilder:validation:XValidation:rule="has(oldSelf.command) || !has(self.command)",message="command is immutable"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.release) || !oldSelf.release || (has(self.release) && self.release)",message="release cannot be undone; create a new LockRequest"
type LockRequestSpec struct {
	// locks are the lock targets to acquire, together. They are acquired in canonical key order
	// (so two multi-lock requests can never deadlock each other) and the request is Granted only
	// when it holds all of them. Immutable.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="locks are immutable; create a new LockRequest to lock something else"
	// +kubebuilder:validation:XValidation:rule="self.all(a, self.exists_one(b, a.repo == b.repo && a.path == b.path && a.workspace == b.workspace && (has(a.project) ? a.project : '') == (has(b.project) ? b.project : '')))",message="locks must not name the same repo/path/workspace/project twice"
	Locks []LockTarget `json:"locks"`

	// holder says who asks. Immutable.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="holder is immutable; create a new LockRequest for another holder"
	Holder Holder `json:"holder"`

	// command is the command the lock is for, e.g. "plan" or "apply". While the CommandLock named
	// after it (or the one named "all") is locked, the request is not granted. It follows the
	// CommandLock naming rule (lowercase letters, digits and '-', starting with a letter, not
	// ending with '-') so every command can be frozen; "all" is reserved for the CommandLock that
	// freezes every command. Immutable.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="command must be lowercase letters, digits and '-', start with a letter and not end with '-' (a CommandLock is named after it), e.g. apply"
	// +kubebuilder:validation:XValidation:rule="self != 'all'",message="command must not be 'all': that name is reserved for the CommandLock that freezes every command; name the command itself, e.g. apply"
	Command string `json:"command,omitempty"`

	// priority orders the queue: Critical, High, Normal, Low. Within one priority the queue is
	// first come, first served, and waiting requests age upward (never above High) so a Low
	// request is not starved. Unset means Normal.
	// +optional
	// +kubebuilder:default=Normal
	Priority Priority `json:"priority,omitempty"`

	// ttl is how long a grant lasts, e.g. "30m", counted from the grant: status.expiresAt is
	// grantedAt + ttl. Unset means the operator's default. Change it while granted to renew: the
	// grant then lasts the new ttl from when the controller sees the change (status.renewedAt),
	// so status.expiresAt becomes renewedAt + ttl; change it again to renew again. At most 24h
	// here; the operator's maximum (--max-ttl) may be lower: a request asking for more fails with
	// reason Invalid, and a renewal asking for more is refused (the grant keeps its expiresAt and
	// a Warning event with reason Invalid says so).
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="ttl must be a positive Go duration such as 90s, 30m or 1h30m"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || (duration(self) >= duration('1s') && duration(self) <= duration('24h'))",message="ttl must be between 1s and 24h"
	TTL *metav1.Duration `json:"ttl,omitempty"`

	// waitTimeout is how long to wait in the queue before failing with reason Timeout. "0s"
	// tries once and fails at once if the lock is busy. Unset waits until granted.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="waitTimeout must be a non-negative Go duration such as 0s, 90s or 10m"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self) <= duration('168h')",message="waitTimeout must be at most 168h"
	WaitTimeout *metav1.Duration `json:"waitTimeout,omitempty"`

	// reason says why the locks are taken, e.g. "migrating state" or "incident 4711: manual
	// fix". Everyone waiting is told it with the holder ("locked by pull #100 (alice): migrating
	// state"); kubectl turnstile why and locks show it, and so does kubectl get -o wide. One line
	// of at most 256 characters. It may be changed; waiters see the new text at the next decision.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.matches('\\\\p{Cc}')",message="reason must be one line: no control characters (newlines, tabs, escapes)"
	// +kubebuilder:validation:XValidation:rule="self == self.trim()",message="reason must not start or end with whitespace"
	Reason string `json:"reason,omitempty"`

	// release gives the locks back while keeping this record (phase Released). Deleting the
	// request releases too. Cannot be undone.
	// +optional
	Release bool `json:"release,omitempty"`

	// bypassFreeze is an emergency bypass: the request is granted even while a CommandLock
	// (spec.locked or a window) freezes its command. Only admins may set it (the "bypassfreeze"
	// permission on lockrequests, checked by an admission policy); every grant it lets through
	// is recorded in an event (reason FreezeBypassed) and the metric
	// turnstile_freeze_bypasses_total. It does not bypass the operator's --disable-apply.
	// +optional
	BypassFreeze *FreezeBypass `json:"bypassFreeze,omitempty"`
}

// FreezeBypass says why a request may ignore freezes.
type FreezeBypass struct {
	// reason says why, e.g. "incident 4711: hotfix"; shown in the bypass event.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="self.trim().size() > 0",message="bypassFreeze.reason must say why the freeze is bypassed"
	// +kubebuilder:validation:XValidation:rule="!self.matches('\\\\p{Cc}')",message="bypassFreeze.reason must be one line: no control characters"
	Reason string `json:"reason"`
}

// LockStatus is the state of one of the request's lock targets, in spec order.
type LockStatus struct {
	// key is the canonical lock key, repo/path/workspace[/project]: at most 582 characters, the
	// longest repo (200), path (253), workspace (63) and project (63) with their three '/'.
	// +required
	// +kubebuilder:validation:MaxLength=582
	Key string `json:"key"`

	// name is the ProjectLock that serializes this key, in the request's namespace.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// held is true while this request holds the key.
	// +optional
	Held bool `json:"held,omitempty"`

	// fencingToken is the token of this request's grant of the key: it is above the token of
	// every earlier holder of the key, as those holders reported it per key or per request. Pass
	// it with every write to the system this key guards. Kept after the request finishes.
	// +optional
	FencingToken int64 `json:"fencingToken,omitempty"`
}

// LockRequestStatus is what the controller decided.
type LockRequestStatus struct {
	// phase is Pending, Granted, Released, Expired or Failed.
	// +optional
	Phase LockRequestPhase `json:"phase,omitempty"`

	// locks reports, for each spec.locks entry in the same order, its key, ProjectLock and
	// whether it is held.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Locks []LockStatus `json:"locks,omitempty"`

	// queuePosition is the 1-based place in the queue of the first lock not yet held (1 = next).
	// It is refreshed lazily for deep waiters; 0 when not waiting.
	// +optional
	QueuePosition int32 `json:"queuePosition,omitempty"`

	// blockedBy says who or what is ahead: a holder ("pull #100 (alice)"), a frozen command, or a
	// deadlock cycle. It is at most as long as a condition's message (32768), which it repeats
	// when the request fails.
	// +optional
	// +kubebuilder:validation:MaxLength=32768
	BlockedBy string `json:"blockedBy,omitempty"`

	// fencingToken is the highest of status.locks[].fencingToken: the token of this request. A
	// later holder of any of its keys gets a higher token than this one, so a system may fence
	// with the request's token or with the per-key token alike. Tokens are large numbers that
	// strictly increase per key; they are not consecutive. Pass one to the system you change so
	// it can reject writes from a holder whose lock has since moved on.
	// +optional
	FencingToken int64 `json:"fencingToken,omitempty"`

	// queuedAt is when the controller first queued the request, by the clock of the manager
	// that did: waitTimeout and aging count from here.
	// +optional
	QueuedAt *metav1.MicroTime `json:"queuedAt,omitempty"`

	// arrivalRevision is the request's resourceVersion when the controller first queued it.
	// Requests of one priority are served in the order the API server stored them: by
	// metadata.creationTimestamp, then by arrivalRevision — never by a manager's clock.
	// +optional
	ArrivalRevision int64 `json:"arrivalRevision,omitempty"`

	// grantedAt is when the request came to hold all its locks.
	// +optional
	GrantedAt *metav1.Time `json:"grantedAt,omitempty"`

	// renewedAt is when the controller last saw spec.ttl change while the request was granted:
	// the grant's ttl counts from here since. Unset until the first renewal.
	// +optional
	RenewedAt *metav1.Time `json:"renewedAt,omitempty"`

	// expiresAt is when the grant ends unless renewed: grantedAt + ttl, or renewedAt + ttl once
	// renewed.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`

	// finishedAt is when the request reached a final phase; retention counts from here.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`

	// fences counts the times a grant listed for this request on a ProjectLock, but never
	// written to it, was taken back (a demotion: its command froze in between). Each demotion
	// raises it, so the demotion always changes the stored object and moves its resourceVersion:
	// an update equal to the stored object is a no-op that keeps the resourceVersion, and would
	// not fence the grant's write still in flight (docs/protocol.md, "A fence must change the
	// stored object"). Clients can ignore it.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Fences int64 `json:"fences,omitempty"`

	// observedGeneration is the spec generation this status describes.
	// 0 until the controller first writes the status.
	// +optional
	// +kubebuilder:default=0
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions are Granted (wait on this one), Ready (True while granted, and once released by its
	// owner), Reconciling (True while queued) and Stalled (True when Failed, or when the grant
	// ended without its owner asking: Expired, ForceUnlocked, HolderLost). kstatus (Flux, kpt)
	// reads them as InProgress while queued, Current when granted or released, Failed otherwise.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// LockRequest asks for one or more locks for a holder. Wait for it with
// `kubectl wait --for=condition=Granted lockrequest/NAME`; release it by deleting it.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=lr,categories=locks
// +kubebuilder:printcolumn:name="Lock",type=string,JSONPath=`.status.locks[0].key`
// +kubebuilder:printcolumn:name="Owner",type=string,JSONPath=`.spec.holder.owner`
// +kubebuilder:printcolumn:name="Session",type=string,JSONPath=`.spec.holder.session`,description="The holder's session: a gated workload's pod/NAME or job/NAME, a run's run-ID"
// +kubebuilder:printcolumn:name="Pull",type=integer,JSONPath=`.spec.holder.pull`
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.holder.cluster`,priority=1,description="The fleet member the holder runs in (docs/fleet.md); empty for this cluster"
// +kubebuilder:printcolumn:name="Command",type=string,JSONPath=`.spec.command`,priority=1
// +kubebuilder:printcolumn:name="Priority",type=string,JSONPath=`.spec.priority`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Position",type=integer,JSONPath=`.status.queuePosition`
// +kubebuilder:printcolumn:name="Token",type=integer,JSONPath=`.status.fencingToken`
// +kubebuilder:printcolumn:name="Expires",type=string,JSONPath=`.status.expiresAt`
// +kubebuilder:printcolumn:name="Blocked-By",type=string,JSONPath=`.status.blockedBy`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.spec.reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type LockRequest struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the object's standard metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is what is asked for.
	// +required
	Spec LockRequestSpec `json:"spec"`

	// status is what the controller decided. Until the controller first writes it, it reads
	// {observedGeneration: 0}: behind metadata.generation, so kstatus (Flux, kpt) reads the
	// object as InProgress, never Current, before anything was decided.
	// +optional
	// +kubebuilder:default={}
	Status LockRequestStatus `json:"status,omitempty"`
}

// LockRequestList is a list of LockRequests.
// +kubebuilder:object:root=true
type LockRequestList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []LockRequest `json:"items"`
}
