// Package wrappers builds test objects fluently, Kueue-style:
// MakeLockRequest("a", ns).Lock("acme/infra", "net", "default").Owner("alice", 1).Obj(), and
// likewise MakeProjectLock and MakeCommandLock.
package wrappers

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// LockRequestWrapper builds a LockRequest.
type LockRequestWrapper struct{ locksv1.LockRequest }

// MakeLockRequest starts a LockRequest owned by "alice" with no locks yet.
func MakeLockRequest(name, namespace string) *LockRequestWrapper {
	w := &LockRequestWrapper{}
	w.Name, w.Namespace = name, namespace
	w.Spec.Holder.Owner = "alice"
	return w
}

// Lock adds a target; project is optional (pass "" for none).
func (w *LockRequestWrapper) Lock(repo, path, workspace string, project ...string) *LockRequestWrapper {
	t := locksv1.LockTarget{Repo: repo, Path: path, Workspace: workspace}
	if len(project) > 0 {
		t.Project = project[0]
	}
	w.Spec.Locks = append(w.Spec.Locks, t)
	return w
}

// Owner sets the holder identity.
func (w *LockRequestWrapper) Owner(owner string, pull int64) *LockRequestWrapper {
	w.Spec.Holder.Owner, w.Spec.Holder.Pull = owner, pull
	return w
}

// URL sets the holder's url.
func (w *LockRequestWrapper) URL(u string) *LockRequestWrapper {
	w.Spec.Holder.URL = u
	return w
}

// Lease binds the request to a holder Lease.
func (w *LockRequestWrapper) Lease(name string) *LockRequestWrapper {
	w.Spec.Holder.Lease = name
	return w
}

// Priority sets spec.priority.
func (w *LockRequestWrapper) Priority(p locksv1.Priority) *LockRequestWrapper {
	w.Spec.Priority = p
	return w
}

// Command sets spec.command.
func (w *LockRequestWrapper) Command(c string) *LockRequestWrapper {
	w.Spec.Command = c
	return w
}

// TTL sets spec.ttl.
func (w *LockRequestWrapper) TTL(d time.Duration) *LockRequestWrapper {
	w.Spec.TTL = &metav1.Duration{Duration: d}
	return w
}

// WaitTimeout sets spec.waitTimeout.
func (w *LockRequestWrapper) WaitTimeout(d time.Duration) *LockRequestWrapper {
	w.Spec.WaitTimeout = &metav1.Duration{Duration: d}
	return w
}

// Obj returns the built object.
func (w *LockRequestWrapper) Obj() *locksv1.LockRequest { return w.DeepCopy() }

// Release sets spec.release.
func (w *LockRequestWrapper) Release() *LockRequestWrapper {
	w.Spec.Release = true
	return w
}

// UID sets metadata.uid, as the API server would.
func (w *LockRequestWrapper) UID(uid string) *LockRequestWrapper {
	w.ObjectMeta.UID = types.UID(uid)
	return w
}

// Deleting sets metadata.deletionTimestamp, as for an object a finalizer keeps.
func (w *LockRequestWrapper) Deleting(at time.Time) *LockRequestWrapper {
	w.DeletionTimestamp = &metav1.Time{Time: at}
	return w
}

// Status sets the status as the controller would have written it.
func (w *LockRequestWrapper) Status(st locksv1.LockRequestStatus) *LockRequestWrapper {
	w.LockRequest.Status = st
	return w
}

// ProjectLockWrapper builds a ProjectLock.
type ProjectLockWrapper struct{ locksv1.ProjectLock }

// MakeProjectLock starts the ProjectLock of a target, named as the controller names it.
func MakeProjectLock(namespace string, target locksv1.LockTarget, name string) *ProjectLockWrapper {
	w := &ProjectLockWrapper{}
	w.Name, w.Namespace = name, namespace
	w.Spec.LockTarget = target
	return w
}

// UID sets metadata.uid.
func (w *ProjectLockWrapper) UID(uid string) *ProjectLockWrapper {
	w.ObjectMeta.UID = types.UID(uid)
	return w
}

// Holder sets status.holder.
func (w *ProjectLockWrapper) Holder(h locksv1.LockHolder) *ProjectLockWrapper {
	w.Status.Holder = &h
	return w
}

// Token sets status.fencingToken.
func (w *ProjectLockWrapper) Token(t int64) *ProjectLockWrapper {
	w.Status.FencingToken = t
	return w
}

// Queue sets status.queue and queueLength (at least the entries given).
func (w *ProjectLockWrapper) Queue(length int32, entries ...locksv1.QueueEntry) *ProjectLockWrapper {
	w.Status.Queue = entries
	w.Status.QueueLength = max(length, int32(len(entries)))
	return w
}

// Deleting sets metadata.deletionTimestamp: a force-unlock the controller is finishing.
func (w *ProjectLockWrapper) Deleting(at time.Time) *ProjectLockWrapper {
	w.DeletionTimestamp = &metav1.Time{Time: at}
	return w
}

// Obj returns the built object.
func (w *ProjectLockWrapper) Obj() *locksv1.ProjectLock { return w.DeepCopy() }

// CommandLockWrapper builds a CommandLock.
type CommandLockWrapper struct{ locksv1.CommandLock }

// MakeCommandLock starts an unlocked CommandLock for command.
func MakeCommandLock(command string) *CommandLockWrapper {
	w := &CommandLockWrapper{}
	w.Name = command
	w.Generation = 1
	return w
}

// Locked freezes the command with reason.
func (w *CommandLockWrapper) Locked(reason string) *CommandLockWrapper {
	w.Spec.Locked, w.Spec.Reason = true, reason
	return w
}

// Until sets spec.until.
func (w *CommandLockWrapper) Until(t time.Time) *CommandLockWrapper {
	w.Spec.Until = &metav1.Time{Time: t}
	return w
}

// Status sets what the controller reports: active holders, blocked requests, and conditions.
func (w *CommandLockWrapper) Status(active, blocked int32, conds ...metav1.Condition) *CommandLockWrapper {
	w.CommandLock.Status = locksv1.CommandLockStatus{ActiveHolders: active, BlockedRequests: blocked, ObservedGeneration: w.Generation, Conditions: conds}
	return w
}

// Obj returns the built object.
func (w *CommandLockWrapper) Obj() *locksv1.CommandLock { return w.DeepCopy() }
