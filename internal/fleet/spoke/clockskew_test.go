package spoke_test

import (
	"context"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/fleet/skew"
	"github.com/turnstile-dev/turnstile/internal/fleet/spoke"
)

// aheadClock is the real clock, ahead by d: a spoke's broken clock (its timers and durations
// run as the real ones do).
type aheadClock struct {
	clock.RealClock
	d time.Duration
}

func (c aheadClock) Now() time.Time                  { return time.Now().Add(c.d) }
func (c aheadClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// TestClockSkewTooLargeGivesTheGrantBack runs a spoke whose clock is 10 s ahead of the hub's
// (the hub API server's Date), over --max-clock-skew 2s. The hub grants its request; the spoke
// never lets it go (it cannot tell when the hub hands its locks on), and gives the grant back:
// the spoke request is final (Released) with reason ClockSkewTooLarge, saying the measured bound,
// the flag and what to do, and its hub request is released, so the key passes on in the fleet
// (a hub user's request of it is granted) instead of staying held while the clock is broken.
func TestClockSkewTooLargeGivesTheGrantBack(t *testing.T) {
	const ns, name = "team-skewed", "skewed-1"
	t.Parallel()
	spk := fleet(t, ns)
	g := gomega.NewWithT(t)
	ctx := context.Background()
	settings := skew.Settings{Lease: 20 * time.Second, Grace: 3 * time.Second, MaxSkew: 2 * time.Second}
	m := spk.startAgent(t, spoke.Options{Cluster: name, Hub: rest.CopyConfig(hub.Config), Settings: settings, Clock: aheadClock{d: 10 * time.Second}}, nil)
	defer func() { _ = m.Stop() }()

	never := spk.neverGranted(t, ns, "bob-apply")
	g.Expect(spk.Client.Create(ctx, request(ns, "bob-apply", "bob"))).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		lr := get(g, spk.Client, ns, "bob-apply")
		g.Expect(lr.Status.Phase).To(gomega.Equal(locksv1.PhaseReleased))
		c := meta.FindStatusCondition(lr.Status.Conditions, locksv1.ConditionGranted)
		g.Expect(c).NotTo(gomega.BeNil())
		g.Expect(c.Reason).To(gomega.Equal(spoke.ReasonClockSkewTooLarge))
		g.Expect(c.Message).To(gomega.MatchRegexp(`^the clock of cluster skewed-1 is off the hub's by up to (9|1[01])(\.[0-9]+)?s \(measured by the renewals of its hub Lease team-skewed/spoke-skewed-1\), over --max-clock-skew 2s: ` +
			`this spoke cannot tell when the hub hands its locks on, so its workload was not let go and its hub grant was given back \(released on the hub\); fix the clock \(NTP\) on cluster skewed-1, then request again$`))
	}).Should(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		h := get(g, hub.Client, ns, name+".bob-apply")
		g.Expect(h.Spec.Release).To(gomega.BeTrue(), "the hub request is released")
		g.Expect(h.Status.Phase).To(gomega.Equal(locksv1.PhaseReleased))
	}).Should(gomega.Succeed())
	g.Expect(hub.Client.Create(ctx, request(ns, "alice-apply", "alice"))).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(get(g, hub.Client, ns, "alice-apply").Status.Phase).To(gomega.Equal(locksv1.PhaseGranted))
	}).Should(gomega.Succeed(), "the key passes on in the fleet")
	// It stays given back: the hub's later words (its request Released) change nothing.
	g.Consistently(func(g gomega.Gomega) {
		c := meta.FindStatusCondition(get(g, spk.Client, ns, "bob-apply").Status.Conditions, locksv1.ConditionGranted)
		g.Expect(c).NotTo(gomega.BeNil())
		g.Expect(c.Reason).To(gomega.Equal(spoke.ReasonClockSkewTooLarge))
	}, 2*time.Second).Should(gomega.Succeed())
	g.Expect(never()).To(gomega.BeTrue(), "the request was never Granted in the spoke")
}
