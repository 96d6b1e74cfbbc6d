// Package deployed runs Turnstile as it is deployed and drives every feature through it, as the
// people who use it: on a fresh local control plane (kube-apiserver + etcd built by hack/) with
// nothing installed,
//
//   - `kubectl apply --server-side -k config/default` installs the CRDs, the RBAC, the admission
//     policies and the Deployment;
//   - the real manager binary runs with the Deployment's args (active-active membership) under the
//     installed ServiceAccount alone: a token from the TokenRequest API, no admin kubeconfig;
//   - people bound to the shipped roles (kubectl --as), a CI ServiceAccount running the real
//     plugin with its own token, and a platform admin take, hand off, renew, freeze, drain and
//     thaw, lose a holder Lease, deadlock, force-unlock, and see finished requests retained and
//     then deleted - every write of theirs judged by the admission policies;
//   - any "forbidden" in the manager's log fails the suite: a verb missing from the shipped RBAC,
//     or a policy that does not exempt the manager where it must.
//
// Run it with `make test`, or alone with:
//
//	make build k8s-bins && KUBEBUILDER_ASSETS=$PWD/bin/k8s/1.36.3-linux-amd64 go test -count=1 ./test/deployed/
package deployed

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
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

	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

const (
	kubectlTimeout = 60 * time.Second
	// settle bounds an asynchronous outcome on a loaded 2-core machine; a grant or hand-off
	// takes milliseconds.
	settle = 30 * time.Second
	poll   = 50 * time.Millisecond
	// shutdownGrace is the Deployment's terminationGracePeriodSeconds.
	shutdownGrace = 10 * time.Second
	// retention is the one flag added to the Deployment's args, so retention is seen within
	// the test (the Deployment keeps finished requests 1h).
	retention = 10 * time.Second
)

var (
	repoRoot   string
	managerBin string
	pluginBin  string
	kubectlBin string
	env        *envtest.Environment
	restHost   string
	caData     []byte
	clientset  *kubernetes.Clientset
	dir        string
	kubeconfig string // the admin's: setup only (namespaces, bindings, tokens) and the install
	cacheDir   string
)

func TestDeployed(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Turnstile deployed-as-ServiceAccount suite")
}

// binary is a path from the environment (set by the Makefile) or its default under the root.
func binary(envVar, def, how string) string {
	p := os.Getenv(envVar)
	if p == "" {
		p = filepath.Join(repoRoot, def)
	}
	_, err := os.Stat(p)
	ExpectWithOffset(1, err).NotTo(HaveOccurred(), "%s not found: %s (or set %s)", p, how, envVar)
	return p
}

var _ = BeforeSuite(func() {
	var err error
	repoRoot, err = framework.RepoRoot()
	Expect(err).NotTo(HaveOccurred())
	Expect(os.Getenv("KUBEBUILDER_ASSETS")).NotTo(BeEmpty(), "KUBEBUILDER_ASSETS is not set: run through `make test`")
	managerBin = binary("TURNSTILE_MANAGER", "bin/manager", "run `make build`")
	pluginBin = binary("TURNSTILE_PLUGIN", "bin/kubectl-turnstile", "run `make build`")
	kubectlBin = binary("TURNSTILE_KUBECTL", "bin/k8s/1.36.3-linux-amd64/kubectl", "run `make k8s-bins`")
	// kubectl finds plugins on PATH.
	Expect(os.Setenv("PATH", filepath.Dir(pluginBin)+string(os.PathListSeparator)+os.Getenv("PATH"))).To(Succeed())

	By("starting a fresh kube-apiserver and etcd, with nothing installed")
	env = &envtest.Environment{BinaryAssetsDirectory: os.Getenv("KUBEBUILDER_ASSETS"), Scheme: framework.Scheme}
	cfg, err := env.Start()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		By("stopping the control plane")
		Expect(env.Stop()).To(Succeed())
	})
	restHost, caData = cfg.Host, cfg.CAData
	clientset, err = kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
	dir = GinkgoT().TempDir()
	kubeconfig, cacheDir = filepath.Join(dir, "admin.kubeconfig"), filepath.Join(dir, "kubectl-cache")
	Expect((&framework.Env{Env: env, Config: cfg}).WriteKubeconfig(kubeconfig)).To(Succeed())
})

