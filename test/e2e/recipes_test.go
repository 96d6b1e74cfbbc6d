package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"
)

// The recipes in docs/atlantis.md and docs/github-actions.md, run as written: the test reads
// the YAML from the doc and runs each `kubectl turnstile` step with the shell the tool uses and
// the variables the tool sets, so the doc and what is tested cannot drift apart. terraform is
// not what is tested: a script named terraform on PATH records how it was called.

// docYAML is the first ```yaml block of docs/NAME that contains marker, parsed.
func docYAML(name, marker string) map[string]any {
	GinkgoHelper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "docs", name))
	Expect(err).NotTo(HaveOccurred())
	for _, m := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(data), -1) {
		if strings.Contains(m[1], marker) {
			var doc map[string]any
			Expect(yaml.Unmarshal([]byte(m[1]), &doc)).To(Succeed(), "the %s block of docs/%s", marker, name)
			return doc
		}
	}
	Fail(fmt.Sprintf("docs/%s has no ```yaml block with %q", name, marker))
	return nil
}

// dig walks a parsed YAML document by keys.
func dig(doc any, keys ...string) any {
	GinkgoHelper()
	for _, k := range keys {
		m, ok := doc.(map[string]any)
		Expect(ok).To(BeTrue(), "no map at %q", k)
		doc = m[k]
	}
	return doc
}

// turnstileRuns are the run: commands of steps that call kubectl turnstile, in order.
func turnstileRuns(steps any) []string {
	GinkgoHelper()
	list, ok := steps.([]any)
	Expect(ok).To(BeTrue(), "steps is not a list: %v", steps)
	var runs []string
	for _, s := range list {
		m, ok := s.(map[string]any)
		if !ok {
			continue // an Atlantis built-in step: init, plan, apply
		}
		if run, _ := m["run"].(string); strings.Contains(run, "kubectl turnstile") {
			runs = append(runs, run)
		}
	}
	return runs
}

// stepResult is one run step's outcome.
type stepResult struct {
	stdout, stderr string
	code           int
}

// recipeRunner runs doc steps as a CI system would: a shell, the tool's variables, kubectl and
// the plugin on PATH, a kubeconfig whose context names the test's namespace (the doc's lines
// name none), and a terraform that records its calls.
type recipeRunner struct {
	shell      []string
	kubeconfig string
	path       string
	calls      string // the file terraform appends its calls to
	dir        string
}

func newRecipeRunner(ns string, shell ...string) *recipeRunner {
	GinkgoHelper()
	dir := GinkgoT().TempDir()
	r := &recipeRunner{shell: shell, dir: dir, kubeconfig: filepath.Join(dir, "kubeconfig"), calls: filepath.Join(dir, "terraform-calls")}
	data, err := os.ReadFile(kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	Expect(os.WriteFile(r.kubeconfig, data, 0o600)).To(Succeed())
	mustKubectl("--kubeconfig", r.kubeconfig, "config", "set-context", "--current", "--namespace", ns)

	bin := filepath.Join(dir, "bin")
	Expect(os.MkdirAll(bin, 0o755)).To(Succeed())
	tf := "#!/bin/sh\necho \"terraform $* token=$TURNSTILE_FENCING_TOKEN request=$TURNSTILE_LOCKREQUEST\" >> " + r.calls + "\n"
	Expect(os.WriteFile(filepath.Join(bin, "terraform"), []byte(tf), 0o755)).To(Succeed())
	r.path = bin + string(os.PathListSeparator) + filepath.Dir(kubectlBin) + string(os.PathListSeparator) + os.Getenv("PATH")
	return r
}

// ciVar reports variables a CI system sets, which the test's own environment must not leak in.
func ciVar(name string) bool {
	if strings.HasPrefix(name, "GITHUB_") {
		return true
	}
	switch name {
	case "BASE_REPO_OWNER", "BASE_REPO_NAME", "REPO_REL_DIR", "WORKSPACE", "PROJECT_NAME", "PULL_NUM", "PULL_AUTHOR",
		"PULL_URL", "COMMAND_NAME", "HEAD_COMMIT", "PLANFILE", "KUBECONFIG", "TURNSTILE_OWNER":
		return true
	}
	return false
}

// run runs one step's command with vars set, in workdir (relative to the runner's directory).
func (r *recipeRunner) run(command, workdir string, vars map[string]string) stepResult {
	GinkgoHelper()
	ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.shell[0], append(r.shell[1:], command)...)
	cmd.Dir = filepath.Join(r.dir, workdir)
	Expect(os.MkdirAll(cmd.Dir, 0o755)).To(Succeed())
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !ciVar(name) && name != "PATH" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "PATH="+r.path, "KUBECONFIG="+r.kubeconfig, "KUBECACHEDIR="+cacheDir)
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	fmt.Fprintf(GinkgoWriter, "$ %s\n%s%s", command, stdout.String(), stderr.String())
	Expect(ctx.Err()).NotTo(HaveOccurred(), "the step did not finish within %s", kubectlTimeout)
	res := stepResult{stdout: stdout.String(), stderr: stderr.String()}
	if err != nil {
		var ee *exec.ExitError
		Expect(errors.As(err, &ee)).To(BeTrue(), "the step did not run: %v", err)
		res.code = ee.ExitCode()
	}
	return res
}

