//go:build linux

// Package proctree finds and stops a process tree on Linux: the descendants of a process as
// /proc shows them (by parent pid, so processes that left the process group or the session are
// found too), a child subreaper so orphans stay in the tree, and signalling every member once.
//
// `kubectl turnstile run` uses it so that a lock is released only when no process of the
// command's tree is left (see docs/run.md).
package proctree

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// prSetChildSubreaper is prctl(2)'s PR_SET_CHILD_SUBREAPER.
const prSetChildSubreaper = 36

// BecomeSubreaper makes the calling process a child subreaper: a descendant orphaned by its
// parent's exit (a double fork, a daemon) is re-parented to this process instead of init, so it
// can still be found, signalled and waited for.
func BecomeSubreaper() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		return fmt.Errorf("prctl(PR_SET_CHILD_SUBREAPER): %w", errno)
	}
	return nil
}

// Proc is one process as /proc/PID/stat shows it.
type Proc struct {
	PID, PPID, PGID, SID int
	// State is the one-letter state: R, S, D, Z (zombie, exited and not yet reaped), T, ...
	State byte
}

// Alive is false for a zombie: it has exited and only waits to be reaped.
func (p Proc) Alive() bool { return p.State != 'Z' && p.State != 'X' }

// Read reads /proc/PID/stat.
func Read(pid int) (Proc, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Proc{}, err
	}
	return parseStat(b)
}

// parseStat parses "pid (comm) state ppid pgrp session ...": comm may hold spaces and
// parentheses, so the fields are read after the last ')'.
func parseStat(b []byte) (Proc, error) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 1 || end < open {
		return Proc{}, fmt.Errorf("proctree: malformed stat %q", b)
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return Proc{}, fmt.Errorf("proctree: malformed stat pid: %w", err)
	}
	f := bytes.Fields(b[end+1:])
	if len(f) < 4 || len(f[0]) != 1 {
		return Proc{}, fmt.Errorf("proctree: malformed stat %q", b)
	}
	p := Proc{PID: pid, State: f[0][0]}
	for i, dst := range []*int{&p.PPID, &p.PGID, &p.SID} {
		if *dst, err = strconv.Atoi(string(f[i+1])); err != nil {
			return Proc{}, fmt.Errorf("proctree: malformed stat field %d: %w", i+2, err)
		}
	}
	return p, nil
}

// All reads every process in /proc. Processes that exit while it reads are left out.
func All() ([]Proc, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	procs := make([]Proc, 0, len(names))
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		p, err := Read(pid)
		if err != nil {
			continue // gone meanwhile
		}
		procs = append(procs, p)
	}
	return procs, nil
}

// Descendants are the processes below root (not root itself), found by parent pid: children,
// their children, and so on, whatever their process group or session. Zombies are included;
// Proc.Alive tells them apart.
func Descendants(root int) ([]Proc, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	return descendantsOf(root, all), nil
}

func descendantsOf(root int, all []Proc) []Proc {
	children := map[int][]Proc{}
	for _, p := range all {
		children[p.PPID] = append(children[p.PPID], p)
	}
	var out []Proc
	queue := []int{root}
	seen := map[int]bool{root: true}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if seen[c.PID] {
				continue
			}
			seen[c.PID] = true
			out = append(out, c)
			queue = append(queue, c.PID)
		}
	}
	return out
}

// Signal sends sig once to every live process below root: to the process group pgid with one
// kill(-pgid) when groupAlive says the group is still root's to signal, and to each descendant
// outside that group on its own (one that called setsid or setpgid, or was orphaned into root
// by a double fork). It returns how many live descendants it found.
func Signal(root, pgid int, groupAlive bool, sig syscall.Signal) (int, error) {
	procs, err := Descendants(root)
	if err != nil {
		return 0, err
	}
	if groupAlive && pgid > 0 {
		if err := syscall.Kill(-pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return 0, fmt.Errorf("signal process group %d: %w", pgid, err)
		}
	}
	live := 0
	for _, p := range procs {
		if !p.Alive() {
			continue
		}
		live++
		// guard:run-signal-only-the-group
		if groupAlive && p.PGID == pgid {
			continue // the group signal reached it
		}
		_ = syscall.Kill(p.PID, sig) // ESRCH: it exited meanwhile
	}
	return live, nil
}

// ReapAll reaps every child that has exited, without blocking, and returns how many it reaped.
func ReapAll() int {
	n := 0
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return n
		}
		n++
	}
}
