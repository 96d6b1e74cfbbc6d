package e2e

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gbytes"
	"github.com/onsi/gomega/gexec"
)

var _ = Describe("A reason on every lock", func() {
	It("is told to waiters, and shown by why, locks and kubectl get -o wide", func() {
		ns := createNamespace()
		mustKubectl("turnstile", "-n", ns, "acquire", "-l", "acme/infra:state", "--owner", "alice", "--pull", "100",
			"--name", "holder", "--reason", "migrating state")
		waiter := turnstile("-n", ns, "acquire", "-l", "acme/infra:state", "--owner", "bob", "--pull", "101", "--name", "waiter")
		Eventually(waiter.Err, settle).Should(gbytes.Say(regexp.QuoteMeta("lockrequest/waiter waiting: locked by pull #100 (alice): migrating state; position 1 of 1")))

		expires, err := jsonpath(ns, "lr/holder", "{.status.expiresAt}")
		Expect(err).NotTo(HaveOccurred())
		Expect(mustKubectl("turnstile", "-n", ns, "why", "waiter")).To(Equal(fmt.Sprintf(
			"lockrequest/waiter for pull #101 (bob): Pending\n"+
				"  lock acme/infra/state/default: held by pull #100 (alice) via holder (token %d, until %s): migrating state\n"+
				"    1. waiter pull #101 (bob) (Normal)  <- this request\n", token(ns, "holder"), expires)),
			"each fact once: the holder, its token, expiry and reason on the lock's line, the place in the queue")
		Expect(mustKubectl("turnstile", "-n", ns, "why", "holder")).To(ContainSubstring("\n  reason: migrating state\n"))

		locks := table(mustKubectl("turnstile", "-n", ns, "locks"))
		Expect(locks).To(ContainElement(SatisfyAll(HaveKeyWithValue("KEY", "acme/infra/state/default"), HaveKeyWithValue("REASON", "migrating state"))))

		wide := table(mustKubectl("-n", ns, "get", "lr", "-o", "wide"))
		Expect(wide).To(ContainElement(SatisfyAll(HaveKeyWithValue("NAME", "holder"), HaveKeyWithValue("REASON", "migrating state"))))
		Expect(table(mustKubectl("-n", ns, "get", "lr"))[0]).NotTo(HaveKey("REASON"), "the reason is a -o wide column")

		mustKubectl("turnstile", "-n", ns, "release", "holder")
		Eventually(waiter, settle).Should(gexec.Exit(0))
	})
})

var _ = Describe("kubectl turnstile why", func() {
	It("says each fact of a granted request once", func() {
		ns := createNamespace()
		mustKubectl("turnstile", "-n", ns, "acquire", "-l", "acme/infra:once", "--owner", "alice", "--pull", "5", "--name", "once", "--command", "apply")
		tok := fmt.Sprint(token(ns, "once"))
		expires, err := jsonpath(ns, "lr/once", "{.status.expiresAt}")
		Expect(err).NotTo(HaveOccurred())

		why := mustKubectl("turnstile", "-n", ns, "why", "once")
		Expect(why).To(Equal(fmt.Sprintf("lockrequest/once for pull #5 (alice), command apply: Granted, fencing token %s, expires %s\n"+
			"  lock acme/infra/once/default: held by this request\n", tok, expires)))
	})

	It("gives each key's own token for a request of several locks, and the end of a finished one", func() {
		ns := createNamespace()
		mustKubectl("turnstile", "-n", ns, "acquire", "-l", "acme/infra:a", "-l", "acme/infra:b", "--owner", "alice", "--name", "two")
		why := mustKubectl("turnstile", "-n", ns, "why", "two")
		Expect(why).To(MatchRegexp(`(?m)^  lock acme/infra/a/default: held by this request \(token [1-9][0-9]*\)$`))
		Expect(why).To(MatchRegexp(`(?m)^  lock acme/infra/b/default: held by this request \(token [1-9][0-9]*\)$`))

		mustKubectl("turnstile", "-n", ns, "release", "two")
		Eventually(field(ns, "lr/two", "{.status.phase}")).WithTimeout(settle).WithPolling(poll).Should(Equal("Released"))
		why = mustKubectl("turnstile", "-n", ns, "why", "two")
		Expect(why).To(MatchRegexp(`^lockrequest/two for alice: Released \(Released\): .+\n$`), "a finished request says how it ended, once, and nothing about locks it no longer has")
	})
})

