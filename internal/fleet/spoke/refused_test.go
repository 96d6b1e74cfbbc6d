package spoke_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/fleet/skew"
	"github.com/turnstile-dev/turnstile/internal/fleet/spoke"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// TestRefusedClusterSaysSoInTheSpoke runs a spoke whose cluster the hub does not list as a
// member, as its hub ServiceAccount under config/fleet's roles and policies: the hub refuses its
// request, and the agent says so on the spoke request (Stalled and Granted False, reason
// FleetRefused, the hub's words) and in a Warning event, and tries again: once the hub's admin
// lists the cluster, the request is mirrored and granted without a restart.
func TestRefusedClusterSaysSoInTheSpoke(t *testing.T) {
	const ns, name = "team-refused", "eu-west-9"
	t.Parallel()
	// A hub of its own: config/fleet's policies, once installed, refuse the other tests' agents
	// (turnstile-fleet-reserved: they act on the hub as its admin, not as a spoke).
	h := ownHub(t)
	spk := spokeOf(t, h, ns)
	g := gomega.NewWithT(t)
	ctx := context.Background()

	// The hub's side of a fleet, as docs/fleet.md installs it, with no member yet.
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "hub.kubeconfig")
	g.Expect(h.WriteKubeconfig(kubeconfig)).To(gomega.Succeed())
	root, err := framework.RepoRoot()
	g.Expect(err).NotTo(gomega.HaveOccurred())
	kubectl := func(args ...string) {
		t.Helper()
		cmd := exec.Command(h.Kubectl(), append([]string{"--kubeconfig", kubeconfig}, args...)...)
		out, err := cmd.CombinedOutput()
		g.Expect(err).NotTo(gomega.HaveOccurred(), string(out))
	}
	kubectl("apply", "--server-side", "-k", filepath.Join(root, "config", "fleet"))
	kubectl("-n", ns, "create", "rolebinding", "turnstile-fleet-spoke", "--clusterrole=turnstile-fleet-spoke", "--group=system:serviceaccounts:turnstile-fleet")

	as := rest.CopyConfig(h.Config)
	as.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:turnstile-fleet:" + spoke.LeaseName(name),
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:turnstile-fleet", "system:authenticated"}}
	asSpoke, err := client.New(as, client.Options{Scheme: framework.Scheme})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	probe := request(ns, "probe", "alice")
	probe.Labels = map[string]string{spoke.LabelCluster: name}
	probe.Name = spoke.HubName(name, "probe")
	probe.Spec.Holder.Cluster, probe.Spec.Holder.Lease = name, spoke.LeaseName(name)
	g.Eventually(func() error { return asSpoke.Create(ctx, probe.DeepCopy(), client.DryRunAll) }).
		Should(gomega.MatchError(gomega.ContainSubstring("is not a member of this fleet")), "the hub's policies are enforced")

	m := spk.startAgent(t, spoke.Options{Cluster: name, Hub: as, Settings: skew.Settings{Lease: 20 * time.Second, Grace: 3 * time.Second, MaxSkew: 2 * time.Second}}, nil)
	defer func() { _ = m.Stop() }()
	g.Expect(spk.Client.Create(ctx, request(ns, "refused", "alice"))).To(gomega.Succeed())
	want := "the hub refused this spoke (--cluster-name=" + name + "): "
	g.Eventually(func(g gomega.Gomega) {
		lr := get(g, spk.Client, ns, "refused")
		g.Expect(lr.Status.Phase).To(gomega.Equal(locksv1.PhasePending))
		for _, typ := range []string{locksv1.ConditionStalled, locksv1.ConditionGranted} {
			c := meta.FindStatusCondition(lr.Status.Conditions, typ)
			g.Expect(c).NotTo(gomega.BeNil(), typ)
			g.Expect(c.Reason).To(gomega.Equal(spoke.ReasonFleetRefused))
			g.Expect(c.Message).To(gomega.HavePrefix(want))
			g.Expect(c.Message).To(gomega.ContainSubstring("cluster " + name + " is not a member of this fleet: ask the hub's admin to run `kubectl turnstile fleet join " + name + "`"))
		}
		g.Expect(meta.IsStatusConditionTrue(lr.Status.Conditions, locksv1.ConditionStalled)).To(gomega.BeTrue())
		g.Expect(lr.Status.ObservedGeneration).To(gomega.Equal(lr.Generation), "kubectl wait reads conditions of the generation observed")
	}).Should(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		var evs eventsv1.EventList
		g.Expect(spk.Client.List(ctx, &evs, client.InNamespace(ns))).To(gomega.Succeed())
		var notes []string
		for _, e := range evs.Items {
			if e.Reason == spoke.ReasonFleetRefused && e.Regarding.Name == "refused" && e.Type == corev1.EventTypeWarning {
				notes = append(notes, e.Note)
			}
		}
		g.Expect(strings.Join(notes, "\n")).To(gomega.ContainSubstring(want))
	}).Should(gomega.Succeed())
	var hubs locksv1.LockRequestList
	g.Expect(h.Client.List(ctx, &hubs, client.InNamespace(ns))).To(gomega.Succeed())
	g.Expect(hubs.Items).To(gomega.BeEmpty())

	// The hub's admin lists the cluster: the agent's next try is accepted.
	kubectl("-n", "turnstile-fleet", "patch", "configmap", "turnstile-fleet-members", "--type=merge", "-p", `{"data":{"`+name+`":"{}"}}`)
	g.Eventually(func(g gomega.Gomega) {
		lr := get(g, spk.Client, ns, "refused")
		g.Expect(lr.Status.Phase).To(gomega.Equal(locksv1.PhaseGranted))
		g.Expect(meta.IsStatusConditionTrue(lr.Status.Conditions, locksv1.ConditionStalled)).To(gomega.BeFalse())
	}).WithTimeout(60 * time.Second).Should(gomega.Succeed())
}
