package chart

// TestDeploymentRunsAsRendered starts the manager the way a kubelet starts the chart's
// Deployment, and nothing more: the container's command and args exactly as `helm template`
// renders them, its env with every valueFrom resolved as the kubelet resolves it (fieldRef,
// resourceFieldRef), the ServiceAccount token, CA and namespace at the path the kubelet mounts
// them, KUBERNETES_SERVICE_HOST/PORT as the kubelet sets them, the image's user, a read-only
// root holding only the binary (as the static image does) with the rendered emptyDir volumes,
// and each replica in its own network, mount and UTS namespaces, so both bind the ports the
// chart renders. client-go's rest.InClusterConfig finds the API server from that alone.
//
// What differs from a cluster, and why it cannot matter here: the API server is reached at
// 127.0.0.1 inside the pod's network namespace (a forwarder in this test plays kube-proxy; the
// serving certificate of the test control plane names 127.0.0.1, not a Service IP), there is
// no PID namespace, /proc or /dev (the manager reads neither), and no seccomp profile.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/turnstile-dev/turnstile/internal/memlimit"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// podOf is what the kubelet knows of a pod when it resolves the downward API.
type podOf struct {
	namespace, name, node, serviceAccount, ip string
}

// containerEnv is the container's env as the kubelet passes it: the image's environment,
// HOSTNAME, the container's env with each valueFrom resolved, then the API server's service
// variables. An env entry it cannot resolve is an error: the test must not guess.
func containerEnv(container map[string]any, pod podOf, apiHost, apiPort string) ([]string, error) {
	env := []string{
		// gcr.io/distroless/static's environment (the Dockerfile's final stage).
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
		"HOSTNAME=" + pod.name,
	}
	entries, _ := container["env"].([]any)
	for _, e := range entries {
		m := e.(map[string]any)
		name, _ := m["name"].(string)
		if v, ok := m["value"]; ok {
			env = append(env, fmt.Sprintf("%s=%v", name, v))
			continue
		}
		from, ok := m["valueFrom"].(map[string]any)
		if !ok {
			env = append(env, name+"=")
			continue
		}
		value, err := resolveValueFrom(from, container, pod)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", name, err)
		}
		env = append(env, name+"="+value)
	}
	return append(env,
		"KUBERNETES_SERVICE_HOST="+apiHost, "KUBERNETES_SERVICE_PORT="+apiPort,
		"KUBERNETES_SERVICE_PORT_HTTPS="+apiPort,
		"KUBERNETES_PORT=tcp://"+net.JoinHostPort(apiHost, apiPort)), nil
}

func resolveValueFrom(from, container map[string]any, pod podOf) (string, error) {
	if f, ok := from["fieldRef"].(map[string]any); ok {
		switch p := f["fieldPath"].(string); p {
		case "metadata.namespace":
			return pod.namespace, nil
		case "metadata.name":
			return pod.name, nil
		case "spec.nodeName":
			return pod.node, nil
		case "spec.serviceAccountName":
			return pod.serviceAccount, nil
		case "status.podIP", "status.podIPs":
			return pod.ip, nil
		default:
			return "", fmt.Errorf("fieldRef %s: not resolved by this test; add it", p)
		}
	}
	if r, ok := from["resourceFieldRef"].(map[string]any); ok {
		return resolveResource(r, container)
	}
	return "", fmt.Errorf("valueFrom %v: not resolved by this test (no ConfigMaps or Secrets are rendered)", from)
}

// resolveResource is the kubelet's resourceFieldRef: the container's limit or request divided
// by the divisor (default 1), rounded up. A missing limit would be the node's allocatable,
// which a test has not got: an error.
func resolveResource(r, container map[string]any) (string, error) {
	res, _ := r["resource"].(string)
	kind, name, ok := strings.Cut(res, ".")
	if !ok || (kind != "limits" && kind != "requests") {
		return "", fmt.Errorf("resourceFieldRef %q: not a limits.* or requests.* resource", res)
	}
	resources, _ := container["resources"].(map[string]any)
	values, _ := resources[kind].(map[string]any)
	raw, ok := values[name]
	if !ok {
		return "", fmt.Errorf("resourceFieldRef %s: the container sets no %s (the kubelet would use the node's allocatable)", res, res)
	}
	q, err := resource.ParseQuantity(fmt.Sprint(raw))
	if err != nil {
		return "", err
	}
	divisor := resource.MustParse("1")
	if d, ok := r["divisor"]; ok {
		if divisor, err = resource.ParseQuantity(fmt.Sprint(d)); err != nil {
			return "", err
		}
	}
	return strconv.FormatInt(int64(math.Ceil(q.AsApproximateFloat64()/divisor.AsApproximateFloat64())), 10), nil
}

