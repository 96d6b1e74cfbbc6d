// Package kubelet starts a rendered Deployment's pods the way a kubelet and its container
// runtime would, and nothing more: the container's command and args over the image's
// entrypoint, its env with every valueFrom resolved as the kubelet resolves it, the
// ServiceAccount token, CA and namespace where the kubelet mounts them,
// KUBERNETES_SERVICE_HOST/PORT, the image's user (checked against runAsNonRoot as the kubelet
// checks it), the image's root file system (or a root holding one static binary) made
// read-only when the container asks, the rendered emptyDir volumes, and each pod in its own
// network, mount and UTS namespaces, so replicas bind the ports the chart renders.
// client-go's rest.InClusterConfig finds the API server from that alone.
//
// test/chart runs the chart's Deployment with bin/manager as the image's only file;
// test/release runs it from the release's image, unpacked layer by layer.
//
// What differs from a cluster, and why it cannot matter here: the API server is reached at
// 127.0.0.1 inside the pod's network namespace (a forwarder plays kube-proxy; the serving
// certificate of the test control plane names 127.0.0.1, not a Service IP), there is no PID
// namespace, /proc or /dev (the manager reads neither), and no seccomp profile. It needs root
// (unshare, nsenter, mount, chroot), as CI and the dev container have.
package kubelet

import (
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// PodOf is what the kubelet knows of a pod when it resolves the downward API.
type PodOf struct {
	Namespace, Name, Node, ServiceAccount, IP string
}

// Image is what a container runs from, as the runtime knows it from the image's config.
type Image struct {
	// Root is the image's unpacked root file system; each container gets its own copy of it,
	// as a snapshotter gives each its own layer. Empty: the root holds only Binary, at the
	// command's path.
	Root string
	// Binary is a static binary, the root's only file when Root is empty.
	Binary string
	// From the image's config.
	User       string
	Env        []string
	Entrypoint []string
	Cmd        []string
}

// Command is what the runtime runs: the container's command, else the image's entrypoint;
// then the container's args, else (only when the command is the image's) the image's cmd.
func Command(container map[string]any, img Image) []string {
	strs := func(key string) ([]string, bool) {
		raw, ok := container[key].([]any)
		if !ok {
			return nil, false
		}
		out := make([]string, 0, len(raw))
		for _, a := range raw {
			out = append(out, fmt.Sprint(a))
		}
		return out, true
	}
	command, ownCommand := strs("command")
	if !ownCommand {
		command = img.Entrypoint
	}
	args, ownArgs := strs("args")
	if !ownArgs && !ownCommand {
		args = img.Cmd
	}
	return append(append([]string(nil), command...), args...)
}

// User is the uid:gid the container runs as: runAsUser and runAsGroup of the container's
// securityContext, else the pod's, else the image's user. With runAsNonRoot, the kubelet
// refuses a container whose user is root or is not numeric ("cannot verify user is
// non-root"): so does this.
func User(podSpec, container map[string]any, img Image) (string, error) {
	podSC, _ := podSpec["securityContext"].(map[string]any)
	ctrSC, _ := container["securityContext"].(map[string]any)
	field := func(name string) any {
		if v, ok := ctrSC[name]; ok {
			return v
		}
		return podSC[name]
	}
	imgUser, imgGroup, _ := strings.Cut(img.User, ":")
	uid, gid := imgUser, imgGroup
	if v := field("runAsUser"); v != nil {
		uid = fmt.Sprint(v)
	}
	if v := field("runAsGroup"); v != nil {
		gid = fmt.Sprint(v)
	}
	if nonRoot, _ := field("runAsNonRoot").(bool); nonRoot {
		n, err := strconv.Atoi(uid)
		switch {
		case uid == "" || uid == "root":
			return "", fmt.Errorf("container has runAsNonRoot and image will run as root (user %q)", img.User)
		case err != nil:
			return "", fmt.Errorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root", uid)
		case n == 0:
			return "", fmt.Errorf("container's runAsUser breaks non-root policy (uid 0)")
		}
	}
	if uid == "" {
		uid = "0"
	}
	if gid == "" {
		gid = primaryGroup(img.Root, uid)
	}
	return uid + ":" + gid, nil
}

// primaryGroup is uid's group in the image's /etc/passwd, as containerd finds it for a user
// given without a group; "0" when the image does not list the user.
func primaryGroup(root, uid string) string {
	if root == "" {
		return "0"
	}
	data, err := os.ReadFile(filepath.Join(root, "etc", "passwd"))
	if err != nil {
		return "0"
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Split(line, ":")
		if len(f) >= 4 && (f[2] == uid || f[0] == uid) {
			return f[3]
		}
	}
	return "0"
}

// ContainerEnv is the container's env as the kubelet passes it: the image's environment,
// HOSTNAME, the container's env with each valueFrom resolved, then the API server's service
// variables. An env entry it cannot resolve is an error: the test must not guess.
func ContainerEnv(container map[string]any, img Image, pod PodOf, apiHost, apiPort string) ([]string, error) {
	env := append(append([]string(nil), img.Env...), "HOSTNAME="+pod.Name)
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
		value, err := ResolveValueFrom(from, container, pod)
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

// ResolveValueFrom resolves an env entry's valueFrom as the kubelet does: fieldRef and
// resourceFieldRef (no ConfigMaps or Secrets are rendered).
func ResolveValueFrom(from, container map[string]any, pod PodOf) (string, error) {
	if f, ok := from["fieldRef"].(map[string]any); ok {
		switch p := f["fieldPath"].(string); p {
		case "metadata.namespace":
			return pod.Namespace, nil
		case "metadata.name":
			return pod.Name, nil
		case "spec.nodeName":
			return pod.Node, nil
		case "spec.serviceAccountName":
			return pod.ServiceAccount, nil
		case "status.podIP", "status.podIPs":
			return pod.IP, nil
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

// Probe is a container probe's httpGet: its port number (a named port resolved from the
// container's ports) and path.
type Probe struct {
	Kind string
	Port int
	Path string
}

// Probes are the container's startup, liveness and readiness probes; each must be an
// httpGet, and there must be one.
func Probes(container map[string]any) ([]Probe, error) {
	named := map[string]int{}
	ports, _ := container["ports"].([]any)
	for _, p := range ports {
		pm := p.(map[string]any)
		if n, ok := pm["name"].(string); ok {
			named[n] = int(pm["containerPort"].(float64))
		}
	}
	var out []Probe
	for _, kind := range []string{"startupProbe", "livenessProbe", "readinessProbe"} {
		pr, ok := container[kind].(map[string]any)
		if !ok {
			continue
		}
		get, ok := pr["httpGet"].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s is not an httpGet probe: %v", kind, pr)
		}
		port := 0
		switch v := get["port"].(type) {
		case float64:
			port = int(v)
		case string:
			if port, ok = named[v]; !ok {
				return nil, fmt.Errorf("%s: no container port named %q", kind, v)
			}
		}
		out = append(out, Probe{kind, port, get["path"].(string)})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the container has no probes")
	}
	return out, nil
}
