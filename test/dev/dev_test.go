// Package dev proves the README's first command, literally: `make dev` starts a local
// kube-apiserver + etcd and the manager, prints a KUBECONFIG and PATH that a person can use with
// kubectl, and Ctrl-C stops every process it started and frees the API server's port.
//
// Run it with `make test`, or alone with:
//
//	make k8s-bins build && KUBEBUILDER_ASSETS=$PWD/bin/k8s/1.37.2-linux-amd64 go test -count=1 -v ./test/dev/
package dev

import (
	"bytes"
	"context"
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

	"k8s.io/client-go/tools/clientcmd"

	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

const (
	// startTimeout covers `make dev` finding everything built (make test built it), compiling
	// hack/dev and starting the control plane on a loaded 2-core machine.
	startTimeout = 3 * time.Minute
	// stopTimeout is how long Ctrl-C may take to stop the manager, kube-apiserver and etcd.
	stopTimeout = 60 * time.Second
)

var (
	exportKubeconfig = regexp.MustCompile(`(?m)^\s*export KUBECONFIG=(\S+)\s*$`)
	// The PATH line names bin/ (the plugin) first, then kubectl's directory.
	exportPath = regexp.MustCompile(`(?m)^\s*export PATH=[^:\s]+:([^:\s]+):\$PATH`)
	servedOn   = regexp.MustCompile(`(metrics|probes) on (http://\S+?)[;)]`)
)

func TestMakeDev(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run through `make test` (it builds kube-apiserver, etcd and kubectl first)")
	}
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()

	// The README's command, as a person types it (only where it keeps its state differs).
	cmd := exec.Command("make", "--no-print-directory", "dev", "DEV_STATE="+state)
	cmd.Dir = root
	cmd.Env = withoutMakeVars(os.Environ())
	// A process group of its own, like a shell's foreground job: Ctrl-C is SIGINT to the group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &framework.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start make dev: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	// Whatever happens, leave nothing behind, even when the test fails half way.
	var seen []proc
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		for _, p := range append(seen, descendants(cmd.Process.Pid)...) {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
		if t.Failed() {
			t.Logf("make dev printed:\n%s", out)
		}
	})

	var kubeconfig, binDir string
	waitFor(t, exited, startTimeout, "make dev to print how to use it", func() bool {
		text := out.String()
		k, p := exportKubeconfig.FindStringSubmatch(text), exportPath.FindStringSubmatch(text)
		if k == nil || p == nil {
			return false
		}
		kubeconfig, binDir = k[1], p[1]
		return true
	})
	if !strings.HasPrefix(kubeconfig, state) {
		t.Errorf("KUBECONFIG %s is not under DEV_STATE %s", kubeconfig, state)
	}

	kubectl := func(args ...string) string {
		t.Helper()
		c := exec.Command(filepath.Join(binDir, "kubectl"), append([]string{"--cache-dir", filepath.Join(state, "cache")}, args...)...)
		c.Dir = root
		c.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
		var stderr bytes.Buffer
		c.Stderr = &stderr
		stdout, err := c.Output()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, stdout, stderr.String())
		}
		return string(stdout)
	}

	t.Run("kubectl get crds lists the three CRDs", func(t *testing.T) {
		got := strings.Fields(kubectl("get", "crds", "-o", "name"))
		want := []string{
			"customresourcedefinition.apiextensions.k8s.io/commandlocks.locks.turnstile.dev",
			"customresourcedefinition.apiextensions.k8s.io/lockrequests.locks.turnstile.dev",
			"customresourcedefinition.apiextensions.k8s.io/projectlocks.locks.turnstile.dev",
		}
		for _, w := range want {
			if !slices.Contains(got, w) {
				t.Errorf("kubectl get crds: %s is missing from %v", w, got)
			}
		}
	})

	// The lines make dev printed, pasted into a fresh shell: nothing of this process's
	// environment, only a HOME (a login shell has one) and the repository as the directory.
	t.Run("the printed lines work pasted into a fresh shell", func(t *testing.T) {
		text := out.String()
		start, end := strings.Index(text, "In another shell"), strings.Index(text, "Press Ctrl-C")
		if start < 0 || end < start {
			t.Fatalf("make dev printed no block of lines to paste")
		}
		var lines []string
		for _, l := range strings.Split(text[start:end], "\n")[1:] {
			if l = strings.TrimSpace(l); l != "" {
				lines = append(lines, l)
			}
		}
		script := "set -e\n" + strings.Join(lines, "\n") + "\n"
		t.Logf("pasting:\n%s", script)
		sh := exec.Command("env", "-i", "HOME="+t.TempDir(), "bash", "--norc", "--noprofile", "-c", script)
		sh.Dir = root
		got, err := sh.CombinedOutput()
		if err != nil {
			t.Fatalf("the pasted lines failed: %v\n%s", err, got)
		}
		for _, w := range []string{"namespace/team-a created", "lockrequest.locks.turnstile.dev/plan-pr-100 condition met", "plan-pr-100", "alice"} {
			if !strings.Contains(string(got), w) {
				t.Errorf("the pasted lines' output does not say %q:\n%s", w, got)
			}
		}
	})

	// The shipped roles and admission policies are installed: the dev cluster refuses what a
	// real install refuses. bob, a requester in team-a (RBAC lets him patch lockrequests there),
	// may not release alice's lock: only the policies say no.
	t.Run("the dev cluster refuses what an install refuses", func(t *testing.T) {
		kubectl("-n", "team-a", "create", "rolebinding", "requesters", "--clusterrole=turnstile-requester", "--user=bob")
		c := exec.Command(filepath.Join(binDir, "kubectl"), "--cache-dir", filepath.Join(state, "cache"), "--as=bob", "-n", "team-a",
			"patch", "lockrequest/plan-pr-100", "--type=merge", "-p", `{"spec":{"release":true}}`)
		c.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
		got, err := c.CombinedOutput()
		if err == nil {
			t.Fatalf("bob released alice's lock:\n%s", got)
		}
		for _, want := range []string{"ValidatingAdmissionPolicy 'turnstile-lockrequest-changes'", "lockrequest plan-pr-100 is held for alice",
			"only its owner, the delegate that created it, or a turnstile-admin in namespace team-a may change or release it, and you are bob"} {
			if !strings.Contains(string(got), want) {
				t.Errorf("refused, but not by the shipped policy (want %q):\n%s", want, got)
			}
		}
	})

	// Metrics and probes on free loopback ports, not :8080 (kubectl proxy's default).
	t.Run("the manager serves on free loopback ports", func(t *testing.T) {
		m := servedOn.FindAllStringSubmatch(out.String(), -1)
		if len(m) != 2 {
			t.Fatalf("make dev does not say where metrics and probes are served:\n%s", out)
		}
		for _, e := range m {
			u, err := url.Parse(e[2])
			if err != nil {
				t.Fatal(err)
			}
			if u.Hostname() != "127.0.0.1" || u.Port() == "8080" || u.Port() == "8081" {
				t.Errorf("%s served on %s: want a free loopback port", e[1], u.Host)
			}
			resp, err := http.Get(e[2])
			if err != nil {
				t.Errorf("GET %s: %v", e[2], err)
				continue
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("GET %s: HTTP %d", e[2], resp.StatusCode)
			}
		}
	})

	t.Run("kubectl explain documents the priority", func(t *testing.T) {
		got := kubectl("explain", "lockrequest.spec.priority")
		for _, w := range []*regexp.Regexp{
			regexp.MustCompile(`FIELD: priority <string>`),
			regexp.MustCompile(`ENUM:\s+Low\s+Normal\s+High\s+Critical\s`),
			regexp.MustCompile(`priority orders the queue`),
			regexp.MustCompile(`Unset\s+means\s+Normal`),
		} {
			if !w.MatchString(got) {
				t.Errorf("kubectl explain lockrequest.spec.priority does not match %q:\n%s", w, got)
			}
		}
	})

	// What make dev started, found by walking the process tree: turnstile-dev and the manager,
	// kube-apiserver and etcd (the last three in process groups of their own).
	seen = descendants(cmd.Process.Pid)
	for _, name := range []string{"turnstile-dev", "manager", "kube-apiserver", "etcd"} {
		if !slices.ContainsFunc(seen, func(p proc) bool { return p.comm == name }) {
			t.Fatalf("make dev is not running %s; its processes: %v", name, seen)
		}
	}
	apiserver := apiserverAddress(t, kubeconfig)

	// The manager runs as its ServiceAccount (a token, no admin certificate), as in a pod.
	for _, p := range seen {
		if p.comm != "manager" {
			continue
		}
		environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.pid))
		if err != nil {
			t.Fatal(err)
		}
		var managerConfig string
		for _, kv := range strings.Split(string(environ), "\x00") {
			if v, ok := strings.CutPrefix(kv, "KUBECONFIG="); ok {
				managerConfig = v
			}
		}
		cfg, err := clientcmd.LoadFromFile(managerConfig)
		if err != nil {
			t.Fatalf("the manager's KUBECONFIG %q: %v", managerConfig, err)
		}
		auth := cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo]
		if auth == nil || auth.TokenFile == "" || len(auth.ClientCertificateData) > 0 || auth.ClientCertificate != "" {
			t.Errorf("the manager does not authenticate with a ServiceAccount token only: %+v", auth)
		}
	}

	// Ctrl-C: the terminal sends SIGINT to the foreground process group (make and hack/dev).
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatalf("SIGINT: %v", err)
	}
	select {
	case err := <-exited:
		// make reports the interrupt with a non-zero status; what matters is what is left.
		t.Logf("make dev ended after Ctrl-C: %v", err)
	case <-time.After(stopTimeout):
		t.Fatalf("make dev did not exit within %s of Ctrl-C", stopTimeout)
	}
	for _, p := range seen {
		if alive(p) {
			t.Errorf("after Ctrl-C, %s (pid %d) is still running", p.comm, p.pid)
		}
	}
	if conn, err := net.DialTimeout("tcp", apiserver, time.Second); err == nil {
		_ = conn.Close()
		t.Errorf("after Ctrl-C, something still listens on the API server's address %s", apiserver)
	}
	if !strings.Contains(out.String(), "Stopping kube-apiserver and etcd") {
		t.Errorf("make dev did not say it stopped the control plane")
	}
}

