//go:build !linux

package proctree

import (
	"errors"
	"syscall"
)

// ErrUnsupported: a child subreaper and /proc are Linux's; `kubectl turnstile run` needs them
// to keep a command's whole tree under the lock, so it refuses to run elsewhere.
var ErrUnsupported = errors.New("proctree: keeping a process tree under a lock needs Linux (PR_SET_CHILD_SUBREAPER and /proc)")

// Proc is one process.
type Proc struct {
	PID, PPID, PGID, SID int
	State                byte
}

// Alive is false for a zombie.
func (p Proc) Alive() bool { return p.State != 'Z' && p.State != 'X' }

// BecomeSubreaper fails outside Linux.
func BecomeSubreaper() error { return ErrUnsupported }

// Read fails outside Linux.
func Read(int) (Proc, error) { return Proc{}, ErrUnsupported }

// Descendants fails outside Linux.
func Descendants(int) ([]Proc, error) { return nil, ErrUnsupported }

// Signal fails outside Linux.
func Signal(int, int, bool, syscall.Signal) (int, error) { return 0, ErrUnsupported }

// ReapAll reaps nothing outside Linux.
func ReapAll() int { return 0 }
