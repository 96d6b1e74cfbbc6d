package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ProjectLockSpec is the key this lock serializes. The controller creates ProjectLocks; their
// spec never changes. A key has no mode: the holders' modes are in the status.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a ProjectLock's key is immutable"
// +kubebuilder:validation:XValidation:rule="!has(self.mode)",message="a ProjectLock's key has no mode; a LockRequest's spec.locks[].mode says how it holds the key, and the ProjectLock's status.mode how it is held"
// +kubebuilder:validation:XValidation:rule="!has(self.maxHolders)",message="a ProjectLock's key has no maxHolders; a LockRequest's spec.locks[].maxHolders bounds the holders it holds beside, and the ProjectLock's status.maxHolders shows the lowest bound of its holders"
type ProjectLockSpec struct {
	LockTarget `json:",inline"`
}

// LockHolder is the identity that holds a ProjectLock and the requests it holds it through.
type LockHolder struct {
	// owner of the holding requests (spec.holder.owner, at most 253 characters).
	// +required
	// +kubebuilder:validation:MaxLength=253
	Owner string `json:"owner"`

	// pull of the holding requests; 0 when none.
	// +optional
	Pull int64 `json:"pull,omitempty"`

	// session of the holding requests (spec.holder.session); empty when none.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Session string `json:"session,omitempty"`

	// cluster of the holding requests (spec.holder.cluster): the fleet member they run in; empty
	// for the cluster the lock lives in.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Cluster string `json:"cluster,omitempty"`

	// url of the holder's pull request or pipeline run (spec.holder.url, at most 2048 characters).
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	URL string `json:"url,omitempty"`

	// requests are the LockRequests (same namespace) that hold this key: one, or more when the
	// same owner+pull re-locked it (plan, then apply).
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	Requests []HolderRequest `json:"requests"`

	// since is when this identity was granted the key.
	// +required
	Since metav1.Time `json:"since"`

	// expiresAt is when the last of the holding requests expires unless renewed.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
}

// HolderRequest names one LockRequest that holds a key.
type HolderRequest struct {
	// name of the LockRequest.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// uid of the LockRequest, so a deleted and re-created request of the same name is not
	// mistaken for the holder. The API server's UIDs are 36-character UUIDs.
	// +required
	// +kubebuilder:validation:MaxLength=128
	UID string `json:"uid"`
}

// SharedHolder is one LockRequest that holds a key in Shared mode, with its own identity and
// token: shared holders of one key may be of many identities.
type SharedHolder struct {
	// request is the LockRequest (same namespace) that holds the key.
	// +required
	Request HolderRequest `json:"request"`

	// owner of the request (spec.holder.owner, at most 253 characters).
	// +required
	// +kubebuilder:validation:MaxLength=253
	Owner string `json:"owner"`

	// pull of the request; 0 when none.
	// +optional
	Pull int64 `json:"pull,omitempty"`

	// session of the request (spec.holder.session); empty when none.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Session string `json:"session,omitempty"`

	// cluster of the request (spec.holder.cluster): the fleet member it runs in; empty for the
	// cluster the lock lives in.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Cluster string `json:"cluster,omitempty"`

	// url of the holder's pull request or pipeline run.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	URL string `json:"url,omitempty"`

	// fencingToken is the token of this holder's grant: above every token granted on the key
	// before it, so concurrent shared holders have distinct tokens in grant order, all above the
	// exclusive holder's before them and below the exclusive holder's after them.
	// +optional
	FencingToken int64 `json:"fencingToken,omitempty"`

	// grantedAt is when this request came to hold the key.
	// +required
	GrantedAt metav1.Time `json:"grantedAt"`

	// expiresAt is when the request's grant expires unless renewed.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
}

// ID is the identity of a shared holder.
func (h SharedHolder) ID() HolderID {
	return HolderID{Owner: h.Owner, Pull: h.Pull, Session: h.Session, Cluster: h.Cluster}
}

// MaxSharedHolders is the most requests that hold one key in Shared mode at once (the bound of
// ProjectLock.status.sharedHolders, and of spec.locks[].maxHolders); the next Shared request
// waits until one leaves.
const MaxSharedHolders = 100

// QueueEntry is one waiting request, as shown in ProjectLock.status.queue.
type QueueEntry struct {
	// request is the waiting LockRequest's name.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Request string `json:"request"`

	// owner of the waiting request (spec.holder.owner, at most 253 characters).
	// +required
	// +kubebuilder:validation:MaxLength=253
	Owner string `json:"owner"`

	// pull of the waiting request.
	// +optional
	Pull int64 `json:"pull,omitempty"`

	// cluster of the waiting request (spec.holder.cluster): the fleet member it runs in; empty
	// for the cluster the lock lives in.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Cluster string `json:"cluster,omitempty"`

	// priority the request waits with, after aging.
	// +required
	Priority Priority `json:"priority"`
}

