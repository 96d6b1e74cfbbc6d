package framework

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// KubectlTimeout bounds one kubectl call: start-up, discovery and the API server on a loaded
// machine.
const KubectlTimeout = time.Minute

// Kubectl runs the real kubectl binary as one user (a kubeconfig) with its own discovery cache,
// logging each call and its output: how the suites drive what a person would type.
type Kubectl struct {
	Bin        string
	Kubeconfig string
	CacheDir   string
	// Log receives "$ kubectl ARGS" and the output of each call (a suite's GinkgoWriter).
	Log io.Writer
	// Timeout bounds one call; zero means KubectlTimeout.
	Timeout time.Duration
}

// Run runs kubectl with stdin and returns its stdout; when it fails, the error holds stderr.
func (k Kubectl) Run(stdin string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	err := k.run(stdin, &stdout, &stderr, args)
	out := stdout.String()
	if len(out) > 3000 {
		out = out[:3000] + "...\n"
	}
	k.log(args, out+stderr.String())
	if err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// Combined runs kubectl and returns stdout and stderr together, as a terminal shows them (an
// admission denial is on stderr).
func (k Kubectl) Combined(args ...string) (string, error) {
	var out bytes.Buffer
	err := k.run("", &out, &out, args)
	k.log(args, out.String())
	return out.String(), err
}

func (k Kubectl) run(stdin string, stdout, stderr io.Writer, args []string) error {
	timeout := k.Timeout
	if timeout == 0 {
		timeout = KubectlTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, k.Bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+k.Kubeconfig, "KUBECACHEDIR="+k.CacheDir)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	return cmd.Run()
}

func (k Kubectl) log(args []string, output string) {
	if k.Log != nil {
		fmt.Fprintf(k.Log, "$ kubectl %s\n%s", strings.Join(args, " "), output)
	}
}
