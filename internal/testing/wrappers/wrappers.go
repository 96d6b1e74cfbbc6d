// Package wrappers builds test objects fluently, Kueue-style:
// MakeLockRequest("a", ns).Lock("acme/infra", "net", "default").Owner("alice", 1).Obj(), and
// likewise MakeProjectLock and MakeCommandLock.
package wrappers

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
)

// LockRequestWrapper builds a LockRequest, and can shape its status as the controller writes it.
// The spec and metadata calls set the object at once. The status-shaping calls (QueuedAt, Held,
// FencingToken, Granted, Waiting, Phase) are recorded and applied by Obj(), after the spec is
// complete, so their order does not matter.
type LockRequestWrapper struct {
	locksv1.LockRequest
	shape statusShape
}

// statusShape is what the status-shaping calls recorded; Obj() turns it into a status.
type statusShape struct {
	phase           locksv1.LockRequestPhase
	queuedAt        *time.Time
	grantedAt       *time.Time
	held            []locksv1.LockTarget
	heldAll         bool
	token           int64
	wait            *waitCondition
	defaultQueuedAt time.Time
	revisionOf      func(queuedAt time.Time) int64
}

// waitCondition is the Pending status a key's decision last wrote for a waiter.
type waitCondition struct {
	reason, message, blockedBy string
	position                   int32
}

// defaultTTL is the API's default spec.ttl, which Granted uses for expiresAt when the spec has none.
const defaultTTL = 30 * time.Minute

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

// Targets sets spec.locks to ts, replacing any targets added before.
func (w *LockRequestWrapper) Targets(ts ...locksv1.LockTarget) *LockRequestWrapper {
	w.Spec.Locks = ts
	return w
}

// Shared asks for every target added so far in Shared mode.
func (w *LockRequestWrapper) Shared() *LockRequestWrapper {
	locks := make([]locksv1.LockTarget, len(w.Spec.Locks))
	for i, t := range w.Spec.Locks {
		t.Mode = locksv1.ModeShared
		locks[i] = t
	}
	w.Spec.Locks = locks
	return w
}

// MaxHolders asks for every target added so far as a counting lock: Shared, held beside at most
// n requests, itself included.
func (w *LockRequestWrapper) MaxHolders(n int32) *LockRequestWrapper {
	locks := make([]locksv1.LockTarget, len(w.Spec.Locks))
	for i, t := range w.Spec.Locks {
		t.Mode, t.MaxHolders = locksv1.ModeShared, n
		locks[i] = t
	}
	w.Spec.Locks = locks
	return w
}

// Owner sets the holder identity.
func (w *LockRequestWrapper) Owner(owner string, pull int64) *LockRequestWrapper {
	w.Spec.Holder.Owner, w.Spec.Holder.Pull = owner, pull
	return w
}

// Session sets the holder's session.
func (w *LockRequestWrapper) Session(s string) *LockRequestWrapper {
	w.Spec.Holder.Session = s
	return w
}

// Cluster sets the holder's cluster: the fleet member it runs in (docs/fleet.md).
func (w *LockRequestWrapper) Cluster(c string) *LockRequestWrapper {
	w.Spec.Holder.Cluster = c
	return w
}

