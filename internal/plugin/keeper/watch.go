package keeper

import (
	"os"
	"time"
)

// Watch is what run tells the supervisor while the command runs: the facts of the locks, which
// the process tree must obey.
type Watch struct {
	// Signals are run's own (SIGINT, SIGTERM, SIGHUP): each is forwarded to the tree.
	Signals <-chan os.Signal
	// Lost says that the locks are lost, and why: the tree is stopped (once).
	Lost <-chan error
	// Deadline is when the tree must begin to stop (StopAt), asked again every 200ms: the
	// keeper stops it then by itself, even if run can no longer tell it.
	Deadline func() time.Time
	// DeadlineCause is why the keeper stopped the tree at the deadline.
	DeadlineCause func() error
	// Say writes one line on run's stderr.
	Say func(format string, a ...any)
}

// Outcome is how the command's tree ended, as the keeper told it.
type Outcome struct {
	// ExecCode is non-zero when the command could not be run: ExitNotFound,
	// ExitCannotExecute, or ExitRunFailed when the keeper could not do its job.
	ExecCode int
	// Status is the command's exit status, 128+N when signal N ended it; -1 if the keeper
	// never said (it was killed).
	Status int
	// Lost is why the tree was stopped for the locks (lost, or the deadline passed); nil when
	// it was not.
	Lost error
}
