package install

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

const (
	// settle is how long an asynchronous outcome may take on a loaded 2-core machine; a grant
	// or hand-off takes milliseconds.
	settle = 30 * time.Second
	poll   = 20 * time.Millisecond
	// shutdownGrace is the Deployment's terminationGracePeriodSeconds: a manager that needs
	// longer to exit after SIGTERM would be killed in a cluster.
	shutdownGrace = 10 * time.Second
)

// cluster is a fresh local control plane with nothing installed: the install puts the CRDs in.
type cluster struct {
	env      *framework.Env
	dir      string            // lives as long as the cluster: kubeconfigs, manager logs
	admin    framework.Kubectl // only the test's own setup and the install use it
	managers []*managerProcess
}

func startCluster(apiserverFlags ...string) *cluster {
	GinkgoHelper()
	c := &cluster{env: framework.StartBareEnvWith(apiserverFlags...)}
	// Called from BeforeAll: cleaned up after the container's last spec (before the control
	// plane stops), so managers started by one spec keep running for the next.
	DeferCleanup(func() {
		for _, m := range c.managers {
			_ = m.p.Kill() // a no-op for one that has exited
		}
	})
	c.dir = GinkgoT().TempDir()
	c.admin = framework.AdminKubectl(c.env, kubectlBin)
	return c
}

// kubectl runs the real kubectl as the admin with stdin, logging the call and its output.
func (c *cluster) kubectl(stdin string, args ...string) (string, error) {
	return c.admin.Run(stdin, args...)
}

func (c *cluster) mustKubectl(stdin string, args ...string) string {
	GinkgoHelper()
	out, err := c.kubectl(stdin, args...)
	Expect(err).NotTo(HaveOccurred())
	return out
}

// execOutput runs a tool (helm, kubectl kustomize) and returns its stdout.
func execOutput(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), framework.KubectlTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// token asks the TokenRequest API for a token of a ServiceAccount, as the kubelet does for a pod.
func (c *cluster) token(namespace, serviceAccount string) string {
	GinkgoHelper()
	token, err := c.env.Token(context.Background(), namespace, serviceAccount)
	Expect(err).NotTo(HaveOccurred())
	return token
}

// serviceAccountKubeconfig writes a kubeconfig that authenticates with a ServiceAccount's
// token and nothing else: what a pod's in-cluster config amounts to.
func (c *cluster) serviceAccountKubeconfig(namespace, serviceAccount string) string {
	GinkgoHelper()
	path, err := c.env.WriteServiceAccountKubeconfig(context.Background(), c.dir, namespace, serviceAccount)
	Expect(err).NotTo(HaveOccurred())
	return path
}

// object is one manifest.
type object = framework.Manifest

func parseManifests(text string) []object {
	GinkgoHelper()
	objs, err := framework.ParseManifests(text)
	Expect(err).NotTo(HaveOccurred())
	return objs
}

func toYAML(objs []object) string {
	GinkgoHelper()
	var b strings.Builder
	for _, o := range objs {
		data, err := yaml.Marshal(o)
		Expect(err).NotTo(HaveOccurred())
		b.WriteString("---\n")
		b.Write(data)
	}
	return b.String()
}

func findObject(objs []object, kind string, nameSuffix string) object {
	GinkgoHelper()
	for _, o := range objs {
		if o.Kind() == kind && strings.HasSuffix(o.Meta("name"), nameSuffix) {
			return o
		}
	}
	Fail(fmt.Sprintf("no %s named *%s in the manifests", kind, nameSuffix))
	return nil
}

// managerProcess is the real manager binary under a ServiceAccount's kubeconfig.
type managerProcess struct {
	name        string
	p           *framework.Process
	metricsAddr string
}

// startManager runs the manager binary with the Deployment's container's args, except the listen
// addresses (loopback ports instead of the pod's), and its env resolved as the kubelet
// resolves it for a pod called name in namespace; nothing added.
func (c *cluster) startManager(binary, name, kubeconfig, namespace string, container map[string]any) *managerProcess {
	GinkgoHelper()
	m := &managerProcess{name: name, metricsAddr: framework.FreeAddr()}
	var ctr corev1.Container
	Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(container, &ctr)).To(Succeed())
	args := framework.OutsideClusterArgs(ctr.Args, m.metricsAddr, framework.FreeAddr())
	env, err := framework.ContainerEnv(ctr, namespace, name)
	Expect(err).NotTo(HaveOccurred())
	fmt.Fprintf(GinkgoWriter, "starting manager %s: %s %s %s\n", name, strings.Join(env, " "), binary, strings.Join(args, " "))
	m.p, err = framework.StartProcessLogFileEnv(binary, kubeconfig, filepath.Join(c.dir, name+".log"), env, args...)
	Expect(err).NotTo(HaveOccurred())
	c.managers = append(c.managers, m)
	return m
}

// log is everything the manager has written so far.
func (m *managerProcess) log() string { return m.p.Log() }

func (m *managerProcess) running() error {
	if err := m.p.Running(); err != nil {
		return fmt.Errorf("manager %s %w", m.name, err)
	}
	return nil
}

// stop sends SIGTERM and expects a clean exit within the Deployment's grace period.
func (m *managerProcess) stop() {
	GinkgoHelper()
	Expect(m.running()).To(Succeed())
	Expect(m.p.Stop(shutdownGrace)).To(Succeed(), "manager %s did not exit cleanly within %s of SIGTERM", m.name, shutdownGrace)
}

// forbiddenLines are the lines of the manager's log that say "forbidden": a permission the
// installed RBAC lacks.
func (m *managerProcess) forbiddenLines() []string { return m.p.ForbiddenLines() }

// scrape GETs the manager's HTTPS metrics with a bearer token; the manager's certificate is
// self-signed, as in the Deployment without cert-manager.
func (m *managerProcess) scrape(token string) (int, string, error) {
	client := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
	}
	req, err := http.NewRequest(http.MethodGet, "https://"+m.metricsAddr+"/metrics", nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// liveMembers is the manager's turnstile_membership_live_members: how many active-active
// replicas it counts ("" before the metric is served).
func (m *managerProcess) liveMembers(token string) (string, error) {
	code, body, err := m.scrape(token)
	if err != nil {
		return "", err
	}
	if code != http.StatusOK {
		return "", fmt.Errorf("scrape: HTTP %d: %s", code, body)
	}
	match := regexp.MustCompile(`(?m)^turnstile_membership_live_members (\d+)$`).FindStringSubmatch(body)
	if match == nil {
		return "", nil
	}
	return match[1], nil
}
