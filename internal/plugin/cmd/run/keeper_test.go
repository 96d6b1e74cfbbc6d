package run_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/turnstile-dev/turnstile/internal/plugin/cmd"
	"github.com/turnstile-dev/turnstile/internal/plugin/keeper"
)

// TestMain lets this test binary be run's keeper, as the plugin is: the keeper re-executes
// /proc/self/exe with "run --internal-keeper ...", answered by the plugin's own command tree.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "run" && os.Args[2] == "--"+keeper.Flag {
		os.Exit(cmd.Main(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// TestRunIsTheKeeper: the command line the supervisor re-executes the plugin with reaches the
// keeper through run's own flags, and the command's status comes back.
func TestRunIsTheKeeper(t *testing.T) {
	sup, err := keeper.NewSupervisor()
	if err != nil {
		t.Fatal(err)
	}
	var said []string
	out, err := sup.Run(time.Second, []string{"sh", "-c", "exit 3"}, os.Environ(), keeper.Watch{
		Deadline:      func() time.Time { return time.Now().Add(time.Hour) },
		DeadlineCause: func() error { return nil },
		Say:           func(format string, a ...any) { said = append(said, fmt.Sprintf(format, a...)) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if out != (keeper.Outcome{Status: 3}) {
		t.Errorf("outcome %+v (said %q), want the command's exit status 3", out, said)
	}
}
