package dashboard

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// The Fleet tab: on a fleet's hub, a row per Spoke the hub's manager keeps (docs/fleet.md, "The
// fleet at a glance"), the same view as `kubectl get spokes` and `kubectl turnstile fleet`. The
// Spokes are cluster-scoped, so one watch serves every page, whatever namespace it shows.

// Fleet is the Fleet tab's data.
type Fleet struct {
	// Served is false when the API server serves no Spokes (no Spoke CRD: not a hub, or a
	// Turnstile from before the fleet view). The page shows no Fleet tab then.
	Served bool `json:"served"`
	// Spokes are the members, by name. None on a cluster that is not a hub.
	Spokes  []SpokeRow   `json:"spokes"`
	Summary FleetSummary `json:"summary"`
	// Problem says why the Spokes cannot be shown (the user may not list them), in words and the
	// API server's own.
	Problem string `json:"problem,omitempty"`
}

// FleetSummary counts the spokes by connection, and their holders and waiters.
type FleetSummary struct {
	Spokes      int   `json:"spokes"`
	Connected   int   `json:"connected"`
	Unreachable int   `json:"unreachable"`
	Never       int   `json:"never"`
	Holders     int32 `json:"holders"`
	Waiters     int32 `json:"waiters"`
}

// SpokeRow is one member of the fleet as the hub sees it.
type SpokeRow struct {
	// Name is the cluster's name (its spoke's --cluster-name).
	Name string `json:"name"`
	UID  string `json:"uid"`
	// Labels are the member's labels ("region=eu"), sorted, for CommandLock scopes.
	Labels []string `json:"labels"`
	// Connection is Connected, Unreachable or Never; Unknown before the hub's manager first
	// wrote the status.
	Connection string `json:"connection"`
	// Since is when the connection became what it is.
	Since *time.Time `json:"since,omitempty"`
	// Heartbeat is the spoke's last renewal of a hub Lease (its own clock).
	Heartbeat *time.Time `json:"heartbeat,omitempty"`
	// SkewMilliseconds is the clock skew bound the spoke's agent measured; nil before it did.
	SkewMilliseconds *int64 `json:"skewMilliseconds,omitempty"`
	// AgentVersion is the version the spoke's agent publishes; empty before it did.
	AgentVersion string `json:"agentVersion,omitempty"`
	Leases       int32  `json:"leases"`
	Holders      int32  `json:"holders"`
	Waiters      int32  `json:"waiters"`
	// Ready is the Ready condition's status: True, False, or Unknown before the hub said.
	Ready string `json:"ready"`
	// Reason and Message say why the spoke is not Ready (the Ready condition's), or why its
	// member entry cannot be read (Stalled, InvalidMember); empty when there is nothing to say.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Stale is set when the status describes an older spec than the Spoke's (the hub's manager
	// has not caught up with an edit of the members ConfigMap).
	Stale bool `json:"stale,omitempty"`
}

// BuildFleet turns the watched Spokes into the Fleet tab's rows. It is pure.
func BuildFleet(served bool, spokes []*locksv1.Spoke, problem string) Fleet {
	f := Fleet{Served: served, Spokes: make([]SpokeRow, 0, len(spokes)), Problem: problem}
	for _, sp := range spokes {
		f.Spokes = append(f.Spokes, spokeRow(sp))
	}
	slices.SortFunc(f.Spokes, func(a, b SpokeRow) int { return strings.Compare(a.Name, b.Name) })
	for _, r := range f.Spokes {
		f.Summary.Spokes++
		switch locksv1.SpokeConnection(r.Connection) {
		case locksv1.SpokeConnected:
			f.Summary.Connected++
		case locksv1.SpokeUnreachable:
			f.Summary.Unreachable++
		case locksv1.SpokeNever:
			f.Summary.Never++
		}
		f.Summary.Holders += r.Holders
		f.Summary.Waiters += r.Waiters
	}
	return f
}

func spokeRow(sp *locksv1.Spoke) SpokeRow {
	st := sp.Status
	r := SpokeRow{
		Name: sp.Name, UID: string(sp.UID), Labels: []string{},
		Connection:       cmp.Or(string(st.Connection), "Unknown"),
		Since:            timeOf(st.ConnectionSince),
		Heartbeat:        timeOf(st.LastHeartbeat),
		SkewMilliseconds: st.ClockSkewMilliseconds,
		AgentVersion:     st.AgentVersion,
		Leases:           st.Leases, Holders: st.Holders, Waiters: st.Waiters,
		Ready: string(metav1.ConditionUnknown),
		Stale: st.ObservedGeneration != 0 && st.ObservedGeneration < sp.Generation,
	}
	for k, v := range sp.Spec.Labels {
		r.Labels = append(r.Labels, k+"="+v)
	}
	slices.Sort(r.Labels)
	if c := meta.FindStatusCondition(st.Conditions, locksv1.ConditionReady); c != nil {
		r.Ready = string(c.Status)
		if c.Status != metav1.ConditionTrue {
			r.Reason, r.Message = c.Reason, c.Message
		}
	}
	// A member entry the hub cannot read is Stalled whatever the connection: say so, as
	// `kubectl turnstile fleet` does. (Stalled for Unreachable repeats Ready.)
	if c := meta.FindStatusCondition(st.Conditions, locksv1.ConditionStalled); c != nil && c.Status == metav1.ConditionTrue &&
		c.Reason != locksv1.ReasonSpokeUnreachable {
		r.Reason, r.Message = c.Reason, c.Message
	}
	return r
}

