package v1alpha1

// The partition opt-out of a fleet (docs/fleet.md, "Opting out"): a spoke cut off from its hub
// stops its running holders before the hub can hand their locks on, unless the holder's
// LockRequest (or the gated Pod or Job it was made for) carries
// AnnotationOnPartition: OnPartitionKeepRunning. Such a request's hub request names no holder
// Lease: the hub keeps its lock across any partition and any death of the spoke, until the
// spoke releases it or an admin releases it on the hub. Writing the annotation needs the
// keeprunning verb on lockrequests (config/admission/keep-running.yaml).
const (
	// AnnotationOnPartition says what a spoke does with the holder when it cannot reach the
	// hub; its only value is OnPartitionKeepRunning (without it: stopped, the default).
	AnnotationOnPartition = "fleet.turnstile.dev/on-partition"
	// OnPartitionKeepRunning is AnnotationOnPartition's value: not stopped, the lock held on
	// the hub until released.
	OnPartitionKeepRunning = "keep-running"
)

// ReasonClockSkewTooLarge is the reason of a spoke request whose hub grant its spoke gave back
// because the spoke's clock is off the hub's by more than --max-clock-skew: its holder is
// stopped, or its workload is not let go, and its hub request is released, so the lock is not
// held fleet-wide while the spoke's clock is broken. Final (Released), as HubUnreachable.
const ReasonClockSkewTooLarge = "ClockSkewTooLarge"

// KeepsRunning says whether annotations opt a holder out of the partition stop.
func KeepsRunning(annotations map[string]string) bool {
	return annotations[AnnotationOnPartition] == OnPartitionKeepRunning
}
