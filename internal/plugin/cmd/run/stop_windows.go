package run

import "os"

// notifyStop relays nothing on Windows, which has no SIGTSTP (and run refuses there before it
// gets this far: keeper.NewSupervisor).
func notifyStop(chan<- os.Signal) {}
