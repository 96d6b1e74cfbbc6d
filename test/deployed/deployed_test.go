package deployed

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

const team = "team-a"

// lockRequest is a LockRequest manifest on key acme/infra:path. owner "" leaves
// spec.holder.owner out: the admission policy fills in the caller.
type lockRequest struct {
	name, path, owner, command, ttl string
	pull                            int
}

func (r lockRequest) yaml() string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: locks.turnstile.dev/v1alpha1\nkind: LockRequest\nmetadata:\n  name: %s\nspec:\n  locks:\n  - repo: acme/infra\n    path: %q\n  holder:\n", r.name, r.path)
	if r.owner != "" {
		fmt.Fprintf(&b, "    owner: %s\n", r.owner)
	}
	fmt.Fprintf(&b, "    pull: %d\n", r.pull)
	if r.command != "" {
		fmt.Fprintf(&b, "  command: %s\n", r.command)
	}
	if r.ttl != "" {
		fmt.Fprintf(&b, "  ttl: %s\n", r.ttl)
	}
	return b.String()
}

// as runs kubectl as user (--as, the admin's credentials impersonating them: every check the
// API server makes is made for user) in the team's namespace.
func as(user, stdin string, args ...string) (string, error) {
	return run(kubeconfig, stdin, append([]string{"--as=" + user, "-n", team}, args...)...)
}

func mustAs(user, stdin string, args ...string) string {
	GinkgoHelper()
	out, err := as(user, stdin, args...)
	Expect(err).NotTo(HaveOccurred())
	return out
}

// take creates r as user. Where no mutating policy fills in the owner (the validating-only
// install), user names it, as docs/install.md tells them to.
func take(user string, r lockRequest) {
	GinkgoHelper()
	mustAs(user, r.filled(user).yaml(), "apply", "-f", "-")
}

// filled is r with its owner written by user where the bundle has no mutating policy.
func (r lockRequest) filled(user string) lockRequest {
	if !mutating() && r.owner == "" {
		r.owner = user
	}
	return r
}

// get reads a jsonpath of a team object as the admin (to assert; nobody acts as the admin).
func get(obj, expr string) func() (string, error) {
	return func() (string, error) { return run(kubeconfig, "", "-n", team, "get", obj, "-o", "jsonpath="+expr) }
}

func condition(typ, field string) string {
	return fmt.Sprintf(`{.status.conditions[?(@.type=="%s")].%s}`, typ, field)
}

func tokenOf(lr string) int64 {
	GinkgoHelper()
	s, err := get("lr/"+lr, "{.status.fencingToken}")()
	Expect(err).NotTo(HaveOccurred())
	n, err := strconv.ParseInt(s, 10, 64)
	Expect(err).NotTo(HaveOccurred())
	return n
}

func waitGranted(user, lr string) {
	GinkgoHelper()
	mustAs(user, "", "wait", "--for=condition=Granted", "lr/"+lr, "--timeout=30s")
}

func eventually(f func() (string, error)) AsyncAssertion {
	return Eventually(f).WithTimeout(settle).WithPolling(poll)
}

