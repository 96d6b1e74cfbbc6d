package v1alpha1

// The marks of a fleet spoke's mirrors (docs/fleet.md, "Mirrors in a spoke"): the spoke agent
// copies the hub's ProjectLocks and CommandLocks into the spoke, read-only, and kubectl
// turnstile why reads these marks there.
const (
	// LabelMirror marks a spoke object that mirrors the hub's (value MirrorHub): nothing in the
	// spoke decides on it, and the agent puts it back as the hub has it.
	LabelMirror = "fleet.turnstile.dev/mirror"
	// MirrorHub is LabelMirror's value.
	MirrorHub = "hub"
	// AnnotationHubSeenAt is, on a CommandLock mirror, the last time the agent read the hub's
	// CommandLocks (RFC 3339): the freeze is as the hub said then.
	AnnotationHubSeenAt = "fleet.turnstile.dev/hub-seen-at"
	// AnnotationHubResourceVersion is the hub object's resourceVersion the mirror copies.
	AnnotationHubResourceVersion = "fleet.turnstile.dev/hub-resource-version"
	// AnnotationMirrorCluster is, on a CommandLock mirror, the spoke's cluster name (its
	// --cluster-name): the cluster the spoke's requests come from on the hub, which the
	// mirror's spec.clusters is judged against.
	AnnotationMirrorCluster = "fleet.turnstile.dev/cluster"
)

// The marks of a spoke's own judgement of the hub's freezes (docs/fleet.md, "Freezes
// everywhere, also offline"): kubectl turnstile why reads them in the spoke.
const (
	// AnnotationMirrorClusterLabels is, on a CommandLock mirror, the spoke's cluster labels as
	// the hub gives them (its Spoke's spec.labels, a JSON object), against which the spoke
	// judges a cluster selector; absent while unknown (a selector then matches: fail safe).
	AnnotationMirrorClusterLabels = "fleet.turnstile.dev/cluster-labels"
	// ConditionJudgedInSpoke is True on a CommandLock mirror whose status the spoke judged by its
	// own clock, because the hub's judgement ran out (a window's transition, an until) and no
	// newer one came: the message says since when, and when the hub was last read.
	ConditionJudgedInSpoke = "JudgedInSpoke"
	// ReasonHubJudgementOutdated is ConditionJudgedInSpoke's reason.
	ReasonHubJudgementOutdated = "HubJudgementOutdated"
	// ReasonFrozenInSpoke is the reason of a spoke request the hub granted that the spoke does
	// not let go while the hub's freezes, as the spoke judges them, hold it.
	ReasonFrozenInSpoke = "FrozenInSpoke"
)
