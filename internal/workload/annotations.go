// Package workload gates Pods and Jobs on Turnstile locks with no client code: a workload that
// carries the annotation locks.turnstile.dev/lock is held at admission (a Pod by the scheduling
// gate locks.turnstile.dev/lock, a Job by spec.suspend; config/admission/workload-*.yaml), and
// this package's controller takes the lock for it with a LockRequest it owns, lets it go when
// the lock is granted, releases the lock when it finishes and stops it when it loses the lock.
// docs/gated-workloads.md is the user's guide.
package workload

import (
	"fmt"
	"time"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
)

// The annotations, label and scheduling gate of gated workloads.
const (
	// AnnotationLock names the keys, REPO:PATH[:WORKSPACE[:PROJECT]] as `kubectl turnstile run
	// -l` takes them, separated by commas or white space (lockkey.ParseList).
	AnnotationLock = "locks.turnstile.dev/lock"
	// AnnotationCommand, AnnotationPriority and AnnotationTTL are the request's spec.command,
	// spec.priority and spec.ttl.
	AnnotationCommand  = "locks.turnstile.dev/command"
	AnnotationPriority = "locks.turnstile.dev/priority"
	AnnotationTTL      = "locks.turnstile.dev/ttl"
	// AnnotationFencingToken is written by the manager when the lock is granted, before (in
	// the same write as) the gate goes: a container reads it through the downward API.
	AnnotationFencingToken = "locks.turnstile.dev/fencing-token"
	// AnnotationCreatedBy records who created the workload; the admission policy stamps it,
	// and it becomes the LockRequest's spec.holder.owner.
	AnnotationCreatedBy = "locks.turnstile.dev/created-by"
	// LabelGated marks a gated workload (the admission policy sets it): the controller
	// watches only objects with it.
	LabelGated = "locks.turnstile.dev/gated"
	// SchedulingGate holds a gated Pod until its lock is granted.
	SchedulingGate = "locks.turnstile.dev/lock"
	// LabelWorkloadKind and LabelWorkloadName on a LockRequest name the workload it is for.
	LabelWorkloadKind = "locks.turnstile.dev/workload-kind"
	LabelWorkloadName = "locks.turnstile.dev/workload-name"
)

// Spec is what a workload's annotations ask for.
type Spec struct {
	Locks    []locksv1.LockTarget
	Command  string
	Priority locksv1.Priority
	TTL      *time.Duration
	// KeepRunning is fleet.turnstile.dev/on-partition: keep-running (in a fleet's spoke, the
	// workload is not stopped when the spoke cannot reach the hub; docs/fleet.md "Opting out"),
	// which the admission policy turnstile-keep-running allows only to a creator with the
	// keeprunning verb, at creation, and which is fixed afterwards: the manager carries it to
	// the request it makes with its own keeprunning, for a creator who had it.
	KeepRunning bool
}

// Parse reads a workload's annotations. Its errors name the annotation and say what it takes,
// as the admission policy's do (which refuses such a workload before it exists; the controller
// only meets one when the policies are not installed).
func Parse(ann map[string]string) (Spec, error) {
	var s Spec
	v, ok := ann[AnnotationLock]
	if !ok {
		return s, fmt.Errorf("annotation %s is missing", AnnotationLock)
	}
	locks, err := lockkey.ParseList(v)
	if err != nil {
		return s, fmt.Errorf("annotation %s %w", AnnotationLock, err)
	}
	s.Locks = locks
	s.Command = ann[AnnotationCommand]
	if p, ok := ann[AnnotationPriority]; ok {
		switch locksv1.Priority(p) {
		case locksv1.PriorityLow, locksv1.PriorityNormal, locksv1.PriorityHigh, locksv1.PriorityCritical:
			s.Priority = locksv1.Priority(p)
		default:
			return s, fmt.Errorf("annotation %s must be Low, Normal, High or Critical, not %q", AnnotationPriority, p)
		}
	}
	if v, ok := ann[locksv1.AnnotationOnPartition]; ok {
		if v != locksv1.OnPartitionKeepRunning {
			return s, fmt.Errorf("annotation %s must be %s, not %q (without it, the workload is stopped when a fleet's spoke cannot reach its hub)",
				locksv1.AnnotationOnPartition, locksv1.OnPartitionKeepRunning, v)
		}
		s.KeepRunning = true
	}
	if t, ok := ann[AnnotationTTL]; ok {
		d, err := time.ParseDuration(t)
		if err != nil || d <= 0 {
			return s, fmt.Errorf("annotation %s must be a positive duration such as 30m or 2h, not %q", AnnotationTTL, t)
		}
		s.TTL = &d
	}
	if s.KeepRunning && s.TTL != nil {
		return s, fmt.Errorf("annotations %s: %s and %s cannot go together: a keep-running grant has no end on the hub; leave out the ttl",
			locksv1.AnnotationOnPartition, locksv1.OnPartitionKeepRunning, AnnotationTTL)
	}
	return s, nil
}
