//go:build !windows

package keeper

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/turnstile-dev/turnstile/internal/proctree"
)

// The keeper's ends of its two pipes (the package doc has the protocol).
const (
	ctlFD    = 3
	statusFD = 4
)

// keeperEvent is what the keeper's main loop reacts to.
type keeperEvent struct {
	line string // a line from run; "" with eof
	eof  bool
}

// Main is the keeper's main. It returns the keeper's exit code (0 unless the keeper
// itself failed; the command's status goes to run on the status pipe).
func Main(grace time.Duration, args []string) int {
	status := os.NewFile(statusFD, "keeper-status")
	ctl := os.NewFile(ctlFD, "keeper-ctl")
	if status == nil || ctl == nil {
		fmt.Fprintln(os.Stderr, "error: --internal-keeper is run's own helper, not for direct use")
		return ExitRunFailed
	}
	say := func(format string, a ...any) { _, _ = fmt.Fprintf(status, format+"\n", a...) }
	// The pipes are run's and the keeper's: the command must not hold them open.
	syscall.CloseOnExec(ctlFD)
	syscall.CloseOnExec(statusFD)

	// guard:run-keeper-not-subreaper
	if err := proctree.BecomeSubreaper(); err != nil {
		say("exec %d %v", ExitRunFailed, err)
		return 0
	}
	// run forwards SIGINT, SIGTERM and SIGHUP on the control pipe: in a session of its own, the
	// keeper receives them itself only when sent to it by pid. Caught (not ignored: an ignored
	// signal would stay ignored in the command).
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)

	pid, ok := startCommand(args, say)
	if !ok {
		return 0
	}
	mainExit, allGone := reap(pid)
	k := &keeperLoop{pid: pid, grace: grace, say: say, deadline: time.NewTimer(time.Hour), kill: time.NewTimer(time.Hour)}
	k.deadline.Stop()
	k.kill.Stop()
	return k.run(controlEvents(ctl), sigs, mainExit, allGone)
}

// startCommand starts the command in a process group of its own and tells run its pid, or
// why it could not start (then ok is false).
func startCommand(args []string, say func(string, ...any)) (pid int, ok bool) {
	path, err := exec.LookPath(args[0])
	if err != nil {
		say("exec %d %v", LookPathCode(err), err)
		return 0, false
	}
	pid, err = syscall.ForkExec(path, args, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		code := ExitCannotExecute
		if errors.Is(err, syscall.ENOENT) {
			code = ExitNotFound
		}
		say("exec %d start %s: %v", code, args[0], err)
		return 0, false
	}
	say("started %d", pid)
	return pid, true
}

// reap is the reaper: wait4(-1) until no child is left (ECHILD, then allGone closes),
// reporting the command's own status on mainExit.
func reap(pid int) (mainExit <-chan syscall.WaitStatus, allGone <-chan struct{}) {
	exit := make(chan syscall.WaitStatus, 1)
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		for {
			var ws syscall.WaitStatus
			wpid, err := syscall.Wait4(-1, &ws, 0, nil)
			switch {
			case errors.Is(err, syscall.EINTR):
				continue
			case err != nil: // ECHILD: the whole tree is gone
				return
			case wpid == pid:
				exit <- ws
			}
		}
	}()
	return exit, gone
}

// controlEvents reads run's lines from the control pipe, then its EOF.
func controlEvents(ctl io.Reader) chan keeperEvent {
	events := make(chan keeperEvent, 8)
	go func() {
		sc := bufio.NewScanner(ctl)
		for sc.Scan() {
			events <- keeperEvent{line: sc.Text()}
		}
		events <- keeperEvent{eof: true}
	}()
	return events
}

// keeperLoop is the keeper's state once the command runs.
type keeperLoop struct {
	pid        int
	grace      time.Duration
	say        func(string, ...any)
	mainReaped bool
	stopping   bool
	deadline   *time.Timer
	kill       *time.Timer
}

func (k *keeperLoop) signalTree(sig syscall.Signal) {
	_, _ = proctree.Signal(os.Getpid(), k.pid, !k.mainReaped, sig)
}

// stop sends SIGTERM to the tree and SIGKILL after the grace (once). A tree suspended by Ctrl-Z
// is continued after the signal, as a shell's kill of a stopped job does, so that it can act on
// it within the grace.
func (k *keeperLoop) stop(sig syscall.Signal) {
	k.signalTree(sig)
	// guard:run-stopped-tree-continued
	k.signalTree(syscall.SIGCONT)
	if !k.stopping {
		k.stopping = true
		// guard:run-no-sigkill-after-grace
		k.kill.Reset(k.grace)
	}
}

// sayExit tells run how the command ended.
func (k *keeperLoop) sayExit(ws syscall.WaitStatus) {
	if ws.Signaled() {
		k.say("signaled %d", int(ws.Signal()))
	} else {
		k.say("exited %d", ws.ExitStatus())
	}
}

// run is the keeper's main loop; it returns once the whole tree is gone.
func (k *keeperLoop) run(events chan keeperEvent, sigs <-chan os.Signal, mainExit <-chan syscall.WaitStatus, allGone <-chan struct{}) int {
	var killing <-chan time.Time
	for {
		select {
		case ev := <-events:
			if ev.eof {
				events = nil
			}
			k.control(ev)
		case <-k.deadline.C:
			if !k.stopping {
				k.say("deadline")
				k.stop(syscall.SIGTERM)
			}
		case <-k.kill.C:
			// Past the grace: SIGKILL whatever is left, again until the reaper sees no child
			// (a process may fork between the scan and the kill).
			k.signalTree(syscall.SIGKILL)
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			killing = t.C
		case <-killing:
			k.signalTree(syscall.SIGKILL)
		case ws := <-mainExit:
			k.mainReaped = true
			k.sayExit(ws)
			// What the command left running is part of its tree: it gets SIGTERM now, and
			// SIGKILL after the grace, before the locks are released.
			// guard:run-leftovers-not-stopped
			k.stop(syscall.SIGTERM)
		case <-sigs:
			// Forwarded by run on the control pipe.
		case <-allGone:
			select {
			case ws := <-mainExit: // reaped just before the last child
				k.sayExit(ws)
			default:
			}
			return 0
		}
	}
}

// control acts on one line from run (or its EOF).
func (k *keeperLoop) control(ev keeperEvent) {
	switch {
	case ev.eof:
		// guard:run-keeper-outlives-run
		k.stop(syscall.SIGTERM) // run is gone: nobody renews the lock any more
	case strings.HasPrefix(ev.line, "deadline "):
		if ns, err := strconv.ParseInt(strings.TrimPrefix(ev.line, "deadline "), 10, 64); err == nil && !k.stopping {
			// guard:run-keeper-ignores-deadline
			k.deadline.Reset(time.Until(time.Unix(0, ns)))
		}
	case strings.HasPrefix(ev.line, "signal "):
		if n, err := strconv.Atoi(strings.TrimPrefix(ev.line, "signal ")); err == nil {
			k.stop(syscall.Signal(n))
		}
	case strings.HasPrefix(ev.line, "stop"):
		k.stop(syscall.SIGTERM)
	case ev.line == "suspend" && !k.stopping:
		// Ctrl-Z of run: the command's tree is suspended as a foreground job is. The deadline
		// still runs: suspended past it, the tree is stopped for good.
		// guard:run-ctrl-z-suspends-tree
		k.signalTree(syscall.SIGTSTP)
	case ev.line == "resume":
		k.signalTree(syscall.SIGCONT)
	}
}
