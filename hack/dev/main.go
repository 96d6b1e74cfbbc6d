// Command dev runs Turnstile locally for `make dev`: a kube-apiserver and etcd built from the Go
// module proxy, the CRDs, and the manager binary in the foreground. It writes a kubeconfig,
// prints how to use it, and on Ctrl-C (or SIGTERM, or the terminal closing) stops everything it
// started. Flags after "--" go to the manager.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

func main() {
	assets := flag.String("assets", os.Getenv("KUBEBUILDER_ASSETS"), "Directory with kube-apiserver, etcd and kubectl.")
	manager := flag.String("manager", "bin/manager", "Manager binary.")
	state := flag.String("state", "bin/dev", "Directory for the kubeconfig.")
	metrics := flag.String("metrics-bind-address", ":8080", "Manager metrics address.")
	probes := flag.String("health-probe-bind-address", ":8081", "Manager probe address.")
	flag.Parse()
	if err := run(*assets, *manager, *state, *metrics, *probes, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "dev:", err)
		os.Exit(1)
	}
}

func run(assets, manager, state, metrics, probes string, extra []string) error {
	sig := make(chan os.Signal, 2)
	// SIGHUP too: closing the terminal must not orphan etcd, kube-apiserver and the manager,
	// which run in process groups of their own.
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)

	fmt.Println("Starting a local kube-apiserver and etcd ...")
	env, err := framework.Start(assets)
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("Stopping kube-apiserver and etcd ...")
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "dev: stop control plane:", err)
		}
	}()
	kubeconfig, err := filepath.Abs(filepath.Join(state, "kubeconfig"))
	if err != nil {
		return err
	}
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		return err
	}
	kubectl, err := filepath.Abs(env.Kubectl())
	if err != nil {
		return err
	}
	args := append([]string{"--metrics-bind-address=" + metrics, "--health-probe-bind-address=" + probes}, extra...)
	proc, err := framework.StartProcess(manager, kubeconfig, os.Stdout, args...)
	if err != nil {
		return err
	}
	fmt.Printf(`
Turnstile is running (manager pid %d%s).

In another shell:

    export KUBECONFIG=%s
    export PATH=%s:$PATH   # kubectl, built from the Go module proxy

    kubectl get crds
    kubectl apply -f config/samples/locks_v1alpha1_lockrequest.yaml
    kubectl wait --for=condition=Granted lockrequest/plan-pr-100
    kubectl get locks

Press Ctrl-C to stop the manager, kube-apiserver and etcd.

`, proc.Pid(), endpoints(metrics, probes), kubeconfig, filepath.Dir(kubectl))

	select {
	case s := <-sig:
		fmt.Printf("\nReceived %s; stopping the manager ...\n", s)
		if err := proc.Stop(15 * time.Second); err != nil {
			fmt.Fprintln(os.Stderr, "dev: manager:", err)
		}
		return nil
	case <-proc.Done():
		return fmt.Errorf("manager exited: %w", proc.Err())
	}
}

// endpoints describes where the manager serves metrics and probes; "0" turns either off.
func endpoints(metrics, probes string) string {
	var out string
	if metrics != "0" {
		out += fmt.Sprintf("; metrics on %s/metrics", metrics)
	}
	if probes != "0" {
		out += fmt.Sprintf("; probes on %s/healthz", probes)
	}
	return out
}
