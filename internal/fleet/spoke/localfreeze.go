package spoke

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/window"
)

// Freezes in a spoke, also offline (docs/fleet.md, "Freezes everywhere, also offline"). The hub
// is the only authority for grants: its grant path holds every request its freezes hold, by
// its own judgement of the windows. The spoke adds one gate, never a grant: a hub grant that
// the spoke does not show yet (a workload not let go) is shown only while the freezes as the
// spoke has them -- its CommandLock mirrors, as the hub last said them -- do not hold the
// request, judged two ways, and held if either holds it:
//
//   - the hub's judgement as mirrored (spec.locked with the hub's written thaw, status.windows);
//   - the spoke's own, by its clock, with the same code the hub uses (internal/window, its
//     daylight-saving rules): each window of the mirror's spec, and spec.until, judged at every
//     instant the hub's clock may show now (the spoke's, give or take the skew bound).
//
// So a weekend freeze holds while the network does not: a grant the hub made before a Deny
// window opened, that reaches the spoke (or is let go by the partition rule) only after the
// window opened by the spoke's clock, waits in the spoke until the window closes. A holder
// already let go runs on (a freeze never takes a grant back, as in one cluster), and the hub
// keeps the grant it made while the spoke holds it back (until its ttl runs out, if it has one,
// as for any grant nobody renews).
//
// The mirror's own status shows the spoke's judgement once the hub's has run out (MirrorStatus).

// judgeSlack is how long past the end of the hub's judgement of a mirror (its next transition,
// or the manual freeze's until) the mirror shows the spoke's own: the hub writes its status at
// the transition, which reaches a connected spoke well within it.
const judgeSlack = 5 * time.Second

// The marks of the spoke's own judgement.
const (
	// ConditionJudgedInSpoke is True on a CommandLock mirror whose status the spoke judged by
	// its own clock, because the hub's judgement ran out and no newer one came.
	ConditionJudgedInSpoke = locksv1.ConditionJudgedInSpoke
	// ReasonHubJudgementOutdated is ConditionJudgedInSpoke's reason.
	ReasonHubJudgementOutdated = locksv1.ReasonHubJudgementOutdated
	// ReasonFrozenInSpoke is the reason of a spoke request the hub granted that the spoke holds
	// back while its freezes, as the spoke judges them, hold the request.
	ReasonFrozenInSpoke = locksv1.ReasonFrozenInSpoke
)

// hubJudgementEnds is when the hub's judgement in hub's status stops being true by the clock
// alone: its windows' next transition, or the until of a manual freeze it shows in force; zero
// when it holds for good.
func hubJudgementEnds(hub *locksv1.CommandLock) time.Time {
	var end time.Time
	if t := hub.Status.NextTransition; t != nil {
		end = t.Time
	}
	if u := hub.Spec.Until; u != nil && queue.HoldsGrants(hub) && (end.IsZero() || u.Before(&metav1.Time{Time: end})) {
		end = u.Time
	}
	return end
}

// MirrorStatus is the status a CommandLock mirror of hub shows at now, and when to look again
// (zero: no need). While the hub's judgement holds (up to hubJudgementEnds plus judgeSlack) it
// is the hub's status as mirrored. Past it, with nothing newer from the hub, it is the spoke's
// own judgement by its clock: status.windows and nextTransition judged now (window.Judge, as
// the hub's reconciler judges them), the Locked condition as the hub would write it, and
// JudgedInSpoke True, whose message says since when the hub's judgement ran out and when the
// hub was last read (seen; zero: not since the agent started). The counts and Drained stay the
// hub's, as last seen. Pure.
func MirrorStatus(hub *locksv1.CommandLock, cluster string, seen, now time.Time) (locksv1.CommandLockStatus, time.Time) {
	st := *hub.Status.DeepCopy()
	st.Admission = nil // the write freeze is not mirrored (MirrorCommandLock)
	end := hubJudgementEnds(hub)
	// guard:fleet-mirror-judged-in-spoke
	if end.IsZero() || now.Before(end.Add(judgeSlack)) {
		if end.IsZero() {
			return st, time.Time{}
		}
		return st, end.Add(judgeSlack)
	}
	var next time.Time
	st.Windows, next = window.Judge(hub.Spec.Windows, now)
	st.NextTransition = nil
	if !next.IsZero() {
		st.NextTransition = &metav1.Time{Time: next.Truncate(time.Second)}
	}
	freeze, inForce := queue.CommandLockFreeze(hub, queue.FreezeFlags{}, now)
	reason := locksv1.ReasonFrozen
	if inForce && hub.Spec.Until != nil && (next.IsZero() || hub.Spec.Until.Time.Before(next)) {
		next = hub.Spec.Until.Time
	} else if !inForce {
		if freeze, inForce = queue.WindowsLockFreeze(hub.Name, st.Windows, queue.FreezeFlags{}); inForce {
			reason = locksv1.ReasonWindow
		}
	}
	g := st.ObservedGeneration
	if inForce {
		queue.SetCondition(&st.Conditions, locksv1.ConditionLocked, metav1.ConditionTrue, reason, freeze.Message, g, now)
	} else {
		queue.SetCondition(&st.Conditions, locksv1.ConditionLocked, metav1.ConditionFalse, locksv1.ReasonThawed, "not frozen", g, now)
	}
	heard := "not since the agent started"
	if !seen.IsZero() {
		heard = "last at " + stamp(seen)
	}
	queue.SetCondition(&st.Conditions, ConditionJudgedInSpoke, metav1.ConditionTrue, ReasonHubJudgementOutdated,
		fmt.Sprintf("judged in this spoke (cluster %s) by its own clock: the hub's judgement ran out at %s and the hub has sent none since (its CommandLocks read %s); the windows, until and Locked are this spoke's, the counts and Drained the hub's as last seen",
			cluster, stamp(end), heard), g, now)
	return st, next
}

