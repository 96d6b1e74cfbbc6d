// Command dev runs Turnstile locally for `make dev`: a kube-apiserver and etcd built from the Go
// module proxy, the shipped install (config/default: CRDs, RBAC, the ServiceAccount, the
// admission policies and their params; everything but the Deployment), and the manager binary
// in the foreground, authenticated as its ServiceAccount as a pod would be. So the dev cluster
// allows and refuses what a real install does. It writes an admin kubeconfig, prints the lines
// to paste into another shell, and on Ctrl-C (or SIGTERM, or the terminal closing) stops
// everything it started. Flags after "--" go to the manager.
//
// With --fleet=N (`make dev FLEET=2`) it starts a fleet (docs/fleet.md) instead: a hub and N
// spokes (spoke-a, spoke-b, ...), each a control plane of its own with the shipped install and
// its manager as its ServiceAccount; the hub also gets config/fleet (the spokes' roles and
// admission policies) with the spokes as its members, and each spoke's manager runs as its
// agent (--hub-kubeconfig, --cluster-name) with a kubeconfig of its own ServiceAccount of the
// hub (turnstile-fleet/spoke-<name>), as docs/fleet.md tells an admin to make one. Namespace
// team-a is a fleet namespace in every cluster. It prints a KUBECONFIG per cluster; the
// managers log to files beside them. Flags after "--" go to the hub's manager.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

func main() {
	assets := flag.String("assets", os.Getenv("KUBEBUILDER_ASSETS"), "Directory with kube-apiserver, etcd and kubectl.")
	manager := flag.String("manager", "bin/manager", "Manager binary.")
	plugin := flag.String("plugin", "bin/kubectl-turnstile", "The kubectl plugin's binary: --fleet admits each spoke with its fleet join.")
	state := flag.String("state", "bin/dev", "Directory for the kubeconfigs and the manager's token.")
	metrics := flag.String("metrics-bind-address", "", "Manager metrics address; \"0\" turns it off (default: a free loopback port).")
	probes := flag.String("health-probe-bind-address", "", "Manager probe address; \"0\" turns it off (default: a free loopback port).")
	fleet := flag.Int("fleet", 0, "Start a fleet instead of one cluster: a hub and this many spokes (spoke-a, spoke-b, ...; at most 26), each a control plane of its own (docs/fleet.md).")
	flag.Parse()
	if *fleet < 0 || *fleet > 26 {
		fmt.Fprintln(os.Stderr, "dev: --fleet is the number of spokes, 0 to 26")
		os.Exit(2)
	}
	for _, addr := range []*string{metrics, probes} {
		if *addr == "" {
			free, err := freeLoopback()
			if err != nil {
				fmt.Fprintln(os.Stderr, "dev:", err)
				os.Exit(1)
			}
			*addr = free
		}
	}
	run := run
	if *fleet > 0 {
		run = func(assets, manager, state, metrics, probes string, extra []string) error {
			return runFleet(assets, manager, *plugin, state, metrics, probes, *fleet, extra)
		}
	}
	if err := run(*assets, *manager, *state, *metrics, *probes, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "dev:", err)
		os.Exit(1)
	}
}

// The shipped install's names (config/default).
const (
	namespace      = "turnstile-system"
	serviceAccount = "turnstile-controller-manager"
	// tokenLifetime and tokenRefresh: the manager's token is renewed in its file as the kubelet
	// renews a projected one; client-go rereads the file.
	tokenLifetime = time.Hour
	tokenRefresh  = 20 * time.Minute
)

