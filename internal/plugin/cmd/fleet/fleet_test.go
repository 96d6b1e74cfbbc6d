package fleet

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

func TestPrint(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: now.Add(-d)} }
	cond := func(typ string, s metav1.ConditionStatus, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg}
	}
	spokes := []locksv1.Spoke{
		{ObjectMeta: metav1.ObjectMeta{Name: "us-east-1"}, Status: locksv1.SpokeStatus{
			Connection: locksv1.SpokeUnreachable, ConnectionSince: ago(2 * time.Minute), LastHeartbeat: ago(160 * time.Second),
			ClockSkewMilliseconds: ptr.To[int64](110), Holders: 1, KeepRunning: 1, AgentVersion: "v0.4.1",
			Conditions: []metav1.Condition{
				cond(locksv1.ConditionReady, metav1.ConditionFalse, locksv1.ReasonSpokeUnreachable, "no hub Lease of spoke us-east-1 is live"),
				cond(locksv1.ConditionStalled, metav1.ConditionTrue, locksv1.ReasonSpokeUnreachable, "no hub Lease of spoke us-east-1 is live"),
			}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "eu-west-1"}, Status: locksv1.SpokeStatus{
			Connection: locksv1.SpokeConnected, ConnectionSince: ago(12 * 24 * time.Hour), LastHeartbeat: ago(3 * time.Second),
			ClockSkewMilliseconds: ptr.To[int64](42), Holders: 2, Waiters: 5, KeepRunning: 1, AgentVersion: "v0.5.0",
			Conditions: []metav1.Condition{cond(locksv1.ConditionReady, metav1.ConditionTrue, locksv1.ReasonSpokeConnected, "renews")}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "ap-south-1"}, Status: locksv1.SpokeStatus{
			Connection: locksv1.SpokeNever,
			Conditions: []metav1.Condition{
				cond(locksv1.ConditionReady, metav1.ConditionFalse, locksv1.ReasonSpokeNeverConnected, "the agent of cluster ap-south-1 has not renewed a hub Lease yet"),
				cond(locksv1.ConditionStalled, metav1.ConditionTrue, "InvalidMember", "the entry of cluster ap-south-1 is not a JSON object"),
			}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "new-1"}},
	}
	var out strings.Builder
	if err := Print(&out, spokes, now); err != nil {
		t.Fatal(err)
	}
	want := `CLUSTER     CONNECTION   SINCE    HEARTBEAT  SKEW    HOLDERS  WAITERS  KEEP-RUNNING  AGENT   READY
ap-south-1  Never        -        -          -       0        0        0             -       False
eu-west-1   Connected    12d ago  3s ago     0.042s  2        5        1             v0.5.0  True
new-1       Unknown      -        -          -       0        0        0             -       Unknown
us-east-1   Unreachable  2m ago   2m40s ago  0.110s  1        0        1             v0.4.1  False

4 spokes: 1 connected, 1 unreachable, 1 never connected; 3 holders (2 keep-running), 5 waiters.
2 agent versions: v0.4.1 on us-east-1; v0.5.0 on eu-west-1.
us-east-1: 1 held while cut off, keep-running: held until released in the spoke, or here by an admin (kubectl turnstile release -n NAMESPACE --cluster us-east-1 NAME)
ap-south-1: NeverConnected: the agent of cluster ap-south-1 has not renewed a hub Lease yet
ap-south-1: InvalidMember: the entry of cluster ap-south-1 is not a JSON object
us-east-1: Unreachable: no hub Lease of spoke us-east-1 is live
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if spokes[0].Name != "us-east-1" {
		t.Error("Print sorted its caller's slice")
	}
}

func TestPrintNoSpokes(t *testing.T) {
	var out strings.Builder
	if err := Print(&out, nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "No spokes") {
		t.Errorf("%q", out.String())
	}
}
