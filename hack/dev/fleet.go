package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// The hub's side of a fleet (config/fleet) and the fleet namespace every cluster gets.
const (
	fleetNamespace = "turnstile-fleet"
	fleetMembers   = "turnstile-fleet-members"
	teamNamespace  = "team-a"
)

// member is one cluster of the dev fleet: its control plane and its manager.
type member struct {
	name       string
	env        *framework.Env
	kubeconfig string // the admin's, printed for the user
	log        string // the manager's log file
	logFile    *os.File
	proc       *framework.Process
}

// runFleet starts a hub and n spokes and runs until a signal or a manager's exit.
func runFleet(assets, manager, plugin, state, metrics, probes string, n int, extra []string) (err error) {
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)

	root, err := framework.RepoRoot()
	if err != nil {
		return err
	}
	state, err = filepath.Abs(filepath.Join(state, "fleet"))
	if err != nil {
		return err
	}
	if plugin, err = filepath.Abs(plugin); err != nil {
		return err
	}
	if err := os.MkdirAll(state, 0o755); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	names := []string{"hub"}
	for i := range n {
		names = append(names, "spoke-"+string(rune('a'+i)))
	}
	var members []*member
	defer func() { stopMembers(members) }()
	kubectl, err := startMembers(root, assets, state, names, &members)
	if err != nil {
		return err
	}
	hub := members[0]
	fmt.Printf("Installing config/fleet in hub; kubectl turnstile fleet join %s ...\n", strings.Join(names[1:], ", "))
	if err := installFleet(root, kubectl, plugin, hub.kubeconfig, state, names[1:]); err != nil {
		return err
	}

	if err := startManagers(ctx, members, state, manager, metrics, probes, extra); err != nil {
		return err
	}
	fleetHowTo(members, filepath.Join(root, "bin"), filepath.Dir(kubectl))

	exited := make(chan *member, len(members))
	for _, m := range members {
		go func() {
			<-m.proc.Done()
			exited <- m
		}()
	}
	select {
	case s := <-sig:
		fmt.Printf("\nReceived %s; stopping the managers ...\n", s)
		return nil
	case m := <-exited:
		return fmt.Errorf("the manager of %s exited (log: %s): %w", m.name, m.log, m.proc.Err())
	}
}

// startManagers runs the built manager in each member as its ServiceAccount: the hub's as in
// one cluster, each spoke's as the hub's agent with the kubeconfig fleet join wrote for it.
func startManagers(ctx context.Context, members []*member, state, manager, metrics, probes string, extra []string) error {
	// The managers' namespace and name, as the Deployment's downward API gives them.
	os.Setenv("POD_NAMESPACE", namespace)
	os.Setenv("POD_NAME", "turnstile-dev")
	for i, m := range members {
		dir := filepath.Join(state, m.name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		config, err := managerKubeconfig(ctx, m.env, dir)
		if err != nil {
			return err
		}
		var args []string
		if i == 0 {
			args = append([]string{"--metrics-bind-address=" + metrics, "--health-probe-bind-address=" + probes}, extra...)
		} else {
			// The spoke's hub credential: what fleet join wrote (its own ServiceAccount of the hub).
			args = []string{"--metrics-bind-address=" + addrOrOff(metrics), "--health-probe-bind-address=" + addrOrOff(probes),
				"--hub-kubeconfig=" + hubKubeconfig(state, m.name), "--cluster-name=" + m.name}
		}
		logFile, err := os.Create(m.log)
		if err != nil {
			return err
		}
		m.logFile = logFile
		if m.proc, err = framework.StartProcess(manager, config, logFile, args...); err != nil {
			return fmt.Errorf("the manager of %s: %w", m.name, err)
		}
	}
	return nil
}

// stopMembers stops in reverse: the spokes' agents, then the hub's manager, then each control
// plane.
func stopMembers(members []*member) {
	for i := len(members) - 1; i >= 0; i-- {
		m := members[i]
		if m.proc != nil {
			if err := m.proc.Stop(15 * time.Second); err != nil {
				fmt.Fprintf(os.Stderr, "dev: the manager of %s: %v\n", m.name, err)
			}
		}
		if m.logFile != nil {
			_ = m.logFile.Close()
		}
	}
	fmt.Println("Stopping kube-apiserver and etcd of every cluster ...")
	for i := len(members) - 1; i >= 0; i-- {
		if err := members[i].env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "dev: stop the control plane of %s: %v\n", members[i].name, err)
		}
	}
}