func timeOf(t *metav1.Time) *time.Time {
	if t == nil {
		return nil
	}
	out := t.Time
	return &out
}

// The Fleet tab's messages: "fleet" carries the whole tab (once per stream, and again when the
// Spokes come to be served or stop being), "fleetpatch" what changed since.
const (
	msgFleet      = "fleet"
	msgFleetPatch = "fleetpatch"
)

// fleetMessage is the payload of a "fleet" message.
type fleetMessage struct {
	Now time.Time `json:"now"`
	Fleet
}

// fleetPatchMessage is the payload of a "fleetpatch" message: spokes upserted or removed (by
// name), the summary, and the problem when it changed (Problem is then set, "" included).
type fleetPatchMessage struct {
	Now     time.Time         `json:"now"`
	Upsert  []json.RawMessage `json:"upsert,omitempty"`
	Remove  []string          `json:"remove,omitempty"`
	Summary FleetSummary      `json:"summary"`
	Problem *string           `json:"problem,omitempty"`
}

// encodedFleet is the Fleet tab as last sent, in JSON, so the next one can be a patch.
type encodedFleet struct {
	served bool
	spokes map[string][]byte
	// problem is the problem as last sent.
	problem string
}

func encodeFleet(f Fleet) encodedFleet {
	e := encodedFleet{served: f.Served, spokes: make(map[string][]byte, len(f.Spokes)), problem: f.Problem}
	for _, s := range f.Spokes {
		e.spokes[s.Name] = mustJSON(s)
	}
	return e
}

// diffFleet is the patch from prev to next (encoded as nextEnc); ok is false when nothing
// changed. A change of Served is no patch: the caller sends the whole tab.
func diffFleet(prev encodedFleet, next Fleet, nextEnc encodedFleet, now time.Time) (fleetPatchMessage, bool) {
	p := fleetPatchMessage{Now: now, Summary: next.Summary}
	changed := false
	for _, s := range next.Spokes {
		if old, ok := prev.spokes[s.Name]; !ok || !bytes.Equal(old, nextEnc.spokes[s.Name]) {
			p.Upsert = append(p.Upsert, nextEnc.spokes[s.Name])
			changed = true
		}
	}
	for name := range prev.spokes {
		if _, ok := nextEnc.spokes[name]; !ok {
			p.Remove = append(p.Remove, name)
			changed = true
		}
	}
	slices.Sort(p.Remove)
	if prev.problem != next.Problem {
		p.Problem = &next.Problem
		changed = true
	}
	return p, changed
}

// fleetRun keeps the Fleet tab: after the Spokes' first list, it builds the tab, then rebuilds
// it when they change, batching what arrives within settle, as a scope does.
func (cl *cluster) fleetRun(ctx context.Context) {
	for !hasSynced(cl.spokes) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	cl.fleetRebuild()
	for {
		select {
		case <-ctx.Done():
			return
		case <-cl.fleetDirty:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(settle):
		}
		cl.fleetRebuild()
	}
}

// fleetChanged marks the Fleet tab for a rebuild.
func (cl *cluster) fleetChanged() {
	select {
	case cl.fleetDirty <- struct{}{}:
	default:
	}
}

// fleetRebuild builds the Fleet tab and sends every page what changed: the whole tab the first
// time and when the Spokes come to be served or stop being, else a patch.
func (cl *cluster) fleetRebuild() {
	now := cl.hub.opts.Clock.Now()
	served, problem := !cl.spokes.isAbsent(), cl.spokes.getProblem()
	if !served {
		problem = "" // not a hub: nothing to say
	}
	f := BuildFleet(served, objects[locksv1.Spoke](cl.spokes), problem)
	enc := encodeFleet(f)
	cl.mu.Lock()
	defer cl.mu.Unlock()
	full := frame(msgFleet, fleetMessage{Now: now, Fleet: f})
	var msg []byte
	switch {
	case cl.fleetFull == nil || cl.fleetLast.served != f.Served:
		msg = full
	default:
		p, changed := diffFleet(cl.fleetLast, f, enc, now)
		if changed {
			msg = frame(msgFleetPatch, p)
		}
	}
	cl.fleetFull, cl.fleetLast = full, enc
	if msg == nil {
		return
	}
	for s := range cl.subs {
		if !s.send(msg) {
			delete(cl.subs, s)
		}
	}
}
