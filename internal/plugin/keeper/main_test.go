package keeper_test

import (
	"os"
	"testing"

	"github.com/turnstile-dev/turnstile/internal/plugin/cmd"
	"github.com/turnstile-dev/turnstile/internal/plugin/keeper"
)

// TestMain lets this test binary be run's keeper: startKeeper re-executes /proc/self/exe with
// "run --internal-keeper ...", as the plugin re-executes itself, and the test binary answers it
// with the plugin's own command tree.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "run" && os.Args[2] == "--"+keeper.Flag {
		os.Exit(cmd.Main(os.Args[1:]))
	}
	os.Exit(m.Run())
}
