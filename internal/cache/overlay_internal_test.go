package cache

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

var keyK1 = types.NamespacedName{Namespace: "ns", Name: "k1"}

// lrAt is request a at resourceVersion rv, its status only a phase.
func lrAt(rv string, phase locksv1.LockRequestPhase) *locksv1.LockRequest {
	return wrappers.MakeLockRequest("a", "ns").UID("uid-a").ResourceVersion(rv).
		Status(locksv1.LockRequestStatus{Phase: phase}).Obj()
}

func TestOverlayRequest(t *testing.T) {
	now := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	cases := map[string]struct {
		cachedRV  string
		wantRV    string
		wantPhase locksv1.LockRequestPhase
	}{
		"cache still shows the version our write replaced: use ours": {cachedRV: "10", wantRV: "11", wantPhase: locksv1.PhaseGranted},
		"cache caught up with our write":                             {cachedRV: "11", wantRV: "11", wantPhase: locksv1.PhaseGranted},
		"someone wrote after us: the cache wins":                     {cachedRV: "12", wantRV: "12", wantPhase: locksv1.PhaseReleased},
		"cache several writes behind ours: still ours":               {cachedRV: "9", wantRV: "11", wantPhase: locksv1.PhaseGranted},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := NewOverlay()
			o.WroteRequest(lrAt("11", locksv1.PhaseGranted), keyK1, now)
			phase := map[string]locksv1.LockRequestPhase{"9": locksv1.PhasePending, "10": locksv1.PhasePending, "11": locksv1.PhaseGranted, "12": locksv1.PhaseReleased}[tc.cachedRV]
			got := o.Request(lrAt(tc.cachedRV, phase))
			if got.ResourceVersion != tc.wantRV || got.Status.Phase != tc.wantPhase {
				t.Errorf("request() = rv %s phase %s, want rv %s phase %s", got.ResourceVersion, got.Status.Phase, tc.wantRV, tc.wantPhase)
			}
			if kept := len(o.requests) != 0; kept != (tc.cachedRV != "12") {
				t.Errorf("memory kept = %v: it should last until the cache moves past our write", kept)
			}
		})
	}
}

// Hole 2 of issue #12: two writes in a row over a cache that shows neither. The second write is
// made over the first (the overlay's own version), and the cache still holds the version
// before both: the latest write must be served, not the stale cache.
func TestOverlayRemembersWritesOverItsOwn(t *testing.T) {
	now := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	o := NewOverlay()
	cached := lrAt("10", locksv1.PhasePending)
	o.WroteRequest(lrAt("11", locksv1.PhasePending), keyK1, now) // held the first key
	first := o.Request(cached)
	o.WroteRequest(lrAt("12", locksv1.PhaseGranted), keyK1, now) // written over `first`
	if first.ResourceVersion != "11" {
		t.Fatalf("after one write, request() = rv %s, want 11", first.ResourceVersion)
	}
	if got := o.Request(cached); got.ResourceVersion != "12" || got.Status.Phase != locksv1.PhaseGranted {
		t.Errorf("after two writes over cached rv 10, request() = rv %s %s, want our latest 12 Granted", got.ResourceVersion, got.Status.Phase)
	}

	pl := &locksv1.ProjectLock{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "k", UID: "uid-k", ResourceVersion: "20"}}
	for _, rv := range []string{"21", "22"} {
		w := pl.DeepCopy()
		w.ResourceVersion = rv
		o.WroteProjectLock(w, now)
	}
	if got := o.ProjectLock(pl); got.ResourceVersion != "22" {
		t.Errorf("after two ProjectLock writes over cached rv 20, lock() = rv %s, want 22", got.ResourceVersion)
	}
}

func TestOverlayForgetsFailedWritesAndOldMemories(t *testing.T) {
	now := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	o := NewOverlay()
	o.WroteRequest(lrAt("11", locksv1.PhaseGranted), keyK1, now)
	o.ForgetRequest("uid-a")
	if got := o.Request(lrAt("10", locksv1.PhasePending)); got.ResourceVersion != "10" {
		t.Errorf("a forgotten write must not be overlaid, got rv %s", got.ResourceVersion)
	}

	pl := &locksv1.ProjectLock{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "k", UID: "uid-k", ResourceVersion: "21"}}
	o.WroteProjectLock(pl, now)
	stale := pl.DeepCopy()
	stale.ResourceVersion = "20"
	if got := o.ProjectLock(stale); got.ResourceVersion != "21" {
		t.Errorf("lock() = rv %s, want our write 21", got.ResourceVersion)
	}
	recreated := stale.DeepCopy()
	recreated.UID = "uid-other"
	o.WroteProjectLock(pl, now)
	if got := o.ProjectLock(recreated); got.UID != "uid-other" {
		t.Errorf("a re-created ProjectLock must not be overlaid by the old one's write")
	}

	last := lrAt("30", locksv1.PhaseGranted)
	last.UID, last.Status.FencingToken = "uid-gone", 77
	o.SawDeleted("uid-gone", last, now)
	o.SawDeleted("uid-tombstone", nil, now)
	if gone, token, known := o.Deleted("uid-gone"); !gone || token != 77 || !known {
		t.Errorf("isDeleted(uid-gone) = %v %d %v, want true 77 true", gone, token, known)
	}
	if gone, _, known := o.Deleted("uid-tombstone"); !gone || known {
		t.Errorf("a tombstone's deletion is known, its token is not: got %v %v", gone, known)
	}
	if gone, _, _ := o.Deleted("uid-a"); gone {
		t.Errorf("isDeleted(uid-a) = true")
	}
	o.WroteProjectLock(pl, now.Add(overlayTTL+2*time.Second)) // sweeps
	if gone, _, _ := o.Deleted("uid-gone"); gone {
		t.Errorf("deletions should be forgotten after %s", overlayTTL)
	}
	if _, ok := o.locks[types.NamespacedName{Namespace: "ns", Name: "k"}]; !ok {
		t.Errorf("the fresh write must survive the sweep")
	}
}
