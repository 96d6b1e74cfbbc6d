package workdir

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

var (
	// ErrLocked is matched (errors.Is) by every error that refuses a guard because its working
	// dir is busy: held by another command or being deleted.
	ErrLocked = errors.New("working dir is locked")
	// ErrInUse is matched by every error that refuses to delete a working dir because a guard
	// inside it is held or another deletion of it is running.
	ErrInUse = errors.New("working dir is in use")
	// ErrLeaseLost is matched by every error that refuses a guard because this replica's
	// heartbeat Lease could not be renewed in time (or was given up on shutdown): the operator
	// may already have released every LockRequest that names the Lease, so a command started
	// now could run without the project lock it believes it holds.
	ErrLeaseLost = errors.New("working-dir guard lease lost")
)

// LockedError says who holds a working dir. It matches ErrLocked.
type LockedError struct {
	// Key is the guard that was asked for.
	Key Key
	// Holder is the holder that has it, or, when Deleting, which deletion runs.
	Holder string
	// Since is when the holder took it.
	Since time.Time
	// Deleting is set when the working dir is being deleted rather than used by a command.
	Deleting bool
}

// Error follows Atlantis's wording ("the default workspace at path . is currently locked by
// another command that is running for this pull request"), which users already search for,
// and adds who holds it and since when.
func (e *LockedError) Error() string {
	if e.Deleting {
		return fmt.Sprintf("the %s workspace is being deleted (%s since %s) - wait until the deletion is complete and try again",
			e.Key, e.Holder, formatTime(e.Since))
	}
	return fmt.Sprintf("the %s workspace is currently locked by another command that is running for this pull request (held by %s since %s) - wait until the previous command is complete and try again",
		e.Key, e.Holder, formatTime(e.Since))
}

// Is makes errors.Is(err, ErrLocked) hold.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// InUseError says why a working dir could not be deleted. It matches ErrInUse.
type InUseError struct {
	// Scope is what was to be deleted.
	Scope Key
	// Holders are the guards held inside Scope, in key order; a deletion already running on an
	// overlapping scope appears with that scope as Key and "delete" as Holder.
	Holders []Held
}

// Error names every holder, so whoever runs the clean-up can see what it waits for.
func (e *InUseError) Error() string {
	parts := make([]string, 0, len(e.Holders))
	for _, h := range e.Holders {
		parts = append(parts, fmt.Sprintf("%s on %s since %s", h.Holder, h.Key, formatTime(h.Since)))
	}
	return fmt.Sprintf("cannot delete working dirs of %s: in use by %s", e.Scope, strings.Join(parts, ", "))
}

// Is makes errors.Is(err, ErrInUse) hold.
func (e *InUseError) Is(target error) bool { return target == ErrInUse }

// formatTime prints UTC to the second: the same instant reads the same in every replica's log.
func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }
