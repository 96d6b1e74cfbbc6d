package install

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

const (
	// kubectlTimeout bounds every kubectl call.
	kubectlTimeout = 60 * time.Second
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
	env        *framework.Env
	dir        string // lives as long as the cluster: kubeconfigs, manager logs
	kubeconfig string // admin: only the test's own setup and the install use it
	cacheDir   string
	clientset  *kubernetes.Clientset
	managers   []*managerProcess
}

func startCluster() *cluster {
	GinkgoHelper()
	env := &envtest.Environment{BinaryAssetsDirectory: os.Getenv("KUBEBUILDER_ASSETS"), Scheme: framework.Scheme}
	cfg, err := env.Start()
	Expect(err).NotTo(HaveOccurred())
	c := &cluster{env: &framework.Env{Env: env, Config: cfg, Assets: env.BinaryAssetsDirectory}}
	// Called from BeforeAll: cleaned up after the container's last spec, so managers started by
	// one spec keep running for the next.
	DeferCleanup(func() {
		for _, m := range c.managers {
			select {
			case <-m.p.Done():
			default:
				_ = m.p.Kill()
			}
		}
		By("stopping the control plane")
		Expect(env.Stop()).To(Succeed())
	})
	c.dir = GinkgoT().TempDir()
	c.kubeconfig = filepath.Join(c.dir, "admin.kubeconfig")
	c.cacheDir = filepath.Join(c.dir, "kubectl-cache")
	Expect(c.env.WriteKubeconfig(c.kubeconfig)).To(Succeed())
	c.clientset, err = kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
	return c
}

// kubectl runs the real kubectl as the admin with stdin, logging the call and its output.
func (c *cluster) kubectl(stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectlBin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.kubeconfig, "KUBECACHEDIR="+c.cacheDir)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	out := stdout.String()
	if len(out) > 2000 {
		out = out[:2000] + "...\n"
	}
	fmt.Fprintf(GinkgoWriter, "$ kubectl %s\n%s%s", strings.Join(args, " "), out, stderr.String())
	if err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

func (c *cluster) mustKubectl(stdin string, args ...string) string {
	GinkgoHelper()
	out, err := c.kubectl(stdin, args...)
	Expect(err).NotTo(HaveOccurred())
	return out
}

// execOutput runs a tool (helm, kubectl kustomize) and returns its stdout.
func execOutput(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
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
	tr, err := c.clientset.CoreV1().ServiceAccounts(namespace).CreateToken(context.Background(), serviceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}},
		metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred(), "token for %s/%s", namespace, serviceAccount)
	return tr.Status.Token
}

// serviceAccountKubeconfig writes a kubeconfig that authenticates with a ServiceAccount's
// token and nothing else: what a pod's in-cluster config amounts to.
func (c *cluster) serviceAccountKubeconfig(namespace, serviceAccount string) string {
	GinkgoHelper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: c.env.Config.Host, CertificateAuthorityData: c.env.Config.CAData}
	cfg.AuthInfos[serviceAccount] = &clientcmdapi.AuthInfo{Token: c.token(namespace, serviceAccount)}
	cfg.Contexts["sa"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: serviceAccount, Namespace: namespace}
	cfg.CurrentContext = "sa"
	path := filepath.Join(c.dir, serviceAccount+".kubeconfig")
	Expect(clientcmd.WriteToFile(*cfg, path)).To(Succeed())
	return path
}

// object is one manifest.
type object map[string]any

func (o object) kind() string { s, _ := o["kind"].(string); return s }

func (o object) meta(field string) string {
	m, _ := o["metadata"].(map[string]any)
	s, _ := m[field].(string)
	return s
}

func (o object) path(keys ...string) any {
	var v any = map[string]any(o)
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func parseManifests(text string) []object {
	GinkgoHelper()
	var objs []object
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(text, -1) {
		var o object
		Expect(yaml.Unmarshal([]byte(doc), &o)).To(Succeed())
		if o != nil {
			objs = append(objs, o)
		}
	}
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
		if o.kind() == kind && strings.HasSuffix(o.meta("name"), nameSuffix) {
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
	logPath     string
	metricsAddr string
}

// freeAddr is a free loopback port: other tests and engineers share the machine, so no fixed
// port is safe.
func freeAddr() string {
	GinkgoHelper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	defer l.Close()
	return l.Addr().String()
}

// startManager runs the binary with the Deployment's own args, except the listen addresses
// (loopback ports instead of the pod's) and the leader election namespace, which a pod
// reads from its ServiceAccount mount and a process outside the cluster must be told.
func (c *cluster) startManager(name, kubeconfig, namespace string, deploymentArgs []string) *managerProcess {
	GinkgoHelper()
	m := &managerProcess{name: name, metricsAddr: freeAddr(), logPath: filepath.Join(c.dir, name+".log")}
	var args []string
	for _, a := range deploymentArgs {
		switch {
		case strings.HasPrefix(a, "--metrics-bind-address="):
			a = "--metrics-bind-address=" + m.metricsAddr
		case strings.HasPrefix(a, "--health-probe-bind-address="):
			a = "--health-probe-bind-address=" + freeAddr()
		}
		args = append(args, a)
	}
	// A pod has $POD_NAMESPACE from the Deployment; a process outside the cluster is told.
	args = append(args, "--leader-election-namespace="+namespace, "--membership-namespace="+namespace)
	fmt.Fprintf(GinkgoWriter, "starting manager %s: %s %s\n", name, managerBin, strings.Join(args, " "))
	// A file, not a pipe: the process writes its log straight into it, so nothing in the test
	// can ever hold up its writes.
	f, err := os.Create(m.logPath)
	Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	m.p, err = framework.StartProcess(managerBin, kubeconfig, f, args...)
	Expect(err).NotTo(HaveOccurred())
	c.managers = append(c.managers, m)
	return m
}

// log is everything the manager has written so far.
func (m *managerProcess) log() string {
	data, err := os.ReadFile(m.logPath)
	if err != nil {
		return err.Error()
	}
	return string(data)
}

func (m *managerProcess) running() error {
	select {
	case <-m.p.Done():
		return fmt.Errorf("manager %s exited: %w", m.name, m.p.Err())
	default:
		return nil
	}
}

// stop sends SIGTERM and expects a clean exit within the Deployment's grace period.
func (m *managerProcess) stop() {
	GinkgoHelper()
	Expect(m.running()).To(Succeed())
	Expect(m.p.Stop(shutdownGrace)).To(Succeed(), "manager %s did not exit cleanly within %s of SIGTERM", m.name, shutdownGrace)
}

var forbidden = regexp.MustCompile(`(?i).*forbidden.*`)

// forbiddenLines are the lines of the manager's log that say "forbidden": a permission the
// installed RBAC lacks.
func (m *managerProcess) forbiddenLines() []string { return forbidden.FindAllString(m.log(), -1) }

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
