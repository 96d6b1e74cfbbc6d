package spoke

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

func grantedHub(uid string, token int64) *locksv1.LockRequest {
	return &locksv1.LockRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "eu-west-1.bob", UID: k8stypes.UID("uid-" + uid)},
		Status:     locksv1.LockRequestStatus{Phase: locksv1.PhaseGranted, FencingToken: token},
	}
}

func TestSameGrant(t *testing.T) {
	cached := grantedHub("a", 7)
	for _, tc := range []struct {
		name string
		live func(*locksv1.LockRequest)
		want bool
	}{
		{"the same grant", func(*locksv1.LockRequest) {}, true},
		{"the same grant, renewed (a later expiry)", func(l *locksv1.LockRequest) {
			l.Status.ExpiresAt = &metav1.Time{Time: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)}
		}, true},
		{"force-released by an admin (status not written yet)", func(l *locksv1.LockRequest) { l.Spec.Release = true }, false},
		{"released", func(l *locksv1.LockRequest) { l.Status.Phase = locksv1.PhaseReleased }, false},
		{"expired", func(l *locksv1.LockRequest) { l.Status.Phase = locksv1.PhaseExpired }, false},
		{"deleted and made anew under its name", func(l *locksv1.LockRequest) { l.UID = "uid-b" }, false},
		{"being deleted (its finalizer releases it)", func(l *locksv1.LockRequest) { l.DeletionTimestamp = &metav1.Time{Time: time.Now()} }, false},
		{"another grant (another token)", func(l *locksv1.LockRequest) { l.Status.FencingToken = 9 }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			live := cached.DeepCopy()
			tc.live(live)
			if got := SameGrant(cached, live); got != tc.want {
				t.Errorf("SameGrant = %v, want %v", got, tc.want)
			}
		})
	}
}

// liveAgent is an agent whose hub is srv, as far as liveGate goes, with namespace "team"'s
// renewals answered or not.
func liveAgent(t *testing.T, srv *httptest.Server, answered bool) *Agent {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := locksv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	hub, err := client.New(&rest.Config{Host: srv.URL}, client.Options{Scheme: scheme, Mapper: hubMapper()})
	if err != nil {
		t.Fatal(err)
	}
	return &Agent{hub: hub, clocks: map[string]*hubClock{"team": {tried: true, failing: !answered}},
		opts: Options{Cluster: "eu-west-1", Clock: clocktesting.NewFakeClock(liveNow)}}
}

// liveNow is the time of liveAgent's clock.
var liveNow = time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)

// liveGate lets a grant go only as the hub answers it, with the hub's live status; it never waits
// on a hub that does not answer renewals, nor longer than liveReadTimeout on one that does not
// answer the read, and never reads for a holder the spoke already shows.
func TestLiveGate(t *testing.T) {
	cached := grantedHub("a", 7)
	renewed := cached.DeepCopy()
	renewed.Status.ExpiresAt = &metav1.Time{Time: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)}
	pending := locksv1.LockRequestStatus{Phase: locksv1.PhasePending, QueuePosition: 1, BlockedBy: "alice"}
	// waiting is pending, waiting for the hub to confirm the grant, for the reason why.
	waiting := func(why string) locksv1.LockRequestStatus {
		return ConfirmingStatus(&locksv1.LockRequest{Status: pending}, cached, "eu-west-1", why, liveNow)
	}
	for _, tc := range []struct {
		name      string
		answered  bool // the hub answered the last renewal
		spoke     locksv1.LockRequestStatus
		serve     any   // the hub's answer to the read; nil: none (it hangs)
		wantReads int32 // reads of the hub
		want      locksv1.LockRequestStatus
		again     time.Duration
	}{
		{"the hub still holds the grant: let go with its live status", true, pending, renewed, 1, SpokeStatus(&locksv1.LockRequest{}, renewed), time.Minute},
		{"force-released on the hub: not let go", true, pending, func() *locksv1.LockRequest {
			l := cached.DeepCopy()
			l.Spec.Release = true
			return l
		}(), 1, waiting("the hub no longer holds it (this spoke's view of the hub lags)"), time.Second},
		{"deleted on the hub: not let go", true, pending, metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status: metav1.StatusFailure, Reason: metav1.StatusReasonNotFound, Code: http.StatusNotFound, Message: `lockrequests "eu-west-1.bob" not found`},
			1, waiting("the hub no longer holds it (its hub request is gone; this spoke's view of the hub lags)"), time.Second},
		{"the hub does not answer the read: not let go, within the timeout", true, pending, nil, 1, waiting("the hub did not answer its read within 1s"), time.Second},
		{"the hub does not answer renewals: not read, not let go", false, pending, renewed, 0, waiting("the hub is not answering this namespace's renewals"), time.Second},
		{"a holder the spoke shows runs on, not read again", true, SpokeStatus(&locksv1.LockRequest{}, cached), nil, 0, SpokeStatus(&locksv1.LockRequest{}, cached), time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var reads atomic.Int32
			done := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				reads.Add(1)
				if tc.serve == nil {
					select {
					case <-r.Context().Done():
					case <-done:
					}
					return
				}
				if st, ok := tc.serve.(metav1.Status); ok {
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(int(st.Code))
					_ = json.NewEncoder(w).Encode(st)
					return
				}
				lr := tc.serve.(*locksv1.LockRequest).DeepCopy()
				lr.APIVersion, lr.Kind = locksv1.GroupVersion.String(), "LockRequest"
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(lr)
			}))
			defer srv.Close()
			defer close(done)
			a := liveAgent(t, srv, tc.answered)
			spoke := &locksv1.LockRequest{Status: tc.spoke}
			start := time.Now()
			res, got := a.liveGate(t.Context(), spoke, cached, ctrl.Result{RequeueAfter: time.Minute}, SpokeStatus(spoke, cached))
			if took := time.Since(start); took > liveReadTimeout+500*time.Millisecond {
				t.Errorf("liveGate took %v, over its %v timeout", took, liveReadTimeout)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("status (-want +got):\n%s", d)
			}
			if res.RequeueAfter != tc.again {
				t.Errorf("looked at again after %v, want %v", res.RequeueAfter, tc.again)
			}
			if n := reads.Load(); n != tc.wantReads {
				t.Errorf("%d reads of the hub, want %d", n, tc.wantReads)
			}
		})
	}
}
