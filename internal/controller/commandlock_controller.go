package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/sharding"
	"github.com/turnstile-dev/turnstile/internal/window"
	turnstile "github.com/turnstile-dev/turnstile/pkg/client"
)

// CommandLockReconciler reports a freeze's effect: how many granted holders of the command are
// left (condition Drained turns True at zero, so an admin can `kubectl wait` for the start of a
// maintenance window), how many requests it blocks, and whether it is in force. It requeues at
// spec.until so the status thaws on time; the lock keys requeue at that time themselves.
type CommandLockReconciler struct {
	options
	client    client.Client
	apiReader client.Reader
	recorder  events.EventRecorder

	// frozen remembers the CommandLocks last seen in force, by name, so that deleting one (which
	// thaws its command) still gets its Thaw event.
	mu     sync.Mutex
	frozen map[string]types.UID
	// identity is the user name this manager writes as (status.admission.manager), asked once.
	identity string
}

var _ reconcile.Reconciler = (*CommandLockReconciler)(nil)

// NewCommandLockReconciler builds the reconciler. apiReader reads past the cache: Drained is
// confirmed against the store before it is reported.
// It uses WithClock, WithFreezeFlags and WithMetrics.
func NewCommandLockReconciler(c client.Client, apiReader client.Reader, recorder events.EventRecorder, opts ...Option) *CommandLockReconciler {
	return &CommandLockReconciler{options: newOptions(opts), client: c, apiReader: apiReader, recorder: recorder, frozen: map[string]types.UID{}}
}

// +kubebuilder:rbac:groups=locks.turnstile.dev,resources=commandlocks,verbs=get;list;watch
// +kubebuilder:rbac:groups=locks.turnstile.dev,resources=commandlocks/status,verbs=get;update;patch

// Reconcile computes one CommandLock's status.
func (r *CommandLockReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var cl locksv1.CommandLock
	if err := r.client.Get(ctx, req.NamespacedName, &cl); err != nil {
		if client.IgnoreNotFound(err) == nil {
			r.metrics.FrozenCommand.DeleteLabelValues(req.Name)
			r.metrics.Blocked.DeleteLabelValues(req.Name)
			if uid, ok := r.remember(req.Name, "", false); ok {
				gone := &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: req.Name, UID: uid}}
				r.recorder.Eventf(gone, nil, "Normal", locksv1.ReasonThawed, "Thaw", "%s was deleted: %s commands may run again", req.Name, req.Name)
			}
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	now := r.clock.Now()
	var list locksv1.LockRequestList
	members, err := r.requestsOf(ctx, &cl, &list)
	if err != nil {
		return reconcile.Result{}, err
	}
	st := CommandLockStatus(&cl, list.Items, r.flags, now, 0)
	inForce := meta.IsStatusConditionTrue(st.Conditions, locksv1.ConditionLocked)
	byWindow := inForce && meta.FindStatusCondition(st.Conditions, locksv1.ConditionLocked).Reason == locksv1.ReasonWindow
	stored := windowsStored(&cl, &st)
	if inForce && meta.IsStatusConditionTrue(st.Conditions, locksv1.ConditionDrained) && (!drainedAlready(&cl) || !stored) {
		// guard:window-drained-after-written-freeze
		if byWindow && !stored {
			// A window freeze is in the store only once this status is: grants read it there.
			// Drained is confirmed by the reconcile its own write triggers.
			setFreezeStarting(&st, now)
		} else {
			// The cache says drained. Before saying so, ask the store: a grant decided from a
			// cache without this freeze may be under way (docs/protocol.md, "Freezes and Drained").
			// guard:drained-from-cache
			granting, err := r.granting(ctx, &cl, members)
			if err != nil {
				return reconcile.Result{}, err
			}
			st = CommandLockStatus(&cl, list.Items, r.flags, now, granting)
		}
	}
	if st.Admission != nil {
		user, err := r.whoAmI(ctx)
		if err != nil {
			return reconcile.Result{}, err
		}
		// guard:freeze-names-the-manager
		st.Admission.Manager = user
	}
	wasInForce := meta.IsStatusConditionTrue(cl.Status.Conditions, locksv1.ConditionLocked)

	if !equality.Semantic.DeepEqual(cl.Status, st) {
		obj := cl.DeepCopy()
		obj.Status = st
		if err := r.client.Status().Update(ctx, obj); err != nil {
			if client.IgnoreNotFound(err) == nil || isConflict(err) {
				return reconcile.Result{RequeueAfter: conflictRetry}, nil
			}
			return reconcile.Result{}, fmt.Errorf("update commandlock %s status: %w", cl.Name, err)
		}
		r.recordBreakGlass(obj, cl.Status.Admission)
		switch {
		case inForce && !wasInForce:
			r.recorder.Eventf(obj, nil, "Warning", locksv1.ReasonFrozen, "Freeze", "%s", meta.FindStatusCondition(st.Conditions, locksv1.ConditionLocked).Message)
		case !inForce && wasInForce:
			r.recorder.Eventf(obj, nil, "Normal", locksv1.ReasonThawed, "Thaw", "%s commands may run again", cl.Name)
		}
	}
	r.metrics.FrozenCommand.WithLabelValues(cl.Name).Set(gauge(inForce))
	r.metrics.Blocked.WithLabelValues(cl.Name).Set(float64(st.BlockedRequests))
	r.remember(cl.Name, cl.UID, inForce)

	// An until still ahead, a window's next transition, or the write freeze's judgement grown
	// old (by the status just written): wake up then and write it, as the store must say.
	cl.Status = st
	return reconcile.Result{RequeueAfter: nextWakeUp(&cl, now)}, nil
}

