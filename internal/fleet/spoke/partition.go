package spoke

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/fleet/skew"
	"github.com/turnstile-dev/turnstile/internal/queue"
)

// ReasonHubUnreachable is the reason of a spoke request whose running holder the agent stopped
// because the hub stopped answering the renewals of its hub Lease (docs/fleet.md, "Partition:
// the rule, with numbers"): the hub may hand its locks on once the Lease lapses.
const ReasonHubUnreachable = "HubUnreachable"

// ReasonClockSkewTooLarge is the reason of a spoke request whose hub grant the agent gave back
// because the spoke's clock skew with the hub is over --max-clock-skew (SkewStatus).
const ReasonClockSkewTooLarge = locksv1.ReasonClockSkewTooLarge

// hubClock is the partition clock of one hub Lease (one namespace): what skew.Judge reads.
type hubClock struct {
	st skew.State
	// tried says a renewal was attempted since the agent started: until then nothing is judged
	// (an agent that has just started has not had the time to renew); after a failed first one,
	// skew.Judge's answer for an unknown clock is Stop, the safe one for an agent restarted
	// during a partition.
	tried bool
	// failing says the last renewal failed: the hub is not answering (renewSoon waits for it).
	failing bool
	// used is when the namespace was last seen in use (a hub request of this cluster not final
	// there), or first renewed: the agent forgets a clock unused for longer than L (forget).
	used time.Time
}

// dateKey carries a *hubDate in a request's context: the hub's Date header of its response.
type dateKey struct{}

type hubDate struct {
	mu sync.Mutex
	at time.Time
}

func (d *hubDate) get() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.at
}

// dateRecorder keeps the Date header of each response to a request whose context asks for it:
// the hub's clock, in whole seconds, at a moment of the round trip.
type dateRecorder struct{ next http.RoundTripper }

func (r dateRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if d, ok := req.Context().Value(dateKey{}).(*hubDate); ok && err == nil && resp != nil {
		if at, perr := http.ParseTime(resp.Header.Get("Date")); perr == nil {
			d.mu.Lock()
			d.at = at
			d.mu.Unlock()
		}
	}
	return resp, err
}

// HubTimes are the hub's times a renewal's response carries, as skew.Measure reads them: its
// Date header (zero when missing or unreadable: none).
func HubTimes(date time.Time) []time.Time {
	if date.IsZero() {
		return nil
	}
	return []time.Time{date}
}

// EarliestExpiry is the earliest status.expiresAt of the granted hub requests (zero when none
// has one): the hub hands a lock on at its grant's end too, which a cut-off spoke cannot renew.
func EarliestExpiry(hubs []locksv1.LockRequest) time.Time {
	var out time.Time
	for i := range hubs {
		h := &hubs[i]
		if h.Status.Phase != locksv1.PhaseGranted || h.Spec.Release || h.Status.ExpiresAt == nil {
			continue
		}
		if out.IsZero() || h.Status.ExpiresAt.Before(&metav1.Time{Time: out}) {
			out = h.Status.ExpiresAt.Time
		}
	}
	return out
}

// LostToPartition says the agent stopped spoke's holder because the hub was unreachable, or
// gave its hub grant back because the spoke's clock skew is over --max-clock-skew: from then on
// the request stays as the agent wrote it (released, HubUnreachable or ClockSkewTooLarge),
// whatever the hub says once it answers again, and its hub request is released; its workload
// runs again only on a new request's grant.
func LostToPartition(spoke *locksv1.LockRequest) bool {
	c := meta.FindStatusCondition(spoke.Status.Conditions, locksv1.ConditionGranted)
	// guard:spoke-skew-given-back-stays
	return spoke.Status.Phase.IsFinal() && c != nil && (c.Reason == ReasonHubUnreachable || c.Reason == ReasonClockSkewTooLarge)
}

// LostStatus is the status of a granted spoke request whose holder must stop now (v.Stop): final
// (Released, reason HubUnreachable: Granted False, Stalled True), which the gated workload
// controller reads as a lost lock (a Pod deleted, a Job suspended again and its token removed).
// lease names the hub Lease; the message says when it was last renewed and the deadline.
func LostStatus(spoke *locksv1.LockRequest, lease string, st skew.State, v skew.Verdict, now time.Time) locksv1.LockRequestStatus {
	out := *spoke.Status.DeepCopy()
	msg := fmt.Sprintf("the hub did not answer the renewals of the spoke's hub Lease %s/%s: %s", spoke.Namespace, lease, v.Why)
	switch {
	case v.Expiry:
		msg = fmt.Sprintf("its hub grant ends at %s (spec.ttl, not renewed in time): the holder was stopped at the deadline %s, before the hub hands its locks on",
			stamp(st.Expires), stamp(v.StopAt))
	case !st.Renewed.IsZero() && !v.StopAt.IsZero():
		msg = fmt.Sprintf("the hub has not answered a renewal of the spoke's hub Lease %s/%s since %s: the holder was stopped at the deadline %s, before the hub can hand its locks on (%s)",
			spoke.Namespace, lease, stamp(st.Renewed), stamp(v.StopAt), v.Why)
	}
	out.Phase = locksv1.PhaseReleased
	out.QueuePosition, out.BlockedBy = 0, ""
	out.FinishedAt = &metav1.Time{Time: now}
	g := out.ObservedGeneration
	queue.SetCondition(&out.Conditions, locksv1.ConditionGranted, metav1.ConditionFalse, ReasonHubUnreachable, msg, g, now)
	queue.SetCondition(&out.Conditions, locksv1.ConditionStalled, metav1.ConditionTrue, ReasonHubUnreachable, msg, g, now)
	queue.SetCondition(&out.Conditions, locksv1.ConditionReady, metav1.ConditionFalse, ReasonHubUnreachable, msg, g, now)
	meta.RemoveStatusCondition(&out.Conditions, locksv1.ConditionReconciling)
	return out
}

