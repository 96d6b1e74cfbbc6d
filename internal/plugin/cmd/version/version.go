// Package version is kubectl turnstile version.
package version

import (
	"fmt"

	"github.com/spf13/cobra"

	buildinfo "github.com/turnstile-dev/turnstile/internal/version"
)

// NewCmdVersion prints the plugin's release: what `make release` stamped into it (the krew
// manifest's spec.version), or "(devel)" for a build from source.
func NewCmdVersion() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version, source commit, Go version and platform",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), "kubectl-turnstile", buildinfo.Get())
			return err
		},
	}
}
