package queue

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

// renewedTo is w's request as the holder leaves it after changing spec.ttl to ttl: the spec is a
// generation ahead of the status the controller last wrote.
func renewedTo(w *wrappers.LockRequestWrapper, ttl time.Duration) *locksv1.LockRequest {
	lr := w.Obj()
	lr.Spec.TTL = &metav1.Duration{Duration: ttl}
	lr.Generation++
	return lr
}

func refusedMsg(ttl time.Duration) string {
	return "renewal refused: spec.ttl " + ttl.String() + " is over this operator's maximum of 2h0m0s; ask for at most 2h0m0s"
}

// A renewal (a change of spec.ttl while granted) runs the new ttl from the renewal, never beyond
// MaxTTL from it; a renewal over MaxTTL is refused and the grant keeps its expiresAt, as at
// creation such a ttl fails with reason Invalid. alice was granted at t0-5m for the default 30m,
// so her grant ends at t0+25m (hExpires) unless renewed.
func TestDecideRenewal(t *testing.T) {
	hExpires := t0.Add(25 * time.Minute)
	held := func(exp time.Time, suffix, event string) map[string]reqView {
		return map[string]reqView{"h": {Phase: locksv1.PhaseGranted, Reason: locksv1.ReasonGranted,
			Message: grantedMsg(key1, 41, exp) + suffix, Token: 41, Held: "1", True: trueGranted, Event: event}}
	}
	refusedHeld := func(exp time.Time, suffix, event string) map[string]reqView {
		v := held(exp, suffix, event)
		h := v["h"]
		h.Reason = locksv1.ReasonRenewalRefused
		v["h"] = h
		return v
	}
	aliceUntil := func(exp time.Time) *lockView {
		return &lockView{Holder: "pull #100 (alice)", Requests: []string{"h"}, Token: 41, Expires: exp}
	}
	h := aliceHolder().Obj()
	refused := renewedTo(aliceHolder(), 3*time.Hour)
	longDefault := testConfig()
	longDefault.DefaultTTL = time.Hour
	priorityOnly := aliceHolder().Obj()
	priorityOnly.Spec.Priority = locksv1.PriorityHigh
	priorityOnly.Generation++

	// renewal is a renewal of alice's grant to ttl, which then holds until exp.
	renewal := func(ttl time.Duration, exp time.Time) decideCase {
		return decideCase{
			lock:        aliceLock(h),
			reqs:        []*locksv1.LockRequest{renewedTo(aliceHolder(), ttl)},
			wantHolder:  "alice#100",
			wantLock:    aliceUntil(exp),
			wantGrant:   held(exp, "", locksv1.ReasonRenewed),
			wantRequeue: untilFromNow(exp),
		}
	}
	// refusal is a renewal of alice's grant to ttl (over MaxTTL) that is refused.
	refusal := func(renewed *locksv1.LockRequest, ttl time.Duration) decideCase {
		return decideCase{
			lock:        aliceLock(h),
			reqs:        []*locksv1.LockRequest{renewed},
			wantHolder:  "alice#100",
			wantGrant:   refusedHeld(hExpires, "; "+refusedMsg(ttl), locksv1.ReasonInvalid),
			wantRequeue: untilFromNow(hExpires),
		}
	}
	late := renewal(35*time.Minute, hExpires.Add(36*time.Minute))
	late.now, late.wantRequeue = hExpires.Add(time.Minute), 35*time.Minute

	runDecideCases(t, map[string]decideCase{
		"a renewal runs the new ttl from the renewal, not from grantedAt":              renewal(35*time.Minute, t0.Add(35*time.Minute)),
		"a renewal to exactly MaxTTL reaches MaxTTL from the renewal":                  renewal(2*time.Hour, t0.Add(2*time.Hour)),
		"lowering spec.ttl shortens the grant, counted from the renewal":               renewal(10*time.Minute, t0.Add(10*time.Minute)),
		"a renewal over MaxTTL is refused (Invalid) and the grant keeps its expiresAt": refusal(refused, 3*time.Hour),
		"a renewal over MaxTTL by a holder of 24h is refused too (the bypass)":         refusal(renewedTo(aliceHolder(), 24*time.Hour), 24*time.Hour),
		"a grant whose renewal was refused expires at its old expiresAt": {
			now:      hExpires,
			lock:     aliceLock(h),
			reqs:     []*locksv1.LockRequest{refused},
			wantLock: &lockView{Token: 41},
			wantFinish: map[string]reqView{"h": {Phase: locksv1.PhaseExpired, Reason: locksv1.ReasonExpired,
				Message: "the grant expired at 2026-03-01T12:25:00Z (" + refusedMsg(3*time.Hour) + ")",
				Token:   41, Held: "0", True: trueEnded, Event: locksv1.ReasonExpired}},
		},
		"a renewal seen after expiresAt but before the grant was ended still counts": late,
		"a spec change that leaves spec.ttl alone renews nothing": {
			lock:        aliceLock(h),
			reqs:        []*locksv1.LockRequest{priorityOnly},
			wantHolder:  "alice#100",
			wantGrant:   held(hExpires, "", ""), // observedGeneration only
			wantRequeue: untilFromNow(hExpires),
		},
		"a new default ttl does not move a grant made under the old one": {
			cfg:         &longDefault,
			lock:        aliceLock(h),
			reqs:        []*locksv1.LockRequest{h},
			wantHolder:  "alice#100",
			wantRequeue: untilFromNow(hExpires),
		},
	})
}