// waitFor polls cond until it holds, failing the test when make exits first or after timeout.
func waitFor(t *testing.T, exited <-chan error, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case err := <-exited:
			t.Fatalf("make dev exited (%v) before %s", err, what)
		case <-ctx.Done():
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		case <-tick.C:
		}
	}
}

func apiserverAddress(t *testing.T, kubeconfig string) string {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("read %s: %v", kubeconfig, err)
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatalf("kubeconfig server %q: %v", cfg.Host, err)
	}
	return u.Host
}

// withoutMakeVars drops the variables the outer `make test` exports, so the inner make behaves
// as it does when a person types `make dev`.
func withoutMakeVars(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return name == "MAKEFLAGS" || name == "MAKELEVEL" || name == "MFLAGS" || name == "MAKEOVERRIDES"
	})
}

// proc is a process seen in /proc.
type proc struct {
	pid, ppid int
	comm      string
	start     uint64 // start time in clock ticks since boot: tells a reused pid apart
}

func (p proc) String() string { return fmt.Sprintf("%s(%d)", p.comm, p.pid) }

// readProc reads /proc/<pid>/stat. ok is false when the process is gone or a zombie.
func readProc(pid int) (p proc, ok bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return proc{}, false
	}
	// pid (comm) state ppid ... field 22 is starttime; comm may hold spaces, so split after ')'.
	open, closing := bytes.IndexByte(data, '('), bytes.LastIndexByte(data, ')')
	if open < 0 || closing < open {
		return proc{}, false
	}
	fields := strings.Fields(string(data[closing+1:]))
	if len(fields) < 20 || fields[0] == "Z" || fields[0] == "X" {
		return proc{}, false
	}
	ppid, _ := strconv.Atoi(fields[1])
	start, _ := strconv.ParseUint(fields[19], 10, 64)
	return proc{pid: pid, ppid: ppid, comm: string(data[open+1 : closing]), start: start}, true
}