// gauge is a condition as a gauge's value: 1 when it holds.
func gauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// whoAmI is the user name the manager writes as, asked of the API server once (a
// SelfSubjectReview): the write freeze's policy lets it through by that name.
func (r *CommandLockReconciler) whoAmI(ctx context.Context) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.identity == "" {
		user, err := turnstile.WhoAmI(ctx, r.client)
		if err != nil {
			return "", fmt.Errorf("who is the manager (status.admission.manager): %w", err)
		}
		r.identity = user
	}
	return r.identity, nil
}

// nextWakeUp is how long until cl's status next changes by the clock alone: its until (while
// the manual freeze is in force), its windows' next transition, or its write freeze's
// judgement growing old; zero when nothing is due.
func nextWakeUp(cl *locksv1.CommandLock, now time.Time) time.Duration {
	var next time.Time
	if queue.IsLockInForce(cl, now) && cl.Spec.Until != nil {
		next = cl.Spec.Until.Time
	}
	if _, t := window.Judge(cl.Spec.Windows, now); !t.IsZero() && (next.IsZero() || t.Before(next)) {
		next = t
	}
	// guard:admission-rejudged-before-horizon/2
	if t := admissionWakeUp(cl); !t.IsZero() && (next.IsZero() || t.Before(next)) {
		next = t
	}
	if next.IsZero() {
		return 0
	}
	return next.Sub(now) + time.Millisecond
}

// windowsStored reports whether cl's stored status already shows the windows as st judges them,
// for the current generation: only then do grants read this judgement.
func windowsStored(cl *locksv1.CommandLock, st *locksv1.CommandLockStatus) bool {
	return cl.Status.ObservedGeneration == cl.Generation && equality.Semantic.DeepEqual(cl.Status.Windows, st.Windows)
}

// setFreezeStarting reports Drained False while a window freeze is being written.
func setFreezeStarting(st *locksv1.CommandLockStatus, now time.Time) {
	queue.SetCondition(&st.Conditions, locksv1.ConditionDrained, metav1.ConditionFalse, locksv1.ReasonFreezeStarting,
		"a window freeze starts: drained is confirmed once it is written", st.ObservedGeneration, now)
	commandLockKstatus(st, true, now)
}

