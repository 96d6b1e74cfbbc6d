package kubelet

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/turnstile-dev/turnstile/internal/memlimit"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// Deployment is a rendered install (helm template of the chart) whose manager Deployment is
// started here, from Image.
type Deployment struct {
	// Render renders the manifests (helm template) given the flags that stand for what helm
	// install learns from the fresh control plane's discovery (Capabilities), so that the
	// chart's .Capabilities choices render as on that cluster. Everything but the Deployment is
	// installed, as helm install would (except prometheus-operator's kinds, which this control
	// plane lacks); the Deployment's pods are started by Run.
	Render    func(capabilities []string) []framework.Manifest
	Namespace string
	Image     Image
	// Kubectl is the real kubectl binary.
	Kubectl string
	// Sample is a LockRequest manifest (alice's plan-pr-100 in config/samples) whose grant
	// shows the replicas work.
	Sample string
}

// Replica is one pod of the Deployment: its sandbox and its manager process.
type Replica struct {
	Name string
	sb   *Sandbox
	cmd  *exec.Cmd
	log  *framework.SyncBuffer
	done chan struct{}
	err  error
}

// Log is everything the replica's process has written.
func (r *Replica) Log() string { return r.log.String() }

func (r *Replica) running() error {
	select {
	case <-r.done:
		return fmt.Errorf("pod %s: the manager exited (%w):\n%s", r.Name, r.err, r.log.String())
	default:
		return nil
	}
}

// Run starts a fresh control plane, installs the objects, starts the Deployment's replicas as
// a kubelet would, and checks what a cluster would show: every replica ready on its probes,
// each a member (or one leading), a lock granted, the probes still passing, each manager
// under its share of the container's memory limit, and nothing forbidden in any log.
func Run(t *testing.T, d Deployment) []*Replica {
	t.Helper()
	r := &run{t: t, d: d}
	r.startControlPlane()
	// helm install renders with what the cluster serves (discovery); so does this.
	r.objects = d.Render(Capabilities(t, r.env.Config))
	r.prepare()
	install(t, r.objects, d.Namespace, r.kc)
	r.startPods()
	r.probeAll("")
	t.Logf("pods ready on their probes %v", r.probes)
	waitMembership(t, d.Namespace, r.command, r.pods, r.kc, r.waitFor)
	r.grant()
	// A kubelet acts on failureThreshold (3) failures in a row, not one slow answer.
	r.probeAll(" after the grant")
	for _, p := range r.pods {
		// The runtime's soft limit is the share of the container's memory limit that the
		// manager takes (MEMORY_LIMIT less the reserve): it logs the limit it runs under.
		if want, ok := memoryLimit(t, r.container); ok && !strings.Contains(p.Log(), `"memoryLimit":`+want+`,"memoryLimitSource":"MEMORY_LIMIT"`) {
			t.Errorf("pod %s does not run under its share of its container's memory limit (%s bytes): no \"memoryLimit\":%s in its log", p.Name, want, want)
		}
		if lines := forbiddenLine.FindAllString(p.Log(), -1); len(lines) > 0 {
			t.Errorf("pod %s logged forbidden (the chart's RBAC lacks something):\n%s", p.Name, strings.Join(lines, "\n"))
		}
	}
	return r.pods
}

// run is one Run's state.
type run struct {
	t          *testing.T
	d          Deployment
	objects    []framework.Manifest
	dep        framework.Manifest
	podSpec    map[string]any
	container  map[string]any
	replicas   int
	command    []string
	user       string
	probes     []Probe
	env        *framework.Env
	dir        string
	kubeconfig string
	pods       []*Replica
}

// prepare reads the Deployment: its pod, replicas, the command the runtime runs and as whom.
func (r *run) prepare() {
	t := r.t
	t.Helper()
	r.dep = findDeployment(t, r.objects)
	r.podSpec = r.dep.Path("spec", "template", "spec").(map[string]any)
	r.container = r.podSpec["containers"].([]any)[0].(map[string]any)
	r.replicas = int(r.dep.Path("spec", "replicas").(float64))
	if r.replicas < 2 {
		t.Fatalf("the Deployment renders %d replicas; this test wants the default two", r.replicas)
	}
	r.command = Command(r.container, r.d.Image)
	var err error
	if r.user, err = User(r.podSpec, r.container, r.d.Image); err != nil {
		t.Fatalf("the kubelet would not start the container: %v", err)
	}
	if r.probes, err = Probes(r.container); err != nil {
		t.Fatal(err)
	}
	t.Logf("container: %s (as %s)", strings.Join(r.command, " "), r.user)
}