func run(assets, manager, state, metrics, probes string, extra []string) error {
	sig := make(chan os.Signal, 2)
	// SIGHUP too: closing the terminal must not orphan etcd, kube-apiserver and the manager,
	// which run in process groups of their own.
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)

	root, err := framework.RepoRoot()
	if err != nil {
		return err
	}
	state, err = filepath.Abs(state)
	if err != nil {
		return err
	}
	fmt.Println("Starting a local kube-apiserver and etcd ...")
	env, err := framework.StartBare(assets)
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("Stopping kube-apiserver and etcd ...")
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "dev: stop control plane:", err)
		}
	}()
	kubeconfig := filepath.Join(state, "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		return err
	}
	kubectl, err := filepath.Abs(env.Kubectl())
	if err != nil {
		return err
	}
	// The bundle a user of this Kubernetes version installs: config/default, or its overlay
	// where the API server serves no MutatingAdmissionPolicy v1 (KUBE_VERSION=1.34.4 make dev).
	bundle, err := framework.BundleFor(env.Config)
	if err != nil {
		return err
	}
	fmt.Printf("Installing %s (CRDs, RBAC, admission policies; not the Deployment) ...\n", bundle)
	if err := install(root, bundle, kubectl, kubeconfig); err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	managerConfig, err := managerKubeconfig(ctx, env, state)
	if err != nil {
		return err
	}

	// The manager's namespace and name, as the Deployment's downward API gives them.
	os.Setenv("POD_NAMESPACE", namespace)
	os.Setenv("POD_NAME", "turnstile-dev")
	args := append([]string{"--metrics-bind-address=" + metrics, "--health-probe-bind-address=" + probes}, extra...)
	proc, err := framework.StartProcess(manager, managerConfig, os.Stdout, args...)
	if err != nil {
		return err
	}
	howTo(proc.Pid(), metrics, probes, kubeconfig, filepath.Join(root, "bin"), filepath.Dir(kubectl))

	select {
	case s := <-sig:
		fmt.Printf("\nReceived %s; stopping the manager ...\n", s)
		if err := proc.Stop(15 * time.Second); err != nil {
			fmt.Fprintln(os.Stderr, "dev: manager:", err)
		}
		return nil
	case <-proc.Done():
		return fmt.Errorf("manager exited: %w", proc.Err())
	}
}

// managerKubeconfig writes the kubeconfig the manager runs with, as its ServiceAccount, into
// state, and keeps the ServiceAccount's token in it fresh until ctx is done.
func managerKubeconfig(ctx context.Context, env *framework.Env, state string) (string, error) {
	return serviceAccountKubeconfig(ctx, env, namespace, serviceAccount, filepath.Join(state, "manager"))
}

// serviceAccountKubeconfig writes base.kubeconfig, which authenticates as the ServiceAccount
// ns/sa of env with the token in base.token, and keeps the token fresh until ctx is done. It
// returns the kubeconfig's path.
func serviceAccountKubeconfig(ctx context.Context, env *framework.Env, ns, sa, base string) (string, error) {
	tokenFile := base + ".token"
	if err := writeToken(ctx, env, ns, sa, tokenFile); err != nil {
		return "", err
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(tokenRefresh):
				if err := writeToken(ctx, env, ns, sa, tokenFile); err != nil {
					fmt.Fprintf(os.Stderr, "dev: renew the token of %s/%s: %v\n", ns, sa, err)
				}
			}
		}
	}()
	path := base + ".kubeconfig"
	return path, writeServiceAccountKubeconfig(env, path, tokenFile, ns, sa)
}

// howTo tells the user how to reach the running control plane and manager.
func howTo(pid int, metrics, probes, kubeconfig, bin, kubectlDir string) {
	fmt.Printf(`
Turnstile is running (manager pid %d, as system:serviceaccount:%s:%s%s).

In another shell (kubectl and the kubectl-turnstile plugin are in these directories):

    export KUBECONFIG=%s
    export PATH=%s:%s:$PATH

    kubectl create namespace team-a
    kubectl -n team-a apply -f config/samples/locks_v1alpha1_lockrequest.yaml
    kubectl -n team-a wait --for=condition=Granted lockrequest/plan-pr-100
    kubectl turnstile -n team-a locks

Press Ctrl-C to stop the manager, kube-apiserver and etcd.

`, pid, namespace, serviceAccount, endpoints(metrics, probes), kubeconfig, bin, kubectlDir)
}