// drainedAlready reports whether cl's status says Drained for its current freeze: confirmed
// then, it stays true until the freeze changes (nothing of the command is granted meanwhile).
func drainedAlready(cl *locksv1.CommandLock) bool {
	return cl.Status.ObservedGeneration == cl.Generation &&
		meta.IsStatusConditionTrue(cl.Status.Conditions, locksv1.ConditionLocked) &&
		meta.IsStatusConditionTrue(cl.Status.Conditions, locksv1.ConditionDrained)
}

// granting counts, from a live list of every ProjectLock read after the freeze was seen, the
// requests of cl's command that a ProjectLock lists as holders and that are Granted or whose
// grant is still being written (not yet held on that key). Each one was listed before this
// read, so before any grant the freeze check lets through could be; once none is left, no
// request of the command is granted until the freeze lifts.
func (r *CommandLockReconciler) granting(ctx context.Context, cl *locksv1.CommandLock, members map[string]map[string]string) (int, error) {
	var pls locksv1.ProjectLockList
	if err := r.apiReader.List(ctx, &pls); err != nil {
		return 0, fmt.Errorf("list projectlocks to confirm %s drained: %w", cl.Name, err)
	}
	var cached locksv1.LockRequestList
	if err := r.client.List(ctx, &cached); err != nil {
		return 0, fmt.Errorf("list lockrequests: %w", err)
	}
	byUID := make(map[types.UID]*locksv1.LockRequest, len(cached.Items))
	for i := range cached.Items {
		byUID[cached.Items[i].UID] = &cached.Items[i]
	}
	n := 0
	for _, pl := range pls.Items {
		for _, h := range pl.Status.HolderRequests() {
			lr := byUID[types.UID(h.UID)]
			// guard:drained-holder-from-cache
			if lr == nil {
				// Newer than the cache: its command (immutable) is in the store.
				var live locksv1.LockRequest
				err := r.apiReader.Get(ctx, client.ObjectKey{Namespace: pl.Namespace, Name: h.Name}, &live)
				switch {
				case apierrors.IsNotFound(err):
					continue // gone: no write can grant it
				case err != nil:
					return 0, fmt.Errorf("read holder %s/%s: %w", pl.Namespace, h.Name, err)
				case string(live.UID) != h.UID:
					continue
				}
				lr = &live
			}
			if !queue.Governs(cl.Name, lr.Spec.Command, r.flags) || lr.Status.Phase.IsFinal() ||
				!queue.ClusterScopeMatches(cl.Spec.Clusters, lr.Spec.Holder.Cluster, members[lr.Spec.Holder.Cluster], members == nil) {
				continue
			}
			// guard:drained-ignores-unconfirmed-grants
			if lr.Status.Phase == locksv1.PhaseGranted || !holds(lr, pl.Name) {
				n++
			}
		}
	}
	return n, nil
}

// requestsOf lists into list the requests of cl's command (every command's for "all") that its
// cluster scope holds (queue.ClusterScopeMatches), and returns the members' labels it judged
// them by (nil when cl selects no clusters by label).
func (r *CommandLockReconciler) requestsOf(ctx context.Context, cl *locksv1.CommandLock, list *locksv1.LockRequestList) (map[string]map[string]string, error) {
	opts := []client.ListOption{}
	if cl.Name != locksv1.CommandAll {
		opts = append(opts, client.MatchingFields{IndexCommand: cl.Name})
	}
	if err := r.client.List(ctx, list, opts...); err != nil {
		return nil, fmt.Errorf("list lockrequests for commandlock %s: %w", cl.Name, err)
	}
	members, err := scopeMembers(ctx, r.apiReader, cl)
	if err != nil {
		return nil, err
	}
	// guard:fleet-counts-in-scope
	list.Items = inClusterScope(cl.Spec.Clusters, list.Items, members)
	return members, nil
}

// holds reports whether the request's status says it holds the ProjectLock named name.
func holds(lr *locksv1.LockRequest, name string) bool {
	for _, l := range lr.Status.Locks {
		if l.Name == name && l.Held {
			return true
		}
	}
	return false
}