// A holder that keeps renewing keeps its lock past grantedAt + MaxTTL, but no expiresAt is ever
// more than MaxTTL after the grant or the renewal it counts from, a refused renewal changes
// nothing once reported, and every step is a fixed point.
func TestDecideRenewalSequence(t *testing.T) {
	cfg := testConfig()
	w := newWorld(t)
	w.add(makeReq("a").Owner("alice", 100).TTL(2 * time.Hour).Obj())

	type step struct {
		at          time.Duration // after t0
		ttl         time.Duration // renew to this ttl first; 0: no renewal
		wantPhase   locksv1.LockRequestPhase
		wantRenewed time.Duration // status.renewedAt after t0; -1: unset
		wantExpires time.Duration // status.expiresAt after t0
		wantEvent   string
	}
	steps := []step{
		{at: 0, wantPhase: locksv1.PhaseGranted, wantRenewed: -1, wantExpires: 2 * time.Hour, wantEvent: locksv1.ReasonGranted},
		{at: 90 * time.Minute, ttl: 119 * time.Minute, wantPhase: locksv1.PhaseGranted, wantRenewed: 90 * time.Minute, wantExpires: 209 * time.Minute, wantEvent: locksv1.ReasonRenewed},
		{at: 100 * time.Minute, ttl: 5 * time.Hour, wantPhase: locksv1.PhaseGranted, wantRenewed: 90 * time.Minute, wantExpires: 209 * time.Minute, wantEvent: locksv1.ReasonInvalid},
		{at: 150 * time.Minute, wantPhase: locksv1.PhaseGranted, wantRenewed: 90 * time.Minute, wantExpires: 209 * time.Minute},
		{at: 200 * time.Minute, ttl: time.Hour, wantPhase: locksv1.PhaseGranted, wantRenewed: 200 * time.Minute, wantExpires: 260 * time.Minute, wantEvent: locksv1.ReasonRenewed},
		{at: 260 * time.Minute, wantPhase: locksv1.PhaseExpired, wantRenewed: 200 * time.Minute, wantExpires: 260 * time.Minute, wantEvent: locksv1.ReasonExpired},
	}
	for _, s := range steps {
		at := t0.Add(s.at)
		if s.ttl > 0 {
			a := w.get("a")
			a.Spec.TTL = &metav1.Duration{Duration: s.ttl}
			a.Generation++
		}
		d := w.decide(name1, at, cfg)
		a := w.get("a")
		var events []string
		for _, u := range append(append([]Update{}, d.Finish...), d.Grant...) {
			if u.Event != nil {
				events = append(events, u.Event.Reason)
			}
		}
		var wantEvents []string
		if s.wantEvent != "" {
			wantEvents = []string{s.wantEvent}
		}
		got := struct {
			Phase            locksv1.LockRequestPhase
			Renewed, Expires time.Duration
			Events           []string
		}{a.Status.Phase, -1, a.Status.ExpiresAt.Sub(t0), events}
		if r := a.Status.RenewedAt; r != nil {
			got.Renewed = r.Sub(t0)
		}
		want := got
		want.Phase, want.Renewed, want.Expires, want.Events = s.wantPhase, s.wantRenewed, s.wantExpires, wantEvents
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("at t0+%s (-want +got):\n%s", s.at, diff)
		}
		base := a.Status.GrantedAt.Time
		if a.Status.RenewedAt != nil {
			base = a.Status.RenewedAt.Time
		}
		if a.Status.ExpiresAt.Sub(base) > cfg.MaxTTL {
			t.Errorf("at t0+%s: expiresAt %s is more than MaxTTL %s after %s", s.at, a.Status.ExpiresAt.UTC(), cfg.MaxTTL, base.UTC())
		}
		if l := w.locks[name1].Status.Holder; a.Status.Phase == locksv1.PhaseGranted && (l == nil || !l.ExpiresAt.Equal(a.Status.ExpiresAt)) {
			t.Errorf("at t0+%s: ProjectLock holder %+v, want expiresAt %s", s.at, l, a.Status.ExpiresAt.UTC())
		}
		if again := w.decide(name1, at, cfg); !empty(again) {
			t.Fatalf("at t0+%s: deciding again writes:\n%s", s.at, describeDecision(again))
		}
	}
}

