package hub

import (
	"fmt"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/fleet/spoke"
	"github.com/turnstile-dev/turnstile/internal/whoami"
)

// maxSkew is the largest clock skew annotation the hub believes: a bound past it is a broken
// clock the agent already refuses (--max-clock-skew), and a larger number is not a measure.
const maxSkew = time.Hour

// LeaseView is what one hub Lease of a spoke says: when the spoke last renewed it, for how
// long, and the clock skew bound the agent published on it.
type LeaseView struct {
	Namespace string
	Renewed   time.Time
	Duration  time.Duration
	// Skew is the agent's published skew bound; nil when the Lease carries none (or one the hub
	// cannot read).
	Skew *time.Duration
	// AgentVersion is the agent's published version (ParseAgentVersion); "" when the Lease
	// carries none, or one the hub does not show.
	AgentVersion string
}

// lapses is when the Lease lapses unless renewed.
func (l LeaseView) lapses() time.Time { return l.Renewed.Add(l.Duration) }

// ViewLease reads lease as cluster's hub Lease. It is one only when it is named
// spoke-<cluster> and was created by the spoke itself (the holder-Lease policy stamps the
// creator and keeps the Lease to it): a Lease a hub user made under that name and label does
// not make an unreachable spoke look connected.
func ViewLease(cluster string, lease *coordinationv1.Lease) (LeaseView, bool) {
	if lease.Name != spoke.LeaseName(cluster) || lease.Labels[spoke.LabelCluster] != cluster {
		return LeaseView{}, false
	}
	// guard:hub-spoke-lease-creator
	if !IsSpokeIdentity(cluster, lease.Annotations[whoami.AnnotationCreatedBy]) {
		return LeaseView{}, false
	}
	if lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil {
		return LeaseView{}, false
	}
	v := LeaseView{
		Namespace: lease.Namespace,
		Renewed:   lease.Spec.RenewTime.Time,
		Duration:  time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second,
	}
	if s, ok := ParseSkew(lease.Annotations[spoke.AnnotationClockSkew]); ok {
		v.Skew = &s
	}
	v.AgentVersion = ParseAgentVersion(lease.Annotations[spoke.AnnotationAgentVersion])
	return v, true
}

// ParseAgentVersion reads the agent version annotation: the version as the agent wrote it when it
// is one (spoke.IsVersion), else "". It is the spoke's own claim; the hub shows it, and checks
// only that it is a version: anything else (a line break, markup, an over-long string) is not
// copied into a status every user reads.
func ParseAgentVersion(s string) string {
	// guard:hub-agent-version-checked
	if !spoke.IsVersion(s) {
		return ""
	}
	return s
}

// IsSpokeIdentity says whether user is cluster's spoke on the hub: its ServiceAccount
// turnstile-fleet/spoke-<cluster>, or (a client certificate of group turnstile:spokes) the user
// named after the cluster.
func IsSpokeIdentity(cluster, user string) bool {
	return user != "" && (user == "system:serviceaccount:"+Namespace+":"+spoke.LeaseName(cluster) || user == cluster)
}