var _ = Describe("Labels for repo, pull and owner", func() {
	BeforeEach(func() {
		By("installing the labels policy of config/labels, as config/default does")
		mustKubectl("apply", "-k", filepath.Join(repoRoot, "config", "labels"))
		DeferCleanup(func() {
			_, _ = kubectl("delete", "-k", filepath.Join(repoRoot, "config", "labels"), "--ignore-not-found")
		})
	})

	It("are set by the plugin, kept honest at admission, and select a pull request's requests", func() {
		ns := createNamespace()
		longOwner := "system:serviceaccount:ci-runners:atlantis-for-the-infrastructure-team@example.com"
		longRepo := "acme/" + strings.Repeat("terraform-modules-", 4) + "network"

		By("the API server refuses a request whose labels contradict its spec (once the policy is in force)")
		lying := `apiVersion: locks.turnstile.dev/v1alpha1
kind: LockRequest
metadata:
  name: liar
  labels:
    locks.turnstile.dev/pull: "101"
spec:
  locks: [{repo: acme/infra, path: net}]
  holder: {owner: mallory, pull: 100}
`
		Eventually(func() string {
			_, err := kubectlApply(ns, lying)
			if err == nil {
				_, _ = kubectl("-n", ns, "delete", "lr", "liar", "--wait=true")
			}
			return stderrOf(err)
		}).WithTimeout(10 * time.Second).WithPolling(200 * time.Millisecond).Should(ContainSubstring("label locks.turnstile.dev/pull must be spec.holder.pull (100)"))
		for label, want := range map[string]string{
			`locks.turnstile.dev/repo: "acme.other"`:  "label locks.turnstile.dev/repo must be the repository of spec.locks",
			`locks.turnstile.dev/owner: "alice"`:      "label locks.turnstile.dev/owner must be spec.holder.owner: mallory",
			`locks.turnstile.dev/owner: "x-0123abcd"`: "label locks.turnstile.dev/owner must be spec.holder.owner: mallory",
		} {
			_, err := kubectlApply(ns, strings.Replace(lying, `locks.turnstile.dev/pull: "101"`, label, 1))
			Expect(stderrOf(err)).To(ContainSubstring(want), label)
		}

		By("the plugin labels what it creates, long and unusual values made label-safe, and the policy accepts them")
		mustKubectl("turnstile", "-n", ns, "acquire", "--no-wait", "-l", "acme/infra:net", "--owner", "alice", "--pull", "100", "--name", "a-net")
		mustKubectl("turnstile", "-n", ns, "acquire", "--no-wait", "-l", "acme/infra:dns", "--owner", longOwner, "--pull", "100", "--name", "a-dns")
		mustKubectl("turnstile", "-n", ns, "acquire", "--no-wait", "-l", longRepo+":net", "--owner", "alice", "--pull", "100", "--name", "long-repo")
		mustKubectl("turnstile", "-n", ns, "acquire", "--no-wait", "-l", "acme/infra:net", "--owner", "bob", "--pull", "101", "--name", "b-net")
		mustKubectl("turnstile", "-n", ns, "acquire", "--no-wait", "-l", "acme/other:net", "--owner", "alice", "--pull", "100", "--name", "other-repo")
		Expect(jsonpath(ns, "lr/a-net", `{.metadata.labels}`)).To(MatchJSON(`{"locks.turnstile.dev/owner":"alice","locks.turnstile.dev/pull":"100","locks.turnstile.dev/repo":"acme.infra"}`))
		owner, err := jsonpath(ns, "lr/a-dns", `{.metadata.labels.locks\.turnstile\.dev/owner}`)
		Expect(err).NotTo(HaveOccurred())
		Expect(owner).To(MatchRegexp(`^system.serviceaccount.ci-runners.atlantis-for-the-in-[0-9a-f]{10}$`))
		repo, err := jsonpath(ns, "lr/long-repo", `{.metadata.labels.locks\.turnstile\.dev/repo}`)
		Expect(err).NotTo(HaveOccurred())
		Expect(len(repo)).To(BeNumerically("<=", 63))
		Expect(repo).To(MatchRegexp(`^acme\.terraform-modules-terraform-modules-terraform-m-[0-9a-f]{10}$`))

		By("a relabel that lies is refused as well")
		_, err = kubectl("-n", ns, "label", "lr", "b-net", "--overwrite", "locks.turnstile.dev/pull=100")
		Expect(stderrOf(err)).To(ContainSubstring("label locks.turnstile.dev/pull must be spec.holder.pull (101)"))

		By("kubectl delete lr -l selects exactly pull #100 of acme/infra")
		out := mustKubectl("-n", ns, "delete", "lr", "-l", "locks.turnstile.dev/repo=acme.infra,locks.turnstile.dev/pull=100")
		var deleted []string
		for _, m := range regexp.MustCompile(`lockrequest\S* "([^"]+)" deleted`).FindAllStringSubmatch(out, -1) {
			deleted = append(deleted, m[1])
		}
		Expect(deleted).To(ConsistOf("a-net", "a-dns"))
		Expect(strings.Fields(mustKubectl("-n", ns, "get", "lr", "-o", "jsonpath={.items[*].metadata.name}"))).
			To(ConsistOf("long-repo", "b-net", "other-repo"))
	})
})

