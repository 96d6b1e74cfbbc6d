package framework

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Process is the real manager binary running against a control plane.
type Process struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // the exit status; set before exited is closed
}

// StartProcess starts binary with args and KUBECONFIG=kubeconfig, its output going to out.
func StartProcess(binary, kubeconfig string, out io.Writer, args ...string) (*Process, error) {
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
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
