//go:build linux

package proctree

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/onsi/gomega"
)

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		want       Proc
		wantErr    bool
	}{
		{name: "plain", stat: "42 (sleep) S 7 42 7 0 -1 4194304", want: Proc{PID: 42, PPID: 7, PGID: 42, SID: 7, State: 'S'}},
		{name: "comm with spaces and parentheses", stat: "9 (a) b (c)) Z 1 9 9 0", want: Proc{PID: 9, PPID: 1, PGID: 9, SID: 9, State: 'Z'}},
		{name: "truncated", stat: "9 (x) S 1", wantErr: true},
		{name: "no comm", stat: "9 S 1 2 3", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStat([]byte(tc.stat))
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseStat(%q) error = %v, want error %v", tc.stat, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); !tc.wantErr && diff != "" {
				t.Errorf("parseStat(%q) (-want +got):\n%s", tc.stat, diff)
			}
		})
	}
}

func TestDescendantsOf(t *testing.T) {
	all := []Proc{
		{PID: 1, PPID: 0}, {PID: 10, PPID: 1}, {PID: 11, PPID: 10}, {PID: 12, PPID: 11, PGID: 12},
		{PID: 13, PPID: 10}, {PID: 20, PPID: 1}, {PID: 21, PPID: 20},
	}
	var got []int
	for _, p := range descendantsOf(10, all) {
		got = append(got, p.PID)
	}
	slices.Sort(got)
	if diff := cmp.Diff([]int{11, 12, 13}, got); diff != "" {
		t.Errorf("descendants of 10 (-want +got):\n%s", diff)
	}
}

// TestSignalReachesALeaver runs a real tree: a shell in its own group whose child calls setsid
// (so it is in neither the group nor the session). Signal must find and stop both.
func TestSignalReachesALeaver(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("setsid(1) not installed")
	}
	dir := t.TempDir()
	pidFile := dir + "/leaver"
	sh := exec.Command("sh", "-c", `setsid sh -c 'echo $$ > `+pidFile+`; exec sleep 600' & wait`)
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-sh.Process.Pid, syscall.SIGKILL); _ = sh.Wait() })
	g := gomega.NewWithT(t)
	var leaver int
	g.Eventually(func() int {
		b, _ := os.ReadFile(pidFile)
		leaver, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return leaver
	}).WithTimeout(10*time.Second).WithPolling(20*time.Millisecond).ShouldNot(gomega.BeZero(), "the setsid child never wrote its pid")
	p, err := Read(leaver)
	if err != nil {
		t.Fatal(err)
	}
	if p.PGID == sh.Process.Pid {
		t.Fatalf("the leaver is still in the shell's group %d", p.PGID)
	}
	n, err := Signal(os.Getpid(), sh.Process.Pid, true, syscall.SIGKILL)
	if err != nil {
		t.Fatal(err)
	}
	if n < 2 {
		t.Errorf("Signal found %d live descendants, want the shell and the leaver at least", n)
	}
	_ = sh.Wait()
	g.Eventually(func() bool {
		p, err := Read(leaver)
		return err == nil && p.Alive()
	}).WithTimeout(10*time.Second).WithPolling(20*time.Millisecond).Should(gomega.BeFalse(), "the process that left the group (pid %d) survived Signal", leaver)
}
