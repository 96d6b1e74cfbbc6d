package hub

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/fleet/spoke"
	"github.com/turnstile-dev/turnstile/internal/whoami"
	"github.com/turnstile-dev/turnstile/pkg/workdir"
)

var t0 = time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)

func at(d time.Duration) *metav1.Time { return &metav1.Time{Time: t0.Add(d)} }

func lease(ns string, renewed time.Duration, skew *time.Duration) LeaseView {
	return LeaseView{Namespace: ns, Renewed: t0.Add(renewed), Duration: 40 * time.Second, Skew: skew}
}

func TestStatusConnection(t *testing.T) {
	ms := func(n int) *time.Duration { d := time.Duration(n) * time.Millisecond; return &d }
	cases := map[string]struct {
		old            locksv1.SpokeStatus
		leases         []LeaseView
		now            time.Duration
		wantConnection locksv1.SpokeConnection
		wantSince      *metav1.Time
		wantHeartbeat  *metav1.Time
		wantSkew       *int64
		wantNext       time.Time
		wantReady      metav1.ConditionStatus
		wantStalled    metav1.ConditionStatus
		wantRecon      metav1.ConditionStatus
	}{
		"no Lease ever: Never, InProgress": {
			wantConnection: locksv1.SpokeNever, wantReady: metav1.ConditionFalse, wantStalled: metav1.ConditionFalse, wantRecon: metav1.ConditionTrue,
		},
		"a live Lease: Connected since its renewal, looked at again when it lapses": {
			leases: []LeaseView{lease(Namespace, 0, ms(42))}, now: 10 * time.Second,
			wantConnection: locksv1.SpokeConnected, wantSince: at(0), wantHeartbeat: at(0), wantSkew: ptr.To[int64](42),
			wantNext: t0.Add(40 * time.Second), wantReady: metav1.ConditionTrue, wantStalled: metav1.ConditionFalse, wantRecon: metav1.ConditionFalse,
		},
		"still Connected: the since of the old status stays": {
			old:    locksv1.SpokeStatus{Connection: locksv1.SpokeConnected, ConnectionSince: at(-time.Hour), LastHeartbeat: at(-10 * time.Second)},
			leases: []LeaseView{lease(Namespace, 0, nil)}, now: 10 * time.Second,
			wantConnection: locksv1.SpokeConnected, wantSince: at(-time.Hour), wantHeartbeat: at(0),
			wantNext: t0.Add(40 * time.Second), wantReady: metav1.ConditionTrue, wantStalled: metav1.ConditionFalse, wantRecon: metav1.ConditionFalse,
		},
		"one live Lease of two: Connected; the next look is the live one's lapse": {
			leases: []LeaseView{lease(Namespace, 0, nil), lease("team-a", -time.Minute, nil)}, now: 10 * time.Second,
			wantConnection: locksv1.SpokeConnected, wantSince: at(0), wantHeartbeat: at(0),
			wantNext: t0.Add(40 * time.Second), wantReady: metav1.ConditionTrue, wantStalled: metav1.ConditionFalse, wantRecon: metav1.ConditionFalse,
		},
		"a Lease at its very lapse is lapsed": {
			leases: []LeaseView{lease(Namespace, 0, nil)}, now: 40 * time.Second,
			wantConnection: locksv1.SpokeUnreachable, wantSince: at(40 * time.Second), wantHeartbeat: at(0),
			wantReady: metav1.ConditionFalse, wantStalled: metav1.ConditionTrue, wantRecon: metav1.ConditionFalse,
		},
		"every Lease lapsed: Unreachable since the last lapse": {
			leases: []LeaseView{lease(Namespace, 0, nil), lease("team-a", 5*time.Second, nil)}, now: time.Hour,
			wantConnection: locksv1.SpokeUnreachable, wantSince: at(45 * time.Second), wantHeartbeat: at(5 * time.Second),
			wantReady: metav1.ConditionFalse, wantStalled: metav1.ConditionTrue, wantRecon: metav1.ConditionFalse,
		},
		"still Unreachable: the since of the old status stays": {
			old:    locksv1.SpokeStatus{Connection: locksv1.SpokeUnreachable, ConnectionSince: at(30 * time.Second), LastHeartbeat: at(0)},
			leases: []LeaseView{lease(Namespace, 0, nil)}, now: time.Hour,
			wantConnection: locksv1.SpokeUnreachable, wantSince: at(30 * time.Second), wantHeartbeat: at(0),
			wantReady: metav1.ConditionFalse, wantStalled: metav1.ConditionTrue, wantRecon: metav1.ConditionFalse,
		},
		"its Leases deleted after it connected: Unreachable, not Never, since its heartbeat": {
			old:            locksv1.SpokeStatus{Connection: locksv1.SpokeConnected, ConnectionSince: at(0), LastHeartbeat: at(10 * time.Second), ClockSkewMilliseconds: ptr.To[int64](1)},
			now:            time.Minute,
			wantConnection: locksv1.SpokeUnreachable, wantSince: at(10 * time.Second), wantHeartbeat: at(10 * time.Second), wantSkew: ptr.To[int64](1),
			wantReady: metav1.ConditionFalse, wantStalled: metav1.ConditionTrue, wantRecon: metav1.ConditionFalse,
		},
		"the skew is the one on the latest renewal that carries one": {
			leases: []LeaseView{lease("team-a", 2*time.Second, ms(7)), lease(Namespace, time.Second, ms(300)), lease("team-b", 3*time.Second, nil)}, now: 10 * time.Second,
			wantConnection: locksv1.SpokeConnected, wantSince: at(3 * time.Second), wantHeartbeat: at(3 * time.Second), wantSkew: ptr.To[int64](7),
			wantNext: t0.Add(41 * time.Second), wantReady: metav1.ConditionTrue, wantStalled: metav1.ConditionFalse, wantRecon: metav1.ConditionFalse,
		},
		"sub-second renewals are kept in whole seconds, as the API server stores them": {
			leases: []LeaseView{lease(Namespace, 1500*time.Millisecond, nil)}, now: 10 * time.Second,
			wantConnection: locksv1.SpokeConnected, wantSince: at(time.Second), wantHeartbeat: at(time.Second),
			wantNext: t0.Add(41500 * time.Millisecond), wantReady: metav1.ConditionTrue, wantStalled: metav1.ConditionFalse, wantRecon: metav1.ConditionFalse,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			sp := &locksv1.Spoke{ObjectMeta: metav1.ObjectMeta{Name: "eu-west-1", Generation: 3}, Status: tc.old}
			got, next := Status(sp, Observation{Leases: tc.leases, Holders: 2, Waiters: 5}, t0.Add(tc.now))
			if got.Connection != tc.wantConnection {
				t.Errorf("connection %s, want %s", got.Connection, tc.wantConnection)
			}
			if diff := cmp.Diff(tc.wantSince, got.ConnectionSince); diff != "" {
				t.Errorf("connectionSince (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantHeartbeat, got.LastHeartbeat); diff != "" {
				t.Errorf("lastHeartbeat (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantSkew, got.ClockSkewMilliseconds); diff != "" {
				t.Errorf("clockSkew (-want +got):\n%s", diff)
			}
			if !next.Equal(tc.wantNext) {
				t.Errorf("next %s, want %s", next, tc.wantNext)
			}
			if got.Holders != 2 || got.Waiters != 5 || got.ObservedGeneration != 3 || got.Leases != int32(len(tc.leases)) {
				t.Errorf("counts %d/%d, leases %d, observedGeneration %d", got.Holders, got.Waiters, got.Leases, got.ObservedGeneration)
			}
			for typ, want := range map[string]metav1.ConditionStatus{locksv1.ConditionReady: tc.wantReady, locksv1.ConditionStalled: tc.wantStalled, locksv1.ConditionReconciling: tc.wantRecon} {
				c := meta.FindStatusCondition(got.Conditions, typ)
				if c == nil || c.Status != want || c.ObservedGeneration != 3 || c.Reason == "" {
					t.Errorf("condition %s: %+v, want status %s", typ, c, want)
				}
			}
		})
	}
}

func TestStatusInvalidMemberIsStalledNotReconciling(t *testing.T) {
	sp := &locksv1.Spoke{ObjectMeta: metav1.ObjectMeta{Name: "eu-west-1"}}
	got, _ := Status(sp, Observation{LabelsProblem: "bad"}, t0)
	stalled := meta.FindStatusCondition(got.Conditions, locksv1.ConditionStalled)
	if stalled.Status != metav1.ConditionTrue || stalled.Reason != ReasonInvalidMember || stalled.Message != "bad" {
		t.Errorf("stalled %+v", stalled)
	}
	if meta.IsStatusConditionTrue(got.Conditions, locksv1.ConditionReconciling) {
		t.Error("Reconciling is True beside Stalled: kstatus would read InProgress, not Failed")
	}
}

func TestViewLease(t *testing.T) {
	const cl = "eu-west-1"
	mk := func(change func(*coordinationv1.Lease)) *coordinationv1.Lease {
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "spoke-" + cl,
				Labels:      map[string]string{workdir.LabelRole: spoke.RoleSpoke, spoke.LabelCluster: cl},
				Annotations: map[string]string{whoami.AnnotationCreatedBy: "system:serviceaccount:turnstile-fleet:spoke-" + cl, spoke.AnnotationClockSkew: "0.250"}},
			Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: t0}, LeaseDurationSeconds: ptr.To(int32(40))},
		}
		if change != nil {
			change(l)
		}
		return l
	}
	skew := 250 * time.Millisecond
	cases := map[string]struct {
		lease  *coordinationv1.Lease
		want   LeaseView
		wantOK bool
	}{
		"the spoke's own": {lease: mk(nil), want: LeaseView{Namespace: "team-a", Renewed: t0, Duration: 40 * time.Second, Skew: &skew}, wantOK: true},
		"made by a certificate spoke (user named after its cluster)": {
			lease: mk(func(l *coordinationv1.Lease) { l.Annotations[whoami.AnnotationCreatedBy] = cl }),
			want:  LeaseView{Namespace: "team-a", Renewed: t0, Duration: 40 * time.Second, Skew: &skew}, wantOK: true,
		},
		"made by someone else under its name": {lease: mk(func(l *coordinationv1.Lease) { l.Annotations[whoami.AnnotationCreatedBy] = "mallory" })},
		"made by another spoke": {
			lease: mk(func(l *coordinationv1.Lease) {
				l.Annotations[whoami.AnnotationCreatedBy] = "system:serviceaccount:turnstile-fleet:spoke-us-east-1"
			}),
		},
		"no creator (the admission policies not installed)": {lease: mk(func(l *coordinationv1.Lease) { delete(l.Annotations, whoami.AnnotationCreatedBy) })},
		"another name":            {lease: mk(func(l *coordinationv1.Lease) { l.Name = "spoke-us-east-1" })},
		"another cluster's label": {lease: mk(func(l *coordinationv1.Lease) { l.Labels[spoke.LabelCluster] = "us-east-1" })},
		"never renewed":           {lease: mk(func(l *coordinationv1.Lease) { l.Spec.RenewTime = nil })},
		"the agent's version": {
			lease: mk(func(l *coordinationv1.Lease) { l.Annotations[spoke.AnnotationAgentVersion] = "v0.5.0" }),
			want:  LeaseView{Namespace: "team-a", Renewed: t0, Duration: 40 * time.Second, Skew: &skew, AgentVersion: "v0.5.0"}, wantOK: true,
		},
		"a version that is not one is not shown": {
			lease: mk(func(l *coordinationv1.Lease) { l.Annotations[spoke.AnnotationAgentVersion] = "v1\nConnected" }),
			want:  LeaseView{Namespace: "team-a", Renewed: t0, Duration: 40 * time.Second, Skew: &skew}, wantOK: true,
		},
		"an unreadable skew is no skew": {
			lease: mk(func(l *coordinationv1.Lease) { l.Annotations[spoke.AnnotationClockSkew] = "soon" }),
			want:  LeaseView{Namespace: "team-a", Renewed: t0, Duration: 40 * time.Second}, wantOK: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := ViewLease(cl, tc.lease)
			if ok != tc.wantOK {
				t.Fatalf("ok %v, want %v", ok, tc.wantOK)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseSkewReadsWhatTheAgentWrites(t *testing.T) {
	for _, d := range []time.Duration{0, time.Millisecond, 42 * time.Millisecond, 1999 * time.Millisecond, 2*time.Second + 400*time.Millisecond} {
		got, ok := ParseSkew(spoke.FormatSkew(d))
		if !ok || got != d {
			t.Errorf("FormatSkew(%s) = %q reads as %s, %v", d, spoke.FormatSkew(d), got, ok)
		}
	}
	for _, bad := range []string{"", "x", "-1", "1e9", "NaN"} {
		if _, ok := ParseSkew(bad); ok {
			t.Errorf("ParseSkew(%q) read", bad)
		}
	}
}

func TestParseAgentVersion(t *testing.T) {
	long := "v1." + strings.Repeat("0", 62)
	for in, want := range map[string]string{
		"v0.5.0": "v0.5.0", "v0.5.0-rc.1+build.7": "v0.5.0-rc.1+build.7", "(devel)": "(devel)",
		"v0.0.0-20261129170000-b1dbb78e0f1a": "v0.0.0-20261129170000-b1dbb78e0f1a", "0.5.0": "0.5.0",
		"": "", "v1 beta": "", "v1\nConnected": "", "<b>v1</b>": "", "(devel": "", "-v1": "", long: "", long[:64]: long[:64],
	} {
		if got := ParseAgentVersion(in); got != want {
			t.Errorf("ParseAgentVersion(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestStatusAgentVersion: the agent's version is the latest renewal's that carries one, kept
// while no Lease says one, and a connected spoke's Ready message names both versions only when
// they differ.
func TestStatusAgentVersion(t *testing.T) {
	v := func(ns string, renewed time.Duration, version string) LeaseView {
		l := lease(ns, renewed, nil)
		l.AgentVersion = version
		return l
	}
	cases := map[string]struct {
		old     string
		leases  []LeaseView
		hub     string
		want    string
		wantMsg string // in Ready's message; "" for no version note
	}{
		"the latest renewal's": {leases: []LeaseView{v("team-a", 3*time.Second, "v0.5.0"), v(Namespace, time.Second, "v0.4.0")}, hub: "v0.5.0", want: "v0.5.0"},
		"a renewal without one does not clear it": {
			leases: []LeaseView{v("team-a", 3*time.Second, ""), v(Namespace, time.Second, "v0.4.0")}, hub: "v0.5.0", want: "v0.4.0",
			wantMsg: "; its agent runs v0.4.0, the hub v0.5.0: run one version across the fleet",
		},
		"none yet: the old status's stays": {old: "v0.4.0", leases: []LeaseView{v(Namespace, time.Second, "")}, hub: "v0.4.0", want: "v0.4.0"},
		"no hub version: nothing compared": {leases: []LeaseView{v(Namespace, time.Second, "v0.4.0")}, want: "v0.4.0"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			sp := &locksv1.Spoke{ObjectMeta: metav1.ObjectMeta{Name: "eu-west-1"}, Status: locksv1.SpokeStatus{AgentVersion: tc.old}}
			got, _ := Status(sp, Observation{Leases: tc.leases, HubVersion: tc.hub}, t0.Add(10*time.Second))
			if got.AgentVersion != tc.want {
				t.Errorf("agentVersion %q, want %q", got.AgentVersion, tc.want)
			}
			ready := meta.FindStatusCondition(got.Conditions, locksv1.ConditionReady)
			if has := strings.Contains(ready.Message, "its agent runs"); has != (tc.wantMsg != "") || !strings.HasSuffix(ready.Message, tc.wantMsg) {
				t.Errorf("Ready message %q, want it to end with %q", ready.Message, tc.wantMsg)
			}
		})
	}
}

func TestMembers(t *testing.T) {
	got := Members(&corev1.ConfigMap{Data: map[string]string{"eu-west-1": `{"labels":{"region":"eu"}}`, "us-east-1": "{}", "ap-1": "", "bad": "region=eu"}})
	if diff := cmp.Diff(map[string]string{"region": "eu"}, got["eu-west-1"].Labels); diff != "" {
		t.Error(diff)
	}
	for _, name := range []string{"us-east-1", "ap-1"} {
		if m, ok := got[name]; !ok || m.Labels != nil || m.Problem != "" {
			t.Errorf("%s: %+v, %v", name, m, ok)
		}
	}
	if m, ok := got["bad"]; !ok || m.Problem == "" {
		t.Errorf("an unreadable entry is a member with a problem: %+v, %v", m, ok)
	}
	if len(Members(nil)) != 0 {
		t.Error("no ConfigMap, no members")
	}
}
