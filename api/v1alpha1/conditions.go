package v1alpha1

// Condition types.
const (
	// ConditionGranted is True while a LockRequest holds all its locks. Wait on this one.
	ConditionGranted = "Granted"
	// ConditionReady is True when an object is where its owner wants it, for kstatus-aware tools
	// (Flux, kpt, Config Sync) and Argo CD: a LockRequest that is Granted or that its owner
	// released (reason Released); a CommandLock that is drained or not frozen.
	ConditionReady = "Ready"
	// ConditionReconciling is True while a LockRequest waits in a queue, or while a frozen
	// CommandLock drains (kstatus abnormal-true: InProgress).
	ConditionReconciling = "Reconciling"
	// ConditionStalled is True when a LockRequest failed and will not be granted, or lost its
	// grant without asking (Expired, ForceUnlocked, HolderLost): kstatus reads it as Failed.
	ConditionStalled = "Stalled"
	// ConditionLocked is True while a ProjectLock is held, or while a CommandLock's freeze is in force.
	ConditionLocked = "Locked"
	// ConditionDrained is True when no request of a frozen command is granted or being granted,
	// and none will be until the freeze lifts.
	ConditionDrained = "Drained"
)

// Condition reasons. Each says why a condition has its status.
const (
	// ReasonQueued: waiting behind a holder or earlier requests.
	ReasonQueued = "Queued"
	// ReasonCommandLocked: waiting (or failed, with waitTimeout 0s) because its command is frozen.
	ReasonCommandLocked = "CommandLocked"
	// ReasonGranted: holds all its locks.
	ReasonGranted = "Granted"
	// ReasonRenewalRefused: holds all its locks, and its spec.ttl is not in force: the renewal
	// asked for more than the operator's maximum, so the grant keeps the expiresAt it had (the
	// Granted condition's message says why).
	ReasonRenewalRefused = "RenewalRefused"
	// ReasonRenewed (event): a granted request's spec.ttl changed, so its grant now lasts the
	// new ttl from the renewal.
	ReasonRenewed = "Renewed"
	// ReasonReleased: released by spec.release or deletion.
	ReasonReleased = "Released"
	// ReasonForceUnlocked: an admin deleted the ProjectLock it held.
	ReasonForceUnlocked = "ForceUnlocked"
	// ReasonExpired: the grant outlived spec.ttl.
	ReasonExpired = "Expired"
	// ReasonTimeout: spec.waitTimeout elapsed before the grant (Forrst LOCK_TIMEOUT).
	ReasonTimeout = "Timeout"
	// ReasonBusy: waitTimeout 0s and the lock was held (Forrst LOCK_ACQUISITION_FAILED).
	ReasonBusy = "Busy"
	// ReasonDeadlock: chosen as the victim of a deadlock cycle.
	ReasonDeadlock = "Deadlock"
	// ReasonHolderLost: the holder's Lease lapsed or was deleted.
	ReasonHolderLost = "HolderLost"
	// ReasonHolderLeaseUnprotected: the request names a holder Lease the admission policies do
	// not protect (no label locks.turnstile.dev/role, or created by someone other than the
	// request's owner or creator), so it was not granted.
	ReasonHolderLeaseUnprotected = "HolderLeaseUnprotected"
	// ReasonQueueFull: the key's queue was at the operator's cap.
	ReasonQueueFull = "QueueFull"
	// ReasonInvalid: the spec passed admission but the operator cannot honor it (e.g. ttl over
	// the operator's maximum). For a granted request whose renewal asks for too long, it is the
	// reason of the Warning event that refuses the renewal; the grant stands.
	ReasonInvalid = "Invalid"
	// ReasonFree: a ProjectLock with no holder.
	ReasonFree = "Free"
	// ReasonHeld: a ProjectLock with a holder.
	ReasonHeld = "Held"
	// ReasonFrozen: a CommandLock whose freeze is in force.
	ReasonFrozen = "Frozen"
	// ReasonThawed: a CommandLock that is not (or no longer) in force.
	ReasonThawed = "Thawed"
	// ReasonActiveHolders: a frozen command still has granted holders.
	ReasonActiveHolders = "ActiveHolders"
	// ReasonNoActiveHolders: a frozen command has no granted holder left.
	ReasonNoActiveHolders = "NoActiveHolders"
	// ReasonWindow: a CommandLock whose freeze windows freeze the command now, for their scope
	// (a Deny window in force, no Allow window in force, or a window that cannot be evaluated).
	ReasonWindow = "Window"
	// ReasonFreezeStarting: a window freeze that the controller has judged in force but not yet
	// written; Drained is confirmed once the written freeze is what grants read.
	ReasonFreezeStarting = "FreezeStarting"
	// ReasonFreezeBypassed (event): a request with spec.bypassFreeze was granted while its
	// command was frozen for it.
	ReasonFreezeBypassed = "FreezeBypassed"
	// ReasonBreakGlass (event on a CommandLock): a break-glass grant lets its owner's writes in
	// its namespace past the CommandLock's write freeze (spec.admission) until it expires.
	ReasonBreakGlass = "BreakGlass"
)

// ReleaseHoldersFinalizer is on every ProjectLock from its creation. A ProjectLock that is
// deleted (an admin's force-unlock) keeps it until the controller has written every holder's
// request Released (reason ForceUnlocked): until then no one else can be granted the key, so a
// holder never learns of its loss after the next holder started. Do not remove it by hand.
const ReleaseHoldersFinalizer = "locks.turnstile.dev/release-holders"