var _ = Describe("Deployed as its ServiceAccount, under the admission policies", Ordered, func() {
	var (
		m          *manager
		namespace  string
		sa         string
		deployArgs []string
		deployEnv  []corev1.EnvVar
	)

	AfterAll(func() {
		if m == nil {
			return
		}
		defer m.kill()
		if CurrentSpecReport().Failed() {
			_, _ = run(kubeconfig, "", "get", "lockrequests,projectlocks,leases", "-A", "-o", "yaml")
			fmt.Fprintf(GinkgoWriter, "--- manager log:\n%s", m.log())
		}
	})

	It("installs with kubectl apply --server-side -k config/default (or the overlay for this version), and the policies take effect", func() {
		manifests, err := run(kubeconfig, "", "kustomize", bundle.Dir)
		Expect(err).NotTo(HaveOccurred())
		for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(manifests, -1) {
			var o struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Namespace string `json:"namespace"`
				} `json:"metadata"`
				Spec struct {
					Template struct {
						Spec struct {
							ServiceAccountName string `json:"serviceAccountName"`
							Containers         []struct {
								Args []string        `json:"args"`
								Env  []corev1.EnvVar `json:"env"`
							} `json:"containers"`
						} `json:"spec"`
					} `json:"template"`
				} `json:"spec"`
			}
			Expect(yaml.Unmarshal([]byte(doc), &o)).To(Succeed())
			if o.Kind == "Deployment" {
				namespace, sa = o.Metadata.Namespace, o.Spec.Template.Spec.ServiceAccountName
				deployArgs = o.Spec.Template.Spec.Containers[0].Args
				deployEnv = o.Spec.Template.Spec.Containers[0].Env
			}
		}
		Expect(deployArgs).To(ContainElement("--active-active=true"), "the Deployment runs its replicas active-active")
		admin("apply", "--server-side", "-k", bundle.Dir)
		admin("wait", "--for=condition=Established", "--timeout=60s",
			"crd/lockrequests.locks.turnstile.dev", "crd/projectlocks.locks.turnstile.dev", "crd/commandlocks.locks.turnstile.dev")

		By("the team: requesters alice and bob, viewer carol, the namespace's admin dana, a CI ServiceAccount; frank freezes for the platform team")
		admin("create", "namespace", team)
		admin("-n", team, "create", "rolebinding", "people", "--clusterrole=turnstile-requester", "--user=alice", "--user=bob", "--serviceaccount="+team+":ci")
		admin("-n", team, "create", "rolebinding", "viewers", "--clusterrole=turnstile-viewer", "--user=carol")
		admin("-n", team, "create", "rolebinding", "team-admin", "--clusterrole=turnstile-admin", "--user=dana")
		admin("-n", team, "create", "serviceaccount", "ci")
		admin("create", "clusterrolebinding", "platform-locks", "--clusterrole=turnstile-admin", "--group=platform-team")

		By("polling until each policy denies what it must (policies load asynchronously)")
		// Served once the CRDs are, and accepted without an owner once the mutating policy runs.
		Eventually(func() error {
			_, err := as("alice", lockRequest{name: "warmup", path: "warmup"}.filled("alice").yaml(), "apply", "-f", "-")
			return err
		}).WithTimeout(settle).WithPolling(200 * time.Millisecond).Should(Succeed())
		for policy, try := range map[string]func() error{
			"turnstile-lockrequest-owner": func() error {
				_, err := as("bob", lockRequest{name: "not-mine", path: "warmup", owner: "alice"}.yaml(), "create", "--dry-run=server", "-f", "-")
				return err
			},
			"turnstile-lockrequest-priority": func() error {
				_, err := as("alice", lockRequest{name: "critical", path: "warmup"}.filled("alice").yaml()+"  priority: Critical\n", "create", "--dry-run=server", "-f", "-")
				return err
			},
			"turnstile-lockrequest-changes": func() error {
				_, err := as("bob", "", "delete", "--dry-run=server", "lr/warmup")
				return err
			},
		} {
			Eventually(try).WithTimeout(settle).WithPolling(200*time.Millisecond).Should(MatchError(ContainSubstring("ValidatingAdmissionPolicy '"+policy+"'")),
				"policy %s never took effect", policy)
		}
		mustAs("alice", "", "delete", "lr/warmup")
		lease := "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: warmup\n  labels:\n    locks.turnstile.dev/role: workdir-guard\n"
		if !mutating() {
			// Nothing stamps the creator: alice writes it (test/validatingonly: refused without).
			lease += "  annotations:\n    locks.turnstile.dev/created-by: alice\n"
		}
		Eventually(func() (string, error) {
			out, err := as("alice", lease, "create", "--dry-run=server", "-f", "-", "-o", `jsonpath={.metadata.annotations.locks\.turnstile\.dev/created-by}`)
			return out, err
		}).WithTimeout(settle).WithPolling(200*time.Millisecond).Should(Equal("alice"), "the Lease policy never took effect")
		mustAs("alice", lease, "create", "-f", "-")
		Eventually(func() error { _, err := as("bob", "", "delete", "--dry-run=server", "lease/warmup"); return err }).
			WithTimeout(settle).WithPolling(200 * time.Millisecond).Should(MatchError(ContainSubstring("ValidatingAdmissionPolicy 'turnstile-holder-lease'")))
		mustAs("alice", "", "delete", "lease/warmup")
	})

	It("runs the manager binary as the installed ServiceAccount, with the Deployment's args (active-active membership)", func() {
		m = startManager(serviceAccountKubeconfig(namespace, sa), namespace, deployArgs, deployEnv, "--finished-retention="+retention.String())
		eventually(func() (string, error) {
			if err := m.running(); err != nil {
				StopTrying(err.Error()).Now()
			}
			return run(kubeconfig, "", "-n", namespace, "get", "lease", "-l", "locks.turnstile.dev/role=member", "-o", "jsonpath={.items[*].spec.holderIdentity}")
		}).Should(Not(BeEmpty()), "the manager never wrote its membership Lease")
	})

	It("grants a request to its owner (filled in by admission), queues another, renews and hands off", func() {
		take("alice", lockRequest{name: "vpc-1", path: "modules/vpc", pull: 1})
		waitGranted("alice", "vpc-1")
		Expect(get("lr/vpc-1", "{.spec.holder.owner}")()).To(Equal("alice"))
		first := tokenOf("vpc-1")

		take("bob", lockRequest{name: "vpc-2", path: "modules/vpc", pull: 2})
		eventually(get("lr/vpc-2", condition("Granted", "reason"))).Should(Equal("Queued"))

		By("bob can neither release nor renew alice's grant")
		_, err := as("bob", "", "patch", "lr/vpc-1", "--type=merge", "-p", `{"spec":{"release":true}}`)
		Expect(err).To(MatchError(ContainSubstring(`lockrequests.locks.turnstile.dev "vpc-1" is forbidden: ValidatingAdmissionPolicy 'turnstile-lockrequest-changes' with binding 'turnstile-lockrequest-changes' denied request: lockrequest vpc-1 is held for alice: only its owner, the delegate that created it, or a turnstile-admin in namespace team-a may change or release it, and you are bob`)))
		_, err = as("bob", "", "patch", "lr/vpc-1", "--type=merge", "-p", `{"spec":{"ttl":"2h"}}`)
		Expect(err).To(MatchError(ContainSubstring("ValidatingAdmissionPolicy 'turnstile-lockrequest-changes'")))

		By("alice renews: the manager records the renewal and moves the expiry")
		mustAs("alice", "", "patch", "lr/vpc-1", "--type=merge", "-p", `{"spec":{"ttl":"1h"}}`)
		eventually(get("lr/vpc-1", "{.status.renewedAt}")).ShouldNot(BeEmpty())
		renewed, err := get("lr/vpc-1", "{.status.renewedAt}")()
		Expect(err).NotTo(HaveOccurred())
		at, err := time.Parse(time.RFC3339, renewed)
		Expect(err).NotTo(HaveOccurred())
		expires, err := get("lr/vpc-1", "{.status.expiresAt}")()
		Expect(err).NotTo(HaveOccurred())
		until, err := time.Parse(time.RFC3339, expires)
		Expect(err).NotTo(HaveOccurred())
		// Both are stored to the second.
		Expect(until.Sub(at)).To(BeNumerically("~", time.Hour, time.Second), "expiresAt = renewedAt + the new ttl")

		By("alice releases: the lock passes to bob with a greater fencing token")
		mustAs("alice", "", "patch", "lr/vpc-1", "--type=merge", "-p", `{"spec":{"release":true}}`)
		waitGranted("bob", "vpc-2")
		Expect(tokenOf("vpc-2")).To(BeNumerically(">", first))
		Expect(get("lr/vpc-1", "{.status.phase}")()).To(Equal("Released"))
	})

	It("a platform admin freezes applies; the freeze drains, and thaws", func() {
		frank := func(args ...string) string {
			GinkgoHelper()
			out, err := run(kubeconfig, "", append([]string{"--as=frank", "--as-group=platform-team"}, args...)...)
			Expect(err).NotTo(HaveOccurred())
			return out
		}
		frank("apply", "-f", filepath.Join(repoRoot, "config", "samples", "locks_v1alpha1_commandlock.yaml"))
		take("alice", lockRequest{name: "apply-a", path: "a", pull: 3, command: "apply"})
		waitGranted("alice", "apply-a")

		By("a requester may not freeze")
		_, err := as("alice", "", "patch", "commandlock/apply", "--type=merge", "-p", `{"spec":{"locked":true}}`)
		Expect(err).To(MatchError(ContainSubstring(`commandlocks.locks.turnstile.dev "apply" is forbidden: User "alice" cannot patch resource "commandlocks" in API group "locks.turnstile.dev" at the cluster scope`)))

		frank("patch", "commandlock/apply", "--type=merge", "-p", `{"spec":{"locked":true,"reason":"maintenance window"}}`)
		eventually(func() (string, error) {
			return run(kubeconfig, "", "get", "commandlock/apply", "-o", "jsonpath="+condition("Locked", "status"))
		}).Should(Equal("True"))
		take("bob", lockRequest{name: "apply-b", path: "b", pull: 4, command: "apply"})
		eventually(get("lr/apply-b", condition("Granted", "reason"))).Should(Equal("CommandLocked"))
		Expect(get("lr/apply-a", "{.status.phase}")()).To(Equal("Granted"), "holders keep their grant during a freeze")

		By("carol, a viewer in the namespace only, waits for the drain as README.md says")
		_, err = as("carol", "", "wait", "--for=condition=Drained", "commandlock/apply", "--timeout=1s")
		Expect(err).To(MatchError(ContainSubstring("timed out waiting for the condition")))
		mustAs("alice", "", "delete", "lr/apply-a")
		mustAs("carol", "", "wait", "--for=condition=Drained", "commandlock/apply", "--timeout=30s")
		out := mustAs("carol", "", "get", "locks")
		Expect(out).To(ContainSubstring("commandlock.locks.turnstile.dev/apply"))

		By("the thaw grants the waiting apply")
		frank("patch", "commandlock/apply", "--type=merge", "-p", `{"spec":{"locked":false}}`)
		waitGranted("bob", "apply-b")
		mustAs("bob", "", "delete", "lr/apply-b")
	})

	It("a CI job's holder Lease (kubectl turnstile run, its own token) is its own; when the job dies its locks pass on", func() {
		ci := serviceAccountKubeconfig(team, "ci")
		ciUser := "system:serviceaccount:" + team + ":ci"
		cmd := exec.Command(kubectlBin, "turnstile", "-n", team, "run", "-l", "acme/infra:modules/ci", "--name", "ci-run",
			"--lease-duration=8s", "--grace=1s", "--", "sleep", "600")
		cmd.Env = append(os.Environ(), "KUBECONFIG="+ci, "KUBECACHEDIR="+cacheDir, "TURNSTILE_OWNER=")
		cmd.Stdout, cmd.Stderr = GinkgoWriter, GinkgoWriter
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		Expect(cmd.Start()).To(Succeed())
		var waitErr error
		exited := make(chan struct{})
		go func() { waitErr = cmd.Wait(); close(exited) }()
		DeferCleanup(func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		})
		eventually(get("lr/ci-run", "{.status.phase}")).Should(Equal("Granted"))

		By("the plugin named no owner: it is the ServiceAccount, as the API server knows it")
		Expect(get("lr/ci-run", "{.spec.holder.owner}")()).To(Equal(ciUser))
		Expect(get("lr/ci-run", `{.metadata.annotations.locks\.turnstile\.dev/created-by}`)()).To(Equal(ciUser))
		lease, err := get("lr/ci-run", "{.spec.holder.lease}")()
		Expect(err).NotTo(HaveOccurred())
		Expect(get("lease/"+lease, `{.metadata.annotations.locks\.turnstile\.dev/created-by}`)()).To(Equal(ciUser))

		By("bob can neither delete the job's Lease nor release its request")
		_, err = as("bob", "", "delete", "lease/"+lease)
		Expect(err).To(MatchError(ContainSubstring(fmt.Sprintf(`leases.coordination.k8s.io %q is forbidden: ValidatingAdmissionPolicy 'turnstile-holder-lease' with binding 'turnstile-holder-lease' denied request: lease %s is the holder Lease of %s (label locks.turnstile.dev/role): only %s or a turnstile-admin in namespace team-a may delete it, and you are bob; to take its locks, wait for them or ask an admin to force-unlock`, lease, lease, ciUser, ciUser))))
		_, err = as("bob", "", "delete", "lr/ci-run")
		Expect(err).To(MatchError(ContainSubstring("ValidatingAdmissionPolicy 'turnstile-lockrequest-changes'")))
		take("bob", lockRequest{name: "ci-next", path: "modules/ci", pull: 5})
		eventually(get("lr/ci-next", condition("Granted", "reason"))).Should(Equal("Queued"))

		By("the job dies (SIGKILL of run: its keeper stops the command's tree and releases nothing): its Lease lapses, its request is released as HolderLost, bob is granted")
		Expect(cmd.Process.Kill()).To(Succeed())
		Eventually(exited).WithTimeout(settle).Should(BeClosed())
		Expect(waitErr).To(MatchError("signal: killed"))
		eventually(get("lr/ci-run", "{.status.phase} "+condition("Granted", "reason"))).Should(Equal("Released HolderLost"))
		waitGranted("bob", "ci-next")
		mustAs("bob", "", "delete", "lr/ci-next")
	})

	It("a deadlock fails one request with reason Deadlock, naming the cycle", func() {
		take("alice", lockRequest{name: "dl-a1", path: "x", owner: "alice", pull: 6})
		take("bob", lockRequest{name: "dl-b1", path: "y", pull: 7})
		waitGranted("alice", "dl-a1")
		waitGranted("bob", "dl-b1")
		take("alice", lockRequest{name: "dl-a2", path: "y", pull: 6})
		eventually(get("lr/dl-a2", condition("Granted", "reason"))).Should(Equal("Queued"))
		take("bob", lockRequest{name: "dl-b2", path: "x", pull: 7})
		// One read: a finished request is deleted after the retention, perhaps between two reads.
		eventually(get("lr/dl-b2", "{.status.phase} "+condition("Granted", "reason")+" "+condition("Granted", "message"))).
			Should(And(HavePrefix("Failed Deadlock "), ContainSubstring("alice"), ContainSubstring("bob")))
		mustAs("bob", "", "delete", "lr/dl-b1", "lr/dl-b2", "--ignore-not-found")
		waitGranted("alice", "dl-a2")
		mustAs("alice", "", "delete", "lr/dl-a1", "lr/dl-a2")
	})

	It("the namespace's admin force-unlocks; a requester may not", func() {
		take("alice", lockRequest{name: "fu-1", path: "modules/dns", pull: 8})
		waitGranted("alice", "fu-1")
		take("bob", lockRequest{name: "fu-2", path: "modules/dns", pull: 9})
		eventually(get("lr/fu-2", condition("Granted", "reason"))).Should(Equal("Queued"))
		before := tokenOf("fu-1")
		lock, err := get("lr/fu-1", "{.status.locks[0].name}")()
		Expect(err).NotTo(HaveOccurred())

		_, err = as("bob", "", "delete", "projectlock/"+lock)
		Expect(err).To(MatchError(ContainSubstring(fmt.Sprintf(`projectlocks.locks.turnstile.dev %q is forbidden: User "bob" cannot delete resource "projectlocks"`, lock))))
		mustAs("dana", "", "delete", "projectlock/"+lock, "--wait=false")
		eventually(get("lr/fu-1", "{.status.phase} "+condition("Granted", "reason"))).Should(Equal("Released ForceUnlocked"))
		waitGranted("bob", "fu-2")
		Expect(tokenOf("fu-2")).To(BeNumerically(">", before))
		mustAs("bob", "", "delete", "lr/fu-2")
	})

	It("deletes finished requests after their retention (the policies exempt the manager)", func() {
		for _, lr := range []string{"vpc-1", "ci-run", "fu-1"} {
			eventually(func() (string, error) {
				out, err := run(kubeconfig, "", "-n", team, "get", "lr/"+lr, "--ignore-not-found", "-o", "name")
				return strings.TrimSpace(out), err
			}).Should(BeEmpty(), "finished request %s is still there %s after it finished", lr, retention)
		}
	})

	It("stops cleanly, and was never forbidden anything", func() {
		Expect(m.running()).To(Succeed())
		Expect(m.p.Stop(shutdownGrace)).To(Succeed(), "the manager did not exit cleanly within %s of SIGTERM", shutdownGrace)
		Expect(m.log()).To(ContainSubstring("starting manager"), "the manager's log was captured")
		Expect(m.forbiddenLines()).To(BeEmpty(), "the manager lacked a permission")
	})
})