// ParseSkew reads the clock skew annotation: seconds, as the agent writes it (spoke.FormatSkew).
func ParseSkew(s string) (time.Duration, bool) {
	if s == "" {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || !(f >= 0 && f <= maxSkew.Seconds()) { // NaN is neither
		return 0, false
	}
	return time.Duration(f * float64(time.Second)).Round(time.Millisecond), true
}

// Observation is what the hub sees of one spoke at one moment.
type Observation struct {
	// Leases are the spoke's hub Leases (ViewLease).
	Leases []LeaseView
	// Holders and Waiters count the hub's requests whose holder is in the cluster: granted, and
	// pending (or not decided yet). KeepRunning counts the holders that name no holder Lease
	// (KeepsRunning).
	Holders, Waiters, KeepRunning int32
	// LabelsProblem says why the member's labels in the members ConfigMap cannot be read; "" when
	// they can.
	LabelsProblem string
	// HubVersion is the hub manager's own version, which a connected spoke's Ready message
	// compares with its agent's; "" to compare nothing.
	HubVersion string
}

// Status is the status the hub keeps for sp from what it observes at now (the hub's clock), and
// when it will change by time alone (the first live Lease's lapse; zero if never). It does not
// change sp.
func Status(sp *locksv1.Spoke, o Observation, now time.Time) (locksv1.SpokeStatus, time.Time) {
	old := sp.Status
	st := locksv1.SpokeStatus{
		ObservedGeneration:    sp.Generation,
		Holders:               o.Holders,
		Waiters:               o.Waiters,
		KeepRunning:           o.KeepRunning,
		Leases:                int32(len(o.Leases)),
		Conditions:            append([]metav1.Condition(nil), old.Conditions...),
		LastHeartbeat:         old.LastHeartbeat,
		ClockSkewMilliseconds: old.ClockSkewMilliseconds,
		AgentVersion:          old.AgentVersion,
	}
	var latest, lastLapse, next time.Time
	var latestSkewAt, latestVersionAt time.Time
	for _, l := range o.Leases {
		if l.Renewed.After(latest) {
			latest = l.Renewed
		}
		if l.lapses().After(lastLapse) {
			lastLapse = l.lapses()
		}
		// guard:hub-spoke-live-lease
		if l.lapses().After(now) && (next.IsZero() || l.lapses().Before(next)) {
			next = l.lapses()
		}
		if l.Skew != nil && !l.Renewed.Before(latestSkewAt) {
			latestSkewAt = l.Renewed
			st.ClockSkewMilliseconds = ptr.To(l.Skew.Milliseconds())
		}
		if l.AgentVersion != "" && !l.Renewed.Before(latestVersionAt) {
			latestVersionAt = l.Renewed
			st.AgentVersion = l.AgentVersion
		}
	}
	if !latest.IsZero() && (st.LastHeartbeat == nil || latest.After(st.LastHeartbeat.Time)) {
		st.LastHeartbeat = seconds(latest)
	}
	switch {
	case !next.IsZero():
		st.Connection = locksv1.SpokeConnected
		st.ConnectionSince = seconds(latest)
		if old.Connection == locksv1.SpokeConnected && old.ConnectionSince != nil {
			st.ConnectionSince = old.ConnectionSince
		}
	case st.LastHeartbeat == nil:
		st.Connection = locksv1.SpokeNever
	default:
		st.Connection = locksv1.SpokeUnreachable
		switch {
		case old.Connection == locksv1.SpokeUnreachable && old.ConnectionSince != nil:
			st.ConnectionSince = old.ConnectionSince
		case !lastLapse.IsZero():
			st.ConnectionSince = seconds(lastLapse)
		default: // its Leases are gone: it was last heard of at its heartbeat
			st.ConnectionSince = st.LastHeartbeat
		}
	}
	setConditions(&st, sp, o)
	return st, next
}

// setConditions sets Ready, Reconciling and Stalled from st's connection and o.
func setConditions(st *locksv1.SpokeStatus, sp *locksv1.Spoke, o Observation) {
	set := func(t string, s metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: sp.Generation})
	}
	name := sp.Name
	var ready metav1.ConditionStatus
	var reason, msg string
	switch st.Connection {
	case locksv1.SpokeConnected:
		ready, reason = metav1.ConditionTrue, locksv1.ReasonSpokeConnected
		msg = fmt.Sprintf("spoke %s renews its hub Leases (%d); last renewal %s", name, st.Leases, st.LastHeartbeat.UTC().Format(time.RFC3339)) +
			versionNote(st.AgentVersion, o.HubVersion)
	case locksv1.SpokeNever:
		ready, reason = metav1.ConditionFalse, locksv1.ReasonSpokeNeverConnected
		msg = fmt.Sprintf("the agent of cluster %s has not renewed a hub Lease yet: run its manager with --hub-kubeconfig and --cluster-name=%s as the hub's ServiceAccount %s/%s (docs/fleet.md)",
			name, name, Namespace, spoke.LeaseName(name))
	default:
		ready, reason = metav1.ConditionFalse, locksv1.ReasonSpokeUnreachable
		passed := "so the hub has passed its locks on"
		if st.KeepRunning > 0 {
			passed = fmt.Sprintf("so the hub has passed its locks on, but for %d held while cut off, keep-running (fleet.turnstile.dev/on-partition): held until released in the spoke, or on the hub by an admin (kubectl turnstile release --cluster %s NAME)",
				st.KeepRunning, name)
		}
		msg = fmt.Sprintf("no hub Lease of spoke %s is live: its last renewal was at %s and the last Lease lapsed at %s, %s; check its agent and its network to the hub",
			name, st.LastHeartbeat.UTC().Format(time.RFC3339), st.ConnectionSince.UTC().Format(time.RFC3339), passed)
	}
	set(locksv1.ConditionReady, ready, reason, msg)
	// kstatus: a member that has not connected yet is InProgress, one that is cut off Failed.
	// A member entry that cannot be read is Stalled, and then not Reconciling (kstatus reads
	// Reconciling first).
	set(locksv1.ConditionReconciling, boolStatus(st.Connection == locksv1.SpokeNever && o.LabelsProblem == ""), reason, msg)
	switch {
	case st.Connection == locksv1.SpokeUnreachable:
		set(locksv1.ConditionStalled, metav1.ConditionTrue, reason, msg)
	case o.LabelsProblem != "":
		set(locksv1.ConditionStalled, metav1.ConditionTrue, ReasonInvalidMember, o.LabelsProblem)
	default:
		set(locksv1.ConditionStalled, metav1.ConditionFalse, reason, "")
	}
}

// versionNote is what a connected spoke's Ready message says of its agent's version: nothing
// when it is the hub's (or either is not known), else both, so that `kubectl get spokes -o wide`
// and `kubectl turnstile fleet` show the spokes to upgrade.
func versionNote(agent, hub string) string {
	if agent == "" || hub == "" || agent == hub {
		return ""
	}
	return fmt.Sprintf("; its agent runs %s, the hub %s: run one version across the fleet", agent, hub)
}

// seconds is t as a status keeps it: metav1.Time is written in whole seconds, so a status
// computed with sub-second times would differ from the stored one at every reconcile.
func seconds(t time.Time) *metav1.Time {
	m := metav1.NewTime(t).Rfc3339Copy()
	return &m
}

func boolStatus(b bool) metav1.ConditionStatus {
	if b {
		return metav1.ConditionTrue
	}
	return metav1.ConditionFalse
}

// ReasonInvalidMember says the member's entry in the members ConfigMap cannot be read (Stalled).
const ReasonInvalidMember = "InvalidMember"