// LocalFreeze is the freeze that holds req back from being let go in the spoke of cluster at
// now, by the CommandLock mirrors among cls (others are ignored: nothing in a spoke freezes but
// the hub): the hub's judgement as mirrored, or the spoke's own judgement of the windows and
// until by its clock, whichever freezes (the hub's first). A cluster selector is judged by the
// spoke's labels as the mirrors carry them (MirrorClusterLabels; unknown: it matches, fail
// safe); nsLabels are the labels of req's namespace in the spoke.
//
// The spoke's clock may be off the hub's by up to skew (the measured bound, or --max-clock-skew
// before a measure): a Deny window the hub's clock has opened may not have opened yet by the
// spoke's, and an until past by the spoke's may not be past by the hub's. So req is held if the
// freezes hold it at any instant of [now − skew, now + skew]: judged at its start and at every
// transition within it (a window shorter than the interval that opens and closes between two
// instants is judged at its opening). next is when to judge again (zero: never by the clock):
// when held, the end of the freeze that holds plus skew; when not, the next transition after
// now + skew, minus skew. Pure.
func LocalFreeze(cls []locksv1.CommandLock, req *locksv1.LockRequest, cluster string, nsLabels map[string]string, now time.Time, skew time.Duration) (fr queue.Freeze, frozen bool, next time.Time) {
	skew = max(skew, 0)
	// guard:fleet-spoke-gate-allows-skew
	at, until := now.Add(-skew), now.Add(skew)
	for range maxFreezeSamples {
		fr, frozen, next = localFreezeAt(cls, req, cluster, nsLabels, at)
		if frozen {
			if !next.IsZero() {
				next = next.Add(skew)
			}
			return fr, true, next
		}
		if next.IsZero() || next.After(until) {
			break
		}
		at = next
	}
	if !next.IsZero() {
		next = next.Add(-skew)
	}
	return queue.Freeze{}, false, next
}

// maxFreezeSamples bounds the instants LocalFreeze judges in its interval: more transitions than
// that within twice the skew bound (at most seconds) is no schedule a CommandLock can have.
const maxFreezeSamples = 64

// localFreezeAt is LocalFreeze at the one instant at, and the spoke's next transition after it.
func localFreezeAt(cls []locksv1.CommandLock, req *locksv1.LockRequest, cluster string, nsLabels map[string]string, now time.Time) (fr queue.Freeze, frozen bool, next time.Time) {
	r := req.DeepCopy()
	r.Spec.Holder.Cluster = cluster // the spoke's requests are its cluster's on the hub
	var mirrors, local []locksv1.CommandLock
	var clusterLabels map[string]string
	for i := range cls {
		if !IsMirror(&cls[i]) {
			continue
		}
		if l, ok := MirrorClusterLabels(&cls[i]); ok {
			clusterLabels = l
		}
		mirrors = append(mirrors, cls[i])
		own := *cls[i].DeepCopy()
		var t time.Time
		own.Status.Windows, t = window.Judge(own.Spec.Windows, now)
		own.Spec.Locked = queue.IsLockInForce(&cls[i], now)
		if own.Spec.Locked && own.Spec.Until != nil && (t.IsZero() || own.Spec.Until.Time.Before(t)) {
			t = own.Spec.Until.Time
		}
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
		local = append(local, own)
	}
	// guard:fleet-spoke-judges-by-its-clock
	for _, set := range [][]locksv1.CommandLock{mirrors, local} {
		f, _ := queue.ResolveFreezes(set, queue.FreezeFlags{}, now)
		if clusterLabels != nil {
			f = f.InFleet(map[string]map[string]string{cluster: clusterLabels})
		}
		f = f.InNamespace(nsLabels)
		if fr, frozen := f.ForRequest(r); frozen {
			return fr, true, next
		}
	}
	return queue.Freeze{}, false, next
}

// FrozenStatus is the status of a spoke request the hub has granted that the spoke holds back
// while fr holds it (LocalFreeze): what the spoke showed (Pending), blockedBy the freeze, and
// Granted False with reason FrozenInSpoke saying why and that the hub keeps its grant.
func FrozenStatus(spoke *locksv1.LockRequest, cluster string, fr queue.Freeze, now time.Time) locksv1.LockRequestStatus {
	return notLetGo(spoke, fr.Source, ReasonFrozenInSpoke, fmt.Sprintf("granted by the hub, but not let go in this spoke (cluster %s) while its freezes, as it judges them by its own clock, hold it: %s; the hub keeps the grant, and this request goes once the freeze ends here",
		cluster, fr.Message), now)
}