// A request holding two keys is renewed once: the first key to see the renewal writes it, the
// other then takes the same expiresAt for its ProjectLock instead of renewing again.
func TestDecideRenewalTwoKeys(t *testing.T) {
	cfg := testConfig()
	w := newWorld(t)
	w.add(makeReq("m").Owner("alice", 100).Targets(tgt1, tgt2).TTL(30 * time.Minute).Obj())
	w.decide(name1, t0, cfg)
	w.decide(name2, t0, cfg)
	if m := w.get("m"); m.Status.Phase != locksv1.PhaseGranted {
		t.Fatalf("not granted: %s", m.Status.Phase)
	}

	m := w.get("m")
	m.Spec.TTL = &metav1.Duration{Duration: time.Hour}
	m.Generation++
	at := t0.Add(10 * time.Minute)
	want := t0.Add(70 * time.Minute)
	d1 := w.decide(name1, at.Add(time.Second), cfg)
	d2 := w.decide(name2, at.Add(2*time.Second), cfg)

	m = w.get("m")
	if m.Status.RenewedAt == nil || !m.Status.RenewedAt.Equal(&metav1.Time{Time: at.Add(time.Second)}) || !m.Status.ExpiresAt.Time.Equal(want.Add(time.Second)) {
		t.Errorf("renewedAt %v, expiresAt %v; want %v and %v", m.Status.RenewedAt, m.Status.ExpiresAt.UTC(), at.Add(time.Second), want.Add(time.Second))
	}
	if len(d1.Grant) != 1 || d1.Grant[0].Event == nil || d1.Grant[0].Event.Reason != locksv1.ReasonRenewed {
		t.Errorf("first key: want one Renewed grant update:\n%s", describeDecision(d1))
	}
	if len(d2.Grant) != 0 {
		t.Errorf("second key renewed again:\n%s", describeDecision(d2))
	}
	for _, n := range []string{name1, name2} {
		if h := w.locks[n].Status.Holder; h == nil || !h.ExpiresAt.Equal(m.Status.ExpiresAt) {
			t.Errorf("ProjectLock %s holder %+v, want expiresAt %s", n, h, m.Status.ExpiresAt.UTC())
		}
	}
}
