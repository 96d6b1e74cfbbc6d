//go:build !windows

package keeper

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/onsi/gomega"

	"github.com/turnstile-dev/turnstile/internal/proctree"
)

// keeperRun is a keeper started on a shell script, with its status lines collected.
type keeperRun struct {
	k     *keeper
	lines chan string
	dir   string
}

func startTestKeeper(t *testing.T, grace time.Duration, script string) *keeperRun {
	t.Helper()
	dir := t.TempDir()
	k, err := startKeeper(grace, []string{"sh", "-c", script}, append(os.Environ(), "D="+dir))
	if err != nil {
		t.Fatal(err)
	}
	kr := &keeperRun{k: k, lines: make(chan string, 16), dir: dir}
	go func() {
		for k.status.Scan() {
			kr.lines <- k.status.Text()
		}
		close(kr.lines)
	}()
	t.Cleanup(func() {
		// Whatever a failed test left of the tree: every process with this test's D= in its
		// environment, wherever it was re-parented.
		marker := []byte("D=" + dir + "\x00")
		dirs, _ := filepath.Glob("/proc/[0-9]*")
		for _, d := range dirs {
			if env, err := os.ReadFile(d + "/environ"); err == nil && bytes.Contains(env, marker) {
				if pid, err := strconv.Atoi(filepath.Base(d)); err == nil && pid != k.cmd.Process.Pid {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		_ = k.ctl.Close()
		_ = k.cmd.Process.Kill()
		_ = k.cmd.Wait()
	})
	return kr
}

// wait waits for the keeper to exit (the whole tree gone) and returns its status lines, minus
// "started".
func (kr *keeperRun) wait(t *testing.T) []string {
	t.Helper()
	var got []string
	timeout := time.After(20 * time.Second)
	for {
		select {
		case l, ok := <-kr.lines:
			if !ok {
				if err := kr.k.cmd.Wait(); err != nil {
					t.Fatalf("keeper: %v", err)
				}
				return got
			}
			if !strings.HasPrefix(l, "started ") {
				got = append(got, l)
			}
		case <-timeout:
			t.Fatalf("the keeper did not exit within 20s (said %v): a process of its tree is left", got)
		}
	}
}

func (kr *keeperRun) file(name string) string {
	b, _ := os.ReadFile(filepath.Join(kr.dir, name))
	return strings.TrimSpace(string(b))
}

// waitUp waits until the tree wrote its "up" file (its traps are set).
func (kr *keeperRun) waitUp(t *testing.T) {
	t.Helper()
	gomega.NewWithT(t).Eventually(func() string { return kr.file("up") }).
		WithTimeout(30*time.Second).WithPolling(20*time.Millisecond).ShouldNot(gomega.BeEmpty(), "the tree never wrote up")
}

func TestKeeperStopsWhatTheCommandLeftBehind(t *testing.T) {
	// A double fork: the orphan is re-parented to the keeper (a subreaper), not to init.
	kr := startTestKeeper(t, time.Second, `(sh -c 'trap "" TERM; echo $$ > $D/orphan; sleep 3; echo survived > $D/done' &); while [ ! -s $D/orphan ]; do sleep 0.01; done; exit 3`)
	if diff := cmp.Diff([]string{"exited 3"}, kr.wait(t)); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	pid, err := strconv.Atoi(kr.file("orphan"))
	if err != nil {
		t.Fatalf("the orphan never started: %v", err)
	}
	if p, err := proctree.Read(pid); err == nil && p.Alive() {
		t.Errorf("the keeper exited while the double-forked orphan (pid %d, parent %d) still ran", pid, p.PPID)
	}
	if kr.file("done") != "" {
		t.Error("the keeper waited for the orphan to finish instead of stopping it")
	}
}

func TestKeeperForwardsSignalsToProcessesThatLeftTheGroup(t *testing.T) {
	kr := startTestKeeper(t, 10*time.Second,
		`setsid sh -c 'trap "echo TERM > $D/leaver; exit 0" TERM; echo up > $D/up; while :; do sleep 0.1; done' & trap 'exit 143' TERM; wait`)
	kr.waitUp(t)
	kr.k.send("signal 15")
	kr.wait(t)
	if got := kr.file("leaver"); got != "TERM" {
		t.Errorf("the process that called setsid got %q, want the forwarded SIGTERM", got)
	}
}

func TestKeeperStopsTheTreeAtTheDeadline(t *testing.T) {
	kr := startTestKeeper(t, 5*time.Second, `trap "echo TERM > $D/term; exit 0" TERM; echo up > $D/up; while :; do sleep 0.1; done`)
	kr.waitUp(t)
	kr.k.send("deadline %d", time.Now().Add(200*time.Millisecond).UnixNano())
	if diff := cmp.Diff([]string{"deadline", "exited 0"}, kr.wait(t)); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	if kr.file("term") != "TERM" {
		t.Error("the tree was not sent SIGTERM at the deadline")
	}
}

func TestKeeperStopsTheTreeWhenRunDies(t *testing.T) {
	kr := startTestKeeper(t, 5*time.Second, `trap "echo TERM > $D/term; exit 0" TERM; echo up > $D/up; while :; do sleep 0.1; done`)
	kr.waitUp(t)
	_ = kr.k.ctl.Close() // what run's death looks like to the keeper
	kr.wait(t)
	if kr.file("term") != "TERM" {
		t.Error("the tree was not stopped when run's end of the control pipe closed")
	}
}

func TestKeeperKillsAfterGrace(t *testing.T) {
	kr := startTestKeeper(t, 500*time.Millisecond, `trap "" TERM; echo up > $D/up; sleep 5; echo survived > $D/done`)
	kr.waitUp(t)
	kr.k.send("stop")
	if diff := cmp.Diff([]string{"signaled 9"}, kr.wait(t)); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	if kr.file("done") != "" {
		t.Error("a command ignoring SIGTERM outlived the grace")
	}
}

func TestKeeperReportsACommandThatCannotRun(t *testing.T) {
	k, err := startKeeper(time.Second, []string{"no-such-command-for-turnstile"}, os.Environ())
	if err != nil {
		t.Fatal(err)
	}
	line := ""
	if k.status.Scan() {
		line = k.status.Text()
	}
	_ = k.ctl.Close()
	_ = k.cmd.Wait()
	if !strings.HasPrefix(line, "exec 127 ") {
		t.Errorf("status = %q, want exec 127 (not found)", line)
	}
}

// TestKeeperOwnSession: the keeper, and the command under it, are out of reach of what stops
// run: another session (no terminal's job control) and another process group than run's.
func TestKeeperOwnSession(t *testing.T) {
	kr := startTestKeeper(t, time.Second, `echo up > $D/up; while [ ! -e $D/go ]; do sleep 0.05; done`)
	kr.waitUp(t)
	self, err := proctree.Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	k, err := proctree.Read(kr.k.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if k.SID == self.SID || k.PGID == self.PGID {
		t.Errorf("the keeper is in run's session %d / group %d (its own: %d / %d): Ctrl-Z or a SIGSTOP of run's group stops it too", self.SID, self.PGID, k.SID, k.PGID)
	}
	if err := os.WriteFile(filepath.Join(kr.dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	kr.wait(t)
}

// suspendedTree starts a keeper on a command that counts while it runs, and suspends it as run
// does on Ctrl-Z; it returns the keeper and the command's pid.
func suspendedTree(t *testing.T, grace time.Duration) (*keeperRun, int) {
	t.Helper()
	kr := startTestKeeper(t, grace, `trap "echo TERM > $D/term; exit 0" TERM; echo up > $D/up; while :; do echo x >> $D/count; sleep 0.05; done`)
	var pid int
	select {
	case l := <-kr.lines:
		if _, err := fmt.Sscanf(l, "started %d", &pid); err != nil {
			t.Fatalf("first status %q", l)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the command did not start")
	}
	kr.waitUp(t)
	kr.k.send("suspend")
	waitTree(t, pid, treeSuspended, "suspended")
	return kr, pid
}

// treeSuspended: no process of the tree runs. Each is stopped (T), or is a shell blocked in
// vfork (D) on a child that the stop caught before it could exec (dash vforks its commands):
// the terminal's Ctrl-Z leaves such a job the same way, and SIGCONT lets the child exec.
func treeSuspended(tree []proctree.Proc) bool {
	stopped := map[int]bool{}
	for _, p := range tree {
		if p.State == 'T' {
			stopped[p.PPID] = true
		}
	}
	for _, p := range tree {
		if p.Alive() && p.State != 'T' && (p.State != 'D' || !stopped[p.PID]) {
			return false
		}
	}
	return true
}

// treeResumed: no process of the tree is stopped any more.
func treeResumed(tree []proctree.Proc) bool {
	for _, p := range tree {
		if p.State == 'T' {
			return false
		}
	}
	return true
}

// waitTree waits until the tree of pid (pid and its descendants) satisfies ok.
func waitTree(t *testing.T, pid int, ok func([]proctree.Proc) bool, what string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond) // /proc has no event to wait on
	defer tick.Stop()
	for {
		p, err := proctree.Read(pid)
		var tree []proctree.Proc
		if err == nil {
			var ds []proctree.Proc
			ds, err = proctree.Descendants(pid)
			tree = append([]proctree.Proc{p}, ds...)
		}
		if err == nil && ok(tree) {
			return
		}
		select {
		case <-deadline:
			t.Fatalf("the tree of pid %d was never %s (%+v, %v)", pid, what, tree, err)
		case <-tick.C:
		}
	}
}

// waitState waits until pid's state satisfies ok.
func waitState(t *testing.T, pid int, ok func(proctree.Proc) bool, what string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond) // /proc has no event to wait on
	defer tick.Stop()
	for {
		p, err := proctree.Read(pid)
		if err == nil && ok(p) {
			return
		}
		select {
		case <-deadline:
			t.Fatalf("pid %d never %s (state %c, %v)", pid, what, p.State, err)
		case <-tick.C:
		}
	}
}

// TestKeeperSuspendsAndResumesTheTree: Ctrl-Z of run suspends the command as the terminal would
// suspend a foreground job; fg resumes it.
func TestKeeperSuspendsAndResumesTheTree(t *testing.T) {
	kr, pid := suspendedTree(t, 5*time.Second)
	kr.k.send("resume")
	waitTree(t, pid, treeResumed, "resumed")
	kr.k.send("stop")
	kr.wait(t)
}

// TestKeeperStopsASuspendedTreeGracefully: a suspended tree that must stop (the deadline, a lost
// lock) is continued after SIGTERM, so it shuts down within the grace instead of being killed.
func TestKeeperStopsASuspendedTreeGracefully(t *testing.T) {
	kr, _ := suspendedTree(t, 10*time.Second)
	kr.k.send("deadline %d", time.Now().Add(100*time.Millisecond).UnixNano())
	if diff := cmp.Diff([]string{"deadline", "exited 0"}, kr.wait(t)); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	if kr.file("term") != "TERM" {
		t.Error("the suspended tree never handled SIGTERM: it was killed after the grace")
	}
}

// TestRunContinuesAStoppedKeeper: a keeper stopped by pid (SIGSTOP cannot be caught) could not
// stop the tree at the deadline; run, watching it, continues it and says so.
func TestRunContinuesAStoppedKeeper(t *testing.T) {
	kr := startTestKeeper(t, time.Second, `echo up > $D/up; while [ ! -e $D/go ]; do sleep 0.05; done`)
	kr.waitUp(t)
	pid := kr.k.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitState(t, pid, func(p proctree.Proc) bool { return p.State == 'T' }, "stopped")
	var said bytes.Buffer
	kr.k.continueIfStopped(func(format string, a ...any) { fmt.Fprintf(&said, format+"\n", a...) })
	waitState(t, pid, func(p proctree.Proc) bool { return p.State != 'T' }, "continued by run")
	if !strings.Contains(said.String(), "was stopped; continuing it") {
		t.Errorf("run said %q, want it to say it continued the keeper", said.String())
	}
	if err := os.WriteFile(filepath.Join(kr.dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	kr.wait(t)
}
