package cache

import (
	"strings"
	"unique"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// annotationPrefix is the prefix of every annotation the manager reads on a LockRequest (the
// creator stamped by the admission policies, locks.turnstile.dev/created-by; the workload
// controller's own). Every other annotation (kubectl's last-applied-configuration, a whole copy
// of the object; a user's notes) is dropped from the cache.
const annotationPrefix = "locks.turnstile.dev/"

// keptAnnotation reports whether the cache keeps annotation k of a LockRequest: those under
// annotationPrefix, a fleet spoke's partition opt-out (locksv1.AnnotationOnPartition), which its
// agent reads on the spoke's requests (docs/fleet.md "Opting out"), and a spoke's confirmation
// that it stopped a grant (locksv1.AnnotationSpokeStopped), which the hub's decisions read.
func keptAnnotation(k string) bool {
	switch k {
	// guard:trim-keeps-on-partition
	case locksv1.AnnotationOnPartition:
		return true
	// guard:trim-keeps-spoke-stopped
	case locksv1.AnnotationSpokeStopped, locksv1.AnnotationConfirmsStops:
		return true
	}
	return strings.HasPrefix(k, annotationPrefix)
}

// trimLockRequest is the cache transform of LockRequests: it drops what no decision reads —
// managedFields, the labels (the client's owner, pull and repo labels are for people's label
// selectors; the manager selects no LockRequest by label) and every annotation outside
// annotationPrefix — and makes the strings that
// thousands of requests share (namespace, lock targets, command, ProjectLock names, condition
// types, statuses, reasons and fixed messages) point to one copy each, and what one request
// says twice (its conditions' message, its blockedBy) to one copy. Nothing the manager writes is lost: it
// writes LockRequests only through the status subresource, which ignores metadata, and patches
// them (the workload controller) with diffs of the fields it changes. It returns obj.
func trimLockRequest(obj any) (any, error) {
	lr, ok := obj.(*locksv1.LockRequest)
	if !ok {
		return obj, nil
	}
	// Every write below is made only when it changes something: an object trimmed once is
	// trimmed again without a write, so a transform that meets an object the store already
	// holds (which other goroutines read at the same time) is no data race.
	// guard:trim-managed-fields
	if lr.ManagedFields != nil {
		lr.ManagedFields = nil
	}
	// guard:trim-labels
	if lr.Labels != nil {
		lr.Labels = nil
	}
	// guard:trim-annotations
	if kept := keepAnnotations(lr.Annotations); len(kept) != len(lr.Annotations) {
		lr.Annotations = kept
	}
	share(&lr.Namespace)
	share(&lr.APIVersion)
	share(&lr.Kind)
	for i := range lr.Spec.Locks {
		shareTarget(&lr.Spec.Locks[i])
	}
	share(&lr.Spec.Command)
	share((*string)(&lr.Spec.Priority))
	share((*string)(&lr.Status.Phase))
	for i := range lr.Status.Locks {
		share(&lr.Status.Locks[i].Key)
		share(&lr.Status.Locks[i].Name)
	}
	shareConditions(lr.Status.Conditions)
	shareBlockedBy(&lr.Status)
	return lr, nil
}

// shortMessage is the longest condition message shared between requests: the fixed ones
// ("waiting", "granted", "finished") are, a waiter's position message is its own.
const shortMessage = 16

// shareConditions makes the strings of conds that requests share point to one copy each.
func shareConditions(conds []metav1.Condition) {
	for i := range conds {
		c := &conds[i]
		share(&c.Type)
		share(&c.Reason)
		share((*string)(&c.Status))
		if len(c.Message) <= shortMessage {
			share(&c.Message)
			continue
		}
		// Granted, Ready and Reconciling say the same thing ("locked by ...; position 3 of 9"):
		// one copy of the message, not three.
		for j := range i {
			if m := conds[j].Message; m == c.Message {
				if unsafe.StringData(m) != unsafe.StringData(c.Message) {
					c.Message = m
				}
				break
			}
		}
	}
}

// shareBlockedBy makes st.BlockedBy the start of its conditions' message when the message
// starts with it, as a waiter's does ("locked by pull #1 (alice)" and "locked by pull #1
// (alice); position 3 of 9"), and a failed request's repeats it: one copy, not two.
func shareBlockedBy(st *locksv1.LockRequestStatus) {
	b := st.BlockedBy
	if b == "" {
		return
	}
	for _, c := range st.Conditions {
		if m := c.Message; strings.HasPrefix(m, b) {
			// guard:trim-blockedby-shares-message
			if unsafe.StringData(m) != unsafe.StringData(b) {
				st.BlockedBy = m[:len(b)]
			}
			return
		}
	}
}

// shareTarget makes the strings of a lock target, which every request and the ProjectLock of a
// key repeat, point to one copy each.
func shareTarget(t *locksv1.LockTarget) {
	share(&t.Repo)
	share(&t.Path)
	share(&t.Workspace)
	share(&t.Project)
	share((*string)(&t.Mode))
}

// share makes *p the one shared copy of its string, writing *p only when it is not that copy.
func share(p *string) {
	if v := intern(*p); unsafe.StringData(v) != unsafe.StringData(*p) {
		*p = v
	}
}

// keepAnnotations returns the annotations under annotationPrefix, or nil when there are none.
func keepAnnotations(in map[string]string) map[string]string {
	kept := 0
	for k := range in {
		// guard:trim-keeps-turnstile-annotations
		if keptAnnotation(k) {
			kept++
		}
	}
	if kept == len(in) {
		return in
	}
	if kept == 0 {
		return nil
	}
	out := make(map[string]string, kept)
	for k, v := range in {
		if keptAnnotation(k) {
			out[k] = v
		}
	}
	return out
}

// intern returns the one shared copy of s (unique.Make: held weakly, freed when unused).
func intern(s string) string {
	if s == "" {
		return s
	}
	return unique.Make(s).Value()
}

// trimProjectLock is the cache transform of ProjectLocks. The lock controller updates a
// ProjectLock whole, so it drops nothing but managedFields (which an update ignores). It makes
// the strings every lock shares (namespace, targets, mode, priorities, condition types,
// reasons and fixed messages) point to one copy each, and cuts the queue's slice to its length:
// a decoder grows it by doubling, so a queue of 9 entries held room for 16. It returns obj.
func trimProjectLock(obj any) (any, error) {
	pl, ok := obj.(*locksv1.ProjectLock)
	if !ok {
		return obj, nil
	}
	// As in trimLockRequest, every write changes something: a second trim writes nothing.
	if pl.ManagedFields != nil {
		pl.ManagedFields = nil
	}
	share(&pl.Namespace)
	share(&pl.APIVersion)
	share(&pl.Kind)
	for i := range pl.Finalizers {
		share(&pl.Finalizers[i])
	}
	shareTarget(&pl.Spec.LockTarget)
	st := &pl.Status
	share((*string)(&st.Mode))
	// guard:trim-projectlock-queue-cap
	if cap(st.Queue) > len(st.Queue) {
		st.Queue = append(make([]locksv1.QueueEntry, 0, len(st.Queue)), st.Queue...)
	}
	for i := range st.Queue {
		share((*string)(&st.Queue[i].Priority))
	}
	shareConditions(st.Conditions)
	return pl, nil
}

// trimTransform is trimLockRequest for LockRequests, trimProjectLock for ProjectLocks and the
// default transform (drop managedFields) for everything else.
func trimTransform() toolscache.TransformFunc {
	strip := ctrlcache.TransformStripManagedFields()
	return func(obj any) (any, error) {
		switch obj.(type) {
		case *locksv1.LockRequest:
			return trimLockRequest(obj)
		case *locksv1.ProjectLock:
			// guard:trim-projectlocks
			return trimProjectLock(obj)
		}
		return strip(obj)
	}
}
