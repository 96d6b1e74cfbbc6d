package kubelet

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Sandbox is a pod's network, mount and UTS namespaces, held by a process that only waits (the
// pause container's part), and the container's root file system mounted in them.
type Sandbox struct {
	Pid  int
	cmd  *exec.Cmd
	Root string // the container's root, mounted in the sandbox's mount namespace
}

// ServiceAccountPath is where the kubelet mounts a pod's ServiceAccount token, CA and namespace.
const ServiceAccountPath = "/var/run/secrets/kubernetes.io/serviceaccount"

// NewSandbox makes the namespaces, names the host, and builds the container's file system:
// the image's root (a private copy) or a root holding only the binary at the command's path,
// the rendered emptyDir volumes, the ServiceAccount files (token, ca.crt, namespace) read-only
// where the kubelet mounts them, and the root made read-only when the container's
// securityContext asks. Without root it skips the test, saying so.
func NewSandbox(t *testing.T, dir, podName string, img Image, command string, container, podSpec map[string]any, saFiles map[string][]byte) *Sandbox {
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
	s := &Sandbox{Pid: cmd.Process.Pid, cmd: cmd, Root: filepath.Join(dir, podName+"-root")}
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
		if theirs, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", s.Pid, kind)); theirs == "" || theirs == hostNS[kind] {
			t.Fatalf("the sandbox's %s namespace is %q, this machine's is %q", kind, theirs, hostNS[kind])
		}
	}
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
	s.mountRoot(t, dir, podName, img, command, container, podSpec, saFiles)
	return s
}

// mountRoot builds the container's file system in the sandbox's mount namespace.
func (s *Sandbox) mountRoot(t *testing.T, dir, podName string, img Image, command string, container, podSpec map[string]any, saFiles map[string][]byte) {
	t.Helper()
	sa := filepath.Join(dir, podName+"-serviceaccount")
	if err := os.MkdirAll(sa, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range saFiles {
		if err := os.WriteFile(filepath.Join(sa, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(s.Root, 0o755); err != nil {
		t.Fatal(err)
	}
	script := []string{"set -e"}
	if img.Root != "" {
		// The container's own copy of the image (its snapshot), owners and modes kept; mount
		// points are made in it, as the runtime makes them in the container's layer.
		snapshot := filepath.Join(dir, podName+"-snapshot")
		if out, err := exec.Command("cp", "-a", img.Root, snapshot).CombinedOutput(); err != nil {
			t.Fatalf("copy the image's root for pod %s: %v\n%s", podName, err, out)
		}
		script = append(script, `mount --bind "`+snapshot+`" "$ROOT"`)
	} else {
		script = append(script,
			`mount -t tmpfs -o mode=0755 rootfs "$ROOT"`,
			`mkdir -p "$ROOT$(dirname "$COMMAND")"`, `touch "$ROOT$COMMAND"`,
			`mount --bind "$BINARY" "$ROOT$COMMAND"`, `mount -o remount,bind,ro "$ROOT$COMMAND"`,
		)
	}
	if auto, ok := podSpec["automountServiceAccountToken"].(bool); !ok || auto {
		script = append(script,
			`mkdir -p "$ROOT`+ServiceAccountPath+`"`, `mount -t tmpfs -o mode=0755 sa "$ROOT`+ServiceAccountPath+`"`,
			`cp "$SA"/* "$ROOT`+ServiceAccountPath+`"/`, `mount -o remount,ro "$ROOT`+ServiceAccountPath+`"`)
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
		if img.Root != "" {
			script = append(script, `mount -o remount,bind,ro "$ROOT"`)
		} else {
			script = append(script, `mount -o remount,ro "$ROOT"`)
		}
	}
	setup := exec.Command("nsenter", "-t", strconv.Itoa(s.Pid), "-m", "sh", "-c", strings.Join(script, "\n"))
	setup.Env = append(os.Environ(), "ROOT="+s.Root, "COMMAND="+command, "BINARY="+img.Binary, "SA="+sa)
	if out, err := setup.CombinedOutput(); err != nil {
		t.Fatalf("build the container's file system: %v\n%s", err, out)
	}
}

// Exec is the command that starts the container's process in the sandbox: in its namespaces,
// chrooted into its root, as user (uid:gid).
func (s *Sandbox) Exec(user string, command []string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"-t", strconv.Itoa(s.Pid), "-n", "-m", "-u", "--",
		"chroot", "--userspec=" + user, s.Root}, command...)...)
}

// inNetns runs f on an OS thread in the sandbox's network namespace: sockets f opens belong to
// the pod's network. The thread is discarded afterwards (never unlocked).
func (s *Sandbox) inNetns(f func() error) error { return s.inNS(unix.CLONE_NEWNET, "net", f) }

// inNS runs f on an OS thread in one of the sandbox's namespaces (CLONE_NEWNET "net",
// CLONE_NEWUTS "uts"); the thread is discarded afterwards.
func (s *Sandbox) inNS(kind int, name string, f func() error) error {
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
		fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/%s", s.Pid, name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
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

// ServeAPI listens on apiAddr inside the pod's network and forwards each connection to the
// API server: the part kube-proxy plays for the kubernetes Service.
func (s *Sandbox) ServeAPI(t *testing.T, apiAddr string) {
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

// Get is an HTTP GET of http://127.0.0.1:port/path from inside the pod's network (a kubelet's
// probe reaches the pod's IP; the manager binds every address).
func (s *Sandbox) Get(port int, p string) (int, error) {
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