func (r *run) startControlPlane() {
	t := r.t
	t.Helper()
	env, err := framework.StartBare("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	r.env, r.dir = env, t.TempDir()
	r.kubeconfig = filepath.Join(r.dir, "admin.kubeconfig")
	if err := env.WriteKubeconfig(r.kubeconfig); err != nil {
		t.Fatal(err)
	}
}

// kc runs the real kubectl as the admin.
func (r *run) kc(stdin string, args ...string) string {
	r.t.Helper()
	out, err := r.kubectl(stdin, args...)
	if err != nil {
		r.t.Fatal(err)
	}
	return out
}

func (r *run) kubectl(stdin string, args ...string) (string, error) {
	cmd := exec.Command(r.d.Kubectl, append([]string{"--kubeconfig", r.kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// startPods starts each replica in its sandbox, with its ServiceAccount's token and its env.
func (r *run) startPods() {
	t := r.t
	t.Helper()
	sa := r.podSpec["serviceAccountName"].(string)
	apiURL, err := url.Parse(r.env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	apiHost, apiPort := apiURL.Hostname(), apiURL.Port()
	podHash := randomSuffix(10)
	for i := range r.replicas {
		podName := fmt.Sprintf("%s-%s-%s", r.dep.Meta("name"), podHash, randomSuffix(5))
		token, err := r.env.Token(context.Background(), r.d.Namespace, sa)
		if err != nil {
			t.Fatal(err)
		}
		sb := NewSandbox(t, r.dir, podName, r.d.Image, r.command[0], r.container, r.podSpec, map[string][]byte{
			"token": []byte(token), "ca.crt": r.env.Config.CAData, "namespace": []byte(r.d.Namespace),
		})
		sb.ServeAPI(t, net.JoinHostPort(apiHost, apiPort))
		pod := PodOf{Namespace: r.d.Namespace, Name: podName, Node: fmt.Sprintf("node-%d", i), ServiceAccount: sa, IP: "127.0.0.1"}
		penv, err := ContainerEnv(r.container, r.d.Image, pod, apiHost, apiPort)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("pod %s env: %s", podName, strings.Join(penv, " "))
		r.pods = append(r.pods, start(t, podName, sb, r.user, r.command, penv))
	}
}

// waitFor polls f until it succeeds, failing at once when a replica exited.
func (r *run) waitFor(what string, f func() error) {
	r.t.Helper()
	var last error
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		for _, p := range r.pods {
			if err := p.running(); err != nil {
				r.t.Fatal(err)
			}
		}
		if last = f(); last == nil {
			return
		}
	}
	r.t.Fatalf("%s: not within 90s: %v", what, last)
}

// probeAll waits until every replica passes every probe.
func (r *run) probeAll(when string) {
	r.t.Helper()
	for _, p := range r.pods {
		for _, pr := range r.probes {
			r.waitFor(fmt.Sprintf("pod %s%s: %s GET :%d%s", p.Name, when, pr.Kind, pr.Port, pr.Path), func() error {
				code, err := p.sb.Get(pr.Port, pr.Path)
				if err == nil && code != http.StatusOK {
					err = fmt.Errorf("HTTP %d", code)
				}
				return err
			})
		}
	}
}

// grant creates the sample LockRequest and waits until it is granted.
func (r *run) grant() {
	r.t.Helper()
	r.kc("", "create", "namespace", "team")
	sample, err := os.ReadFile(r.d.Sample)
	if err != nil {
		r.t.Fatal(err)
	}
	// A new CRD is Established a moment before the API server serves it ("ServiceUnavailable:
	// Resource kind ... not found"): retry the create as a pipeline would.
	r.waitFor("the LockRequest is created", func() error {
		_, err := r.kubectl(string(sample), "-n", "team", "apply", "-f", "-")
		return err
	})
	r.kc("", "-n", "team", "wait", "--for=condition=Granted", "lockrequest/plan-pr-100", "--timeout=60s")
}

func findDeployment(t *testing.T, objs []framework.Manifest) framework.Manifest {
	t.Helper()
	for _, o := range objs {
		if o.Kind() == "Deployment" {
			return o
		}
	}
	t.Fatal("no Deployment in the rendered manifests")
	return nil
}

// install applies everything rendered that this control plane serves, as `helm install`
// would, except the Deployment: the test is its kubelet.
func install(t *testing.T, objects []framework.Manifest, namespace string, kc func(stdin string, args ...string) string) {
	t.Helper()
	var manifests bytes.Buffer
	for _, o := range objects {
		if o.Kind() == "Deployment" || strings.HasPrefix(fmt.Sprint(o["apiVersion"]), "monitoring.coreos.com/") {
			continue
		}
		data, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		manifests.WriteString("---\n")
		manifests.Write(data)
	}
	kc("", "create", "namespace", namespace)
	kc(manifests.String(), "apply", "--server-side", "-f", "-")
	kc("", "wait", "--for=condition=Established", "--timeout=60s", "crd/lockrequests.locks.turnstile.dev", "crd/projectlocks.locks.turnstile.dev", "crd/commandlocks.locks.turnstile.dev")
}

// start runs the container's process in its sandbox; cleanup stops it as the kubelet does
// (SIGTERM, then SIGKILL after the grace period).
func start(t *testing.T, podName string, sb *Sandbox, user string, command, env []string) *Replica {
	t.Helper()
	cmd := sb.Exec(user, command)
	cmd.Env = env
	r := &Replica{Name: podName, sb: sb, cmd: cmd, log: &framework.SyncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = r.log, r.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.err = cmd.Wait(); close(r.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-r.done
		}
		if t.Failed() {
			t.Logf("--- log of %s:\n%s", r.Name, r.Log())
		}
	})
	return r
}

// waitMembership waits until the replicas work together: each pod's membership Lease (named
// after its POD_NAME) is there and each manager logged the membership with all of them;
// with leader election instead, one pod leads (its host name, the pod's name, holds the Lease).
func waitMembership(t *testing.T, namespace string, command []string, pods []*Replica, kc func(string, ...string) string, waitFor func(string, func() error)) {
	t.Helper()
	if !slices.Contains(command, "--active-active=true") {
		waitFor("a replica leads", func() error {
			holder := kc("", "-n", namespace, "get", "lease", "turnstile.locks.turnstile.dev", "-o", "jsonpath={.spec.holderIdentity}", "--ignore-not-found")
			for _, r := range pods {
				if strings.HasPrefix(holder, r.Name+"_") {
					return nil
				}
			}
			return fmt.Errorf("the leader Lease's holder is %q, none of the pods", holder)
		})
		return
	}
	waitFor("all replicas are members", func() error {
		leases := kc("", "-n", namespace, "get", "leases", "-l", "locks.turnstile.dev/role=member", "-o", "name")
		for _, r := range pods {
			if !strings.Contains(leases, r.Name) {
				return fmt.Errorf("no membership Lease of %s in:\n%s", r.Name, leases)
			}
		}
		for _, r := range pods {
			if !allLive(r.Log(), pods) {
				return fmt.Errorf("pod %s has not logged a membership with every replica", r.Name)
			}
		}
		return nil
	})
}

// memoryLimit is the runtime's soft memory limit the container's env and args give the
// manager, in bytes (MEMORY_LIMIT resolved, less --memory-limit-reserve or its default, as
// memlimit.Set takes it), and whether they give one.
func memoryLimit(t *testing.T, container map[string]any) (string, bool) {
	reserve := int64(memlimit.DefaultReserve)
	args, _ := container["args"].([]any)
	for _, a := range args {
		if v, ok := strings.CutPrefix(fmt.Sprint(a), "--memory-limit-reserve="); ok {
			q, err := resource.ParseQuantity(v)
			if err != nil {
				t.Fatalf("--memory-limit-reserve: %v", err)
			}
			reserve = q.Value()
		}
	}
	entries, _ := container["env"].([]any)
	for _, e := range entries {
		m := e.(map[string]any)
		if m["name"] != memlimit.Env {
			continue
		}
		from, _ := m["valueFrom"].(map[string]any)
		v, err := ResolveValueFrom(from, container, PodOf{})
		if err != nil {
			t.Fatalf("%s: %v", memlimit.Env, err)
		}
		limit, err := memlimit.Set(func(k string) string { return map[string]string{memlimit.Env: v}[k] }, reserve, func(int64) int64 { return 0 })
		if err != nil {
			t.Fatalf("%s=%q: %v", memlimit.Env, v, err)
		}
		return strconv.FormatInt(limit.Bytes, 10), true
	}
	return "", false
}

// allLive: the log has a "membership changed" line naming every pod.
func allLive(log string, pods []*Replica) bool {
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "membership changed") {
			continue
		}
		all := true
		for _, r := range pods {
			all = all && strings.Contains(line, r.Name)
		}
		if all {
			return true
		}
	}
	return false
}

var forbiddenLine = regexp.MustCompile(`(?i).*forbidden.*`)

func randomSuffix(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:n]
}

// Capabilities are the helm template flags that stand for what helm install learns from the
// cluster's discovery: its version, and every group/version and group/version/Kind it serves
// (as helm's own capabilities list them), so `.Capabilities` choices render as on that cluster.
func Capabilities(t *testing.T, cfg *rest.Config) []string {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	version, err := dc.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	_, lists, err := dc.ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--kube-version", version.GitVersion}
	for _, l := range lists {
		args = append(args, "--api-versions", l.GroupVersion)
		for _, r := range l.APIResources {
			if !strings.Contains(r.Name, "/") {
				args = append(args, "--api-versions", l.GroupVersion+"/"+r.Kind)
			}
		}
	}
	return args
}
