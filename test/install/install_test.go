package install

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	"github.com/turnstile-dev/turnstile/test/monitoring"
)

// installPath is one way to install Turnstile.
type installPath struct {
	// manifests renders what is installed on the cluster b describes.
	manifests func(b framework.Bundle) string
	// dryRunOnly are more renderings that must pass a server-side dry-run (other values).
	dryRunOnly func(b framework.Bundle) []string
	// createNamespace: the manifests do not create their namespace (Helm's convention); the
	// test creates it as README.md says, enforcing the restricted Pod Security Standard. The
	// kustomize build creates and labels its own.
	createNamespace bool
	// install installs the manifests as the path's users do (nil: kubectl apply --server-side of
	// the manifests); helm install of a packaged chart, for one.
	install func(c *cluster)
	// manager is the manager binary to run (nil: bin/manager); a release's, from its image.
	manager func() string
}

var _ = Describe("Installed with the Helm chart", Ordered, func() {
	chart := func() string { return filepath.Join(repoRoot, "charts", "turnstile") }
	describeInstall(installPath{
		manifests: func(b framework.Bundle) string {
			return run(helmBin, append([]string{"template", "turnstile", chart(), "--namespace", "turnstile-system"}, capabilities(b)...)...)
		},
		dryRunOnly: func(b framework.Bundle) []string {
			allOn := run(helmBin, append([]string{"template", "turnstile", chart(), "--namespace", "turnstile-system",
				"-f", filepath.Join(repoRoot, "test", "chart", "testdata", "all-on.yaml")}, capabilities(b)...)...)
			// The ServiceMonitor and PrometheusRule need prometheus-operator's CRDs, which this
			// control plane does not have: helm-unittest and test/chart check them.
			var kept []object
			for _, o := range parseManifests(allOn) {
				if k := o.Kind(); k != "ServiceMonitor" && k != "PrometheusRule" {
					kept = append(kept, o)
				}
			}
			return []string{toYAML(kept)}
		},
		createNamespace: true,
	})
})

var _ = Describe("Installed with kustomize", Ordered, func() {
	describeInstall(installPath{
		// The bundle docs/install.md tells a user of this version to apply.
		manifests: func(b framework.Bundle) string {
			return run(kubectlBin, "kustomize", b.Dir)
		},
		dryRunOnly: func(framework.Bundle) []string { return nil },
	})
})

// capabilities are the flags that tell `helm template` what `helm install` learns from the
// cluster's discovery: its version, and the MutatingAdmissionPolicy version it serves (the
// chart installs its mutating policies as that one, or none: admissionPolicies.mutating=auto).
func capabilities(b framework.Bundle) []string {
	flags := []string{"--kube-version", b.Cluster.Version.String()}
	if b.Cluster.MutatingAdmissionPolicy != "" {
		flags = append(flags, "--api-versions", "admissionregistration.k8s.io/"+b.Cluster.MutatingAdmissionPolicy+"/MutatingAdmissionPolicy")
	}
	return flags
}

// run runs a tool and returns its stdout.
func run(name string, args ...string) string {
	GinkgoHelper()
	out, err := execOutput(name, args...)
	Expect(err).NotTo(HaveOccurred())
	return out
}

