// Package framework is the shared harness of Turnstile's integration tests, e2e tests, benchmark
// and `make dev`: a real kube-apiserver and etcd (envtest, with binaries built by hack/), the
// CRDs installed, and the manager run in-process or as its real binary.
package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/turnstile-dev/turnstile/internal/cache"
	"github.com/turnstile-dev/turnstile/internal/controller"
)

// Scheme knows the built-in types and Turnstile's: the manager's own (controller.NewScheme).
var Scheme = controller.NewScheme()

// rootModule is the module line of the repository's own go.mod: the modules nested in the tree
// (hack/kal, test/gitopsfreeze) have go.mod files of their own.
const rootModule = "module github.com/turnstile-dev/turnstile\n"

// RepoRoot finds the repository root (the directory holding Turnstile's go.mod, not a nested
// module's) from the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(b), rootModule) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// Env is a running control plane, with the CRDs installed unless it was started bare.
type Env struct {
	Env    *envtest.Environment
	Config *rest.Config
	// Client is an admin client of Scheme that can also watch (what an InvariantChecker needs).
	Client client.WithWatch
	Assets string
}

// Start starts etcd and kube-apiserver from assets (default $KUBEBUILDER_ASSETS) and installs
// the CRDs from config/crd/bases.
func Start(assets string) (*Env, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	return start(assets, func() (*envtest.Environment, error) {
		return &envtest.Environment{
			CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
			ErrorIfCRDPathMissing: true,
		}, nil
	})
}

// StartBare starts etcd and kube-apiserver from assets (default $KUBEBUILDER_ASSETS) with
// nothing installed: for the suites whose subject is the install itself (kubectl apply -k,
// helm template), which puts the CRDs in.
func StartBare(assets string) (*Env, error) {
	return start(assets, func() (*envtest.Environment, error) { return &envtest.Environment{}, nil })
}

// StartBareWith is StartBare with kube-apiserver flags (--name=value) added, as an admin of a
// cluster sets them (--emulated-version=kube=1.32: a server that serves an older version's APIs).
func StartBareWith(assets string, apiserverFlags ...string) (*Env, error) {
	return start(assets, func() (*envtest.Environment, error) {
		s := &envtest.APIServer{}
		if err := appendFlags(s, "StartBareWith", apiserverFlags); err != nil {
			return nil, err
		}
		return &envtest.Environment{ControlPlane: envtest.ControlPlane{APIServer: s}}, nil
	})
}

// startAttempts is how many times start tries a control plane on fresh ports.
const startAttempts = 3

// start starts the control plane newEnv describes, on fresh ports up to startAttempts times.
// envtest picks a free port, closes it, and passes it to kube-apiserver (and etcd); a control
// plane started at the same moment (go test runs packages side by side, make test-versions runs
// versions side by side) can pick the same one. The second kube-apiserver cannot bind; the
// first answers envtest's readiness poll, and envtest's wait for the default namespace, through
// a client that trusts only its own CA, times out. A start that fails is stopped, said on
// stderr, and tried again with a new Environment; every attempt's error is returned if none
// starts.
func start(assets string, newEnv func() (*envtest.Environment, error)) (*Env, error) {
	var errs []error
	for attempt := range startAttempts {
		env, err := newEnv()
		if err != nil {
			return nil, err
		}
		e, err := startOnce(assets, env)
		if err == nil {
			return e, nil
		}
		if errors.Is(err, errNoAssets) {
			return nil, err
		}
		fmt.Fprintf(os.Stderr, "framework: control plane start %d of %d failed, trying fresh ports: %v\n", attempt+1, startAttempts, err)
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

var errNoAssets = errors.New("KUBEBUILDER_ASSETS is not set: run through `make test` (it builds kube-apiserver, etcd and kubectl into bin/k8s)")

func startOnce(assets string, env *envtest.Environment) (*Env, error) {
	if assets == "" {
		assets = os.Getenv("KUBEBUILDER_ASSETS")
	}
	if assets == "" {
		return nil, errNoAssets
	}
	env.BinaryAssetsDirectory = assets
	env.Scheme = Scheme
	if env.ControlPlane.APIServer == nil {
		env.ControlPlane.APIServer = &envtest.APIServer{}
	}
	if err := ConfigureAPIServer(env.ControlPlane.APIServer); err != nil {
		return nil, err
	}
	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop() // what did start: etcd, a kube-apiserver that did not get ready
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	// Tests drive the API server hard on purpose; a client-side limiter would measure itself.
	cfg.QPS, cfg.Burst = -1, 0
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: Scheme})
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &Env{Env: env, Config: cfg, Client: c, Assets: assets}, nil
}

