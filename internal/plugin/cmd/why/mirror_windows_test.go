package why

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// TestExplainMirrorWindows: in a spoke, why names a mirrored CommandLock whose windows freeze
// the request, with the window's message and whether the spoke judged it by its own clock; a
// request the spoke holds back says so under its header.
func TestExplainMirrorWindows(t *testing.T) {
	until := metav1.NewTime(time.Date(2026, 11, 28, 12, 0, 30, 0, time.UTC))
	mirror := func(scope *locksv1.ClusterScope, labels string, judgedInSpoke bool) *locksv1.CommandLock {
		cl := &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: "apply",
			Labels:      map[string]string{locksv1.LabelMirror: locksv1.MirrorHub},
			Annotations: map[string]string{locksv1.AnnotationMirrorCluster: "eu-west-1"}}}
		if labels != "" {
			cl.Annotations[locksv1.AnnotationMirrorClusterLabels] = labels
		}
		cl.Status.Windows = []locksv1.FreezeWindowStatus{{Name: "weekend", Action: locksv1.WindowDeny, State: locksv1.WindowOpen,
			NextTransition: &until, WindowScope: locksv1.WindowScope{Clusters: scope}}}
		if judgedInSpoke {
			cl.Status.Conditions = []metav1.Condition{{Type: locksv1.ConditionJudgedInSpoke, Status: metav1.ConditionTrue,
				Reason: locksv1.ReasonHubJudgementOutdated, Message: "judged in this spoke (cluster eu-west-1) by its own clock: the hub's judgement ran out at 2026-11-28T12:00:00Z"}}
		}
		return cl
	}
	lr := &locksv1.LockRequest{Spec: locksv1.LockRequestSpec{Command: "apply", Holder: locksv1.Holder{Owner: "alice"},
		Locks: []locksv1.LockTarget{{Repo: "acme/infra", Path: "vpc", Workspace: "default"}}}}
	const frozen = "  Apply commands are frozen by window weekend of commandlock apply: Deny window in force until 2026-11-28T12:00:30Z\n"
	eu := &locksv1.ClusterScope{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"region": "eu"}}}
	for name, tc := range map[string]struct {
		cl   *locksv1.CommandLock
		want string
	}{
		"judged in the spoke": {cl: mirror(nil, "", true),
			want: frozen + "    judged in this spoke (cluster eu-west-1) by its own clock: the hub's judgement ran out at 2026-11-28T12:00:00Z\n"},
		"as the hub judged it": {cl: mirror(nil, "", false),
			want: frozen + "    as the hub judged the windows (the hub's CommandLock, mirrored in this spoke)\n"},
		"a window for this cluster by name": {cl: mirror(&locksv1.ClusterScope{Names: []string{"eu-west-1"}}, "", false),
			want: frozen + "    as the hub judged the windows (the hub's CommandLock, mirrored in this spoke)\n"},
		"a window for another cluster: nothing to say":       {cl: mirror(&locksv1.ClusterScope{Names: []string{"us-east-1"}}, "", true)},
		"a window for the EU, this spoke labelled region=us": {cl: mirror(eu, `{"region":"us"}`, true)},
		"a window for the EU, this spoke's labels unknown: it may freeze (fail safe)": {cl: mirror(eu, "", false),
			want: frozen + "    as the hub judged the windows (the hub's CommandLock, mirrored in this spoke)\n"},
	} {
		var out bytes.Buffer
		explainMirrorWindows(&out, lr, tc.cl)
		if diff := cmp.Diff(tc.want, out.String()); diff != "" {
			t.Errorf("%s: (-want +got)\n%s", name, diff)
		}
	}

	held := lr.DeepCopy()
	held.Name = "job-rollout"
	held.Status.Phase = locksv1.PhasePending
	held.Status.Conditions = []metav1.Condition{{Type: locksv1.ConditionGranted, Status: metav1.ConditionFalse, Reason: locksv1.ReasonFrozenInSpoke,
		Message: "granted by the hub, but not let go in this spoke (cluster eu-west-1) while its freezes, as it judges them by its own clock, hold it: …"}}
	var out bytes.Buffer
	explainHeader(&out, held, false)
	want := "lockrequest/job-rollout for alice, command apply: Pending (FrozenInSpoke)\n" +
		"  granted by the hub, but not let go in this spoke (cluster eu-west-1) while its freezes, as it judges them by its own clock, hold it: …\n"
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("header: (-want +got)\n%s", diff)
	}
}