func TestResolveValueFrom(t *testing.T) {
	container := map[string]any{"resources": map[string]any{
		"limits":   map[string]any{"memory": "256Mi", "cpu": "500m"},
		"requests": map[string]any{"memory": "64Mi"},
	}}
	pod := podOf{namespace: "ns", name: "p-1", node: "node-a", serviceAccount: "sa", ip: "10.0.0.7"}
	for _, tc := range []struct {
		from map[string]any
		want string
	}{
		{map[string]any{"fieldRef": map[string]any{"fieldPath": "metadata.namespace"}}, "ns"},
		{map[string]any{"fieldRef": map[string]any{"fieldPath": "metadata.name"}}, "p-1"},
		{map[string]any{"fieldRef": map[string]any{"fieldPath": "spec.nodeName"}}, "node-a"},
		{map[string]any{"resourceFieldRef": map[string]any{"resource": "limits.memory"}}, "268435456"},
		{map[string]any{"resourceFieldRef": map[string]any{"resource": "limits.memory", "divisor": "1Mi"}}, "256"},
		{map[string]any{"resourceFieldRef": map[string]any{"resource": "requests.memory", "divisor": "1Mi"}}, "64"},
		// The kubelet rounds up: 500m of a core is 1.
		{map[string]any{"resourceFieldRef": map[string]any{"resource": "limits.cpu"}}, "1"},
		{map[string]any{"resourceFieldRef": map[string]any{"resource": "limits.cpu", "divisor": "1m"}}, "500"},
	} {
		got, err := resolveValueFrom(tc.from, container, pod)
		if err != nil || got != tc.want {
			t.Errorf("%v = %q, %v; want %q", tc.from, got, err, tc.want)
		}
	}
	if _, err := resolveValueFrom(map[string]any{"resourceFieldRef": map[string]any{"resource": "requests.cpu"}}, container, pod); err == nil {
		t.Error("requests.cpu without a request resolved to something")
	}
}

// imageUser is the USER of the Dockerfile's final stage: the user the image runs as.
func imageUser(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	user := ""
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "USER" {
			user = f[1]
		}
		if strings.HasPrefix(line, "FROM ") {
			user = ""
		}
	}
	if user == "" {
		t.Fatal("the Dockerfile's final stage sets no USER")
	}
	return user
}

// staticManager is the manager binary, which must be static like the image's (CGO_ENABLED=0):
// the pod's root holds nothing else.
func staticManager(t *testing.T) string {
	t.Helper()
	bin := tool(t, "TURNSTILE_MANAGER", "bin/manager")
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatalf("%s is dynamically linked; build it as the image does: CGO_ENABLED=0 (make build)", bin)
		}
	}
	return bin
}

// sandbox is a pod's network, mount and UTS namespaces, held by a process that only waits (the
// pause container's part).
type sandbox struct {
	pid  int
	cmd  *exec.Cmd
	root string // the container's root, mounted in the sandbox's mount namespace
}

