// Command kubectl-turnstile is Turnstile's kubectl plugin: `kubectl turnstile locks | acquire |
// release | run -- CMD | freeze | thaw | why | break-glass | dashboard`. Everything it does is
// plain LockRequest, ProjectLock, CommandLock and Lease objects, so it can be followed with
// `kubectl get locks`. Its commands are internal/plugin/cmd.
package main

import (
	"os"

	"github.com/turnstile-dev/turnstile/internal/plugin/cmd"
)

func main() { os.Exit(cmd.Main(os.Args[1:])) }
