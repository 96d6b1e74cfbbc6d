package e2e

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// keyToken is a LockRequest's token for its first key.
func keyToken(ns, lr string) int64 {
	GinkgoHelper()
	s, err := jsonpath(ns, "lockrequest/"+lr, "{.status.locks[0].fencingToken}")
	Expect(err).NotTo(HaveOccurred())
	n, err := strconv.ParseInt(s, 10, 64)
	Expect(err).NotTo(HaveOccurred(), "lockrequest %s has no token for its key (%q)", lr, s)
	return n
}

var _ = Describe("Shared locks, driven with kubectl", func() {
	var ns string
	inFreshNamespace(&ns)

	apply := func(r lockRequest) {
		GinkgoHelper()
		r.Repo, r.Path = "acme/infra", "modules/vpc"
		_, err := kubectlApply(ns, r.YAML())
		Expect(err).NotTo(HaveOccurred())
	}

	It("readers hold together, a writer waits and is preferred over a later reader, and tokens increase", func() {
		By("two readers of two pull requests hold the key at once")
		apply(lockRequest{Name: "plan-1", Owner: "alice", Pull: 1, Mode: "Shared"})
		waitGranted(ns, "plan-1", 20*time.Second)
		apply(lockRequest{Name: "plan-2", Owner: "bob", Pull: 2, Mode: "Shared"})
		waitGranted(ns, "plan-2", 20*time.Second)
		t1, t2 := keyToken(ns, "plan-1"), keyToken(ns, "plan-2")
		Expect(t2).To(BeNumerically(">", t1), "the later reader's grant has the higher token")

		rows := table(mustKubectl("get", "projectlocks", "-n", ns))
		Expect(rows).To(HaveLen(1))
		Expect(rows[0]).To(HaveKeyWithValue("MODE", "Shared"))
		Expect(rows[0]).To(HaveKeyWithValue("HOLDERS", "2"))
		out := mustKubectl("turnstile", "-n", ns, "locks")
		Expect(out).To(ContainSubstring("shared by 2: pull #1 (alice), pull #2 (bob)"))

		By("a writer waits for both readers")
		apply(lockRequest{Name: "apply-3", Owner: "carol", Pull: 3})
		expectPending(ns, "apply-3")

		By("a reader that comes after the writer does not pass it")
		apply(lockRequest{Name: "plan-4", Owner: "dave", Pull: 4, Mode: "Shared"})
		expectPending(ns, "plan-4")
		Eventually(field(ns, "lr/plan-4", "{.status.blockedBy}")).WithTimeout(settle).WithPolling(poll).
			Should(ContainSubstring("waiting behind exclusive request apply-3 of pull #3 (carol) (writer preference)"))
		why := mustKubectl("turnstile", "-n", ns, "why", "plan-4")
		Expect(why).To(ContainSubstring("held shared by 2: pull #1 (alice) via plan-1 (token " + fmt.Sprint(t1)))

		By("one reader leaves: the other keeps its grant and its token, the writer still waits")
		mustKubectl("-n", ns, "delete", "lockrequest", "plan-1")
		Eventually(field(ns, "projectlocks", "{.items[0].status.holderCount}")).WithTimeout(settle).WithPolling(poll).Should(Equal("1"))
		Expect(keyToken(ns, "plan-2")).To(Equal(t2))
		Expect(jsonpath(ns, "lr/apply-3", "{.status.phase}")).To(Equal("Pending"))

		By("the last reader leaves: the writer holds alone, above every reader")
		mustKubectl("-n", ns, "delete", "lockrequest", "plan-2")
		waitGranted(ns, "apply-3", 20*time.Second)
		tw := keyToken(ns, "apply-3")
		Expect(tw).To(BeNumerically(">", t2))
		rows = table(mustKubectl("get", "projectlocks", "-n", ns))
		Expect(rows[0]).To(HaveKeyWithValue("MODE", "Exclusive"))
		Expect(rows[0]).To(HaveKeyWithValue("HOLDER", "carol"))
		expectPending(ns, "plan-4")

		By("the writer leaves: the reader behind it holds, above the writer")
		mustKubectl("-n", ns, "delete", "lockrequest", "apply-3")
		waitGranted(ns, "plan-4", 20*time.Second)
		Expect(keyToken(ns, "plan-4")).To(BeNumerically(">", tw))
	})

	It("refuses a mode that is not Exclusive or Shared, naming both", func() {
		_, err := kubectlApply(ns, strings.Replace(lockRequest{Name: "typo", Repo: "acme/infra", Owner: "alice", Mode: "Shared"}.YAML(), "Shared", "Sharde", 1))
		Expect(err).To(HaveOccurred())
		Expect(stderrOf(err)).To(ContainSubstring(`spec.locks[0].mode: Unsupported value: "Sharde": supported values: "Exclusive", "Shared"`))
	})

	It("runs the shared Atlantis recipe (docs/atlantis.md): plans share the lock, an apply waits for them and holds alone", func() {
		doc := docYAML("atlantis.md", "turnstile-shared:")
		plan := turnstileRuns(dig(doc, "workflows", "turnstile-shared", "plan", "steps"))
		applyStep := turnstileRuns(dig(doc, "workflows", "turnstile-shared", "apply", "steps"))
		Expect(plan).To(HaveLen(1))
		Expect(applyStep).To(HaveLen(1))
		Expect(plan[0]).To(ContainSubstring("--shared"))
		Expect(applyStep[0]).NotTo(ContainSubstring("--shared"))

		r := newRecipeRunner(ns, "sh", "-c")
		dir := func(pull int) string {
			return filepath.Join("repos/acme/infra", fmt.Sprint(pull), "default/modules/vpc")
		}
		atlantis := func(pull int, author, command string) map[string]string {
			return map[string]string{
				"BASE_REPO_OWNER": "acme", "BASE_REPO_NAME": "infra", "REPO_REL_DIR": "modules/vpc", "WORKSPACE": "default",
				"PROJECT_NAME": "vpc-prod", "PULL_NUM": fmt.Sprint(pull), "PULL_AUTHOR": author,
				"PULL_URL": fmt.Sprintf("https://github.com/acme/infra/pull/%d", pull), "COMMAND_NAME": command,
				"PLANFILE": filepath.Join(r.dir, dir(pull), "vpc-prod-default.tfplan"),
			}
		}

		By("pull #101's plan holds the project's lock shared (its step is still running, say)")
		mustKubectl("turnstile", "-n", ns, "acquire", "-l", "acme/infra:modules/vpc:default:vpc-prod", "--owner", "bob", "--pull", "101", "--command", "plan", "--shared")

		By("pull #100's plan step runs beside it, with a token of its own")
		res := r.run(plan[0], dir(100), atlantis(100, "alice", "plan"))
		Expect(res.code).To(Equal(0), res.stderr)
		calls := r.terraformCalls()
		Expect(calls).To(ConsistOf(MatchRegexp(`^terraform plan -input=false -out \S+ token=[1-9][0-9]* request=` + ns + `/atlantis-100-\S+$`)))
		planToken := regexp.MustCompile(`token=([0-9]+)`).FindStringSubmatch(calls[0])[1]

		By("pull #100's apply step waits for the plan that still holds, then applies alone with a higher token")
		done := make(chan stepResult, 1)
		go func() {
			defer GinkgoRecover()
			done <- r.run(applyStep[0], dir(100), atlantis(100, "alice", "apply"))
		}()
		Eventually(func() string {
			out, _ := kubectl("-n", ns, "get", "lr", "-l", "locks.turnstile.dev/pull=100", "-o", "jsonpath={range .items[*]}{.spec.command}={.status.phase}:{.status.blockedBy} {end}")
			return out
		}).WithTimeout(settle).WithPolling(poll).Should(ContainSubstring("apply=Pending:locked by pull #101 (bob) (shared)"))
		Consistently(done).WithTimeout(time.Second).ShouldNot(Receive())
		mustKubectl("turnstile", "-n", ns, "release", "--pull", "101", "--repo", "acme/infra")
		var applied stepResult
		Eventually(done).WithTimeout(30 * time.Second).Should(Receive(&applied))
		Expect(applied.code).To(Equal(0), applied.stderr)
		calls = r.terraformCalls()
		Expect(calls).To(HaveLen(2))
		m := regexp.MustCompile(`^terraform apply -input=false \S+ token=([0-9]+) request=` + ns + `/atlantis-100-\S+$`).FindStringSubmatch(calls[1])
		Expect(m).NotTo(BeNil(), calls[1])
		a, _ := strconv.ParseInt(m[1], 10, 64)
		p, _ := strconv.ParseInt(planToken, 10, 64)
		Expect(a).To(BeNumerically(">", p), "the apply's token is above the plan's before it")
	})
})