// run runs the real kubectl (or the plugin through it) with kubeconfig kc and returns stdout,
// and stderr inside the error when it fails.
func run(kc, stdin string, args ...string) (string, error) {
	c, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
	defer cancel()
	cmd := exec.CommandContext(c, kubectlBin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kc, "KUBECACHEDIR="+cacheDir)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	out := stdout.String()
	if len(out) > 3000 {
		out = out[:3000] + "...\n"
	}
	fmt.Fprintf(GinkgoWriter, "$ kubectl %s\n%s%s", strings.Join(args, " "), out, stderr.String())
	if err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// admin runs kubectl as the cluster's admin: setup only, never the features under test.
func admin(args ...string) string {
	GinkgoHelper()
	out, err := run(kubeconfig, "", args...)
	Expect(err).NotTo(HaveOccurred())
	return out
}

// token asks the TokenRequest API for a ServiceAccount's token, as the kubelet does for a pod.
func token(namespace, serviceAccount string) string {
	GinkgoHelper()
	tr, err := clientset.CoreV1().ServiceAccounts(namespace).CreateToken(context.Background(), serviceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}},
		metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred(), "token for %s/%s", namespace, serviceAccount)
	return tr.Status.Token
}

// serviceAccountKubeconfig writes a kubeconfig holding a ServiceAccount's token and nothing
// else: what a pod's in-cluster config amounts to.
func serviceAccountKubeconfig(namespace, serviceAccount string) string {
	GinkgoHelper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: restHost, CertificateAuthorityData: caData}
	cfg.AuthInfos[serviceAccount] = &clientcmdapi.AuthInfo{Token: token(namespace, serviceAccount)}
	cfg.Contexts["sa"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: serviceAccount, Namespace: namespace}
	cfg.CurrentContext = "sa"
	path := filepath.Join(dir, namespace+"-"+serviceAccount+".kubeconfig")
	Expect(clientcmd.WriteToFile(*cfg, path)).To(Succeed())
	return path
}

// freeAddr is a free loopback port: the machine is shared, so no fixed port is safe.
func freeAddr() string {
	GinkgoHelper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	defer l.Close()
	return l.Addr().String()
}

// manager is the real manager binary under the installed ServiceAccount's kubeconfig.
type manager struct {
	p       *framework.Process
	logPath string
}

// startManager runs the binary with the Deployment's args, except the listen addresses
// (loopback ports instead of the pod's) and the leader election and membership namespace (which a pod reads
// from its ServiceAccount mount), plus extra. The caller stops it (the Ordered container's AfterAll).
func startManager(kc, namespace string, deploymentArgs []string, extra ...string) *manager {
	GinkgoHelper()
	m := &manager{logPath: filepath.Join(dir, "manager.log")}
	var args []string
	for _, a := range deploymentArgs {
		switch {
		case strings.HasPrefix(a, "--metrics-bind-address="):
			a = "--metrics-bind-address=" + freeAddr()
		case strings.HasPrefix(a, "--health-probe-bind-address="):
			a = "--health-probe-bind-address=" + freeAddr()
		}
		args = append(args, a)
	}
	args = append(append(args, "--leader-election-namespace="+namespace, "--membership-namespace="+namespace), extra...)
	fmt.Fprintf(GinkgoWriter, "starting the manager: %s %s\n", managerBin, strings.Join(args, " "))
	f, err := os.Create(m.logPath)
	Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	m.p, err = framework.StartProcess(managerBin, kc, f, args...)
	Expect(err).NotTo(HaveOccurred())
	return m
}

// kill ends the manager if it still runs (a failed spec left it so).
func (m *manager) kill() {
	select {
	case <-m.p.Done():
	default:
		_ = m.p.Kill()
	}
}

func (m *manager) log() string {
	data, err := os.ReadFile(m.logPath)
	if err != nil {
		return err.Error()
	}
	return string(data)
}

func (m *manager) running() error {
	select {
	case <-m.p.Done():
		return fmt.Errorf("the manager exited: %w", m.p.Err())
	default:
		return nil
	}
}

var forbidden = regexp.MustCompile(`(?i).*forbidden.*`)

// forbiddenLines are the lines of the manager's log that say "forbidden".
func (m *manager) forbiddenLines() []string { return forbidden.FindAllString(m.log(), -1) }