// remember records whether the CommandLock name (uid) is in force, and returns what was recorded
// before.
func (r *CommandLockReconciler) remember(name string, uid types.UID, inForce bool) (types.UID, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev, ok := r.frozen[name]
	if inForce {
		r.frozen[name] = uid
	} else {
		delete(r.frozen, name)
	}
	return prev, ok
}

// CommandLockStatus computes a CommandLock's status from the requests of its command. Pure.
//
// Locked reports the freeze the command is under once the operator's flags have spoken (see
// queue.CommandLockFreeze): an apply CommandLock shows --disable-apply's freeze even when
// unlocked, and is not Locked under --disable-global-apply-lock. blockedRequests counts the
// requests waiting on this very freeze: an apply request blocked by "all" counts for "all", not
// for an unlocked "apply". Requests without a command are not the business of any CommandLock,
// nor is apply of "all" under --disable-global-apply-lock (queue.Governs).
// granting is how many requests of the command the store shows granted or being granted that the
// requests (a cache) do not: Drained needs none of either.
func CommandLockStatus(cl *locksv1.CommandLock, requests []locksv1.LockRequest, flags queue.FreezeFlags, now time.Time, granting int) locksv1.CommandLockStatus {
	st := *cl.Status.DeepCopy()
	st.ObservedGeneration = cl.Generation
	var next time.Time
	st.Windows, next = window.Judge(cl.Spec.Windows, now)
	st.NextTransition = nil
	if !next.IsZero() {
		st.NextTransition = &metav1.Time{Time: next.Truncate(time.Second)}
	}
	freeze, inForce := queue.CommandLockFreeze(cl, flags, now)
	lockedReason := locksv1.ReasonFrozen
	if !inForce {
		// Manual freezes beat windows: the windows speak only when no manual freeze does.
		if freeze, inForce = queue.WindowsLockFreeze(cl.Name, st.Windows, flags); inForce {
			lockedReason = locksv1.ReasonWindow
		}
	}
	setInvalidWindows(&st, now)
	st.Admission = AdmissionStatus(cl, requests, flags, now)
	st.ActiveHolders, st.BlockedRequests = 0, 0
	for i := range requests {
		lr := &requests[i]
		if !queue.Governs(cl.Name, lr.Spec.Command, flags) {
			continue
		}
		switch lr.Status.Phase {
		case locksv1.PhaseGranted:
			st.ActiveHolders++
		case locksv1.PhasePending, "":
			c := meta.FindStatusCondition(lr.Status.Conditions, locksv1.ConditionGranted)
			if inForce && c != nil && c.Reason == locksv1.ReasonCommandLocked && lr.Status.BlockedBy == freeze.Source {
				st.BlockedRequests++
			}
		}
	}
	set := func(typ string, s metav1.ConditionStatus, reason, msg string) {
		queue.SetCondition(&st.Conditions, typ, s, reason, msg, st.ObservedGeneration, now)
	}
	if inForce {
		set(locksv1.ConditionLocked, metav1.ConditionTrue, lockedReason, freeze.Message)
	} else {
		set(locksv1.ConditionLocked, metav1.ConditionFalse, locksv1.ReasonThawed, "not frozen")
	}
	drained := "no granted request of this command is left"
	if cl.Name == locksv1.CommandAll && flags.DisableGlobalApplyLock {
		// No CommandLock holds apply back under this flag: "all" does not speak for it.
		drained = "no granted request of any command except apply is left (--disable-global-apply-lock: apply does not wait for this freeze)"
	}
	switch {
	case st.ActiveHolders == 0 && granting == 0:
		set(locksv1.ConditionDrained, metav1.ConditionTrue, locksv1.ReasonNoActiveHolders, drained)
	case st.ActiveHolders == 0:
		set(locksv1.ConditionDrained, metav1.ConditionFalse, locksv1.ReasonActiveHolders,
			fmt.Sprintf("%d request(s) of this command are being granted", granting))
	default:
		set(locksv1.ConditionDrained, metav1.ConditionFalse, locksv1.ReasonActiveHolders,
			fmt.Sprintf("%d granted request(s) of this command still hold their locks", st.ActiveHolders))
	}
	commandLockKstatus(&st, inForce, now)
	return st
}