var _ = Describe("kubectl turnstile release --pull", func() {
	It("releases every request of the pull request in the repository, labelled or not, held or waiting, and says which", func() {
		ns := createNamespace()
		mustKubectl("turnstile", "-n", ns, "acquire", "-l", "acme/infra:net", "--owner", "alice", "--pull", "100", "--name", "plan-net")
		mustKubectl("turnstile", "-n", ns, "acquire", "-l", "acme/infra:net", "-l", "acme/infra:dns", "--owner", "alice", "--pull", "100", "--name", "plan-both")
		mustKubectl("turnstile", "-n", ns, "acquire", "-l", "acme/infra:app", "--owner", "bob", "--pull", "7", "--name", "bob-app")
		// Written by hand, without labels; waits behind bob.
		_, err := kubectlApply(ns, lockRequest{Name: "by-hand", Repo: "acme/infra", Path: "app", Owner: "alice", Pull: 100}.YAML())
		Expect(err).NotTo(HaveOccurred())
		expectPending(ns, "by-hand")
		mustKubectl("turnstile", "-n", ns, "acquire", "-l", "acme/other:net", "--owner", "alice", "--pull", "100", "--name", "other-repo")
		mustKubectl("turnstile", "-n", ns, "acquire", "-l", "acme/infra:k8s", "--owner", "carol", "--pull", "101", "--name", "other-pull")

		out := mustKubectl("turnstile", "-n", ns, "release", "--pull", "100", "--repo", "acme/infra")
		Expect(out).To(Equal("lockrequest/by-hand released (pull #100 (alice), was Pending): acme/infra/app/default\n" +
			"lockrequest/plan-both released (pull #100 (alice), was Granted): acme/infra/net/default, acme/infra/dns/default\n" +
			"lockrequest/plan-net released (pull #100 (alice), was Granted): acme/infra/net/default\n"))
		for _, lr := range []string{"plan-net", "plan-both", "by-hand"} {
			Eventually(field(ns, "lr/"+lr, "{.status.phase}")).WithTimeout(settle).WithPolling(poll).Should(Equal("Released"), lr)
		}
		for _, lr := range []string{"bob-app", "other-repo", "other-pull"} {
			Expect(jsonpath(ns, "lr/"+lr, "{.status.phase}")).To(Equal("Granted"), lr)
		}
		Expect(mustKubectl("turnstile", "-n", ns, "release", "--pull", "100", "--repo", "acme/infra")).
			To(Equal("no unfinished lock request of pull #100 in acme/infra in namespace " + ns + "\n"))

		_, err = kubectl("turnstile", "-n", ns, "release", "--pull", "100")
		Expect(stderrOf(err)).To(ContainSubstring("--repo OWNER/NAME is required with --pull"))
	})
})

var _ = Describe("The plugin's kubectl flags", func() {
	It("takes the standard connection flags: --as, --request-timeout, --server, --token", func() {
		ns := createNamespace()
		_, err := kubectl("turnstile", "-n", ns, "--as", "nobody", "--request-timeout", "20s", "locks")
		Expect(stderrOf(err)).To(ContainSubstring(`User "nobody" cannot list resource "projectlocks"`))

		_, err = kubectl("turnstile", "-n", ns, "--server", "https://127.0.0.1:1", "--token", "t", "--insecure-skip-tls-verify", "--request-timeout", "5s", "locks")
		Expect(stderrOf(err)).To(ContainSubstring("127.0.0.1:1"))

		_, err = kubectl("turnstile", "-n", ns, "--context", "no-such-context", "locks")
		Expect(stderrOf(err)).To(ContainSubstring(`context "no-such-context" does not exist`))
	})
})