// ProjectLockStatus is who holds the key and who waits for it.
type ProjectLockStatus struct {
	// mode is how the key is held: Exclusive (status.holder) or Shared (status.sharedHolders);
	// unset when free.
	// +optional
	Mode LockMode `json:"mode,omitempty"`

	// holder is the identity that holds the key exclusively; unset when free or held Shared.
	// +optional
	Holder *LockHolder `json:"holder,omitempty"`

	// sharedHolders are the requests that hold the key in Shared mode, in grant order; empty
	// when free or held Exclusive.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	SharedHolders []SharedHolder `json:"sharedHolders,omitempty"`

	// holderCount is the number of requests that hold the key (an exclusive holder's requests,
	// or the shared holders).
	// +optional
	HolderCount int32 `json:"holderCount,omitempty"`

	// maxHolders is the lowest spec.locks[].maxHolders among the holders (a counting lock):
	// nobody joins them while holderCount is at it. Unset when no holder has one, or free.
	// +optional
	MaxHolders int32 `json:"maxHolders,omitempty"`

	// fencingToken is the token of the latest grant: the resourceVersion of this ProjectLock
	// that the grant's write replaced. It strictly increases from one holder to the next, also
	// across deletion and re-creation of the ProjectLock (resourceVersions of one resource only
	// grow), with no clock involved. A re-created ProjectLock has none until its first grant.
	// +optional
	FencingToken int64 `json:"fencingToken,omitempty"`

	// queue is the head of the queue, in grant order (at most 20 entries).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	Queue []QueueEntry `json:"queue,omitempty"`

	// queueLength is the number of waiting requests.
	// +optional
	QueueLength int32 `json:"queueLength,omitempty"`

	// observedGeneration is the generation this status describes.
	// 0 until the controller first writes the status.
	// +optional
	// +kubebuilder:default=0
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions are Locked (True while held).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ProjectLock is one lock key and its holder: the single point of serialization. The controller
// creates and updates it; `kubectl delete projectlock NAME` force-unlocks it: its finalizer
// (locks.turnstile.dev/release-holders) keeps it until the controller has released the holder's
// requests (reason ForceUnlocked), and waiting requests then create it anew.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=pl,categories=locks
// +kubebuilder:printcolumn:name="Repo",type=string,JSONPath=`.spec.repo`
// +kubebuilder:printcolumn:name="Path",type=string,JSONPath=`.spec.path`
// +kubebuilder:printcolumn:name="Workspace",type=string,JSONPath=`.spec.workspace`
// +kubebuilder:printcolumn:name="Project",type=string,JSONPath=`.spec.project`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.status.mode`
// +kubebuilder:printcolumn:name="Holders",type=integer,JSONPath=`.status.holderCount`
// +kubebuilder:printcolumn:name="Max",type=integer,JSONPath=`.status.maxHolders`,description="A counting lock: at most this many hold it at once (the lowest maxHolders of its holders)"
// +kubebuilder:printcolumn:name="Holder",type=string,JSONPath=`.status.holder.owner`
// +kubebuilder:printcolumn:name="Pull",type=integer,JSONPath=`.status.holder.pull`
// +kubebuilder:printcolumn:name="Session",type=string,JSONPath=`.status.holder.session`,description="The holder's session: a gated workload's pod/NAME or job/NAME, a run's run-ID"
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.status.holder.cluster`,priority=1,description="The fleet member the holder runs in (docs/fleet.md); empty for this cluster"
// +kubebuilder:printcolumn:name="Queue",type=integer,JSONPath=`.status.queueLength`
// +kubebuilder:printcolumn:name="Token",type=integer,JSONPath=`.status.fencingToken`,priority=1
// +kubebuilder:printcolumn:name="Expires",type=string,JSONPath=`.status.holder.expiresAt`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ProjectLock struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the object's standard metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the lock key.
	// +required
	Spec ProjectLockSpec `json:"spec"`

	// status is the holder and the queue. Until the controller first writes it, it reads
	// {observedGeneration: 0}: behind metadata.generation, so kstatus (Flux, kpt) reads the
	// object as InProgress, never Current, before anything was decided.
	// +optional
	// +kubebuilder:default={}
	Status ProjectLockStatus `json:"status,omitempty"`
}

// ProjectLockList is a list of ProjectLocks.
// +kubebuilder:object:root=true
type ProjectLockList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProjectLock `json:"items"`
}