// Annotation sets annotation k to v.
func (w *LockRequestWrapper) Annotation(k, v string) *LockRequestWrapper {
	if w.Annotations == nil {
		w.Annotations = map[string]string{}
	}
	w.Annotations[k] = v
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

// Reason sets spec.reason.
func (w *LockRequestWrapper) Reason(r string) *LockRequestWrapper {
	w.Spec.Reason = r
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

// Release sets spec.release.
func (w *LockRequestWrapper) Release() *LockRequestWrapper {
	w.Spec.Release = true
	return w
}

// ControlledBy makes the workload apiVersion/kind/name its controlling owner, as anyone may
// write an ownerReference (and as the gated workloads' controller made a request before it
// stamped them).
func (w *LockRequestWrapper) ControlledBy(apiVersion, kind, name string) *LockRequestWrapper {
	w.OwnerReferences = append(w.OwnerReferences, metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name,
		UID: types.UID("uid-" + name), Controller: ptr.To(true)})
	return w
}

// MadeFor stamps the request as the gated workloads' controller stamps the request it makes
// for the workload kind/name ("pod", "migrate-db"): the annotations locks.turnstile.dev/workload
// and locks.turnstile.dev/workload-uid (internal/workload).
func (w *LockRequestWrapper) MadeFor(kind, name string) *LockRequestWrapper {
	if w.Annotations == nil {
		w.Annotations = map[string]string{}
	}
	w.Annotations["locks.turnstile.dev/workload"] = kind + "/" + name
	w.Annotations["locks.turnstile.dev/workload-uid"] = "uid-" + name
	return w
}

// UID sets metadata.uid, as the API server would.
func (w *LockRequestWrapper) UID(uid string) *LockRequestWrapper {
	w.ObjectMeta.UID = types.UID(uid)
	return w
}

// Generation sets metadata.generation, as the API server would.
func (w *LockRequestWrapper) Generation(g int64) *LockRequestWrapper {
	w.ObjectMeta.Generation = g
	return w
}

// ResourceVersion sets metadata.resourceVersion, as the API server would.
func (w *LockRequestWrapper) ResourceVersion(rv string) *LockRequestWrapper {
	w.ObjectMeta.ResourceVersion = rv
	return w
}

// Creation sets metadata.creationTimestamp, as the API server would.
func (w *LockRequestWrapper) Creation(t time.Time) *LockRequestWrapper {
	w.CreationTimestamp = metav1.NewTime(t)
	return w
}

// Deleting sets metadata.deletionTimestamp, as for an object a finalizer keeps.
func (w *LockRequestWrapper) Deleting(at time.Time) *LockRequestWrapper {
	w.DeletionTimestamp = &metav1.Time{Time: at}
	return w
}

// Status sets the status as the controller would have written it. The status-shaping calls,
// if any, replace it in Obj().
func (w *LockRequestWrapper) Status(st locksv1.LockRequestStatus) *LockRequestWrapper {
	w.LockRequest.Status = st
	return w
}

// SeenDefaults says how Obj() completes a shaped status: the queuedAt of a request that no
// QueuedAt or Granted call gave one, and status.arrivalRevision as a function of queuedAt (nil:
// 0), so that a test's revisions can follow its clock as a store's would.
func (w *LockRequestWrapper) SeenDefaults(queuedAt time.Time, revisionOf func(queuedAt time.Time) int64) *LockRequestWrapper {
	w.shape.defaultQueuedAt, w.shape.revisionOf = queuedAt, revisionOf
	return w
}

// QueuedAt stamps status.queuedAt and makes the request Pending: the controller has seen it.
func (w *LockRequestWrapper) QueuedAt(t time.Time) *LockRequestWrapper {
	w.shape.queuedAt = &t
	w.seen()
	return w
}

// Held marks the targets as held in status.locks (a Pending request that holds some keys).
func (w *LockRequestWrapper) Held(ts ...locksv1.LockTarget) *LockRequestWrapper {
	w.shape.held = append(w.shape.held, ts...)
	w.seen()
	return w
}

// FencingToken sets status.fencingToken (a request that holds, or held, some key).
func (w *LockRequestWrapper) FencingToken(n int64) *LockRequestWrapper {
	w.shape.token = n
	return w
}

// Granted gives the request the status the controller writes for a grant at `at` with token:
// every target held, expiresAt from the spec's ttl (default 30m), the four conditions.
func (w *LockRequestWrapper) Granted(at time.Time, token int64) *LockRequestWrapper {
	w.shape.grantedAt, w.shape.token, w.shape.phase = &at, token, locksv1.PhaseGranted
	w.shape.heldAll = true
	return w
}

// Waiting gives a Pending request the conditions a queue wrote: reason, message, position.
func (w *LockRequestWrapper) Waiting(reason, message string, position int32, blockedBy string) *LockRequestWrapper {
	w.shape.wait = &waitCondition{reason: reason, message: message, position: position, blockedBy: blockedBy}
	w.shape.phase = locksv1.PhasePending
	return w
}

// Phase forces the phase of a shaped status, e.g. a final one.
func (w *LockRequestWrapper) Phase(p locksv1.LockRequestPhase) *LockRequestWrapper {
	w.shape.phase = p
	return w
}

// seen makes the request Pending unless a phase was given: the controller has seen it.
func (w *LockRequestWrapper) seen() {
	if w.shape.phase == "" {
		w.shape.phase = locksv1.PhasePending
	}
}

// Obj returns the built object, its status shaped by the status-shaping calls if there were any.
func (w *LockRequestWrapper) Obj() *locksv1.LockRequest {
	lr := w.DeepCopy()
	if w.shape.phase != "" {
		w.shape.apply(lr)
	}
	return lr
}

// apply writes the shaped status into lr, whose spec is complete.
func (s *statusShape) apply(lr *locksv1.LockRequest) {
	st := &lr.Status
	*st = locksv1.LockRequestStatus{Phase: s.phase, ObservedGeneration: lr.Generation}
	for _, t := range lr.Spec.Locks {
		ls := locksv1.LockStatus{Key: lockkey.String(t), Name: lockkey.Name(t)}
		for _, h := range s.held {
			if lockkey.String(h) == ls.Key {
				ls.Held = true
			}
		}
		if ls.Held || s.heldAll {
			ls.Held, ls.FencingToken = true, s.token
		}
		st.Locks = append(st.Locks, ls)
	}
	q := s.defaultQueuedAt
	if s.queuedAt != nil {
		q = *s.queuedAt
	} else if s.grantedAt != nil {
		q = *s.grantedAt
	}
	mt := metav1.NewMicroTime(q.Truncate(time.Microsecond))
	st.QueuedAt = &mt
	// A request the controller queued was created no later than that.
	if c := metav1.NewTime(q.Truncate(time.Second)); c.Before(&lr.CreationTimestamp) {
		lr.CreationTimestamp = c
	}
	if s.revisionOf != nil {
		st.ArrivalRevision = s.revisionOf(q)
	}
	st.FencingToken = s.token
	g := lr.Generation
	if m := s.wait; m != nil {
		st.QueuePosition, st.BlockedBy = m.position, m.blockedBy
		st.Conditions = []metav1.Condition{
			condition(locksv1.ConditionGranted, metav1.ConditionFalse, m.reason, m.message, g, q),
			condition(locksv1.ConditionReady, metav1.ConditionFalse, m.reason, m.message, g, q),
			condition(locksv1.ConditionReconciling, metav1.ConditionTrue, m.reason, m.message, g, q),
			condition(locksv1.ConditionStalled, metav1.ConditionFalse, m.reason, "waiting", g, q),
		}
	}
	if s.grantedAt != nil {
		ttl := defaultTTL
		if lr.Spec.TTL != nil {
			ttl = lr.Spec.TTL.Duration
		}
		at := metav1.NewTime(s.grantedAt.Truncate(time.Second))
		exp := metav1.NewTime(at.Add(ttl))
		st.GrantedAt, st.ExpiresAt = &at, &exp
		what := fmt.Sprintf("%d locks", len(lr.Spec.Locks))
		if len(lr.Spec.Locks) == 1 {
			what = lockkey.String(lr.Spec.Locks[0])
		}
		msg := fmt.Sprintf("holds %s (fencing token %d) until %s", what, s.token, exp.UTC().Format(time.RFC3339))
		st.Conditions = []metav1.Condition{
			condition(locksv1.ConditionGranted, metav1.ConditionTrue, locksv1.ReasonGranted, msg, g, at.Time),
			condition(locksv1.ConditionReady, metav1.ConditionTrue, locksv1.ReasonGranted, msg, g, at.Time),
			condition(locksv1.ConditionReconciling, metav1.ConditionFalse, locksv1.ReasonGranted, "granted", g, at.Time),
			condition(locksv1.ConditionStalled, metav1.ConditionFalse, locksv1.ReasonGranted, "granted", g, at.Time),
		}
	}
}

// condition is a condition as the controller sets it, its transition time at API precision.
func condition(typ string, status metav1.ConditionStatus, reason, msg string, gen int64, at time.Time) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen,
		LastTransitionTime: metav1.NewTime(at.Truncate(time.Second))}
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

// Admission makes the freeze hold back writes too (spec.admission).
func (w *CommandLockWrapper) Admission(a locksv1.AdmissionFreeze) *CommandLockWrapper {
	w.Spec.Admission = &a
	return w
}

// Window adds a window.
func (w *CommandLockWrapper) Window(win locksv1.FreezeWindow) *CommandLockWrapper {
	w.Spec.Windows = append(w.Spec.Windows, win)
	return w
}

// Status sets what the controller reports: active holders, blocked requests, and conditions.
func (w *CommandLockWrapper) Status(active, blocked int32, conds ...metav1.Condition) *CommandLockWrapper {
	w.CommandLock.Status = locksv1.CommandLockStatus{ActiveHolders: active, BlockedRequests: blocked, ObservedGeneration: w.Generation, Conditions: conds}
	return w
}

// Obj returns the built object.
func (w *CommandLockWrapper) Obj() *locksv1.CommandLock { return w.DeepCopy() }
