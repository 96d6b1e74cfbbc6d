package keeper

import (
	"fmt"
	"os"
	"time"

	"github.com/turnstile-dev/turnstile/internal/proctree"
)

// On Windows there is no process tree for run to hold: no process groups or sessions to signal,
// no child subreaper to keep a double-forked orphan, no SIGSTOP or SIGCONT. run refuses there,
// before it asks for any lock, as it does everywhere outside Linux (proctree.ErrUnsupported);
// acquire, release and the other commands of the plugin work. docs/run.md says so.

// Supervisor is run's side of the process tree; on Windows there is none.
type Supervisor struct{}

// NewSupervisor fails on Windows, before anything is asked for.
func NewSupervisor() (*Supervisor, error) { return nil, proctree.ErrUnsupported }

// JobControl does nothing on Windows (there is no Ctrl-Z to follow).
func (*Supervisor) JobControl(<-chan os.Signal) {}

// Run fails on Windows (NewSupervisor already did).
func (*Supervisor) Run(time.Duration, []string, []string, Watch) (Outcome, error) {
	return Outcome{ExecCode: ExitRunFailed, Status: -1}, proctree.ErrUnsupported
}

// Main fails on Windows: no run starts a keeper there.
func Main(time.Duration, []string) int {
	fmt.Fprintln(os.Stderr, "kubectl turnstile run:", proctree.ErrUnsupported)
	return ExitRunFailed
}
