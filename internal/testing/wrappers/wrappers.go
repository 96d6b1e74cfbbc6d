// Package wrappers builds test objects fluently, Kueue-style:
// MakeLockRequest("a", ns).Lock("acme/infra", "net", "default").Owner("alice", 1).Obj().
package wrappers

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
