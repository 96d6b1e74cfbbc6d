package framework

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Process is the real manager binary running against a control plane.
type Process struct {
	cmd     *exec.Cmd
	exited  chan struct{}
	err     error  // the exit status; set before exited is closed
	logPath string // set by StartProcessLogFile
}

// StartProcess starts binary with args and KUBECONFIG=kubeconfig, its output going to out.
func StartProcess(binary, kubeconfig string, out io.Writer, args ...string) (*Process, error) {
	return StartProcessEnv(binary, kubeconfig, nil, out, args...)
}

// StartProcessEnv is StartProcess with env (NAME=value) added to this process's environment.
func StartProcessEnv(binary, kubeconfig string, env []string, out io.Writer, args ...string) (*Process, error) {
	cmd := exec.Command(binary, args...)
	cmd.Env = append(append(os.Environ(), env...), "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, so a Ctrl-C meant for `make dev` reaches it only through us.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", binary, err)
	}
	p := &Process{cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// StartProcessLogFile is StartProcess with the output going to the file logPath: a file, not a
// pipe, so the process writes straight into it and nothing in the test can hold up its writes.
// Log reads it.
func StartProcessLogFile(binary, kubeconfig, logPath string, args ...string) (*Process, error) {
	return StartProcessLogFileEnv(binary, kubeconfig, logPath, nil, args...)
}

// StartProcessLogFileEnv is StartProcessLogFile with env (NAME=value) added.
func StartProcessLogFileEnv(binary, kubeconfig, logPath string, env []string, args ...string) (*Process, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child has its own descriptor
	p, err := StartProcessEnv(binary, kubeconfig, env, f, args...)
	if err != nil {
		return nil, err
	}
	p.logPath = logPath
	return p, nil
}

// Log is what the process has written to its log file so far (StartProcessLogFile), or why
// that cannot be read.
func (p *Process) Log() string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	return string(data)
}

var forbidden = regexp.MustCompile(`(?i).*forbidden.*`)

// ForbiddenLines are the lines of the process's log file that say "forbidden": for the
// manager, a verb the RBAC it runs under lacks, or an admission policy that denies it.
func (p *Process) ForbiddenLines() []string { return forbidden.FindAllString(p.Log(), -1) }

// Running is nil while the process runs; once it has ended, an error that says how.
func (p *Process) Running() error {
	select {
	case <-p.exited:
		if p.err == nil {
			return errors.New("exited with status 0")
		}
		return fmt.Errorf("exited: %w", p.err)
	default:
		return nil
	}
}

// FreeLoopbackAddr is a free loopback address (FreeAddr outside Ginkgo, for plain tests).
func FreeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// OutsideClusterArgs are a Deployment's manager args for the binary run outside the cluster:
// the listen addresses moved to the given loopback ones (not the pod's ports), nothing added.
// What else a pod gives the manager comes from its env (DownwardEnv).
func OutsideClusterArgs(deploymentArgs []string, metricsAddr, probeAddr string) []string {
	var args []string
	for _, a := range deploymentArgs {
		switch {
		case strings.HasPrefix(a, "--metrics-bind-address="):
			a = "--metrics-bind-address=" + metricsAddr
		case strings.HasPrefix(a, "--health-probe-bind-address="):
			a = "--health-probe-bind-address=" + probeAddr
		}
		args = append(args, a)
	}
	return args
}

// DownwardEnv is a container's env as NAME=value, resolved as the kubelet resolves it for a
// pod of the given namespace and name: values, and fieldRefs to the pod's namespace and name.
// Anything else is an error rather than a guess. ContainerEnv resolves resourceFieldRefs too.
func DownwardEnv(env []corev1.EnvVar, namespace, podName string) ([]string, error) {
	return ContainerEnv(corev1.Container{Env: env}, namespace, podName)
}

// ContainerEnv is DownwardEnv of the container's env, with resourceFieldRefs resolved from its
// resources as the kubelet does (the limit or request divided by the divisor, rounded up; a
// missing limit would be the node's allocatable, which a test has not got: an error).
func ContainerEnv(ctr corev1.Container, namespace, podName string) ([]string, error) {
	var out []string
	for _, e := range ctr.Env {
		switch {
		case e.ValueFrom == nil:
			out = append(out, e.Name+"="+e.Value)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			out = append(out, e.Name+"="+namespace)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			out = append(out, e.Name+"="+podName)
		case e.ValueFrom.ResourceFieldRef != nil:
			v, err := resourceValue(e.ValueFrom.ResourceFieldRef, ctr.Resources)
			if err != nil {
				return nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
			out = append(out, e.Name+"="+v)
		default:
			return nil, fmt.Errorf("env %s: valueFrom %+v is not resolved outside a cluster", e.Name, *e.ValueFrom)
		}
	}
	return out, nil
}

func resourceValue(ref *corev1.ResourceFieldSelector, res corev1.ResourceRequirements) (string, error) {
	kind, name, _ := strings.Cut(ref.Resource, ".")
	var list corev1.ResourceList
	switch kind {
	case "limits":
		list = res.Limits
	case "requests":
		list = res.Requests
	default:
		return "", fmt.Errorf("resourceFieldRef %q: not a limits.* or requests.* resource", ref.Resource)
	}
	q, ok := list[corev1.ResourceName(name)]
	if !ok {
		return "", fmt.Errorf("resourceFieldRef %s: the container sets none (the kubelet would use the node's allocatable)", ref.Resource)
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	return strconv.FormatInt(int64(math.Ceil(q.AsApproximateFloat64()/divisor.AsApproximateFloat64())), 10), nil
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has ended; Err then says how.
func (p *Process) Done() <-chan struct{} { return p.exited }

// Err is the exit status once Done is closed: nil for a clean exit, an *exec.ExitError otherwise.
func (p *Process) Err() error {
	<-p.exited
	return p.err
}

// Stop sends SIGTERM and waits up to grace for a clean exit, then kills.
func (p *Process) Stop(grace time.Duration) error {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-p.exited:
		return p.err
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		return fmt.Errorf("manager did not exit within %s of SIGTERM; killed: %w", grace, p.Err())
	}
}

// Kill sends SIGKILL, as a crash would, waits for the process to go and returns its exit
// status (normally "signal: killed").
func (p *Process) Kill() error {
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return p.Err()
}

// SyncBuffer collects a process's output for a test to read while the process still writes it.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
