package queue

import (
	"fmt"
	"sort"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
)

// Times are built at the precision the API server keeps (seconds for metav1.Time, microseconds
// for MicroTime), so a status read back compares equal to the one written and an unchanged
// decision writes nothing.

func newTime(t time.Time) metav1.Time { return metav1.NewTime(t.Truncate(time.Second)) }

func newMicroTime(t time.Time) metav1.MicroTime {
	return metav1.NewMicroTime(t.Truncate(time.Microsecond))
}

// SetCondition sets one condition of a Turnstile status, stamped at the API server's precision:
// the one condition setter of the queue's statuses, the deadlock victim's and CommandLock's.
func SetCondition(conds *[]metav1.Condition, typ string, status metav1.ConditionStatus, reason, msg string, gen int64, now time.Time) {
	meta.SetStatusCondition(conds, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: Clip(msg),
		ObservedGeneration: gen, LastTransitionTime: newTime(now),
	})
}

// MaxMessage is the longest condition message the API server stores (metav1.Condition's
// maxLength), and the CRD's limit of status.blockedBy, which repeats such a message.
const MaxMessage = 32768

// Clip shortens a message the API server would refuse as too long, such as the description of
// a deadlock among hundreds of requests, to MaxMessage bytes (so at most as many characters),
// cut at a character boundary and ending in "…". A status write that failed on its length
// would leave the request undecided for good.
func Clip(msg string) string {
	if len(msg) <= MaxMessage {
		return msg
	}
	const ellipsis = "…"
	cut := MaxMessage - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + ellipsis
}

func findCond(conds []metav1.Condition, typ string) *metav1.Condition {
	return meta.FindStatusCondition(conds, typ)
}

func equalStatus(a, b locksv1.LockRequestStatus) bool {
	// The fields a refresh changes first, cheaply: most differing statuses differ here.
	if a.Phase != b.Phase || a.QueuePosition != b.QueuePosition || a.BlockedBy != b.BlockedBy ||
		a.FencingToken != b.FencingToken || a.ObservedGeneration != b.ObservedGeneration ||
		len(a.Conditions) != len(b.Conditions) || len(a.Locks) != len(b.Locks) {
		return false
	}
	return equality.Semantic.DeepEqual(a, b)
}

func statusEqual(a, b locksv1.ProjectLockStatus) bool { return equality.Semantic.DeepEqual(a, b) }

func lockStatus(lock *locksv1.ProjectLock, holders, waiting []*entry, token int64, newHolder bool, now time.Time, cfg Config) locksv1.ProjectLockStatus {
	// A ProjectLock about to be created will be at generation 1, like every new object: say so
	// now, or the next decision rewrites the status only to correct observedGeneration.
	st := locksv1.ProjectLockStatus{ObservedGeneration: 1}
	if lock != nil {
		st = *lock.Status.DeepCopy()
		st.ObservedGeneration = lock.Generation
	}
	st.FencingToken = token
	st.Holder, st.SharedHolders, st.Mode = nil, nil, ""
	st.HolderCount = int32(len(holders))
	st.MaxHolders = lowestBound(holders)
	switch {
	case len(holders) > 0 && allShared(holders):
		st.Mode = locksv1.ModeShared
		st.SharedHolders = sharedHolders(lock, holders, now)
	case len(holders) > 0:
		st.Mode = locksv1.ModeExclusive
		first := holders[0].req
		h := &locksv1.LockHolder{Owner: first.Spec.Holder.Owner, Pull: first.Spec.Holder.Pull, Session: first.Spec.Holder.Session,
			Cluster: first.Spec.Holder.Cluster, URL: first.Spec.Holder.URL}
		h.Since = newTime(now)
		if !newHolder && lock != nil && lock.Status.Holder != nil {
			h.Since = lock.Status.Holder.Since
		}
		var expires *metav1.Time
		sorted := append([]*entry{}, holders...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i].req.Name < sorted[j].req.Name })
		for _, e := range sorted {
			h.Requests = append(h.Requests, locksv1.HolderRequest{Name: e.req.Name, UID: string(e.req.UID)})
			if exp := expiresAt(e, now); exp != nil && (expires == nil || exp.After(expires.Time)) {
				expires = exp
			}
		}
		h.ExpiresAt = expires
		st.Holder = h
	}
	st.Queue = nil
	head := cfg.HeadSize
	for i, e := range waiting {
		if i >= head {
			break
		}
		st.Queue = append(st.Queue, locksv1.QueueEntry{
			Request: e.req.Name, Owner: e.req.Spec.Holder.Owner, Pull: e.req.Spec.Holder.Pull,
			Cluster: e.req.Spec.Holder.Cluster, Priority: rankName(e.priority),
		})
	}
	st.QueueLength = int32(len(waiting))
	switch {
	case st.Holder != nil:
		SetCondition(&st.Conditions, locksv1.ConditionLocked, metav1.ConditionTrue, locksv1.ReasonHeld,
			fmt.Sprintf("locked by %s", locksv1.Holder{Owner: st.Holder.Owner, Pull: st.Holder.Pull, Cluster: st.Holder.Cluster}.Describe()), st.ObservedGeneration, now)
	case len(st.SharedHolders) > 0:
		SetCondition(&st.Conditions, locksv1.ConditionLocked, metav1.ConditionTrue, locksv1.ReasonHeld,
			"locked by "+sharedText(holders)+boundText(holders), st.ObservedGeneration, now)
	default:
		SetCondition(&st.Conditions, locksv1.ConditionLocked, metav1.ConditionFalse, locksv1.ReasonFree, "not locked", st.ObservedGeneration, now)
	}
	return st
}

