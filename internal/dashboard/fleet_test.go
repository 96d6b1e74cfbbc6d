package dashboard

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	w "github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

// spokeObj is a Spoke as the hub's manager keeps it: connection, since, heartbeat (relative to
// now), and its Ready condition.
func spokeObj(name string, conn locksv1.SpokeConnection, since, heartbeat time.Duration, ready metav1.ConditionStatus, reason, msg string) *locksv1.Spoke {
	sp := &locksv1.Spoke{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Generation: 1}}
	sp.Status = locksv1.SpokeStatus{ObservedGeneration: 1, Connection: conn, Leases: 1,
		Conditions: []metav1.Condition{{Type: locksv1.ConditionReady, Status: ready, Reason: reason, Message: msg}}}
	if since != 0 {
		m := mt(since)
		sp.Status.ConnectionSince = &m
	}
	if heartbeat != 0 {
		m := mt(heartbeat)
		sp.Status.LastHeartbeat = &m
	}
	return sp
}

func TestBuildFleet(t *testing.T) {
	const unreachableMsg = "no hub Lease of spoke us-east-1 is live: its last renewal was at ..."
	connected := spokeObj("eu-west-1", locksv1.SpokeConnected, -12*24*time.Hour, -3*time.Second, metav1.ConditionTrue, locksv1.ReasonSpokeConnected, "spoke eu-west-1 renews its hub Leases (2)")
	connected.Spec.Labels = map[string]string{"region": "eu", "env": "prod"}
	connected.Status.ClockSkewMilliseconds = ptr.To[int64](42)
	connected.Status.AgentVersion = "v0.5.0"
	connected.Status.Holders, connected.Status.Waiters, connected.Status.Leases = 2, 5, 2
	unreachable := spokeObj("us-east-1", locksv1.SpokeUnreachable, -2*time.Minute, -2*time.Minute-54*time.Second, metav1.ConditionFalse, locksv1.ReasonSpokeUnreachable, unreachableMsg)
	unreachable.Status.Holders = 1
	unreachable.Status.Conditions = append(unreachable.Status.Conditions,
		metav1.Condition{Type: locksv1.ConditionStalled, Status: metav1.ConditionTrue, Reason: locksv1.ReasonSpokeUnreachable, Message: unreachableMsg})
	never := spokeObj("ap-south-1", locksv1.SpokeNever, 0, 0, metav1.ConditionFalse, locksv1.ReasonSpokeNeverConnected, "the agent of cluster ap-south-1 has not renewed a hub Lease yet")
	invalid := spokeObj("eu-north-1", locksv1.SpokeConnected, -time.Hour, -time.Second, metav1.ConditionTrue, locksv1.ReasonSpokeConnected, "renews")
	invalid.Status.Conditions = append(invalid.Status.Conditions,
		metav1.Condition{Type: locksv1.ConditionStalled, Status: metav1.ConditionTrue, Reason: "InvalidMember", Message: "the entry of cluster eu-north-1 cannot be read"})
	fresh := &locksv1.Spoke{ObjectMeta: metav1.ObjectMeta{Name: "new-1", UID: "uid-new-1", Generation: 1}}
	edited := spokeObj("eu-west-2", locksv1.SpokeConnected, -time.Hour, -time.Second, metav1.ConditionTrue, locksv1.ReasonSpokeConnected, "renews")
	edited.Generation = 2

	cases := map[string]struct {
		served  bool
		spokes  []*locksv1.Spoke
		problem string
		want    Fleet
	}{
		"not a hub: no Spokes served, nothing to say": {
			want: Fleet{Spokes: []SpokeRow{}},
		},
		"a hub without members": {
			served: true,
			want:   Fleet{Served: true, Spokes: []SpokeRow{}},
		},
		"a user who may not list Spokes is told so": {
			served: true, problem: "You may not list spokes (cluster-wide). The API server said: ...",
			want: Fleet{Served: true, Spokes: []SpokeRow{}, Problem: "You may not list spokes (cluster-wide). The API server said: ..."},
		},
		"connected, unreachable and never connected, by name, counted; why each is not Ready": {
			served: true, spokes: []*locksv1.Spoke{unreachable, connected, never},
			want: Fleet{Served: true, Summary: FleetSummary{Spokes: 3, Connected: 1, Unreachable: 1, Never: 1, Holders: 3, Waiters: 5}, Spokes: []SpokeRow{
				{Name: "ap-south-1", UID: "uid-ap-south-1", Labels: []string{}, Connection: "Never", Leases: 1, Ready: "False",
					Reason: locksv1.ReasonSpokeNeverConnected, Message: "the agent of cluster ap-south-1 has not renewed a hub Lease yet"},
				{Name: "eu-west-1", UID: "uid-eu-west-1", Labels: []string{"env=prod", "region=eu"}, Connection: "Connected",
					Since: at(-12 * 24 * time.Hour), Heartbeat: at(-3 * time.Second), SkewMilliseconds: ptr.To[int64](42), AgentVersion: "v0.5.0", Leases: 2, Holders: 2, Waiters: 5, Ready: "True"},
				{Name: "us-east-1", UID: "uid-us-east-1", Labels: []string{}, Connection: "Unreachable", Since: at(-2 * time.Minute), Heartbeat: at(-2*time.Minute - 54*time.Second),
					Leases: 1, Holders: 1, Ready: "False", Reason: locksv1.ReasonSpokeUnreachable, Message: unreachableMsg},
			}},
		},
		"a member entry the hub cannot read is said, though connected": {
			served: true, spokes: []*locksv1.Spoke{invalid},
			want: Fleet{Served: true, Summary: FleetSummary{Spokes: 1, Connected: 1}, Spokes: []SpokeRow{
				{Name: "eu-north-1", UID: "uid-eu-north-1", Labels: []string{}, Connection: "Connected", Since: at(-time.Hour), Heartbeat: at(-time.Second), Leases: 1,
					Ready: "True", Reason: "InvalidMember", Message: "the entry of cluster eu-north-1 cannot be read"},
			}},
		},
		"a Spoke the hub has not written yet is Unknown, counted in no connection": {
			served: true, spokes: []*locksv1.Spoke{fresh},
			want: Fleet{Served: true, Summary: FleetSummary{Spokes: 1}, Spokes: []SpokeRow{
				{Name: "new-1", UID: "uid-new-1", Labels: []string{}, Connection: "Unknown", Ready: "Unknown"},
			}},
		},
		"a status of an older generation is marked stale": {
			served: true, spokes: []*locksv1.Spoke{edited},
			want: Fleet{Served: true, Summary: FleetSummary{Spokes: 1, Connected: 1}, Spokes: []SpokeRow{
				{Name: "eu-west-2", UID: "uid-eu-west-2", Labels: []string{}, Connection: "Connected", Since: at(-time.Hour), Heartbeat: at(-time.Second), Leases: 1,
					Ready: "True", Stale: true},
			}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := BuildFleet(tc.served, tc.spokes, tc.problem)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestDiffFleet(t *testing.T) {
	eu := spokeObj("eu-west-1", locksv1.SpokeConnected, -time.Hour, -3*time.Second, metav1.ConditionTrue, locksv1.ReasonSpokeConnected, "renews")
	us := spokeObj("us-east-1", locksv1.SpokeConnected, -time.Hour, -5*time.Second, metav1.ConditionTrue, locksv1.ReasonSpokeConnected, "renews")
	usLost := spokeObj("us-east-1", locksv1.SpokeUnreachable, -time.Second, -45*time.Second, metav1.ConditionFalse, locksv1.ReasonSpokeUnreachable, "no hub Lease is live")
	ap := spokeObj("ap-south-1", locksv1.SpokeNever, 0, 0, metav1.ConditionFalse, locksv1.ReasonSpokeNeverConnected, "not yet")
	prev := BuildFleet(true, []*locksv1.Spoke{eu, us}, "")

	type summary struct {
		Upsert      []string
		Remove      []string
		Problem     *string
		Unreachable int
		Changed     bool
	}
	cases := map[string]struct {
		next Fleet
		want summary
	}{
		"nothing changed: no patch": {
			next: prev,
		},
		"a spoke went unreachable: only its row, and the summary": {
			next: BuildFleet(true, []*locksv1.Spoke{eu, usLost}, ""),
			want: summary{Upsert: []string{"us-east-1"}, Unreachable: 1, Changed: true},
		},
		"a member added and one removed": {
			next: BuildFleet(true, []*locksv1.Spoke{eu, ap}, ""),
			want: summary{Upsert: []string{"ap-south-1"}, Remove: []string{"us-east-1"}, Changed: true},
		},
		"the watch failed: the problem, rows kept": {
			next: BuildFleet(true, []*locksv1.Spoke{eu, us}, "Cannot list spokes (cluster-wide): connection refused"),
			want: summary{Problem: ptr.To("Cannot list spokes (cluster-wide): connection refused"), Changed: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p, changed := diffFleet(encodeFleet(prev), tc.next, encodeFleet(tc.next), now)
			got := summary{Remove: p.Remove, Problem: p.Problem, Unreachable: p.Summary.Unreachable, Changed: changed}
			for _, raw := range p.Upsert {
				var s SpokeRow
				if err := json.Unmarshal(raw, &s); err != nil {
					t.Fatal(err)
				}
				got.Upsert = append(got.Upsert, s.Name)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	t.Run("the problem cleared is sent as empty", func(t *testing.T) {
		failing := BuildFleet(true, []*locksv1.Spoke{eu, us}, "Cannot list spokes")
		p, changed := diffFleet(encodeFleet(failing), prev, encodeFleet(prev), now)
		if !changed || p.Problem == nil || *p.Problem != "" {
			t.Errorf("got changed=%v problem=%v, want the problem sent as \"\"", changed, p.Problem)
		}
		if b := mustJSON(p); !json.Valid(b) || !containsJSONKey(b, "problem") {
			t.Errorf("the patch does not carry the cleared problem: %s", b)
		}
	})
}

func containsJSONKey(b []byte, key string) bool {
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		return false
	}
	_, ok := m[key]
	return ok
}

// TestKeysNameTheirCluster: a spoke's holder and waiters carry their cluster, which the Fleet
// tab's "Show its requests" filters on.
func TestKeysNameTheirCluster(t *testing.T) {
	h := holderOf("alice", 0, "", 0, 0, "eu-1")
	h.Cluster = "eu-west-1"
	pl := w.MakeProjectLock(ns, vpc, vpcName).UID("pl-1").Token(3).Holder(h).
		Queue(1, locksv1.QueueEntry{Request: "us-1", Owner: "bob", Cluster: "us-east-1", Priority: locksv1.PriorityNormal}).Obj()
	reqs := []*locksv1.LockRequest{
		req("eu-1", vpc, "alice", 0).Cluster("eu-west-1").Status(holding(3, vpc)).Obj(),
		req("us-1", vpc, "bob", 0).Cluster("us-east-1").Status(waitingFor(1, -time.Minute, "queued", vpc)).Obj(),
		req("ap-1", vpc, "carol", 0).Cluster("ap-south-1").Obj(), // not placed yet
	}
	keys := Build(Input{Now: now, AgingStep: 10 * time.Minute, ProjectLocks: []*locksv1.ProjectLock{pl}, Requests: reqs}).Keys
	if len(keys) != 1 {
		t.Fatalf("got %d keys, want 1", len(keys))
	}
	got := []string{keys[0].Holder.Who + " @" + keys[0].Holder.Cluster}
	for _, wt := range keys[0].Queue {
		got = append(got, wt.Who+" @"+wt.Cluster)
	}
	want := []string{"alice in eu-west-1 @eu-west-1", "bob in us-east-1 @us-east-1", "carol in ap-south-1 @ap-south-1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestFleetMessages: a page that joins before the Spokes' first list gets the whole tab when it
// is built, one that joins after gets it on joining; then only changes are sent, as patches,
// and the whole tab again when the Spokes come to be served or stop being.
func TestFleetMessages(t *testing.T) {
	cl := &cluster{hub: &hub{opts: Options{Clock: clocktesting.NewFakePassiveClock(now)}}, subs: map[*subscriber]bool{},
		fleetDirty: make(chan struct{}, 1), spokes: &resourceWatch{resource: "spokes", absent: true}}
	events := func(s *subscriber) []string {
		var out []string
		for len(s.ch) > 0 {
			m := string(<-s.ch)
			event, data, _ := strings.Cut(strings.TrimPrefix(m, "event: "), "\ndata: ")
			var d map[string]any
			if err := json.Unmarshal([]byte(strings.TrimSpace(data)), &d); err != nil {
				t.Fatalf("%v: %q", err, m)
			}
			delete(d, "now")
			// Re-encoded: the keys in sorted order.
			out = append(out, event+" "+string(mustJSON(d)))
		}
		return out
	}
	early := newSubscriber()
	if _, fleet := cl.subscribe(early); fleet != nil {
		t.Errorf("before the first list a joining page got %s, want nothing yet", fleet)
	}
	const notServed = `{"served":false,"spokes":[],"summary":{"connected":0,"holders":0,"never":0,"spokes":0,"unreachable":0,"waiters":0}}`
	cl.fleetRebuild()
	if diff := cmp.Diff([]string{"fleet " + notServed}, events(early)); diff != "" {
		t.Errorf("the first build (-want +got):\n%s", diff)
	}
	late := newSubscriber()
	_, fleet := cl.subscribe(late)
	if !strings.HasPrefix(string(fleet), "event: fleet\n") || !strings.Contains(string(fleet), `"served":false`) {
		t.Errorf("a page joining after it got %q, want the whole tab", fleet)
	}
	cl.fleetRebuild()
	if got := events(early); len(got) != 0 {
		t.Errorf("nothing changed, yet the page got %v", got)
	}

	// Served, but the user may not list them: the whole tab again (Served changed).
	cl.spokes.absent = false
	cl.spokes.setProblem("You may not list spokes (cluster-wide).")
	cl.fleetRebuild()
	want := `{"problem":"You may not list spokes (cluster-wide).","served":true,"spokes":[],"summary":{"connected":0,"holders":0,"never":0,"spokes":0,"unreachable":0,"waiters":0}}`
	for name, s := range map[string]*subscriber{"early": early, "late": late} {
		if diff := cmp.Diff([]string{"fleet " + want}, events(s)); diff != "" {
			t.Errorf("%s page, served (-want +got):\n%s", name, diff)
		}
	}
	// The problem cleared: a patch that says so.
	cl.spokes.setProblem("")
	cl.fleetRebuild()
	if diff := cmp.Diff([]string{`fleetpatch {"problem":"","summary":{"connected":0,"holders":0,"never":0,"spokes":0,"unreachable":0,"waiters":0}}`}, events(late)); diff != "" {
		t.Errorf("the problem cleared (-want +got):\n%s", diff)
	}
}
