//go:build !windows

package run

import (
	"os"
	"os/signal"
	"syscall"
)

// notifyStop relays the terminal's Ctrl-Z (SIGTSTP) to c: run suspends the command's tree
// through its keeper (keeper.Supervisor.JobControl).
func notifyStop(c chan<- os.Signal) { signal.Notify(c, syscall.SIGTSTP) }
