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