// commandLockKstatus sets the conditions that kstatus (Flux, kpt, Config Sync) and Argo CD's
// health check judge a CommandLock by, from its Locked and Drained: a freeze in force that still
// has holders is draining, so Reconciling=True and Ready=False (InProgress: a `wait` keeps
// waiting); a drained freeze, or no freeze, is Ready=True (Current).
func commandLockKstatus(st *locksv1.CommandLockStatus, inForce bool, now time.Time) {
	set := func(typ string, s metav1.ConditionStatus, reason, msg string) {
		queue.SetCondition(&st.Conditions, typ, s, reason, msg, st.ObservedGeneration, now)
	}
	drained := meta.FindStatusCondition(st.Conditions, locksv1.ConditionDrained)
	switch {
	case !inForce:
		set(locksv1.ConditionReconciling, metav1.ConditionFalse, locksv1.ReasonThawed, "not frozen")
		set(locksv1.ConditionReady, metav1.ConditionTrue, locksv1.ReasonThawed, "not frozen")
	case drained.Status != metav1.ConditionTrue:
		set(locksv1.ConditionReconciling, metav1.ConditionTrue, drained.Reason, "draining: "+drained.Message)
		set(locksv1.ConditionReady, metav1.ConditionFalse, drained.Reason, "draining: "+drained.Message)
	default:
		set(locksv1.ConditionReconciling, metav1.ConditionFalse, drained.Reason, "frozen and drained")
		set(locksv1.ConditionReady, metav1.ConditionTrue, drained.Reason, "frozen and drained: "+drained.Message)
	}
}

// SetupWithManager registers the reconciler: CommandLock events, and LockRequest events of its
// command (a holder finishing may drain it).
func (r *CommandLockReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("commandlock").
		For(&locksv1.CommandLock{}).
		Watches(&locksv1.LockRequest{}, handler.EnqueueRequestsFromMapFunc(r.requestCommands)).
		WithOptions(controller.Options{NewQueue: sharding.NewQueueFunc(r.router)}).
		Complete(r)
}

// requestCommands maps a LockRequest event to the CommandLocks whose status it may change: its
// command's and the one of all commands, those of them that exist. A command with no
// CommandLock has no status to keep, and a CommandLock's own create or delete event reconciles
// it, with whatever requests the cache holds by then; so the requests of commands nobody
// freezes, most of them, enqueue nothing.
func (r *CommandLockReconciler) requestCommands(ctx context.Context, o client.Object) []reconcile.Request {
	lr, ok := o.(*locksv1.LockRequest)
	if !ok || lr.Spec.Command == "" {
		return nil
	}
	var out []reconcile.Request
	for _, name := range []string{lr.Spec.Command, locksv1.CommandAll} {
		var cl locksv1.CommandLock // from the cache the reconciler reads: no request to the API server
		if err := r.client.Get(ctx, types.NamespacedName{Name: name}, &cl); apierrors.IsNotFound(err) {
			continue
		}
		// Any other error enqueues: the reconcile reads again and reports it.
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
	}
	return out
}

// setInvalidWindows sets Stalled (reason Invalid) naming every window that cannot be evaluated
// (an unknown zone, an unparsable schedule): such a window freezes its scope until it is fixed.
// With none, there is no Stalled condition.
func setInvalidWindows(st *locksv1.CommandLockStatus, now time.Time) {
	var bad []string
	for _, w := range st.Windows {
		if w.Invalid != "" {
			bad = append(bad, w.Invalid)
		}
	}
	if len(bad) == 0 {
		meta.RemoveStatusCondition(&st.Conditions, locksv1.ConditionStalled)
		return
	}
	queue.SetCondition(&st.Conditions, locksv1.ConditionStalled, metav1.ConditionTrue, locksv1.ReasonInvalid,
		"invalid windows freeze their scope until fixed: "+strings.Join(bad, "; "), st.ObservedGeneration, now)
}