// Stop stops the control plane.
func (e *Env) Stop() error { return e.Env.Stop() }

// WriteKubeconfig writes an admin kubeconfig for the control plane to path.
func (e *Env) WriteKubeconfig(path string) error {
	user, err := e.Env.ControlPlane.AddUser(envtest.User{Name: "turnstile-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("add admin user: %w", err)
	}
	data, err := user.KubeConfig()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

// Kubectl is the path of the kubectl built next to the control plane binaries.
func (e *Env) Kubectl() string { return filepath.Join(e.Assets, "kubectl") }

// Token asks the TokenRequest API for an hour's token of a ServiceAccount, as the kubelet does
// for a pod.
func (e *Env) Token(ctx context.Context, namespace, serviceAccount string) (string, error) {
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		return "", err
	}
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, serviceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}},
		metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for %s/%s: %w", namespace, serviceAccount, err)
	}
	return tr.Status.Token, nil
}

// WriteServiceAccountKubeconfig writes to dir/<namespace>-<serviceAccount>.kubeconfig a
// kubeconfig that authenticates with a fresh token of the ServiceAccount and nothing else:
// what a pod's in-cluster config amounts to. It returns the file's path.
func (e *Env) WriteServiceAccountKubeconfig(ctx context.Context, dir, namespace, serviceAccount string) (string, error) {
	token, err := e.Token(ctx, namespace, serviceAccount)
	if err != nil {
		return "", err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: e.Config.Host, CertificateAuthorityData: e.Config.CAData}
	cfg.AuthInfos[serviceAccount] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["sa"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: serviceAccount, Namespace: namespace}
	cfg.CurrentContext = "sa"
	path := filepath.Join(dir, namespace+"-"+serviceAccount+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", err
	}
	return path, nil
}

// Manager is a manager running in this process.
type Manager struct {
	Client client.Client
	cancel context.CancelFunc
	done   chan error
}

// StartManager runs the Turnstile controllers in-process until Stop, with the given options;
// with changes, the manager's options changed by each (a test's client that delays writes).
func (e *Env) StartManager(o controller.SetupOptions, changes ...func(*ctrl.Options)) (*Manager, error) {
	cfg := rest.CopyConfig(e.Config)
	cfg.QPS, cfg.Burst = 1000, 2000
	mo := ctrl.Options{
		Scheme:                 Scheme,
		Cache:                  cache.Options(),
		NewCache:               cache.New,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Tests run several managers in one process (two at once, or one after a "crash").
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	}
	for _, change := range changes {
		change(&mo)
	}
	mgr, err := ctrl.NewManager(cfg, mo)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := controller.Setup(ctx, mgr, o); err != nil {
		cancel()
		return nil, err
	}
	return Run(ctx, cancel, mgr)
}

// Run starts mgr, set up by the caller on ctx, and waits until its caches have synced; cancel
// (ctx's) stops it, as Stop does.
func Run(ctx context.Context, cancel context.CancelFunc, mgr ctrl.Manager) (*Manager, error) {
	m := &Manager{Client: mgr.GetClient(), cancel: cancel, done: make(chan error, 1)}
	go func() { m.done <- mgr.Start(ctx) }()
	syncCtx, syncCancel := context.WithTimeout(ctx, 60*time.Second)
	defer syncCancel()
	if !mgr.GetCache().WaitForCacheSync(syncCtx) {
		cancel()
		return nil, errors.New("manager cache did not sync")
	}
	return m, nil
}

// Stop stops the manager and waits for it to exit.
func (m *Manager) Stop() error {
	m.cancel()
	select {
	case err := <-m.done:
		return err
	case <-time.After(30 * time.Second):
		return errors.New("manager did not stop within 30s")
	}
}