// describeInstall adds the specs of one install path to an Ordered container.
func describeInstall(ip installPath) {
	const team = "team-a"
	var (
		c            *cluster
		manifests    string
		bundle       framework.Bundle
		objs         []object
		namespace    string
		sa           string
		deployArgs   []string
		podSpec      map[string]any
		cl           client.Client
		a, b         *managerProcess
		bin          string // the manager binary the replicas run
		readerToken  string
		exported     = monitoring.Exported{}
		testCtx      = context.Background()
		lockRequests = func(name string) *locksv1.LockRequest {
			GinkgoHelper()
			lr := &locksv1.LockRequest{}
			Expect(cl.Get(testCtx, types.NamespacedName{Namespace: team, Name: name}, lr)).To(Succeed())
			return lr
		}
		granted = func(name string) func() bool {
			return func() bool {
				lr := &locksv1.LockRequest{}
				if err := cl.Get(testCtx, types.NamespacedName{Namespace: team, Name: name}, lr); err != nil {
					return false
				}
				return meta.IsStatusConditionTrue(lr.Status.Conditions, locksv1.ConditionGranted)
			}
		}
		phase = func(name string) func() locksv1.LockRequestPhase {
			return func() locksv1.LockRequestPhase {
				lr := &locksv1.LockRequest{}
				if err := cl.Get(testCtx, types.NamespacedName{Namespace: team, Name: name}, lr); err != nil {
					return ""
				}
				return lr.Status.Phase
			}
		}
		as = func(user string, stdin string, args ...string) string {
			GinkgoHelper()
			return c.mustKubectl(stdin, append([]string{"--as=" + user, "-n", team}, args...)...)
		}
		scrapeInto = func(m *managerProcess) {
			GinkgoHelper()
			code, body, err := m.scrape(readerToken)
			Expect(err).NotTo(HaveOccurred())
			Expect(code).To(Equal(http.StatusOK), body)
			e, err := monitoring.ParseExposition(strings.NewReader(body))
			Expect(err).NotTo(HaveOccurred())
			exported.Merge(e)
		}
	)

	BeforeAll(func() {
		By("starting a fresh kube-apiserver and etcd, with nothing installed")
		c = startCluster()
		var err error
		bundle, err = framework.BundleFor(c.env.Config)
		Expect(err).NotTo(HaveOccurred())
		manifests = ip.manifests(bundle)
		objs = parseManifests(manifests)
		By(fmt.Sprintf("on Kubernetes %s, MutatingAdmissionPolicy served as %q: the mutating policies are installed as that, or left out", bundle.Cluster.Version, bundle.Mutating))
		mutating := 0
		for _, o := range objs {
			if o.Kind() == "MutatingAdmissionPolicy" {
				mutating++
				Expect(o["apiVersion"]).To(Equal("admissionregistration.k8s.io/" + bundle.Mutating))
			}
		}
		if bundle.Mutating == "" {
			Expect(mutating).To(BeZero())
		} else {
			Expect(mutating).To(BeNumerically(">", 0))
		}
		Expect(findObject(objs, "ValidatingAdmissionPolicy", "-workload-held")).NotTo(BeNil(), "what the mutating policies fill in is checked either way")
		dep := findObject(objs, "Deployment", "-controller-manager")
		namespace = dep.Meta("namespace")
		podSpec = dep.Path("spec", "template", "spec").(map[string]any)
		sa = podSpec["serviceAccountName"].(string)
		for _, a := range podSpec["containers"].([]any)[0].(map[string]any)["args"].([]any) {
			deployArgs = append(deployArgs, a.(string))
		}
		Expect(namespace).NotTo(BeEmpty())
		Expect(deployArgs).To(ContainElement("--active-active=true"), "the Deployment runs its replicas active-active")
	})

	AfterAll(func() {
		if !CurrentSpecReport().Failed() || c == nil {
			return
		}
		_, _ = c.kubectl("", "get", "lockrequests,projectlocks", "-A", "-o", "yaml")
		for _, m := range []*managerProcess{a, b} {
			if m != nil {
				fmt.Fprintf(GinkgoWriter, "--- log of %s:\n%s", m.name, m.log())
			}
		}
	})

	It("passes a server-side dry-run", func() {
		// Namespaced objects dry-run only in a namespace that exists.
		c.mustKubectl("", "create", "namespace", namespace)
		if ip.createNamespace {
			c.mustKubectl("", "label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted")
		}
		for i, m := range append([]string{manifests}, ip.dryRunOnly(bundle)...) {
			By(fmt.Sprintf("kubectl apply --server-side --dry-run=server (rendering %d)", i+1))
			c.mustKubectl(m, "apply", "--server-side", "--dry-run=server", "-f", "-")
		}
		// A dry-run persists nothing.
		_, err := c.kubectl("", "get", "crd", "lockrequests.locks.turnstile.dev")
		Expect(err).To(HaveOccurred())
	})

	It("installs as its users install it", func() {
		if ip.install != nil {
			ip.install(c)
		} else {
			c.mustKubectl(manifests, "apply", "--server-side", "-f", "-")
		}
		c.mustKubectl("", "wait", "--for=condition=Established", "--timeout=60s",
			"crd/lockrequests.locks.turnstile.dev", "crd/projectlocks.locks.turnstile.dev", "crd/commandlocks.locks.turnstile.dev")
		// Established is not the end: the admission policies' dispatcher learns a new kind from
		// discovery a moment later, and until then it answers 503 "Resource kind … not found".
		By("waiting until a LockRequest passes admission (a server-side dry run)")
		sample := filepath.Join(repoRoot, "config", "samples", "locks_v1alpha1_lockrequest.yaml")
		request := c.mustKubectl("", "-n", namespace, "create", "--dry-run=client", "-o", "yaml", "-f", sample)
		if bundle.Mutating == "" {
			// Nothing records who created it: the admin, taking the lock for alice, writes it
			// down as the refusal says (docs/install.md, "Supported Kubernetes versions").
			self := c.mustKubectl("", "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
			request = c.mustKubectl(request, "annotate", "--local", "-o", "yaml", "-f", "-", "locks.turnstile.dev/created-by="+self)
		}
		Eventually(func() error {
			_, err := c.kubectl(request, "-n", namespace, "create", "--dry-run=server", "-f", "-")
			return err
		}).WithTimeout(settle).WithPolling(200 * time.Millisecond).Should(Succeed())
		var err error
		cl, err = client.New(c.env.Config, client.Options{Scheme: framework.Scheme})
		Expect(err).NotTo(HaveOccurred())
		Expect(c.mustKubectl("", "get", "namespace", namespace, "-o", "jsonpath={.metadata.labels.pod-security\\.kubernetes\\.io/enforce}")).
			To(Equal("restricted"))
	})

	It("runs a manager pod that meets the restricted Pod Security Standard", func() {
		// The Deployment's pod, created (dry-run) in the namespace that enforces "restricted":
		// the API server's PodSecurity admission rejects any pod spec that falls short.
		pod := object{
			"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"name": "manager-pod-security", "namespace": namespace},
			"spec":     podSpec,
		}
		out := c.mustKubectl(toYAML([]object{pod}), "create", "--dry-run=server", "-o", "name", "-f", "-")
		Expect(out).To(ContainSubstring("pod/manager-pod-security"))
	})

	It("runs the manager binary as the installed ServiceAccount, with the Deployment's args", func() {
		kubeconfig := c.serviceAccountKubeconfig(namespace, sa)
		bin = managerBin
		if ip.manager != nil {
			bin = ip.manager()
		}
		a = c.startManager(bin, "manager-a", kubeconfig, namespace, podSpec["containers"].([]any)[0].(map[string]any))

		By("binding a scraper (a Prometheus ServiceAccount) to the installed metrics-reader ClusterRole")
		reader := findObject(objs, "ClusterRole", "-metrics-reader").Meta("name")
		c.mustKubectl("", "create", "namespace", "monitoring")
		c.mustKubectl("", "-n", "monitoring", "create", "serviceaccount", "prometheus")
		c.mustKubectl("", "create", "clusterrolebinding", "prometheus-turnstile-metrics", "--clusterrole="+reader, "--serviceaccount=monitoring:prometheus")
		readerToken = c.token("monitoring", "prometheus")

		By("waiting until it is a member (active-active, as in the Deployment)")
		Eventually(func() (string, error) { return a.liveMembers(readerToken) }).WithTimeout(settle).WithPolling(200*time.Millisecond).
			Should(Equal("1"), "manager-a never joined the membership (%v)", a.running())
	})

	It("grants, hands off and expires locks for users bound to the installed requester role", func() {
		requester := findObject(objs, "ClusterRole", "-requester").Meta("name")
		c.mustKubectl("", "create", "namespace", team)
		c.mustKubectl("", "-n", team, "create", "rolebinding", "pipelines", "--clusterrole="+requester, "--user=alice", "--user=bob", "--user=carol")
		By("a CommandLock exists (admin), so the freeze metrics are exported")
		c.mustKubectl("", "apply", "-f", filepath.Join(repoRoot, "config", "samples", "locks_v1alpha1_commandlock.yaml"))

		By("alice takes the lock")
		as("alice", "", "apply", "-f", filepath.Join(repoRoot, "config", "samples", "locks_v1alpha1_lockrequest.yaml"))
		as("alice", "", "wait", "--for=condition=Granted", "lockrequest/plan-pr-100", "--timeout=30s")
		token100 := lockRequests("plan-pr-100").Status.FencingToken

		By("carol may not release alice's lock: the installed admission policies say who may, and how to get it")
		changes := findObject(objs, "ValidatingAdmissionPolicy", "-lockrequest-changes").Meta("name")
		denied := func(stdin string, args ...string) func() string {
			return func() string {
				// A server-side dry-run goes through admission and changes nothing, so polling
				// until the policy has loaded cannot release alice's lock.
				_, err := c.kubectl(stdin, append([]string{"--as=carol", "-n", team, "--dry-run=server"}, args...)...)
				if err == nil {
					return "allowed"
				}
				return err.Error()
			}
		}
		Eventually(denied("", "patch", "lockrequest", "plan-pr-100", "--type=merge", "-p", `{"spec":{"release":true}}`)).
			WithTimeout(settle).WithPolling(200 * time.Millisecond).Should(And(
			ContainSubstring("ValidatingAdmissionPolicy '"+changes+"'"),
			ContainSubstring("lockrequest plan-pr-100 is held for alice: only its owner, the delegate that created it, or a turnstile-admin in namespace "+team+" may change or release it, and you are carol")))
		By("carol may not jump the queue: maxPriority comes from the installed params ConfigMap")
		Eventually(denied(`apiVersion: locks.turnstile.dev/v1alpha1
kind: LockRequest
metadata:
  name: plan-pr-103
spec:
  locks:
  - repo: acme/infra
    path: modules/vpc
  holder:
    owner: carol
  priority: Critical
`, "create", "-f", "-")).WithTimeout(settle).WithPolling(200 * time.Millisecond).Should(
			ContainSubstring("priority Critical is above High, the most anyone may ask for: it needs the prioritize permission for Critical on lockrequests in namespace " + team))

		By("bob queues behind her")
		as("bob", "", "apply", "-f", filepath.Join(repoRoot, "config", "samples", "locks_v1alpha1_lockrequest_waiting.yaml"))
		Eventually(phase("plan-pr-101")).WithTimeout(settle).WithPolling(poll).Should(Equal(locksv1.PhasePending))
		Eventually(func() (string, error) {
			return c.kubectl("", "-n", team, "get", "pl", "-o", "jsonpath={.items[0].status.queueLength}")
		}).WithTimeout(settle).WithPolling(poll).Should(Equal("1"))
		scrapeInto(a) // a key held, a queue, a waiting and a granted request

		By("alice releases: the lock passes to bob")
		as("alice", "", "patch", "lockrequest", "plan-pr-100", "--type=merge", "-p", `{"spec":{"release":true}}`)
		as("bob", "", "wait", "--for=condition=Granted", "lockrequest/plan-pr-101", "--timeout=30s")
		Expect(lockRequests("plan-pr-101").Status.FencingToken).To(BeNumerically(">", token100))
		Expect(lockRequests("plan-pr-100").Status.Phase).To(Equal(locksv1.PhaseReleased))

		By("carol's grant runs out its ttl")
		as("carol", `apiVersion: locks.turnstile.dev/v1alpha1
kind: LockRequest
metadata:
  name: apply-pr-102
spec:
  locks:
  - repo: acme/infra
    path: modules/dns
  holder:
    owner: carol
    pull: 102
  command: apply
  ttl: 2s
`, "apply", "-f", "-")
		Eventually(phase("apply-pr-102")).WithTimeout(settle).WithPolling(poll).Should(Equal(locksv1.PhaseExpired))
		scrapeInto(a) // releases and expirations counted

		By("a fleet member declared on this cluster, its hub: the manager keeps its Spoke (the fleet view) with the installed RBAC")
		c.mustKubectl("", "apply", "--server-side", "-f", filepath.Join(repoRoot, "config", "fleet", "namespace.yaml"),
			"-f", filepath.Join(repoRoot, "config", "fleet", "members.yaml"))
		c.mustKubectl("", "-n", "turnstile-fleet", "patch", "configmap", "turnstile-fleet-members", "--type=merge", "-p", `{"data":{"eu-west-1":"{}"}}`)
		Eventually(func() (string, error) {
			return c.kubectl("", "get", "spoke", "eu-west-1", "-o", "jsonpath={.status.connection}")
		}).WithTimeout(settle).WithPolling(poll).Should(Equal("Never"))
		scrapeInto(a) // the spoke's gauges
	})

	It("serves its metrics over HTTPS only to scrapers the installed RBAC allows", func() {
		code, _, err := a.scrape("")
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(http.StatusUnauthorized), "no token")
		c.mustKubectl("", "-n", "monitoring", "create", "serviceaccount", "stranger")
		code, _, err = a.scrape(c.token("monitoring", "stranger"))
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(http.StatusForbidden), "a token not bound to the metrics-reader role")
		code, _, err = a.scrape(readerToken)
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(http.StatusOK))
	})

	It("exports every metric and label that the alerts and the dashboard select", func() {
		var queries []monitoring.Query
		data, err := os.ReadFile(filepath.Join(repoRoot, "config", "prometheus", "turnstile.rules.yaml"))
		Expect(err).NotTo(HaveOccurred())
		q, err := monitoring.RuleQueries(data)
		Expect(err).NotTo(HaveOccurred())
		queries = append(queries, q...)
		data, err = os.ReadFile(filepath.Join(repoRoot, "config", "grafana", "turnstile-dashboard.json"))
		Expect(err).NotTo(HaveOccurred())
		q, err = monitoring.DashboardQueries(data)
		Expect(err).NotTo(HaveOccurred())
		queries = append(queries, q...)
		fmt.Fprintf(GinkgoWriter, "%d queries select: %s\n", len(queries), strings.Join(monitoring.Metrics(queries), ", "))
		Expect(monitoring.Check(queries, exported)).To(BeEmpty())
	})

	It("hands off while a rollout replaces a replica", func() {
		By("a second replica joins")
		b = c.startManager(bin, "manager-b", c.serviceAccountKubeconfig(namespace, sa), namespace, podSpec["containers"].([]any)[0].(map[string]any))
		for _, m := range []*managerProcess{a, b} {
			Eventually(func() (string, error) { return m.liveMembers(readerToken) }).WithTimeout(settle).WithPolling(200*time.Millisecond).
				Should(Equal("2"), "%s never saw both replicas (%v)", m.name, m.running())
		}

		By("a holder and a waiter on one key")
		for _, r := range []struct{ name, user string }{{"rollout-1", "alice"}, {"rollout-2", "bob"}} {
			as(r.user, fmt.Sprintf(`apiVersion: locks.turnstile.dev/v1alpha1
kind: LockRequest
metadata:
  name: %s
spec:
  locks:
  - repo: acme/infra
    path: modules/rollout
  holder:
    owner: %s
`, r.name, r.user), "apply", "-f", "-")
		}
		Eventually(granted("rollout-1")).WithTimeout(settle).WithPolling(poll).Should(BeTrue())
		Eventually(phase("rollout-2")).WithTimeout(settle).WithPolling(poll).Should(Equal(locksv1.PhasePending))

		By("the rollout stops a replica (SIGTERM) as the holder releases")
		start := time.Now()
		stopped := make(chan error, 1)
		go func() { stopped <- a.p.Stop(shutdownGrace) }()
		lr := &locksv1.LockRequest{}
		lr.Namespace, lr.Name = team, "rollout-1"
		Expect(cl.Patch(testCtx, lr, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"release":true}}`)))).To(Succeed())
		Eventually(granted("rollout-2")).WithTimeout(2*time.Minute).WithPolling(poll).Should(BeTrue(),
			"the waiter was never granted after a replica stopped (%v)", b.running())
		pause := time.Since(start)
		Expect(<-stopped).To(Succeed(), "the stopped replica did not exit cleanly within %s of SIGTERM", shutdownGrace)
		Eventually(func() (string, error) { return b.liveMembers(readerToken) }).WithTimeout(settle).WithPolling(200*time.Millisecond).
			Should(Equal("1"), "the stopped replica left the membership")
		AddReportEntry("hand-off pause while a replica is replaced", pause.Round(time.Millisecond).String())
		fmt.Fprintf(GinkgoWriter, "hand-off during a replica's replacement: %s from SIGTERM of a replica to the waiter's grant\n", pause.Round(time.Millisecond))
	})

	It("stops cleanly, and no manager was ever forbidden anything", func() {
		b.stop()
		for _, m := range []*managerProcess{a, b} {
			Expect(m.forbiddenLines()).To(BeEmpty(), "manager %s lacked a permission", m.name)
			Expect(m.log()).To(ContainSubstring("starting manager"), "manager %s's log was captured", m.name)
		}
	})
}