// newSandbox makes the namespaces, names the host, and builds the container's file system:
// a read-only root with the binary at the command's path, the rendered emptyDir volumes, and
// the ServiceAccount files (token, ca.crt, namespace) read-only where the kubelet mounts them.
func newSandbox(t *testing.T, dir, podName, binary, command string, container, podSpec map[string]any, saFiles map[string][]byte) *sandbox {
	t.Helper()
	// The shell prints once unshare has made the namespaces, then becomes the pause process.
	cmd := exec.Command("unshare", "--net", "--mount", "--uts", "--propagation", "private", "sh", "-c", "echo ready; exec sleep infinity")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot make a pod's namespaces here (unshare: %v); this test needs root", err)
	}
	s := &sandbox{pid: cmd.Process.Pid, cmd: cmd, root: filepath.Join(dir, podName+"-root")}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- line
	}()
	select {
	case line := <-ready:
		if line != "ready\n" {
			t.Fatalf("unshare did not make the pod's namespaces (it printed %q)", line)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("unshare did not make the pod's namespaces within 30s")
	}
	// Everything below changes the sandbox's namespaces: never this machine's.
	for _, kind := range []string{"net", "uts", "mnt"} {
		if theirs, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", s.pid, kind)); theirs == "" || theirs == hostNS[kind] {
			t.Fatalf("the sandbox's %s namespace is %q, this machine's is %q", kind, theirs, hostNS[kind])
		}
	}
	pid := strconv.Itoa(s.pid)
	// The pod's loopback up, and its host name the pod's name, as the runtime makes them.
	if err := s.inNetns(func() error {
		ifr, err := unix.NewIfreq("lo")
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
			return err
		}
		ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
		return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
	}); err != nil {
		t.Fatalf("bring up the pod's loopback: %v", err)
	}
	if err := s.inNS(unix.CLONE_NEWUTS, "uts", func() error { return unix.Sethostname([]byte(podName)) }); err != nil {
		t.Fatalf("set the pod's host name: %v", err)
	}

	sa := filepath.Join(dir, podName+"-serviceaccount")
	if err := os.MkdirAll(sa, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range saFiles {
		if err := os.WriteFile(filepath.Join(sa, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(s.root, 0o755); err != nil {
		t.Fatal(err)
	}
	const saPath = "/var/run/secrets/kubernetes.io/serviceaccount"
	script := []string{
		"set -e",
		`mount -t tmpfs -o mode=0755 rootfs "$ROOT"`,
		`mkdir -p "$ROOT$(dirname "$COMMAND")"`, `touch "$ROOT$COMMAND"`,
		`mount --bind "$BINARY" "$ROOT$COMMAND"`, `mount -o remount,bind,ro "$ROOT$COMMAND"`,
	}
	if auto, ok := podSpec["automountServiceAccountToken"].(bool); !ok || auto {
		script = append(script,
			`mkdir -p "$ROOT`+saPath+`"`, `mount -t tmpfs -o mode=0755 sa "$ROOT`+saPath+`"`,
			`cp "$SA"/* "$ROOT`+saPath+`"/`, `mount -o remount,ro "$ROOT`+saPath+`"`)
	}
	volumes := map[string]map[string]any{}
	vs, _ := podSpec["volumes"].([]any)
	for _, v := range vs {
		vm := v.(map[string]any)
		volumes[vm["name"].(string)] = vm
	}
	mounts, _ := container["volumeMounts"].([]any)
	for _, m := range mounts {
		mm := m.(map[string]any)
		v := volumes[mm["name"].(string)]
		if _, ok := v["emptyDir"]; !ok {
			t.Fatalf("volume %v: only emptyDir volumes are made by this test; add it", v)
		}
		p := path.Clean(mm["mountPath"].(string))
		script = append(script, fmt.Sprintf(`mkdir -p "$ROOT%s"`, p), fmt.Sprintf(`mount -t tmpfs -o mode=1777 emptydir "$ROOT%s"`, p))
	}
	if sc, _ := container["securityContext"].(map[string]any); sc["readOnlyRootFilesystem"] == true {
		script = append(script, `mount -o remount,ro "$ROOT"`)
	}
	setup := exec.Command("nsenter", "-t", pid, "-m", "sh", "-c", strings.Join(script, "\n"))
	setup.Env = append(os.Environ(), "ROOT="+s.root, "COMMAND="+command, "BINARY="+binary, "SA="+sa)
	if out, err := setup.CombinedOutput(); err != nil {
		t.Fatalf("build the container's file system: %v\n%s", err, out)
	}
	return s
}

// inNetns runs f on an OS thread in the sandbox's network namespace: sockets f opens belong to
// the pod's network. The thread is discarded afterwards (never unlocked).
func (s *sandbox) inNetns(f func() error) error { return s.inNS(unix.CLONE_NEWNET, "net", f) }

// inNS runs f on an OS thread in one of the sandbox's namespaces (CLONE_NEWNET "net",
// CLONE_NEWUTS "uts"); the thread is discarded afterwards.
func (s *sandbox) inNS(kind int, name string, f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Back to this thread's own namespace afterwards; a thread that cannot go back is
		// discarded (a goroutine that exits locked ends its thread).
		back, err := unix.Open(fmt.Sprintf("/proc/self/task/%d/ns/%s", unix.Gettid(), name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- err
			return
		}
		defer unix.Close(back)
		fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/%s", s.pid, name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- err
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, kind); err != nil {
			done <- fmt.Errorf("setns: %w", err)
			return
		}
		err = f()
		if unix.Setns(back, kind) == nil {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}

// hostNS are this process's namespaces, read before any thread of it enters a sandbox's.
var hostNS = func() map[string]string {
	m := map[string]string{}
	for _, kind := range []string{"net", "uts", "mnt"} {
		m[kind], _ = os.Readlink("/proc/self/ns/" + kind)
	}
	return m
}()

// serveAPI listens on apiAddr inside the pod's network and forwards each connection to the
// API server: the part kube-proxy plays for the kubernetes Service.
func (s *sandbox) serveAPI(t *testing.T, apiAddr string) {
	t.Helper()
	var ln net.Listener
	if err := s.inNetns(func() (err error) { ln, err = net.Listen("tcp", apiAddr); return err }); err != nil {
		t.Fatalf("listen on %s in the pod's network: %v", apiAddr, err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				out, err := net.Dial("tcp", apiAddr) // on a host thread: the real API server
				if err != nil {
					return
				}
				defer out.Close()
				go func() { _, _ = io.Copy(out, in); _ = out.(*net.TCPConn).CloseWrite() }()
				_, _ = io.Copy(in, out)
			}()
		}
	}()
}

// get is an HTTP GET of http://127.0.0.1:port/path from inside the pod's network (a kubelet's
// probe reaches the pod's IP; the manager binds every address).
func (s *sandbox) get(port int, p string) (int, error) {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(_ context.Context, network, addr string) (c net.Conn, err error) {
			err = s.inNetns(func() (err error) { c, err = net.DialTimeout(network, addr, 5*time.Second); return err })
			return c, err
		},
	}}
	resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, p))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// replica is one pod of the Deployment: its sandbox and its manager process.