// SkewStatus is the status of a spoke request whose hub grant the agent gives back because the
// spoke's clock skew with the hub, bound (the measured bound), is over maxSkew
// (--max-clock-skew; v.SkewTooLarge): final as LostStatus is (Released: a running holder
// stopped, a waiting workload never let go), with reason ClockSkewTooLarge and a message naming
// the bound, the flag and what to do: fix the clock of cluster. Its hub request is released then
// (LostToPartition), so the key is not held fleet-wide while the clock is broken.
func SkewStatus(spoke *locksv1.LockRequest, cluster string, bound, maxSkew time.Duration, now time.Time) locksv1.LockRequestStatus {
	out := LostStatus(spoke, LeaseName(cluster), skew.State{}, skew.Verdict{Stop: true}, now)
	did := "its workload was not let go"
	if spoke.Status.Phase == locksv1.PhaseGranted {
		did = "its holder was stopped"
	}
	msg := fmt.Sprintf("the clock of cluster %s is off the hub's by up to %s (measured by the renewals of its hub Lease %s/%s), over --max-clock-skew %s: this spoke cannot tell when the hub hands its locks on, so %s and its hub grant was given back (released on the hub); fix the clock (NTP) on cluster %s, then request again",
		cluster, skew.Secs(bound), spoke.Namespace, LeaseName(cluster), skew.Secs(maxSkew), did, cluster)
	g := out.ObservedGeneration
	for _, c := range []string{locksv1.ConditionGranted, locksv1.ConditionStalled, locksv1.ConditionReady} {
		status := metav1.ConditionFalse
		if c == locksv1.ConditionStalled {
			status = metav1.ConditionTrue
		}
		queue.SetCondition(&out.Conditions, c, status, ReasonClockSkewTooLarge, msg, g, now)
	}
	return out
}

// lostStatus is the status of a spoke request whose holder the partition rule stops, or whose
// grant it gives back (v.SkewTooLarge: SkewStatus), judged with st.
func (a *Agent) lostStatus(spoke *locksv1.LockRequest, st skew.State, v skew.Verdict) locksv1.LockRequestStatus {
	now := a.opts.Clock.Now()
	if v.SkewTooLarge {
		bound, _ := st.Skew.Max()
		return SkewStatus(spoke, a.opts.Cluster, bound, a.opts.Settings.MaxSkew, now)
	}
	return LostStatus(spoke, LeaseName(a.opts.Cluster), st, v, now)
}

// HeldStatus is the status of a spoke request the hub has granted that is not let go (v.LetGo
// false): what the spoke showed (Pending), with blockedBy saying the hub is unreachable.
func HeldStatus(spoke *locksv1.LockRequest, st skew.State, v skew.Verdict) locksv1.LockRequestStatus {
	out := pendingStatus(spoke)
	since := "the agent started"
	if !st.Renewed.IsZero() {
		since = stamp(st.Renewed)
	}
	out.BlockedBy = queue.Clip(fmt.Sprintf("the hub is unreachable since %s; nothing is granted until it answers (%s)", since, v.Why))
	return out
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// clockOf is the partition clock of ns, and whether a renewal was tried; a copy.
func (a *Agent) clockOf(ns string) (skew.State, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.clocks[ns]
	if c == nil {
		return skew.State{}, false
	}
	return c.st, c.tried
}

// judge applies the partition rule to ns now, after a first renewal was tried (tried here, at
// once, if none was), with the earliest expiry of the hub grants in ns.
func (a *Agent) judge(ctx context.Context, ns string, hubs []locksv1.LockRequest) (skew.State, skew.Verdict) {
	st, tried := a.clockOf(ns)
	if !tried {
		_ = a.renew(ctx, ns) // its error is the verdict's: an unknown clock stops
		st, _ = a.clockOf(ns)
	}
	st.Expires = EarliestExpiry(hubs)
	return st, a.opts.Settings.Judge(a.opts.Clock.Now(), st)
}

// kick asks the renewer to renew now (a granted workload waits on the let-go rule).
func (a *Agent) kick() {
	select {
	case a.kicks <- struct{}{}:
	default:
	}
}

// Action is what the agent does with a hub grant under the partition rule.
type Action int

const (
	// Show says the hub's grant is shown in the spoke request (the holder runs, or is let go).
	Show Action = iota
	// Stop says the running holder is stopped (LostStatus).
	Stop
	// Hold says the grant is not shown yet; the request stays as it was (HeldStatus).
	Hold
)

// PartitionAction is what the rule's verdict v makes of a hub grant, for a spoke request that
// shows it already (running) or not (waiting to be let go), and that opted out of the stop
// (keep: KeepRunning) or not. A holder that opted out runs on whatever the verdict (its hub
// request names no Lease: the hub keeps its lock); one that waits is let go by the same rule as
// any other: a grant is shown only while the hub answers renewals.
func PartitionAction(running, keep bool, v skew.Verdict) Action {
	switch {
	// guard:spoke-keep-running-not-stopped
	case running && keep:
		return Show
	// guard:spoke-stop-at-deadline
	case running && v.Stop:
		return Stop
	case running:
		return Show
	// guard:spoke-held-while-unreachable
	case !v.LetGo:
		return Hold
	}
	return Show
}