// expiresAt is when a holder's grant ends: only a fully granted request has a TTL running.
// A grant being made now is stamped grantedAt = now, to the second (heldStatus).
func expiresAt(e *entry, now time.Time) *metav1.Time {
	if !e.term.expiry.IsZero() {
		t := metav1.NewTime(e.term.expiry)
		return &t
	}
	if e.ttl == 0 {
		return nil // NoExpiry: held until released
	}
	granted := newTime(now)
	if e.req.Status.GrantedAt != nil {
		granted = *e.req.Status.GrantedAt
	} else if !allHeldAfter(e) {
		return nil
	}
	t := metav1.NewTime(grantExpiry(granted.Time, e.ttl))
	return &t
}

// grantExpiry is when a grant made at grantedAt with ttl ends: the status.expiresAt written,
// which the API server keeps to the second. The expiry check, both statuses and the requeue
// all use it, so a ttl that is not whole seconds ("1500ms") cannot leave a live grant with
// its deadline already behind the requeue.
func grantExpiry(grantedAt time.Time, ttl time.Duration) time.Time {
	return grantedAt.Add(ttl).Truncate(time.Second)
}

// allHeldAfter reports whether the request holds every key once it holds this one.
func allHeldAfter(e *entry) bool {
	for i, r := range e.refs {
		if i != e.pos && !HoldsKey(e.req, r) {
			return false
		}
	}
	return true
}

// stampArrival records, the first time a request is written, when it was queued (for its
// timeouts and aging) and its arrival revision (for its place in the queue).
func stampArrival(st *locksv1.LockRequestStatus, e *entry) {
	if st.QueuedAt == nil {
		t := newMicroTime(e.arrival)
		st.QueuedAt = &t
		st.ArrivalRevision = e.ticket
	}
}

// baseStatus is a request's status with its locks list rebuilt from spec, keeping held flags
// and per-key tokens.
func baseStatus(req *locksv1.LockRequest) locksv1.LockRequestStatus {
	st := *req.Status.DeepCopy()
	st.ObservedGeneration = req.Generation
	locks := make([]locksv1.LockStatus, len(req.Spec.Locks))
	for i, t := range req.Spec.Locks {
		locks[i] = locksv1.LockStatus{Key: lockkey.String(t), Name: lockkey.Name(t)}
		if i < len(st.Locks) && st.Locks[i].Name == locks[i].Name {
			locks[i].Held, locks[i].FencingToken = st.Locks[i].Held, st.Locks[i].FencingToken
		}
	}
	st.Locks = locks
	return st
}

// FinishedStatus is the status of a request that ends now: phase (Released, Expired or Failed)
// for reason, with message. It is the one builder of a finished status: Decide's outcomes and
// the deadlock detector's victims are written with it.
func FinishedStatus(req *locksv1.LockRequest, phase locksv1.LockRequestPhase, reason, message string, now time.Time) locksv1.LockRequestStatus {
	st := baseStatus(req)
	for i := range st.Locks {
		st.Locks[i].Held = false
	}
	st.Phase = phase
	st.QueuePosition = 0
	st.BlockedBy = ""
	if reason == locksv1.ReasonCommandLocked || reason == locksv1.ReasonBusy || reason == locksv1.ReasonDeadlock {
		st.BlockedBy = Clip(message)
	}
	fin := newTime(now)
	st.FinishedAt = &fin
	g := st.ObservedGeneration
	SetCondition(&st.Conditions, locksv1.ConditionGranted, metav1.ConditionFalse, reason, message, g, now)
	SetCondition(&st.Conditions, locksv1.ConditionReady, metav1.ConditionFalse, reason, message, g, now)
	SetCondition(&st.Conditions, locksv1.ConditionReconciling, metav1.ConditionFalse, reason, "finished", g, now)
	if phase == locksv1.PhaseFailed {
		SetCondition(&st.Conditions, locksv1.ConditionStalled, metav1.ConditionTrue, reason, message, g, now)
	} else {
		SetCondition(&st.Conditions, locksv1.ConditionStalled, metav1.ConditionFalse, reason, "finished", g, now)
	}
	kstatusFinished(&st, phase, reason, message, now)
	return st
}

