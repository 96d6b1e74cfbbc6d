package e2e

import (
	"fmt"
	"path/filepath"
	"regexp"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Write freezes with the plugin (docs/freeze-admission.md): kubectl turnstile freeze --enforce,
// a refusal pasted into kubectl turnstile why, kubectl turnstile break-glass and thaw, with the
// real kubectl, the real plugin and the real manager binary, and the shipped freeze policies.
var _ = Describe("Write freezes with the plugin", func() {
	It("freeze --enforce refuses writes with the message, why explains a pasted refusal, break-glass lets the breaker's writes through while granted, thaw ends it", func() {
		policies := filepath.Join(repoRoot, "config", "admission", "freeze.yaml")
		mustKubectl("apply", "--server-side", "-f", policies)
		DeferCleanup(func() { _, _ = kubectl("delete", "-f", policies, "--ignore-not-found") })

		ns := createNamespace()
		label := "env-" + randSuffix()
		mustKubectl("label", "namespace", ns, label+"=prod")
		// alice writes, and breaks the glass: not the admin, whom the manager here runs as (the
		// freeze never refuses the manager's own writes).
		role := "e2e-freeze-" + randSuffix()
		_, err := kubectlWithInput(fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: %[1]s}
rules:
- {apiGroups: [""], resources: [configmaps, secrets], verbs: ["*"]}
- {apiGroups: [locks.turnstile.dev], resources: [lockrequests], verbs: ["*"]}
- {apiGroups: [locks.turnstile.dev], resources: [lockrequests/status, commandlocks, projectlocks], verbs: [get, list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: %[1]s, namespace: %[2]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: %[1]s}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: %[1]s}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}]
`, role, ns), "apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() {
			_, _ = kubectl("delete", "clusterrole,clusterrolebinding", role, "--ignore-not-found")
		})
		Eventually(func() (string, error) {
			return kubectl("auth", "can-i", "create", "configmaps", "-n", ns, "--as=alice")
		}).WithTimeout(settle).WithPolling(poll).Should(Equal("yes\n"))
		name := "weekend-" + randSuffix()
		DeferCleanup(func() { _, _ = kubectl("delete", "commandlock", name, "--ignore-not-found") })

		By("kubectl turnstile freeze --enforce: a manual freeze of ConfigMaps in the prod namespaces")
		out := mustKubectl("turnstile", "freeze", name, "--reason", "no production changes at the weekend",
			"--enforce-namespaces", label+"=prod", "--kind", "ConfigMap", "--kind", "apps/Deployment", "--bypass", "page #platform-oncall")
		Expect(out).To(Equal(fmt.Sprintf("commandlock/%s frozen\ncommandlock/%s freezes writes (mode Deny) while it is in force\n", name, name)))
		Expect(mustKubectl("get", "commandlock", name, "-o", "jsonpath={.spec.admission}")).To(MatchJSON(fmt.Sprintf(
			`{"mode":"Deny","bypass":"page #platform-oncall","namespaceSelector":{"matchLabels":{%q:"prod"}},"resources":[{"apiGroups":[""],"kinds":["ConfigMap"]},{"apiGroups":["apps"],"kinds":["Deployment"]}]}`, label)))

		create := func(cm string) (string, error) {
			return kubectl("--as=alice", "-n", ns, "create", "configmap", cm, "--from-literal=k=v")
		}
		var refusal string
		Eventually(func() string {
			_, err := create("app")
			if err == nil {
				_, _ = kubectl("-n", ns, "delete", "configmap", "app")
				return "admitted"
			}
			refusal = stderrOf(err)
			return refusal
		}).WithTimeout(settle).WithPolling(poll).Should(MatchRegexp(
			`^error: failed to create configmap: configmaps "app" is forbidden: ValidatingAdmissionPolicy 'turnstile-freeze' with binding 'turnstile-freeze' denied request: `+
				`writes are frozen by commandlock %s \(no production changes at the weekend\) since \S+Z until it is thawed: create of configmaps app in namespace %s by alice is refused; page #platform-oncall; kubectl turnstile why explains this message\n$`,
			regexp.QuoteMeta(name), regexp.QuoteMeta(ns)))
		mustKubectl("--as=alice", "-n", ns, "create", "secret", "generic", "token", "--from-literal=k=v") // another kind: not frozen

		By("kubectl turnstile why -: the refusal piped in")
		why, err := kubectlWithInput(refusal, "turnstile", "why", "-")
		Expect(err).NotTo(HaveOccurred())
		Expect(why).To(Equal(fmt.Sprintf(`refused: create of configmaps app in namespace %[2]s by alice
commandlock/%[1]s freezes writes (mode Deny): no production changes at the weekend
  now: frozen by hand until it is thawed (kubectl turnstile thaw %[1]s)
  kinds: ConfigMap, apps/Deployment
  namespaces: namespaces matching %[3]s=prod
  frozen: everyone (except the cluster's own controllers)
  to get past it: page #platform-oncall
`, name, ns, label)))

		By("kubectl turnstile break-glass: a grant lets the breaker's writes in the namespace through, recorded")
		out = mustKubectl("turnstile", "break-glass", name, "-n", ns, "--as=alice", "--reason", "incident 4711: roll back", "--ttl", "10m")
		m := regexp.MustCompile(`^lockrequest/(break-glass-\S+) granted: (\S+) may write in namespace ` + regexp.QuoteMeta(ns) + ` past commandlock ` + regexp.QuoteMeta(name) +
			` until \S+Z; release it when done: kubectl turnstile release -n ` + regexp.QuoteMeta(ns) + ` (break-glass-\S+)\n$`).FindStringSubmatch(out)
		Expect(m).NotTo(BeNil(), out)
		request, breaker := m[1], m[2]
		Expect(m[3]).To(Equal(request))
		Expect(breaker).To(Equal("alice"))
		Eventually(func() error {
			_, err := create("hotfix")
			return err
		}).WithTimeout(settle).WithPolling(poll).Should(Succeed())
		why, err = kubectlWithInput(refusal, "turnstile", "why", "-")
		Expect(err).NotTo(HaveOccurred())
		Expect(why).To(MatchRegexp(`\n  break glass: %s in namespace %s until \S+Z \(lockrequest %s: incident 4711: roll back\)\n`,
			regexp.QuoteMeta(breaker), regexp.QuoteMeta(ns), regexp.QuoteMeta(request)))
		Expect(mustKubectl("get", "events", "-A", "--field-selector", "reason=BreakGlass,involvedObject.name="+name, "-o", "jsonpath={.items[*].message}")).To(
			MatchRegexp(`^break glass: %s may write in namespace %s past the write freeze until \S+Z \(lockrequest %s/%s\): incident 4711: roll back$`,
				regexp.QuoteMeta(breaker), regexp.QuoteMeta(ns), regexp.QuoteMeta(ns), regexp.QuoteMeta(request)))

		By("released: frozen again")
		mustKubectl("turnstile", "-n", ns, "--as=alice", "release", request)
		Eventually(func() error {
			_, err := create("after-release")
			return err
		}).WithTimeout(settle).WithPolling(poll).Should(MatchError(ContainSubstring("writes are frozen by commandlock " + name)))

		By("kubectl turnstile thaw: writes pass again, and why says the freeze is not in force")
		mustKubectl("turnstile", "thaw", name)
		Eventually(func() error {
			_, err := create("after-thaw")
			return err
		}).WithTimeout(settle).WithPolling(poll).Should(Succeed())
		why, err = kubectlWithInput(refusal, "turnstile", "why", "-")
		Expect(err).NotTo(HaveOccurred())
		Expect(why).To(ContainSubstring("\n  now: not frozen\n"))
	})
})