// descendants lists the live processes below pid.
func descendants(pid int) []proc {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]proc{}
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readProc(n); ok {
			children[p.ppid] = append(children[p.ppid], p)
		}
	}
	var out []proc
	queue := []int{pid}
	for len(queue) > 0 {
		next := queue[0]
		queue = queue[1:]
		for _, c := range children[next] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
	}
	return out
}

// alive reports whether p still runs (the same process, not a later one that reused its pid).
func alive(p proc) bool {
	now, ok := readProc(p.pid)
	return ok && now.start == p.start
}

// exportFleet matches the lines `make dev FLEET=2` prints per cluster.
var exportFleet = regexp.MustCompile(`(?m)^\s+(hub|spoke-[a-z])\s+KUBECONFIG=(\S+)`)

// TestMakeDevFleet is `make dev FLEET=2` (docs/fleet.md): a hub and two spokes on three control
// planes, the spokes' managers as agents of the hub with their own ServiceAccounts of it; the
// lines it prints, pasted into a fresh shell, make a request in spoke-a that the hub grants and
// the same request in spoke-b wait behind it; Ctrl-C stops all nine processes.
func TestMakeDevFleet(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run through `make test` (it builds kube-apiserver, etcd and kubectl first)")
	}
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	cmd := exec.Command("make", "--no-print-directory", "dev", "FLEET=2", "DEV_STATE="+state)
	cmd.Dir = root
	cmd.Env = withoutMakeVars(os.Environ())
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &framework.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start make dev FLEET=2: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var seen []proc
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		for _, p := range append(seen, descendants(cmd.Process.Pid)...) {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
		if t.Failed() {
			t.Logf("make dev FLEET=2 printed:\n%s", out)
			for _, name := range []string{"hub", "spoke-a", "spoke-b"} {
				if log, err := os.ReadFile(filepath.Join(state, "fleet", name+".log")); err == nil {
					t.Logf("--- the manager of %s:\n%s", name, log)
				}
			}
		}
	})

	// Three control planes start one after the other: three times make dev's wait.
	configs := map[string]string{}
	waitFor(t, exited, 3*startTimeout, "make dev FLEET=2 to print how to use it", func() bool {
		text := out.String()
		if !strings.Contains(text, "Press Ctrl-C") {
			return false
		}
		for _, m := range exportFleet.FindAllStringSubmatch(text, -1) {
			configs[m[1]] = m[2]
		}
		return true
	})
	for _, name := range []string{"hub", "spoke-a", "spoke-b"} {
		if !strings.HasPrefix(configs[name], state) {
			t.Errorf("no KUBECONFIG of %s under DEV_STATE %s: %v", name, state, configs)
		}
	}

	t.Run("the printed lines work pasted into a fresh shell", func(t *testing.T) {
		text := out.String()
		start, end := strings.Index(text, "In another shell"), strings.Index(text, "Press Ctrl-C")
		if start < 0 || end < start {
			t.Fatalf("make dev FLEET=2 printed no block of lines to paste")
		}
		var lines []string
		for _, l := range strings.Split(text[start:end], "\n")[1:] {
			// The commands are indented; the sentence after them is not.
			if strings.HasPrefix(l, "    ") {
				lines = append(lines, strings.TrimSpace(l))
			}
		}
		script := "set -e\n" + strings.Join(lines, "\n") + "\n"
		t.Logf("pasting:\n%s", script)
		sh := exec.Command("env", "-i", "HOME="+t.TempDir(), "bash", "--norc", "--noprofile", "-c", script)
		sh.Dir = root
		got, err := sh.CombinedOutput()
		if err != nil {
			t.Fatalf("the pasted lines failed: %v\n%s", err, got)
		}
		// The hub's copy of spoke-a's request, granted; spoke-b's queued behind it on one key.
		for _, w := range []*regexp.Regexp{
			regexp.MustCompile(`lockrequest.locks.turnstile.dev/plan-pr-100 condition met`),
			regexp.MustCompile(`(?m)^spoke-a\.plan-pr-100\s.*\sGranted\s`),
			regexp.MustCompile(`(?m)^lockrequest\.locks\.turnstile\.dev/spoke-b\.plan-pr-100\s.*\sPending\s`),
		} {
			if !w.Match(got) {
				t.Errorf("the pasted lines' output does not match %q:\n%s", w, got)
			}
		}
	})

	seen = descendants(cmd.Process.Pid)
	count := map[string]int{}
	for _, p := range seen {
		count[p.comm]++
	}
	for _, name := range []string{"manager", "kube-apiserver", "etcd"} {
		if count[name] != 3 {
			t.Errorf("make dev FLEET=2 runs %d %s processes, want 3 (one per cluster): %v", count[name], name, seen)
		}
	}
	// Each spoke's agent authenticates to the hub as its own ServiceAccount there, by the token
	// `kubectl turnstile fleet join` wrote into its kubeconfig.
	for _, name := range []string{"spoke-a", "spoke-b"} {
		cfg, err := clientcmd.LoadFromFile(filepath.Join(state, "fleet", name, "hub.kubeconfig"))
		if err != nil {
			t.Fatalf("the hub kubeconfig of %s: %v", name, err)
		}
		if cfg.CurrentContext == "" || cfg.Contexts[cfg.CurrentContext] == nil {
			t.Fatalf("the hub kubeconfig of %s has no current context", name)
		}
		auth := cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo]
		if auth == nil || auth.Token == "" || cfg.Contexts[cfg.CurrentContext].AuthInfo != "spoke-"+name {
			t.Errorf("%s does not reach the hub as ServiceAccount spoke-%s with a token: %+v", name, name, cfg.Contexts[cfg.CurrentContext])
		}
	}

	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatalf("SIGINT: %v", err)
	}
	select {
	case err := <-exited:
		t.Logf("make dev FLEET=2 ended after Ctrl-C: %v", err)
	case <-time.After(3 * stopTimeout):
		t.Fatalf("make dev FLEET=2 did not exit within %s of Ctrl-C", 3*stopTimeout)
	}
	for _, p := range seen {
		if alive(p) {
			t.Errorf("after Ctrl-C, %s (pid %d) is still running", p.comm, p.pid)
		}
	}
	for name, kubeconfig := range configs {
		addr := apiserverAddress(t, kubeconfig)
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			_ = conn.Close()
			t.Errorf("after Ctrl-C, something still listens on the API server address of %s, %s", name, addr)
		}
	}
}