// terraformCalls are the calls the terraform script recorded.
func (r *recipeRunner) terraformCalls() []string {
	data, err := os.ReadFile(r.calls)
	if os.IsNotExist(err) {
		return nil
	}
	Expect(err).NotTo(HaveOccurred())
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

// requestsOf names the LockRequests of a pull request, by its label.
func requestsOf(ns string, pull int) []string {
	GinkgoHelper()
	out := mustKubectl("-n", ns, "get", "lr", "-l", fmt.Sprintf("locks.turnstile.dev/pull=%d", pull), "-o", "jsonpath={.items[*].metadata.name}")
	return strings.Fields(out)
}

var _ = Describe("The Atlantis recipe (docs/atlantis.md)", func() {
	It("locks a project from plan to apply, refuses another pull request with the holder's reason, and is released by pull", func() {
		ns := createNamespace()
		doc := docYAML("atlantis.md", "workflows:")
		Expect(dig(doc, "repos")).To(ContainElement(HaveKeyWithValue("repo_locks", HaveKeyWithValue("mode", "disabled"))),
			"the recipe turns Atlantis's own locking off")
		plan := turnstileRuns(dig(doc, "workflows", "turnstile", "plan", "steps"))
		apply := turnstileRuns(dig(doc, "workflows", "turnstile", "apply", "steps"))
		Expect(plan).To(HaveLen(1))
		Expect(apply).To(HaveLen(1))

		// Atlantis runs a custom run step with sh -c, in the project's directory.
		r := newRecipeRunner(ns, "sh", "-c")
		atlantis := func(pull int, author, command string) map[string]string {
			return map[string]string{
				"BASE_REPO_OWNER": "acme", "BASE_REPO_NAME": "infra", "HEAD_REPO_OWNER": "acme", "HEAD_REPO_NAME": "infra",
				"REPO_REL_DIR": "modules/vpc", "WORKSPACE": "default", "PROJECT_NAME": "vpc-prod",
				"PULL_NUM": fmt.Sprint(pull), "PULL_AUTHOR": author, "PULL_URL": fmt.Sprintf("https://github.com/acme/infra/pull/%d", pull),
				"USER_NAME": author, "COMMAND_NAME": command, "HEAD_COMMIT": fmt.Sprintf("c0ffee%d", pull),
				"DIR":      filepath.Join(r.dir, "repos/acme/infra", fmt.Sprint(pull), "default/modules/vpc"),
				"PLANFILE": filepath.Join(r.dir, "repos/acme/infra", fmt.Sprint(pull), "default/modules/vpc/vpc-prod-default.tfplan"),
			}
		}
		dir := func(pull int) string {
			return filepath.Join("repos/acme/infra", fmt.Sprint(pull), "default/modules/vpc")
		}

		By("pull #100's plan step takes the lock and keeps it")
		res := r.run(plan[0], dir(100), atlantis(100, "alice", "plan"))
		Expect(res.code).To(Equal(0), res.stderr)
		Expect(res.stdout).To(MatchRegexp(`lockrequest/atlantis-100-\S+ granted: fencing token [1-9][0-9]*`))
		held := requestsOf(ns, 100)
		Expect(held).To(HaveLen(1))
		Expect(jsonpath(ns, "lr/"+held[0], `{.spec.locks[0].repo}|{.spec.locks[0].path}|{.spec.locks[0].workspace}|{.spec.locks[0].project}|{.spec.holder.owner}|{.spec.holder.pull}|{.spec.holder.url}|{.spec.command}|{.spec.reason}|{.status.phase}`)).
			To(Equal("acme/infra|modules/vpc|default|vpc-prod|alice|100|https://github.com/acme/infra/pull/100|plan|atlantis plan of c0ffee100|Granted"))
		Expect(jsonpath(ns, "lr/"+held[0], `{.metadata.labels.locks\.turnstile\.dev/repo}|{.metadata.labels.locks\.turnstile\.dev/owner}`)).
			To(Equal("acme.infra|alice"))

		By("pull #101's plan step of the same project is refused at once, with who holds it and why")
		res = r.run(plan[0], dir(101), atlantis(101, "bob", "plan"))
		Expect(res.code).NotTo(Equal(0))
		Expect(res.stderr).To(ContainSubstring("acme/infra/modules/vpc/default/vpc-prod is busy and waitTimeout is 0s: locked by pull #100 (alice): atlantis plan of c0ffee100"))

		By("pull #100's apply step re-enters its lock, runs terraform apply with the fencing token, and releases only its own request")
		res = r.run(apply[0], dir(100), atlantis(100, "alice", "apply"))
		Expect(res.code).To(Equal(0), res.stderr)
		Expect(r.terraformCalls()).To(ConsistOf(MatchRegexp(
			`^terraform apply -input=false ` + regexp.QuoteMeta(atlantis(100, "alice", "apply")["PLANFILE"]) + ` token=[1-9][0-9]* request=` + ns + `/atlantis-100-\S+$`)))
		Expect(requestsOf(ns, 100)).To(HaveLen(2))
		Expect(jsonpath(ns, "lr/"+held[0], "{.status.phase}")).To(Equal("Granted"), "the plan's lock is kept after the apply, as Atlantis keeps it until the pull request closes")

		By("the apply of a pull request that does not hold the lock fails before terraform runs")
		res = r.run(apply[0], dir(101), atlantis(101, "bob", "apply"))
		Expect(res.code).NotTo(Equal(0))
		Expect(res.stderr).To(ContainSubstring("locked by pull #100 (alice)"))
		Expect(r.terraformCalls()).To(HaveLen(1))

		By("a step without Atlantis's variables says which are missing")
		vars := atlantis(102, "carol", "plan")
		delete(vars, "PULL_NUM")
		delete(vars, "COMMAND_NAME")
		res = r.run(plan[0], dir(102), vars)
		Expect(res.code).NotTo(Equal(0))
		Expect(res.stderr).To(ContainSubstring("--from atlantis: PULL_NUM, COMMAND_NAME not set"))

		By("pull #100 is closed: no hook runs, so it is released by pull")
		out := mustKubectl("turnstile", "-n", ns, "release", "--pull", "100", "--repo", "acme/infra")
		Expect(out).To(Equal(fmt.Sprintf("lockrequest/%s released (pull #100 (alice), was Granted): acme/infra/modules/vpc/default/vpc-prod\n", held[0])))
		res = r.run(plan[0], dir(101), atlantis(101, "bob", "plan"))
		Expect(res.code).To(Equal(0), res.stderr)
		Expect(res.stdout).To(MatchRegexp(`lockrequest/atlantis-101-\S+ granted`))
	})
})

var _ = Describe("The GitHub Actions recipe (docs/github-actions.md)", func() {
	It("locks at plan, applies under the lock, and the closed job releases every lock of the pull request", func() {
		ns := createNamespace()
		doc := docYAML("github-actions.md", "jobs:")
		plan := turnstileRuns(dig(doc, "jobs", "plan", "steps"))
		apply := turnstileRuns(dig(doc, "jobs", "apply", "steps"))
		unlock := turnstileRuns(dig(doc, "jobs", "unlock", "steps"))
		Expect(plan).To(HaveLen(1))
		Expect(apply).To(HaveLen(1))
		Expect(unlock).To(HaveLen(1))
		workdir := dig(doc, "jobs", "plan", "defaults", "run", "working-directory").(string)

		// Actions runs a run step with bash --noprofile --norc -eo pipefail.
		r := newRecipeRunner(ns, "bash", "--noprofile", "--norc", "-eo", "pipefail", "-c")
		actions := func(pull int, author, action string) map[string]string {
			event := filepath.Join(r.dir, fmt.Sprintf("event-%d-%s.json", pull, action))
			payload := fmt.Sprintf(`{"action": %q, "number": %d, "pull_request": {"number": %d, "html_url": "https://github.com/acme/infra/pull/%d", "user": {"login": %q}}}`,
				action, pull, pull, pull, author)
			Expect(os.WriteFile(event, []byte(payload), 0o600)).To(Succeed())
			return map[string]string{
				"GITHUB_ACTIONS": "true", "GITHUB_REPOSITORY": "acme/infra", "GITHUB_ACTOR": "someone-who-pushed",
				"GITHUB_EVENT_NAME": "pull_request", "GITHUB_EVENT_PATH": event, "GITHUB_REF": fmt.Sprintf("refs/pull/%d/merge", pull),
				"GITHUB_HEAD_REF": fmt.Sprintf("feature-%d", pull), "GITHUB_SERVER_URL": "https://github.com", "GITHUB_RUN_ID": "4711",
			}
		}

		By("pull #7's plan job locks infra/vpc for the pull request's author")
		res := r.run(plan[0], workdir, actions(7, "alice", "synchronize"))
		Expect(res.code).To(Equal(0), res.stderr)
		held := requestsOf(ns, 7)
		Expect(held).To(HaveLen(1))
		Expect(held[0]).To(HavePrefix("gha-7-"))
		Expect(jsonpath(ns, "lr/"+held[0], `{.spec.locks[0].repo}|{.spec.locks[0].path}|{.spec.holder.owner}|{.spec.holder.pull}|{.spec.holder.url}|{.spec.command}|{.spec.reason}`)).
			To(Equal("acme/infra|infra/vpc|alice|7|https://github.com/acme/infra/pull/7|plan|plan of feature-7"))

		By("pull #8's plan job is refused at once, with who holds it and why")
		res = r.run(plan[0], workdir, actions(8, "bob", "synchronize"))
		Expect(res.code).NotTo(Equal(0))
		Expect(res.stderr).To(ContainSubstring("locked by pull #7 (alice): plan of feature-7"))

		By("pull #7's apply job runs terraform apply under the lock")
		res = r.run(apply[0], workdir, actions(7, "alice", "labeled"))
		Expect(res.code).To(Equal(0), res.stderr)
		Expect(r.terraformCalls()).To(ConsistOf(MatchRegexp(`^terraform apply -input=false -auto-approve token=[1-9][0-9]* request=` + ns + `/gha-7-\S+$`)))
		Expect(jsonpath(ns, "lr/"+held[0], "{.status.phase}")).To(Equal("Granted"))

		By("pull #7 is closed: the unlock job releases every lock of it and says which")
		res = r.run(unlock[0], ".", actions(7, "alice", "closed"))
		Expect(res.code).To(Equal(0), res.stderr)
		Expect(res.stdout).To(Equal(fmt.Sprintf("lockrequest/%s released (pull #7 (alice), was Granted): acme/infra/infra/vpc/default\n", held[0])))
		Eventually(field(ns, "lr/"+held[0], "{.status.phase}")).WithTimeout(settle).WithPolling(poll).Should(Equal("Released"))

		By("pull #8's plan job now gets the lock")
		res = r.run(plan[0], workdir, actions(8, "bob", "synchronize"))
		Expect(res.code).To(Equal(0), res.stderr)

		By("a job without GitHub's variables says which are missing")
		res = r.run(plan[0], workdir, map[string]string{"GITHUB_REF": "refs/pull/9/merge"})
		Expect(res.code).NotTo(Equal(0))
		Expect(res.stderr).To(ContainSubstring("--from github-actions: GITHUB_REPOSITORY, GITHUB_ACTOR not set"))
	})
})
