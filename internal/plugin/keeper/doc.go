// Package keeper is `kubectl turnstile run`'s process tree, and every rule run keeps about it:
// the keeper process (run re-executed, a child subreaper in a session of its own, that starts
// the command in its own process group and waits for every process of its tree), how run
// follows it (signals forwarded, the deadline by which the tree must stop so that it is gone
// before the locks can pass on, a stopped keeper continued, Ctrl-Z), and what run does when the
// keeper is killed (it is a subreaper too, and kills what is left). internal/proctree is the
// low-level helper (/proc, prctl, kill); docs/run.md is the user's account.
//
// The keeper talks to `run` over two pipes:
//
//	fd 3, run → keeper:  "deadline UNIXNANO" (stop the tree by then), "signal N" (forward N),
//	                     "stop WHY" (the lock was lost), "suspend" and "resume" (Ctrl-Z and
//	                     fg/bg of run); EOF (run died) stops the tree as well.
//	fd 4, keeper → run:  "started PID", "exec CODE MESSAGE" (the command could not start),
//	                     "exited CODE", "signaled N", "deadline" (it stopped the tree for the
//	                     deadline).
//
// A separate process survives `run` being killed: it then stops the tree (SIGTERM, SIGKILL
// after the grace) well before the holder Lease can lapse, as it does at the deadline `run`
// gives it if renewals fail.
//
// The keeper runs in a session of its own (setsid), so nothing that stops `run` stops it: not
// the terminal's job control (Ctrl-Z, SIGTTIN, SIGTTOU go to run's process group), not a SIGSTOP
// of run's process group. A stopped `run` sends no more deadlines, so the keeper stops the tree
// by the last one, before the lease can lapse. A stopped keeper is continued by `run`, which
// watches it (docs/run.md, "Job control").
package keeper

import (
	"errors"
	"os"
	"os/exec"
)

const (
	// Flag is the hidden flag of `run` that makes it the keeper: the plugin's run command
	// answers `run --internal-keeper --grace GRACE -- COMMAND...` with Main (Start re-executes
	// the plugin so).
	Flag = "internal-keeper"
)

// The exit codes of run that the keeper reports for a command that did not run (docs/run.md).
const (
	// ExitRunFailed is run's own failure (here: the keeper could not become a subreaper), as
	// timeout(1) and env(1) use 125 for their own failures.
	ExitRunFailed = 125
	// ExitCannotExecute and ExitNotFound are the shell's codes for COMMAND itself.
	ExitCannotExecute = 126
	ExitNotFound      = 127
)

// LookPathCode is the shell's code for a command that cannot be run: 127 not found, 126 found
// but not executable.
func LookPathCode(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		return ExitNotFound
	}
	return ExitCannotExecute
}