// finishedStatus is FinishedStatus for an entry's outcome, stamped with its arrival if it was
// never written before.
func finishedStatus(e *entry, now time.Time) locksv1.LockRequestStatus {
	st := FinishedStatus(e.req, e.outcome.phase, e.outcome.reason, e.outcome.message, now)
	stampArrival(&st, e)
	return st
}

// heldStatus is the status of a request that holds this key after the decision.
func heldStatus(e *entry, token int64, now time.Time) (locksv1.LockRequestStatus, bool) {
	st := baseStatus(e.req)
	st.Locks[e.ref.Index].Held = true
	st.Locks[e.ref.Index].FencingToken = token
	stampArrival(&st, e)
	st.FencingToken = max(st.FencingToken, token)
	g := st.ObservedGeneration
	all := true
	for _, l := range st.Locks {
		all = all && l.Held
	}
	if all {
		st.Phase = locksv1.PhaseGranted
		st.QueuePosition = 0
		st.BlockedBy = ""
		if st.GrantedAt == nil {
			t := newTime(now)
			st.GrantedAt = &t
		}
		exp := metav1.NewTime(grantExpiry(st.GrantedAt.Time, e.ttl))
		if !e.term.expiry.IsZero() {
			exp = metav1.NewTime(e.term.expiry)
		}
		if e.term.renewed {
			t := newTime(now)
			st.RenewedAt = &t
		}
		st.ExpiresAt = &exp
		msg := fmt.Sprintf("holds %s (fencing token %d) until %s", keysText(e), st.FencingToken, exp.UTC().Format(time.RFC3339))
		if e.ttl == 0 {
			st.ExpiresAt = nil
			msg = fmt.Sprintf("holds %s (fencing token %d) until released: keep-running, its cluster's partitions do not end it", keysText(e), st.FencingToken)
		}
		reason := locksv1.ReasonGranted
		if e.term.refused != "" {
			// Machine-readable: the grant stands, and a client can tell its renewal was refused.
			msg += "; " + e.term.refused
			reason = locksv1.ReasonRenewalRefused
		}
		SetCondition(&st.Conditions, locksv1.ConditionGranted, metav1.ConditionTrue, reason, msg, g, now)
		SetCondition(&st.Conditions, locksv1.ConditionReady, metav1.ConditionTrue, reason, msg, g, now)
		SetCondition(&st.Conditions, locksv1.ConditionReconciling, metav1.ConditionFalse, locksv1.ReasonGranted, "granted", g, now)
		SetCondition(&st.Conditions, locksv1.ConditionStalled, metav1.ConditionFalse, locksv1.ReasonGranted, "granted", g, now)
	} else if st.Phase != locksv1.PhasePending || !HoldsKey(e.req, e.ref) {
		// Its part of the request was just granted: say so once. From then on the queue of the
		// key it waits for speaks for it (position, blocker); rewriting the message here on every
		// decision would undo that key's write, and each write wakes the other key again.
		next := ""
		for _, r := range e.refs {
			if !st.Locks[r.Index].Held {
				next = r.Key
				break
			}
		}
		st.QueuePosition = 0
		st.BlockedBy = ""
		msg := fmt.Sprintf("holds %s; waiting for %s next (locks are taken in canonical order)", e.ref.Key, next)
		pendingConds(&st, locksv1.ReasonQueued, msg, now)
	}
	return st, !equalStatus(e.req.Status, st)
}

func pendingConds(st *locksv1.LockRequestStatus, reason, msg string, now time.Time) {
	g := st.ObservedGeneration
	st.Phase = locksv1.PhasePending
	SetCondition(&st.Conditions, locksv1.ConditionGranted, metav1.ConditionFalse, reason, msg, g, now)
	SetCondition(&st.Conditions, locksv1.ConditionReady, metav1.ConditionFalse, reason, msg, g, now)
	SetCondition(&st.Conditions, locksv1.ConditionReconciling, metav1.ConditionTrue, reason, msg, g, now)
	SetCondition(&st.Conditions, locksv1.ConditionStalled, metav1.ConditionFalse, reason, "waiting", g, now)
}

// waitingStatus is the status of a request still in this key's queue at index i of n.
func waitingStatus(e *entry, i, n int, told blockers, now time.Time) locksv1.LockRequestStatus {
	st := baseStatus(e.req)
	stampArrival(&st, e)
	// Position and message belong to the first key the request does not hold yet; a later key's
	// queue does not speak for it.
	for _, r := range e.refs[:e.pos] {
		if !HoldsKey(e.req, r) {
			if st.Phase == "" {
				pendingConds(&st, locksv1.ReasonQueued, fmt.Sprintf("waiting for %s first (locks are taken in canonical order)", r.Key), now)
			}
			return st
		}
	}
	st.QueuePosition = int32(i + 1)
	reason, blockedBy, prefix := queuedText(e, told)
	st.BlockedBy = blockedBy
	pendingConds(&st, reason, positionText(prefix, i, n), now)
	return st
}
