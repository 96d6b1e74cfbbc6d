package why

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// TestExplainCommandLockInAFleet: why says whether a CommandLock's cluster scope holds the
// request's cluster, and in a spoke that the freeze is the hub's, as last seen when.
func TestExplainCommandLockInAFleet(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	cl := func(scope *locksv1.ClusterScope, mirror bool, seen time.Time) *locksv1.CommandLock {
		c := &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: "apply"}, Spec: locksv1.CommandLockSpec{Locked: true, Reason: "weekend", Clusters: scope}}
		if mirror {
			c.Labels = map[string]string{locksv1.LabelMirror: locksv1.MirrorHub}
			c.Annotations = map[string]string{locksv1.AnnotationMirrorCluster: "eu-west-1"}
			if !seen.IsZero() {
				c.Annotations[locksv1.AnnotationHubSeenAt] = seen.Format(time.RFC3339)
			}
		}
		return c
	}
	req := func(cluster, blockedBy string) *locksv1.LockRequest {
		lr := &locksv1.LockRequest{Spec: locksv1.LockRequestSpec{Command: "apply", Holder: locksv1.Holder{Owner: "alice", Cluster: cluster}}}
		lr.Status.BlockedBy = blockedBy
		return lr
	}
	eu := &locksv1.ClusterScope{Names: []string{"eu-west-1"}}
	byLabel := &locksv1.ClusterScope{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"region": "eu"}}}
	for name, tc := range map[string]struct {
		cl   *locksv1.CommandLock
		lr   *locksv1.LockRequest
		want string
	}{
		"unscoped, on the hub": {cl: cl(nil, false, time.Time{}), lr: req("", ""),
			want: "  commandlock/apply freezes it: weekend\n"},
		"named cluster, on the hub": {cl: cl(eu, false, time.Time{}), lr: req("eu-west-1", ""),
			want: "  commandlock/apply freezes it (it freezes clusters eu-west-1; cluster eu-west-1 is one): weekend\n"},
		"another cluster, on the hub": {cl: cl(eu, false, time.Time{}), lr: req("us-east-1", ""),
			want: "  commandlock/apply does not freeze it: it freezes clusters eu-west-1, not cluster us-east-1\n"},
		"the hub's own request": {cl: cl(eu, false, time.Time{}), lr: req("", ""),
			want: "  commandlock/apply does not freeze it: it freezes clusters eu-west-1, and this request was made in the hub, in no cluster\n"},
		"a selector the hub judged": {cl: cl(byLabel, false, time.Time{}), lr: req("eu-west-1", "commandlock/apply"),
			want: "  commandlock/apply freezes it (it freezes clusters labelled region=eu; cluster eu-west-1 is one): weekend\n"},
		"a selector not yet judged": {cl: cl(byLabel, false, time.Time{}), lr: req("eu-west-1", ""),
			want: "  commandlock/apply freezes clusters labelled region=eu: weekend; whether cluster eu-west-1 is one is the hub's to judge, by the labels it gives its members (the request's status says the hub's verdict)\n"},
		"in a spoke, the mirror names the spoke's cluster, seen lately": {cl: cl(eu, true, now.Add(-40*time.Second)), lr: req("", ""),
			want: "  commandlock/apply freezes it (it freezes clusters eu-west-1; cluster eu-west-1 is one): weekend\n" +
				"    the hub's CommandLock, as last seen from the hub at 2026-11-28T11:59:20Z\n"},
		"in a spoke cut off from the hub": {cl: cl(nil, true, now.Add(-10*time.Minute)), lr: req("", ""),
			want: "  commandlock/apply freezes it: weekend\n" +
				"    the hub's CommandLock, as last seen from the hub at 2026-11-28T11:50:00Z (10m0s ago): this spoke has not heard from the hub since, so this is the freeze as it was then; nothing new is granted here until it hears again\n"},
		"in a spoke, not yet dated": {cl: cl(nil, true, time.Time{}), lr: req("", ""),
			want: "  commandlock/apply freezes it: weekend\n" +
				"    the hub's CommandLock, mirrored in this spoke (not yet dated: the agent has not read the hub since it started)\n"},
	} {
		var out bytes.Buffer
		explainCommandLock(&out, tc.lr, tc.cl, now)
		if diff := cmp.Diff(tc.want, out.String()); diff != "" {
			t.Errorf("%s: (-want +got)\n%s", name, diff)
		}
	}
}