// install applies `kubectl kustomize` of the bundle (config/default or an overlay of it) without its
// Deployment (this process runs the manager) and waits for the CRDs.
func install(root string, bundle framework.Bundle, kubectl, kubeconfig string) error {
	out, err := exec.Command(kubectl, "kustomize", bundle.Dir).Output()
	if err != nil {
		return fmt.Errorf("kubectl kustomize %s: %w", bundle.Dir, err)
	}
	objs, err := framework.ParseManifests(string(out))
	if err != nil {
		return err
	}
	var manifests bytes.Buffer
	for _, o := range objs {
		if o.Kind() == "Deployment" {
			continue
		}
		data, err := yaml.Marshal(o)
		if err != nil {
			return err
		}
		manifests.WriteString("---\n")
		manifests.Write(data)
	}
	kc := func(stdin []byte, args ...string) error {
		cmd := exec.Command(kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Stdin = bytes.NewReader(stdin)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := kc(manifests.Bytes(), "apply", "--server-side", "-f", "-"); err != nil {
		return err
	}
	if err := kc(nil, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/lockrequests.locks.turnstile.dev", "crd/projectlocks.locks.turnstile.dev", "crd/commandlocks.locks.turnstile.dev"); err != nil {
		return err
	}
	// Established is not yet served: the API server's handler for a new CRD and its admission
	// policies come a moment later, and the first request pasted would get "ServiceUnavailable:
	// Resource kind ... not found". Ready is when a server-side dry-run of the sample request
	// passes and the owner policy has stamped who created it.
	sample := filepath.Join(root, "config", "samples", "locks_v1alpha1_lockrequest.yaml")
	var last error
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "-n", "default", "create", "--dry-run=server", "-f", sample,
			"-o", `jsonpath={.metadata.annotations.locks\.turnstile\.dev/created-by}`).CombinedOutput()
		switch {
		case bundle.Mutating == "" && err != nil && bytes.Contains(out, []byte("ValidatingAdmissionPolicy")):
			// Without the mutating policies the admin's request for alice must record its
			// creator: the owner policy refusing it is the policies running.
			return nil
		case err != nil:
			last = fmt.Errorf("%w: %s", err, out)
		case len(bytes.TrimSpace(out)) == 0:
			last = errors.New("the owner policy has not stamped locks.turnstile.dev/created-by yet")
		default:
			return nil
		}
	}
	return fmt.Errorf("the API server does not serve LockRequests under the admission policies after 60s: %w", last)
}

// writeToken writes a fresh token of a ServiceAccount to path (atomically).
func writeToken(ctx context.Context, env *framework.Env, namespace, serviceAccount, path string) error {
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		return err
	}
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, serviceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(tokenLifetime.Seconds()))}},
		metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token for %s/%s: %w", namespace, serviceAccount, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(tr.Status.Token), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// writeServiceAccountKubeconfig writes a kubeconfig that authenticates with the token in
// tokenFile and nothing else.
func writeServiceAccountKubeconfig(env *framework.Env, path, tokenFile, namespace, serviceAccount string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["dev"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	cfg.AuthInfos[serviceAccount] = &clientcmdapi.AuthInfo{TokenFile: tokenFile}
	cfg.Contexts["manager"] = &clientcmdapi.Context{Cluster: "dev", AuthInfo: serviceAccount, Namespace: namespace}
	cfg.CurrentContext = "manager"
	return clientcmd.WriteToFile(*cfg, path)
}

// freeLoopback is a free port on 127.0.0.1 (not :8080, which kubectl proxy and many local tools
// take by default, nor anything reachable from outside).
func freeLoopback() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// endpoints describes where the manager serves metrics and probes; "0" turns either off.
func endpoints(metrics, probes string) string {
	var out string
	if metrics != "0" {
		out += fmt.Sprintf("; metrics on http://%s/metrics", metrics)
	}
	if probes != "0" {
		out += fmt.Sprintf("; probes on http://%s/healthz", probes)
	}
	return out
}