// judgeGrant is what the agent does with the hub's status want of spoke: no grant let go to a
// request its holder is done with (notForDoneRequests), the partition rule, then the spoke's
// freezes as a gate on letting a grant go (freezeGate); never a grant.
func (a *Agent) judgeGrant(ctx context.Context, spoke, hub *locksv1.LockRequest, want locksv1.LockRequestStatus) (ctrl.Result, locksv1.LockRequestStatus, error) {
	want = notForDoneRequests(spoke, want)
	res, want := a.partition(ctx, spoke, hub, want)
	return a.freezeGate(ctx, spoke, hub, res, want)
}

// freezeGate applies the spoke's freezes to a hub grant the spoke would show now (want, after
// the partition rule) and does not show yet: held (FrozenStatus) while LocalFreeze holds it at
// any instant the hub's clock may show (the spoke's now give or take gateSkew), looked at again
// within a second (a thaw on the hub reaches the mirrors, not this request) or at the spoke's
// next transition. It never turns anything into a grant: a want that is not a
// grant, or a holder the spoke already shows, passes as it is. The request is judged with the
// freeze bypass of its hub request (hub), the one the hub admitted: a spoke user's own
// spec.bypassFreeze is never carried to the hub, which gives a spoke none of its own, so it
// passes no freeze of the fleet's.
func (a *Agent) freezeGate(ctx context.Context, spoke, hub *locksv1.LockRequest, res ctrl.Result, want locksv1.LockRequestStatus) (ctrl.Result, locksv1.LockRequestStatus, error) {
	if want.Phase != locksv1.PhaseGranted || spoke.Status.Phase == locksv1.PhaseGranted {
		return res, want, nil
	}
	var cls locksv1.CommandLockList
	if err := a.spoke.List(ctx, &cls, client.MatchingLabels{LabelMirror: MirrorHub}); err != nil {
		return res, want, err
	}
	ns, err := a.namespaceLabels(ctx, spoke.Namespace)
	if err != nil {
		return res, want, err
	}
	now := a.opts.Clock.Now()
	judged := spoke.DeepCopy()
	// guard:fleet-spoke-bypass-the-hubs
	judged.Spec.BypassFreeze = hub.Spec.BypassFreeze.DeepCopy()
	fr, frozen, next := LocalFreeze(cls.Items, judged, a.opts.Cluster, ns, now, a.gateSkew(spoke.Namespace))
	// guard:fleet-spoke-frozen-held
	if !frozen {
		return res, want, nil
	}
	log.FromContext(ctx).V(1).Info("a hub grant held in the spoke: frozen here", "freeze", fr.Source)
	again := time.Second
	if !next.IsZero() && next.Sub(now) < again {
		again = max(next.Sub(now), 0) + 10*time.Millisecond
	}
	return ctrl.Result{RequeueAfter: again}, FrozenStatus(spoke, a.opts.Cluster, fr, now), nil
}

// gateSkew is how far the spoke's clock may be off the hub's for the freeze gate of a request in
// ns: the skew bound its hub Lease's renewals measured, or --max-clock-skew before a measure
// (fail safe: the largest skew the partition rule lets anything go with).
func (a *Agent) gateSkew(ns string) time.Duration {
	st, _ := a.clockOf(ns)
	if b, known := st.Skew.Max(); known {
		return b
	}
	return a.opts.Settings.MaxSkew
}

// namespaceLabels are the labels of namespace ns in the spoke (metadata only, from the cache
// the mirrors' namespace watch fills); none when it is gone.
func (a *Agent) namespaceLabels(ctx context.Context, ns string) (map[string]string, error) {
	var m metav1.PartialObjectMetadata
	m.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "Namespace"})
	if err := a.spoke.Get(ctx, client.ObjectKey{Name: ns}, &m); client.IgnoreNotFound(err) != nil {
		return nil, fmt.Errorf("read namespace %s for the freezes: %w", ns, err)
	}
	return m.Labels, nil
}

// JudgedInSpoke is the message of a mirror's JudgedInSpoke condition, when True: its status is
// the spoke's own judgement (MirrorStatus).
func JudgedInSpoke(cl *locksv1.CommandLock) (string, bool) {
	c := meta.FindStatusCondition(cl.Status.Conditions, ConditionJudgedInSpoke)
	if c == nil || c.Status != metav1.ConditionTrue {
		return "", false
	}
	return c.Message, true
}

// MirrorClusterLabels are the spoke's cluster labels a CommandLock mirror carries
// (AnnotationMirrorClusterLabels), and whether it carries them readably.
func MirrorClusterLabels(cl *locksv1.CommandLock) (map[string]string, bool) {
	v, ok := cl.Annotations[locksv1.AnnotationMirrorClusterLabels]
	if !ok {
		return nil, false
	}
	out := map[string]string{}
	if err := json.Unmarshal([]byte(v), &out); err != nil {
		return nil, false
	}
	return out, true
}