// startMembers starts a control plane per name, with the shipped install and namespace team-a,
// appending each to members as it starts (so the caller stops what started), and returns
// kubectl's path.
func startMembers(root, assets, state string, names []string, members *[]*member) (string, error) {
	var kubectl string
	for _, name := range names {
		fmt.Printf("Starting the control plane of %s (kube-apiserver and etcd) ...\n", name)
		env, err := framework.StartBare(assets)
		if err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		m := &member{name: name, env: env, kubeconfig: filepath.Join(state, name+".kubeconfig"), log: filepath.Join(state, name+".log")}
		*members = append(*members, m)
		if err := env.WriteKubeconfig(m.kubeconfig); err != nil {
			return "", err
		}
		if kubectl, err = filepath.Abs(env.Kubectl()); err != nil {
			return "", err
		}
		bundle, err := framework.BundleFor(env.Config)
		if err != nil {
			return "", err
		}
		fmt.Printf("Installing %s in %s (CRDs, RBAC, admission policies; not the Deployment) ...\n", bundle, name)
		if err := install(root, bundle, kubectl, m.kubeconfig); err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		if err := kubectlRun(kubectl, m.kubeconfig, "create", "namespace", teamNamespace); err != nil {
			return "", err
		}
	}
	return kubectl, nil
}

// installFleet applies config/fleet to the hub as its admin does, admits each spoke with the
// built `kubectl turnstile fleet join` (its membership, its hub ServiceAccount, and the
// kubeconfig its agent runs with, written to hubKubeconfig(state, spoke)), and makes team-a a
// fleet namespace (the spoke role bound in it).
func installFleet(root, kubectl, plugin, kubeconfig, state string, spokes []string) error {
	if err := kubectlRun(kubectl, kubeconfig, "apply", "--server-side", "-k", filepath.Join(root, "config", "fleet")); err != nil {
		return err
	}
	for _, s := range spokes {
		path := hubKubeconfig(state, s)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		out, err := exec.Command(plugin, "fleet", "join", s, "--kubeconfig", kubeconfig, "-o", path).CombinedOutput()
		if err != nil {
			return fmt.Errorf("kubectl turnstile fleet join %s: %w\n%s", s, err, out)
		}
	}
	return kubectlRun(kubectl, kubeconfig, "-n", teamNamespace, "create", "rolebinding", "turnstile-fleet-spoke",
		"--clusterrole=turnstile-fleet-spoke", "--group=system:serviceaccounts:"+fleetNamespace, "--group=turnstile:spokes")
}

// hubKubeconfig is where installFleet writes the kubeconfig spoke's agent reaches the hub with.
func hubKubeconfig(state, spoke string) string {
	return filepath.Join(state, spoke, "hub.kubeconfig")
}

// kubectlRun runs kubectl as the cluster's admin.
func kubectlRun(kubectl, kubeconfig string, args ...string) error {
	out, err := exec.Command(kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// addrOrOff is "0" when the hub's address flag turned the endpoint off, else a free loopback
// port of the spoke's own.
func addrOrOff(hubs string) string {
	if hubs == "0" {
		return "0"
	}
	addr, err := freeLoopback()
	if err != nil {
		return "0"
	}
	return addr
}

// fleetHowTo tells the user each cluster's KUBECONFIG and what to paste.
func fleetHowTo(members []*member, bin, kubectlDir string) {
	fmt.Printf("\nA Turnstile fleet is running: %s is the hub, ", members[0].name)
	var spokes []string
	for _, m := range members[1:] {
		spokes = append(spokes, m.name)
	}
	fmt.Printf("%s its spokes. Namespace %s is a fleet namespace in each.\n\n", strings.Join(spokes, " and "), teamNamespace)
	for _, m := range members {
		fmt.Printf("  %-8s KUBECONFIG=%s   (manager pid %d, log %s)\n", m.name, m.kubeconfig, m.proc.Pid(), m.log)
	}
	a, hub := members[1], members[0]
	lines := []string{
		"export PATH=" + bin + ":" + kubectlDir + ":$PATH",
		"export KUBECONFIG=" + a.kubeconfig,
		"",
		"kubectl -n " + teamNamespace + " apply -f config/samples/locks_v1alpha1_lockrequest.yaml",
		"kubectl -n " + teamNamespace + " wait --for=condition=Granted lockrequest/plan-pr-100",
		"kubectl --kubeconfig=" + hub.kubeconfig + " -n " + teamNamespace + " get lockrequests",
	}
	about := fmt.Sprintf("The request is %s's, granted by the hub, which shows it as %s.plan-pr-100.", a.name, a.name)
	if len(members) > 2 {
		b := members[2]
		lines = append(lines,
			"kubectl --kubeconfig="+b.kubeconfig+" -n "+teamNamespace+" apply -f config/samples/locks_v1alpha1_lockrequest.yaml",
			"kubectl --kubeconfig="+b.kubeconfig+" -n "+teamNamespace+" wait --for=jsonpath='{.status.phase}'=Pending lockrequest/plan-pr-100",
			"kubectl --kubeconfig="+hub.kubeconfig+" -n "+teamNamespace+" get lockrequests,projectlocks")
		about += fmt.Sprintf(" The same request in %s is another holder\n(alice in another cluster): it waits until %s's is released.", b.name, a.name)
	}
	fmt.Printf("\nIn another shell (kubectl and the kubectl-turnstile plugin are in these directories):\n\n")
	for _, l := range lines {
		if l == "" {
			fmt.Println()
			continue
		}
		fmt.Println("    " + l)
	}
	fmt.Printf("\n%s\n\nPress Ctrl-C to stop every manager, kube-apiserver and etcd.\n\n", about)
}