type replica struct {
	name string
	sb   *sandbox
	cmd  *exec.Cmd
	log  *framework.SyncBuffer
	done chan struct{}
	err  error
}

func (r *replica) running() error {
	select {
	case <-r.done:
		return fmt.Errorf("pod %s: the manager exited (%w):\n%s", r.name, r.err, r.log.String())
	default:
		return nil
	}
}

// probe is a container probe's httpGet: its port number (a named port resolved from the
// container's ports) and path.
type probe struct {
	kind string
	port int
	path string
}

func probesOf(t *testing.T, container map[string]any) []probe {
	t.Helper()
	named := map[string]int{}
	ports, _ := container["ports"].([]any)
	for _, p := range ports {
		pm := p.(map[string]any)
		if n, ok := pm["name"].(string); ok {
			named[n] = int(pm["containerPort"].(float64))
		}
	}
	var out []probe
	for _, kind := range []string{"startupProbe", "livenessProbe", "readinessProbe"} {
		pr, ok := container[kind].(map[string]any)
		if !ok {
			continue
		}
		get, ok := pr["httpGet"].(map[string]any)
		if !ok {
			t.Fatalf("%s is not an httpGet probe: %v", kind, pr)
		}
		port := 0
		switch v := get["port"].(type) {
		case float64:
			port = int(v)
		case string:
			if port, ok = named[v]; !ok {
				t.Fatalf("%s: no container port named %q", kind, v)
			}
		}
		out = append(out, probe{kind, port, get["path"].(string)})
	}
	if len(out) == 0 {
		t.Fatal("the container has no probes")
	}
	return out
}

func randomSuffix(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:n]
}

func TestDeploymentRunsAsRendered(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making a pod's namespaces and mounts needs root (CI and the dev container run as root)")
	}
	binary := staticManager(t)
	user := imageUser(t)
	for name, args := range map[string][]string{
		"default values": nil,
		"all on":         {"-f", filepath.Join(root, "test", "chart", "testdata", "all-on.yaml")},
		// One active replica instead: the leader election Lease's namespace comes from the pod.
		"leader election": {"--set", "activeActive.enabled=false", "--set", "leaderElection.enabled=true"},
	} {
		t.Run(name, func(t *testing.T) { runRendered(t, binary, user, args) })
	}
}

