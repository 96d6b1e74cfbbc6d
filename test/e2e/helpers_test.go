package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"
)

// kubectlTimeout bounds every kubectl call; `kubectl wait --timeout=...` stays below it.
const kubectlTimeout = 45 * time.Second

// KubectlError is a kubectl run that failed: its exit status and what it said on stderr.
type KubectlError struct {
	Args   []string
	Stdout string
	Stderr string
	Err    error
}

func (e *KubectlError) Error() string {
	return fmt.Sprintf("kubectl %s: %v\nstderr: %s", strings.Join(e.Args, " "), e.Err, strings.TrimSpace(e.Stderr))
}

func (e *KubectlError) Unwrap() error { return e.Err }

// kubectl runs the real kubectl against the control plane and returns its stdout.
func kubectl(args ...string) (string, error) {
	return kubectlWithInput("", args...)
}

// kubectlWithInput runs kubectl with stdin.
func kubectlWithInput(stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectlBin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "KUBECACHEDIR="+cacheDir)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	logged := stdout.String() + stderr.String()
	if logged != "" && !strings.HasSuffix(logged, "\n") {
		logged += "\n"
	}
	fmt.Fprintf(GinkgoWriter, "$ kubectl %s\n%s", strings.Join(args, " "), logged)
	if ctx.Err() != nil {
		err = fmt.Errorf("timed out after %s: %w", kubectlTimeout, err)
	}
	if err != nil {
		return stdout.String(), &KubectlError{Args: args, Stdout: stdout.String(), Stderr: stderr.String(), Err: err}
	}
	return stdout.String(), nil
}

// kubectlApply applies manifest (YAML) in namespace ns from stdin.
func kubectlApply(ns, manifest string) (string, error) {
	return kubectlWithInput(manifest, "-n", ns, "apply", "-f", "-")
}

// mustKubectl runs kubectl and fails the spec when it fails.
func mustKubectl(args ...string) string {
	GinkgoHelper()
	out, err := kubectl(args...)
	Expect(err).NotTo(HaveOccurred())
	return out
}

// jsonpath reads one field of one object: kubectl -n ns get kindName -o jsonpath={expr}.
func jsonpath(ns, obj, expr string) (string, error) {
	args := []string{"get", obj, "-o", "jsonpath=" + expr}
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	out, err := kubectl(args...)
	return strings.TrimSpace(out), err
}

// field returns a poller of one field, for Eventually and Consistently.
func field(ns, obj, expr string) func() (string, error) {
	return func() (string, error) { return jsonpath(ns, obj, expr) }
}

// conditionField is the JSONPath of one field of a condition.
func conditionField(typ, f string) string {
	return fmt.Sprintf(`{.status.conditions[?(@.type=="%s")].%s}`, typ, f)
}

// token is the fencing token of a LockRequest.
func token(ns, lr string) int64 {
	GinkgoHelper()
	s, err := jsonpath(ns, "lockrequest/"+lr, "{.status.fencingToken}")
	Expect(err).NotTo(HaveOccurred())
	n, err := strconv.ParseInt(s, 10, 64)
	Expect(err).NotTo(HaveOccurred(), "lockrequest %s has no fencing token (%q)", lr, s)
	return n
}

// waitGranted runs `kubectl wait --for=condition=Granted` and fails the spec if it does not
// succeed within timeout.
func waitGranted(ns, lr string, timeout time.Duration) {
	GinkgoHelper()
	_, err := kubectl("-n", ns, "wait", "--for=condition=Granted", "lockrequest/"+lr, "--timeout="+timeout.String())
	Expect(err).NotTo(HaveOccurred(), "lockrequest %s was not granted within %s", lr, timeout)
}

// expectPending asserts that a LockRequest becomes Pending and stays so for a while.
func expectPending(ns, lr string) {
	GinkgoHelper()
	Eventually(field(ns, "lockrequest/"+lr, "{.status.phase}")).WithTimeout(settle).WithPolling(poll).
		Should(Equal("Pending"), "lockrequest %s never became Pending", lr)
	Consistently(field(ns, "lockrequest/"+lr, "{.status.phase}")).WithTimeout(time.Second).WithPolling(200*time.Millisecond).
		Should(Equal("Pending"), "lockrequest %s did not stay Pending", lr)
}

func randSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// createNamespace creates a fresh namespace with kubectl and deletes it after the spec. The
// local control plane runs no namespace controller, so the deletion only marks it Terminating
// and would leave its requests holding their locks: the cleanup deletes them first and waits,
// so no spec sees another spec's holders (a CommandLock counts them across namespaces).
func createNamespace() string {
	GinkgoHelper()
	ns := "e2e-" + randSuffix()
	mustKubectl("create", "namespace", ns)
	DeferCleanup(func() {
		_, _ = kubectl("delete", "-n", ns, "lockrequests", "--all", "--timeout=30s")
		_, _ = kubectl("delete", "namespace", ns, "--wait=false")
	})
	return ns
}

// dumpState writes the locks of ns (and every CommandLock) as YAML to the spec's output, so a
// failure shows what the operator did.
func dumpState(ns string) {
	for _, args := range [][]string{
		{"-n", ns, "get", "lockrequests,projectlocks", "-o", "yaml"},
		{"get", "commandlocks", "-o", "yaml"},
		{"-n", ns, "get", "events", "--sort-by=.metadata.creationTimestamp"},
	} {
		_, _ = kubectl(args...)
	}
}

// table parses kubectl's default table output into rows keyed by column header. kubectl pads
// every column to align with its header, so a cell is the text under its header up to the next
// header; an empty cell (an unset printer column) stays empty.
func table(out string) []map[string]string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) == 0 {
		return nil
	}
	header := lines[0]
	var starts []int
	for i := 0; i < len(header); i++ {
		if header[i] != ' ' && (i == 0 || header[i-1] == ' ') {
			starts = append(starts, i)
		}
	}
	var rows []map[string]string
	for _, l := range lines[1:] {
		row := map[string]string{}
		for i, start := range starts {
			end := len(l)
			if i+1 < len(starts) && starts[i+1] < end {
				end = starts[i+1]
			}
			name := strings.TrimSpace(header[start:])
			if i+1 < len(starts) {
				name = strings.TrimSpace(header[start:starts[i+1]])
			}
			cell := ""
			if start < len(l) {
				cell = strings.TrimSpace(l[start:end])
			}
			row[name] = cell
		}
		rows = append(rows, row)
	}
	return rows
}

// lockRequest renders a LockRequest manifest. Empty fields are left out, so CRD defaults and
// validation apply as they would to a user's file.
type lockRequest struct {
	Name        string
	Repo        string
	Path        string
	Workspace   string
	Owner       string
	Pull        int
	Command     string
	Priority    string
	TTL         string
	WaitTimeout string
	Mode        string // spec.locks[0].mode: Shared or Exclusive; "" leaves it out
}

func (r lockRequest) YAML() string {
	lock := map[string]any{"repo": r.Repo}
	setUnlessZero(lock, "path", r.Path)
	setUnlessZero(lock, "workspace", r.Workspace)
	setUnlessZero(lock, "mode", r.Mode)
	holder := map[string]any{"owner": r.Owner}
	setUnlessZero(holder, "pull", r.Pull)
	spec := map[string]any{"locks": []any{lock}, "holder": holder}
	setUnlessZero(spec, "command", r.Command)
	setUnlessZero(spec, "priority", r.Priority)
	setUnlessZero(spec, "ttl", r.TTL)
	setUnlessZero(spec, "waitTimeout", r.WaitTimeout)
	out, err := yaml.Marshal(map[string]any{
		"apiVersion": "locks.turnstile.dev/v1alpha1",
		"kind":       "LockRequest",
		"metadata":   map[string]any{"name": r.Name},
		"spec":       spec,
	})
	if err != nil {
		panic(err)
	}
	return string(out)
}

// setUnlessZero sets m[key] to v unless v is its type's zero value: a field a user would leave out.
func setUnlessZero[T comparable](m map[string]any, key string, v T) {
	var zero T
	if v != zero {
		m[key] = v
	}
}

// stderrOf is the stderr of a failed kubectl run.
func stderrOf(err error) string {
	var ke *KubectlError
	if errors.As(err, &ke) {
		return ke.Stderr
	}
	return ""
}
