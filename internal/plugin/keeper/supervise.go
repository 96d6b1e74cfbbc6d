//go:build !windows

package keeper

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/turnstile-dev/turnstile/internal/proctree"
)

// Supervisor is run's side of the process tree, from before run asks for the locks until the
// tree is gone: run is a child subreaper too, so if its keeper is killed the tree is
// re-parented to run, which kills it before releasing (Run); and Ctrl-Z suspends the tree
// through the keeper (JobControl).
type Supervisor struct {
	mu sync.Mutex
	k  *keeper // the keeper while the command runs
}

// NewSupervisor makes the calling process (run) a child subreaper. Outside Linux this fails,
// before anything is asked for.
func NewSupervisor() (*Supervisor, error) {
	if err := proctree.BecomeSubreaper(); err != nil {
		return nil, err
	}
	return &Supervisor{}, nil
}

// JobControl is Ctrl-Z (SIGTSTP from the terminal): run suspends the command's tree through its
// keeper, as the terminal would suspend a foreground job, then stops itself, so the shell gets
// its prompt back; fg or bg continues run, which resumes the tree. The keeper, in a session of
// its own, is not stopped: it still stops the tree at the deadline run gave it, so a job
// suspended longer than the lease allows loses its locks without outliving them (docs/run.md,
// "Job control").
func (s *Supervisor) JobControl(tstp <-chan os.Signal) {
	for range tstp {
		k := s.current()
		if k != nil {
			k.send("suspend")
		}
		_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		// Continued (fg, bg or a SIGCONT).
		if k != nil {
			k.send("resume")
		}
	}
}

func (s *Supervisor) current() *keeper {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.k
}

func (s *Supervisor) set(k *keeper) {
	s.mu.Lock()
	s.k = k
	s.mu.Unlock()
}

// Run starts the keeper on args with env, and follows it until the whole tree is gone: it
// forwards signals, keeps the keeper's deadline current, stops the tree when the locks are
// lost, continues a keeper something stopped, and kills what a killed keeper left. The error
// is that the keeper could not be started.
func (s *Supervisor) Run(grace time.Duration, args, env []string, w Watch) (Outcome, error) {
	k, err := startKeeper(grace, args, env)
	if err != nil {
		return Outcome{}, err
	}
	s.set(k)
	defer s.set(nil)
	sent := w.Deadline()
	k.send("deadline %d", sent.UnixNano())
	lines := make(chan string, 8)
	go func() {
		for k.status.Scan() {
			lines <- k.status.Text()
		}
		close(lines)
	}()

	t := &tree{w: w, k: k, command: args[0], status: -1}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
loop:
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				break loop
			}
			t.said(line)
		case sig := <-w.Signals:
			k.send("signal %d", int(sig.(syscall.Signal)))
		case err := <-w.Lost:
			t.stop(err)
		case <-tick.C:
			k.continueIfStopped(w.Say)
			if d := w.Deadline(); !d.Equal(sent) {
				sent = d
				k.send("deadline %d", d.UnixNano())
			}
		}
	}
	_ = k.ctl.Close()
	if werr := k.cmd.Wait(); werr != nil {
		// The keeper did not finish its job (killed): what it kept is re-parented to run, the
		// next subreaper up. Kill it all and wait until it is gone before releasing.
		w.Say("warning: the keeper ended early (%v); killing what is left of the command", werr)
		killOrphans(t.pgid)
	}
	return Outcome{ExecCode: t.execCode, Status: t.status, Lost: t.lostCause}, nil
}

// tree is what run has heard of the command's tree from its keeper.
type tree struct {
	w         Watch
	k         *keeper
	command   string
	pgid      int
	execCode  int
	status    int // -1 until the command has ended
	lostCause error
	stopped   bool
}

// stop tells the keeper to stop the tree (once), for why.
func (t *tree) stop(why error) {
	if t.lostCause == nil {
		t.lostCause = why
	}
	if !t.stopped {
		t.stopped = true
		t.w.Say("stopping %s: %v", t.command, why)
		t.k.send("stop")
	}
}

// said takes in one line from the keeper.
func (t *tree) said(line string) {
	verb, rest, _ := strings.Cut(line, " ")
	switch verb {
	case "started":
		t.pgid, _ = strconv.Atoi(rest)
	case "exec":
		c, msg, _ := strings.Cut(rest, " ")
		t.execCode, _ = strconv.Atoi(c)
		t.w.Say("error: %s", msg)
	case "exited":
		t.status, _ = strconv.Atoi(rest)
	case "signaled":
		n, _ := strconv.Atoi(rest)
		t.status = 128 + n
	case "deadline":
		if t.lostCause == nil {
			t.lostCause = t.w.DeadlineCause()
			t.w.Say("stopping %s: %v", t.command, t.lostCause)
		}
		t.stopped = true
	}
}

// killOrphans SIGKILLs run's descendants (the command's tree, re-parented to run) until none is
// alive, and reaps them.
func killOrphans(pgid int) {
	for {
		n, err := proctree.Signal(os.Getpid(), pgid, false, syscall.SIGKILL)
		proctree.ReapAll()
		if err != nil || n == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// continueIfStopped continues the keeper if something stopped it (a SIGSTOP by pid): stopped,
// it could not stop the tree at the deadline should run stop too, or its renewals fail.
func (k *keeper) continueIfStopped(say func(string, ...any)) {
	p, err := proctree.Read(k.cmd.Process.Pid)
	// guard:run-keeper-continued
	if err == nil && p.State == 'T' {
		say("warning: the keeper (pid %d) was stopped; continuing it: it stops the command if the locks cannot be renewed", p.PID)
		_ = syscall.Kill(p.PID, syscall.SIGCONT)
	}
}

// keeper is run's side of a started keeper.
type keeper struct {
	cmd    *exec.Cmd
	ctl    io.WriteCloser
	status *bufio.Scanner
}

// send writes one line to the keeper; a keeper that is gone ignores it.
func (k *keeper) send(format string, a ...any) {
	_, _ = fmt.Fprintf(k.ctl, format+"\n", a...)
}

// startKeeper re-executes this binary as the keeper of args.
func startKeeper(grace time.Duration, args []string, env []string) (*keeper, error) {
	// This very binary, even if it was replaced on disk since run started.
	self := "/proc/self/exe"
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	stR, stW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, append([]string{"run", "--" + Flag, "--grace", grace.String(), "--"}, args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{ctlR, stW} // fds 3 and 4
	cmd.Env = env
	// Out of reach of whatever stops run: the terminal's job control, a signal to run's group.
	// guard:run-keeper-own-session
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	_ = ctlR.Close()
	_ = stW.Close()
	if err != nil {
		_ = ctlW.Close()
		_ = stR.Close()
		return nil, fmt.Errorf("start the keeper: %w", err)
	}
	return &keeper{cmd: cmd, ctl: ctlW, status: bufio.NewScanner(stR)}, nil
}
