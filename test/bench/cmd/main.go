// Command bench runs Turnstile's benchmark harness (`make bench`): it starts a local control
// plane and the manager binary, measures Turnstile beside the raw API server and client-go
// leaderelection, prints the results as Markdown tables and writes them to <out>/results.json.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/turnstile-dev/turnstile/test/bench"
)

func main() {
	var (
		size      = flag.String("size", "full", "full (make bench) or smoke (seconds; what make test runs)")
		manager   = flag.String("manager", "bin/manager", "the manager binary")
		out       = flag.String("out", "bin/bench", "directory for results.json and manager.log")
		assets    = flag.String("assets", "", "directory with kube-apiserver and etcd (default $KUBEBUILDER_ASSETS)")
		phases    = flag.String("phases", "", "comma-separated phases to run: steady, scale, run, shared, gated, freeze, fleet, replicas, failover, roll (default: all)")
		plugin    = flag.String("plugin", "bin/kubectl-turnstile", "the kubectl-turnstile binary the run phase measures")
		baseline  = flag.String("run-baseline", "", "another kubectl-turnstile binary the run phase measures side by side (e.g. one built from main)")
		replicas  = flag.Int("replicas", 1, "managers in the steady-state phases; above 1 they run active-active")
		leader    = flag.Bool("leader-elect", false, "with --replicas above 1: run them with leader election (one leads, the others stand by) instead of active-active")
		rounds    = flag.Int("rounds", 0, "rounds of the replicas phase (0: the size's default)")
		pool      = flag.String("pool", "", "comma-separated results.json files of replicas-phase runs: print their rounds pooled, run nothing")
		scaleBase = flag.String("scale-baseline", "", "another manager binary (e.g. built from main) the scale phase restarts on the same requests at every point, side by side")
		scalePts  = flag.String("scale-points", "", "comma-separated request counts of the scale curve, ascending (default: the size's, 10000,30000,100000 for full); keys and namespaces keep their ratio to requests")
		memLimit  = flag.String("mem-limit", "", "the container memory limit of every manager the bench starts, as the chart passes it (default: the size's, 256Mi for full)")
		cgroup    = flag.Bool("cgroup", false, "enforce --mem-limit as a container does: run each manager in a memory cgroup with that limit (needs root and the memory controller, cgroup v1 or v2)")
		samples   = flag.Int("handoff-samples", 0, "hand-offs per depth and mode in the steady phase (0: the size's, 200 for full); more make the per-hand-off CPU and allocation figures and the profiles steadier")
		fleetN    = flag.Int("fleet-samples", 0, "hand-offs of each kind in each mode of the fleet phase (0: the size's, 100 for full)")
		fleetLink = flag.Duration("fleet-link", -1, "one-way latency to the hub in the fleet phase's link mode, whole ms (0: no link mode; default: the size's, 10ms for full)")
		fleetBase = flag.String("fleet-baseline", "", "another manager binary (e.g. built from main) whose agents time the fleet phase's hand-offs between spokes again, in each mode, beside this one's in the same run")
		profile   = flag.Int("profile", 0, "seconds of manager CPU profile to record from the start of each back-to-back hand-off run into <out>/cpu-handoff-depth<N>.pprof, and of each deep-queue run of the replicas phase (0: none)")
	)
	flag.Parse()
	if *pool != "" {
		if err := poolRuns(strings.Split(*pool, ",")); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	var cfg bench.Config
	switch *size {
	case "full":
		cfg = bench.Full()
	case "smoke":
		cfg = bench.Smoke()
	default:
		fmt.Fprintf(os.Stderr, "--size must be full or smoke, not %q\n", *size)
		os.Exit(2)
	}
	cfg.Manager, cfg.OutDir, cfg.Assets, cfg.Progress = *manager, *out, *assets, os.Stderr
	cfg.ProfileSeconds = *profile
	if *samples > 0 {
		cfg.HandoffSamples = *samples
	}
	fleetFlags(&cfg, *fleetN, *fleetLink, *fleetBase)
	cfg.RunPhase.Plugin, cfg.RunPhase.Baseline = *plugin, *baseline
	if *rounds > 0 {
		cfg.ReplicasPhase.Rounds = *rounds
	}
	cfg.Replicas, cfg.LeaderElect = *replicas, *leader
	cfg.ScaleBaseline = *scaleBase
	if *memLimit != "" {
		cfg.MemLimit = *memLimit
	}
	cfg.Cgroup = *cgroup
	if *scalePts != "" {
		if err := setScalePoints(&cfg, *scalePts); err != nil {
			fmt.Fprintln(os.Stderr, "--scale-points:", err)
			os.Exit(2)
		}
	}
	if *phases != "" {
		cfg.Phases = strings.Split(*phases, ",")
	}
	// The harness's own informers would log through controller-runtime; nothing there is news.
	log.SetLogger(logr.Discard())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	res, err := bench.Run(ctx, cfg)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	res.WriteTable(os.Stdout)
	fmt.Printf("\nJSON: %s\n", filepath.Join(*out, "results.json"))
}

// fleetFlags applies --fleet-samples (0: the size's), --fleet-link (negative: the size's) and
// --fleet-baseline to cfg.
func fleetFlags(cfg *bench.Config, samples int, link time.Duration, baseline string) {
	if samples > 0 {
		cfg.Fleet.Samples = samples
	}
	if link >= 0 {
		cfg.Fleet.Link = bench.Duration(link)
	}
	cfg.Fleet.BaselineManager = baseline
}

// setScalePoints makes pts the scale curve: its last point is the largest, with the size's
// requests per key and keys per namespace.
func setScalePoints(cfg *bench.Config, pts string) error {
	var points []int
	for _, p := range strings.Split(pts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 || (len(points) > 0 && n <= points[len(points)-1]) {
			return fmt.Errorf("%q is not an ascending list of positive counts", pts)
		}
		points = append(points, n)
	}
	perKey, keysPerNS := cfg.ScaleRequests/cfg.ScaleKeys, cfg.ScaleKeys/cfg.ScaleNamespaces
	last := points[len(points)-1]
	cfg.ScalePoints, cfg.ScaleRequests = points[:len(points)-1], last
	cfg.ScaleKeys = max(1, last/perKey)
	cfg.ScaleNamespaces = max(1, cfg.ScaleKeys/keysPerNS)
	return nil
}

// poolRuns prints the replicas phases of the runs in files, pooled round by round.
func poolRuns(files []string) error {
	var runs []bench.Result
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var r bench.Result
		if err := json.Unmarshal(data, &r); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		runs = append(runs, r)
	}
	res, err := bench.PoolReplicas(runs)
	if err != nil {
		return err
	}
	res.WriteTable(os.Stdout)
	return nil
}