// capabilities are the helm template flags that stand for what helm install learns from the
// cluster's discovery: its version, and every group/version and group/version/Kind it serves
// (as helm's own capabilities list them), so `.Capabilities` choices render as on that cluster.
func capabilities(t *testing.T, cfg *rest.Config) []string {
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

func runRendered(t *testing.T, binary, user string, values []string) {
	const namespace = "turnstile-system"
	env, err := framework.StartBare("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	// helm install renders with what the cluster serves (discovery); so does this test.
	objs := render(t, "turnstile", namespace, append(capabilities(t, env.Config), values...)...)
	dep := find(t, objs, "Deployment")
	podSpec := dep.Path("spec", "template", "spec").(map[string]any)
	container := podSpec["containers"].([]any)[0].(map[string]any)
	replicas := int(dep.Path("spec", "replicas").(float64))
	if replicas < 2 {
		t.Fatalf("the Deployment renders %d replicas; this test wants the default two", replicas)
	}
	var command []string
	for _, a := range container["command"].([]any) {
		command = append(command, a.(string))
	}
	for _, a := range container["args"].([]any) {
		command = append(command, a.(string))
	}
	t.Logf("container: %s", strings.Join(command, " "))

	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "admin.kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	kc := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command(kubectl(t), append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	// Install everything the chart renders that this control plane serves, as `helm install`
	// would, except the Deployment: this test is its kubelet.
	var install bytes.Buffer
	for _, o := range objs {
		if o.Kind() == "Deployment" || strings.HasPrefix(fmt.Sprint(o["apiVersion"]), "monitoring.coreos.com/") {
			continue
		}
		data, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		install.WriteString("---\n")
		install.Write(data)
	}
	kc("", "create", "namespace", namespace)
	kc(install.String(), "apply", "--server-side", "-f", "-")
	kc("", "wait", "--for=condition=Established", "--timeout=60s", "crd/lockrequests.locks.turnstile.dev", "crd/projectlocks.locks.turnstile.dev", "crd/commandlocks.locks.turnstile.dev")

	sa := podSpec["serviceAccountName"].(string)
	apiURL, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	apiHost, apiPort := apiURL.Hostname(), apiURL.Port()
	podHash := randomSuffix(10)
	var pods []*replica
	for i := range replicas {
		podName := fmt.Sprintf("%s-%s-%s", dep.Meta("name"), podHash, randomSuffix(5))
		token, err := env.Token(context.Background(), namespace, sa)
		if err != nil {
			t.Fatal(err)
		}
		sb := newSandbox(t, dir, podName, binary, command[0], container, podSpec, map[string][]byte{
			"token": []byte(token), "ca.crt": env.Config.CAData, "namespace": []byte(namespace),
		})
		sb.serveAPI(t, net.JoinHostPort(apiHost, apiPort))
		penv, err := containerEnv(container, podOf{namespace: namespace, name: podName, node: fmt.Sprintf("node-%d", i), serviceAccount: sa, ip: "127.0.0.1"}, apiHost, apiPort)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("pod %s env: %s", podName, strings.Join(penv[2:], " "))
		cmd := exec.Command("nsenter", append([]string{"-t", strconv.Itoa(sb.pid), "-n", "-m", "-u", "--",
			"chroot", "--userspec=" + user, sb.root}, command...)...)
		cmd.Env = penv
		r := &replica{name: podName, sb: sb, cmd: cmd, log: &framework.SyncBuffer{}, done: make(chan struct{})}
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
				t.Logf("--- log of %s:\n%s", r.name, r.log.String())
			}
		})
		pods = append(pods, r)
	}

	probes := probesOf(t, container)
	waitFor := func(what string, f func() error) {
		t.Helper()
		var last error
		for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			for _, r := range pods {
				if err := r.running(); err != nil {
					t.Fatal(err)
				}
			}
			if last = f(); last == nil {
				return
			}
		}
		t.Fatalf("%s: not within 90s: %v", what, last)
	}
	for _, r := range pods {
		for _, p := range probes {
			waitFor(fmt.Sprintf("pod %s: %s GET :%d%s", r.name, p.kind, p.port, p.path), func() error {
				code, err := r.sb.get(p.port, p.path)
				if err == nil && code != http.StatusOK {
					err = fmt.Errorf("HTTP %d", code)
				}
				return err
			})
		}
		t.Logf("pod %s: ready on its probes %v", r.name, probes)
	}

	activeActive := slices.Contains(command, "--active-active=true")
	if !activeActive {
		// One leads: the leader election Lease in the pod's namespace names one of the pods (by
		// its host name, which the kubelet sets to the pod's name).
		waitFor("a replica leads", func() error {
			holder := kc("", "-n", namespace, "get", "lease", "turnstile.locks.turnstile.dev", "-o", "jsonpath={.spec.holderIdentity}", "--ignore-not-found")
			for _, r := range pods {
				if strings.HasPrefix(holder, r.name+"_") {
					return nil
				}
			}
			return fmt.Errorf("the leader Lease's holder is %q, none of the pods", holder)
		})
	}
	// Both replicas join: each pod's membership Lease (named after its POD_NAME) is there, and
	// each manager has logged the membership with both.
	waitFor("both replicas are members", func() error {
		if !activeActive {
			return nil
		}
		leases := kc("", "-n", namespace, "get", "leases", "-l", "locks.turnstile.dev/role=member", "-o", "name")
		for _, r := range pods {
			if !strings.Contains(leases, r.name) {
				return fmt.Errorf("no membership Lease of %s in:\n%s", r.name, leases)
			}
		}
		for _, r := range pods {
			if !bothLive(r.log.String(), pods) {
				return fmt.Errorf("pod %s has not logged a membership with both replicas", r.name)
			}
		}
		return nil
	})

	// A lock is granted, and handed off.
	kc("", "create", "namespace", "team")
	sample, err := os.ReadFile(filepath.Join(root, "config", "samples", "locks_v1alpha1_lockrequest.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// A new CRD is Established a moment before the API server serves it ("ServiceUnavailable:
	// Resource kind ... not found"): retry the create as a pipeline would.
	waitFor("the LockRequest is created", func() error {
		cmd := exec.Command(kubectl(t), "--kubeconfig", kubeconfig, "-n", "team", "apply", "-f", "-")
		cmd.Stdin = bytes.NewReader(sample)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	})
	kc("", "-n", "team", "wait", "--for=condition=Granted", "lockrequest/plan-pr-100", "--timeout=60s")
	for _, r := range pods {
		if err := r.running(); err != nil {
			t.Fatal(err)
		}
		// A kubelet acts on failureThreshold (3) failures in a row, not one slow answer.
		for _, p := range probes {
			waitFor(fmt.Sprintf("pod %s after the grant: %s GET :%d%s", r.name, p.kind, p.port, p.path), func() error {
				code, err := r.sb.get(p.port, p.path)
				if err == nil && code != http.StatusOK {
					err = fmt.Errorf("HTTP %d", code)
				}
				return err
			})
		}
		// The runtime's soft limit is the share of the container's memory limit that the
		// manager takes (MEMORY_LIMIT × --memory-limit-ratio): it logs the limit it runs under.
		if want, ok := memoryLimit(t, container); ok && !strings.Contains(r.log.String(), `"memoryLimit":`+want+`,"memoryLimitSource":"MEMORY_LIMIT"`) {
			t.Errorf("pod %s does not run under its share of its container's memory limit (%s bytes): no \"memoryLimit\":%s in its log", r.name, want, want)
		}
		if lines := forbiddenIn(r.log.String()); len(lines) > 0 {
			t.Errorf("pod %s logged forbidden (the chart's RBAC lacks something):\n%s", r.name, strings.Join(lines, "\n"))
		}
	}
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
		v, err := resolveValueFrom(from, container, podOf{})
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

// bothLive: the log has a "membership changed" line naming every pod.
func bothLive(log string, pods []*replica) bool {
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "membership changed") {
			continue
		}
		all := true
		for _, r := range pods {
			all = all && strings.Contains(line, r.name)
		}
		if all {
			return true
		}
	}
	return false
}

var forbiddenLine = regexp.MustCompile(`(?i).*forbidden.*`)

func forbiddenIn(log string) []string { return forbiddenLine.FindAllString(log, -1) }
