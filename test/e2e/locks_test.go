package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

func sample(name string) string { return filepath.Join(repoRoot, "config", "samples", name) }

// holderAndWaiter applies the two sample LockRequests: plan-pr-100 granted, then plan-pr-101
// queued behind it. It returns plan-pr-100's fencing token.
func holderAndWaiter(ns string) int64 {
	GinkgoHelper()
	mustKubectl("apply", "-n", ns, "-f", sample("locks_v1alpha1_lockrequest.yaml"))
	waitGranted(ns, "plan-pr-100", 20*time.Second)
	token100 := token(ns, "plan-pr-100")
	mustKubectl("apply", "-n", ns, "-f", sample("locks_v1alpha1_lockrequest_waiting.yaml"))
	expectPending(ns, "plan-pr-101")
	return token100
}

// inFreshNamespace gives each spec of the container a namespace of its own in *ns, with the
// manager running before and after it, and the namespace's state dumped when it fails.
func inFreshNamespace(ns *string) {
	BeforeEach(func() {
		Expect(manager.Running()).To(Succeed())
		*ns = createNamespace()
	})
	AfterEach(func() {
		if CurrentSpecReport().Failed() {
			dumpState(*ns)
		}
		Expect(manager.Running()).To(Succeed())
	})
}

var _ = Describe("Turnstile, driven with kubectl", func() {
	var ns string
	inFreshNamespace(&ns)

	It("a user takes, queues and hands off a lock", func() {
		By("taking a free lock with the sample LockRequest")
		mustKubectl("apply", "-n", ns, "-f", sample("locks_v1alpha1_lockrequest.yaml"))
		waitGranted(ns, "plan-pr-100", 20*time.Second)

		By("seeing the holder with kubectl get projectlocks")
		rows := table(mustKubectl("get", "projectlocks", "-n", ns))
		Expect(rows).To(HaveLen(1), "one lock key, one ProjectLock")
		Expect(rows[0]).To(HaveKeyWithValue("REPO", "acme/infra"))
		Expect(rows[0]).To(HaveKeyWithValue("PATH", "modules/vpc"))
		Expect(rows[0]).To(HaveKeyWithValue("HOLDER", "alice"))
		Expect(rows[0]).To(HaveKeyWithValue("PULL", "100"))
		token100 := token(ns, "plan-pr-100")

		By("queueing a second pull request for the same lock")
		mustKubectl("apply", "-n", ns, "-f", sample("locks_v1alpha1_lockrequest_waiting.yaml"))
		expectPending(ns, "plan-pr-101")
		Eventually(field(ns, "lr/plan-pr-101", conditionField("Granted", "message"))).WithTimeout(settle).WithPolling(poll).
			Should(ContainSubstring("locked by pull #100 (alice)"))
		Eventually(field(ns, "pl", "{.items[0].status.queueLength}")).WithTimeout(settle).WithPolling(poll).
			Should(Equal("1"))
		Expect(jsonpath(ns, "pl", "{.items[0].status.holder.owner}")).To(Equal("alice"))

		By("handing the lock off by deleting the holder's request")
		mustKubectl("delete", "-n", ns, "lockrequest", "plan-pr-100")
		waitGranted(ns, "plan-pr-101", 10*time.Second)
		Expect(token(ns, "plan-pr-101")).To(BeNumerically(">", token100), "the fencing token must increase with each grant")
		Eventually(field(ns, "pl", "{.items[0].status.holder.owner} {.items[0].status.holder.pull}")).
			WithTimeout(settle).WithPolling(poll).Should(Equal("bob 101"))
		// queueLength is omitempty: an empty queue prints nothing.
		Expect(jsonpath(ns, "pl", "{.items[0].status.queueLength}")).To(BeElementOf("", "0"))
	})

	It("release keeps the record", func() {
		token100 := holderAndWaiter(ns)

		By("releasing with spec.release")
		mustKubectl("patch", "-n", ns, "lr", "plan-pr-100", "--type", "merge", "-p", `{"spec":{"release":true}}`)
		Eventually(field(ns, "lr/plan-pr-100", "{.status.phase}")).WithTimeout(settle).WithPolling(poll).
			Should(Equal("Released"))
		Expect(jsonpath(ns, "lr/plan-pr-100", conditionField("Granted", "status"))).To(Equal("False"))
		Expect(jsonpath(ns, "lr/plan-pr-100", conditionField("Granted", "reason"))).To(Equal("Released"))
		Expect(jsonpath(ns, "lr/plan-pr-100", "{.status.finishedAt}")).NotTo(BeEmpty())

		By("the next request is granted")
		waitGranted(ns, "plan-pr-101", 10*time.Second)
		Expect(token(ns, "plan-pr-101")).To(BeNumerically(">", token100))

		By("the released record is kept")
		Consistently(field(ns, "lr/plan-pr-100", "{.status.phase}")).WithTimeout(time.Second).WithPolling(200 * time.Millisecond).
			Should(Equal("Released"))
		Expect(jsonpath(ns, "pl", "{.items[0].status.holder.owner}")).To(Equal("bob"))
	})

	It("kubectl delete projectlock force-unlocks", func() {
		token100 := holderAndWaiter(ns)
		lockName, err := jsonpath(ns, "lr/plan-pr-100", "{.status.locks[0].name}")
		Expect(err).NotTo(HaveOccurred())
		Expect(lockName).NotTo(BeEmpty())

		By("an admin deletes the ProjectLock " + lockName)
		mustKubectl("delete", "-n", ns, "projectlock", lockName)

		By("the holder's request is Released with reason ForceUnlocked")
		Eventually(field(ns, "lr/plan-pr-100", "{.status.phase} "+conditionField("Granted", "reason"))).
			WithTimeout(settle).WithPolling(poll).Should(Equal("Released ForceUnlocked"))

		By("the waiter recreates the lock and is granted with a greater token")
		waitGranted(ns, "plan-pr-101", 10*time.Second)
		Expect(token(ns, "plan-pr-101")).To(BeNumerically(">", token100),
			"the fencing token must keep increasing across deletion and re-creation of the ProjectLock")
		Eventually(field(ns, "projectlock/"+lockName, "{.status.holder.owner} {.status.holder.pull}")).
			WithTimeout(settle).WithPolling(poll).Should(Equal("bob 101"))
		Expect(jsonpath(ns, "lr/plan-pr-100", "{.status.phase}")).To(Equal("Released"),
			"a force-unlocked request must not be granted again")
	})

	It("bad input is rejected by kubectl apply with a clear message", func() {
		for _, tc := range []struct {
			what string
			lr   lockRequest
			want string
		}{
			{"a repo without owner", lockRequest{Name: "bad-repo", Repo: "acme", Owner: "alice"},
				"repo must be owner/name"},
			{"a path escaping the repository", lockRequest{Name: "bad-path", Repo: "acme/infra", Path: "../x", Owner: "alice"},
				"path must not contain '.' or '..' segments"},
			{"a ttl over 24h", lockRequest{Name: "bad-ttl", Repo: "acme/infra", Owner: "alice", TTL: "25h"},
				"ttl must be between 1s and 24h"},
		} {
			By("applying " + tc.what)
			_, err := kubectlApply(ns, tc.lr.YAML())
			Expect(err).To(HaveOccurred(), "kubectl apply of %s must fail", tc.what)
			Expect(stderrOf(err)).To(ContainSubstring(tc.want))
			Expect(stderrOf(err)).To(ContainSubstring(`The LockRequest %q is invalid`, tc.lr.Name))
		}
		Expect(kubectl("-n", ns, "get", "lockrequests", "-o", "name")).To(BeEmpty(), "nothing was created")
		Expect(kubectl("-n", ns, "get", "projectlocks", "-o", "name")).To(BeEmpty(), "nothing was created")
	})

	It("an admin freezes applies", func() {
		DeferCleanup(func() {
			_, _ = kubectl("delete", "commandlock", "apply", "--ignore-not-found")
		})
		mustKubectl("apply", "-f", sample("locks_v1alpha1_commandlock.yaml"))

		By("an apply is running on key A")
		_, err := kubectlApply(ns, lockRequest{Name: "apply-a", Repo: "acme/infra", Path: "a", Owner: "alice", Pull: 1, Command: "apply"}.YAML())
		Expect(err).NotTo(HaveOccurred())
		waitGranted(ns, "apply-a", 20*time.Second)
		Eventually(field("", "commandlock/apply", "{.status.activeHolders} "+conditionField("Drained", "status"))).
			WithTimeout(settle).WithPolling(poll).Should(Equal("1 False"))

		By("freezing applies")
		mustKubectl("patch", "commandlock", "apply", "--type", "merge", "-p", `{"spec":{"locked":true,"reason":"maintenance window"}}`)
		Eventually(field("", "commandlock/apply", conditionField("Locked", "status"))).
			WithTimeout(settle).WithPolling(poll).Should(Equal("True"))

		By("a new apply on key B waits for the thaw")
		_, err = kubectlApply(ns, lockRequest{Name: "apply-b", Repo: "acme/infra", Path: "b", Owner: "bob", Pull: 2, Command: "apply"}.YAML())
		Expect(err).NotTo(HaveOccurred())
		expectPending(ns, "apply-b")
		Eventually(field(ns, "lr/apply-b", conditionField("Granted", "reason"))).WithTimeout(settle).WithPolling(poll).
			Should(Equal("CommandLocked"))
		Expect(jsonpath(ns, "lr/apply-b", conditionField("Granted", "message"))).
			To(ContainSubstring("Apply commands are locked globally: maintenance window"))

		By("kubectl get commandlock shows the freeze at a glance")
		Eventually(func() (map[string]string, error) {
			out, err := kubectl("get", "commandlock", "apply")
			if err != nil {
				return nil, err
			}
			rows := table(out)
			if len(rows) != 1 {
				return nil, fmt.Errorf("want one row, got %d", len(rows))
			}
			return rows[0], nil
		}).WithTimeout(settle).WithPolling(poll).Should(And(
			HaveKeyWithValue("LOCKED", "true"),
			HaveKeyWithValue("REASON", "maintenance window"),
			HaveKeyWithValue("ACTIVE", "1"),
			HaveKeyWithValue("BLOCKED", "1"),
			HaveKeyWithValue("DRAINED", "False"),
		))

		By("a plan on key C is not frozen")
		_, err = kubectlApply(ns, lockRequest{Name: "plan-c", Repo: "acme/infra", Path: "c", Owner: "carol", Pull: 3, Command: "plan"}.YAML())
		Expect(err).NotTo(HaveOccurred())
		waitGranted(ns, "plan-c", 10*time.Second)

		By("the freeze is not drained while the apply on key A still runs")
		_, err = kubectl("wait", "--for=condition=Drained", "commandlock/apply", "--timeout=2s")
		Expect(err).To(HaveOccurred(), "Drained must not be True while an apply holder is granted")
		Expect(stderrOf(err)).To(ContainSubstring("timed out waiting for the condition"))
		Expect(jsonpath(ns, "lr/apply-a", "{.status.phase}")).To(Equal("Granted"), "holders keep their grant during a freeze")

		By("the running apply finishes: the freeze drains")
		mustKubectl("delete", "-n", ns, "lockrequest", "apply-a")
		_, err = kubectl("wait", "--for=condition=Drained", "commandlock/apply", "--timeout=10s")
		Expect(err).NotTo(HaveOccurred())
		Expect(jsonpath(ns, "lr/apply-b", "{.status.phase}")).To(Equal("Pending"), "still frozen")

		By("thawing: the waiting apply is granted")
		mustKubectl("patch", "commandlock", "apply", "--type", "merge", "-p", `{"spec":{"locked":false}}`)
		waitGranted(ns, "apply-b", 10*time.Second)
		Eventually(field("", "commandlock/apply", conditionField("Locked", "status")+" {.status.activeHolders}")).
			WithTimeout(settle).WithPolling(poll).Should(Equal("False 1"))

		By("freeze and thaw are Events on the CommandLock")
		Eventually(func() (string, error) {
			return kubectl("get", "events", "-n", "default", "--field-selector", "involvedObject.kind=CommandLock,involvedObject.name=apply",
				"-o", `jsonpath={range .items[*]}{.reason}: {.message}{"\n"}{end}`)
		}).WithTimeout(settle).WithPolling(poll).Should(And(
			ContainSubstring("Frozen: Apply commands are locked globally: maintenance window"),
			ContainSubstring("Thawed: apply commands may run again"),
		))
	})

	It("kubectl get locks lists every kind", func() {
		cl := "e2e-" + randSuffix()
		DeferCleanup(func() {
			_, _ = kubectl("delete", "commandlock", cl, "--ignore-not-found")
		})
		_, err := kubectlWithInput("apiVersion: locks.turnstile.dev/v1alpha1\nkind: CommandLock\nmetadata:\n  name: "+cl+"\nspec:\n  locked: false\n",
			"apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred())
		mustKubectl("apply", "-n", ns, "-f", sample("locks_v1alpha1_lockrequest.yaml"))
		waitGranted(ns, "plan-pr-100", 20*time.Second)
		lockName, err := jsonpath(ns, "lr/plan-pr-100", "{.status.locks[0].name}")
		Expect(err).NotTo(HaveOccurred())

		names := strings.Fields(mustKubectl("get", "locks", "-n", ns, "-o", "name"))
		Expect(names).To(ContainElements(
			"lockrequest.locks.turnstile.dev/plan-pr-100",
			"projectlock.locks.turnstile.dev/"+lockName,
			"commandlock.locks.turnstile.dev/"+cl,
		))
		Expect(mustKubectl("get", "locks", "-n", ns)).To(And(
			ContainSubstring("lockrequest.locks.turnstile.dev/plan-pr-100"),
			ContainSubstring("projectlock.locks.turnstile.dev/"+lockName),
			ContainSubstring("commandlock.locks.turnstile.dev/"+cl),
		))

		By("kubectl explain documents the priorities")
		Eventually(func() (string, error) { return kubectl("explain", "lockrequest.spec.priority") }).
			WithTimeout(settle).WithPolling(500 * time.Millisecond).Should(ContainSubstring("Critical"))
	})
})
