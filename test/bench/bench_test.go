package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// TestSmoke runs every phase at a tiny size so the harness never rots. It checks that the
// result is complete and well-formed, never how fast anything was: timings on a shared machine
// are not a test.
func TestSmoke(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cfg := Smoke()
	cfg.Manager = os.Getenv("TURNSTILE_MANAGER")
	if cfg.Manager == "" {
		cfg.Manager = filepath.Join(root, "bin", "manager")
	}
	if _, err := os.Stat(cfg.Manager); err != nil {
		t.Fatalf("manager binary %s not found: run `make build` (or set TURNSTILE_MANAGER): %v", cfg.Manager, err)
	}
	cfg.RunPhase.Plugin = os.Getenv("TURNSTILE_PLUGIN")
	if cfg.RunPhase.Plugin == "" {
		cfg.RunPhase.Plugin = filepath.Join(root, "bin", "kubectl-turnstile")
	}
	cfg.OutDir = t.TempDir()
	cfg.ProfileSeconds = 1
	cfg.Progress = testWriter{t}
	log.SetLogger(logr.Discard())

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	res.WriteTable(&table)
	t.Log("\n" + table.String())

	// The JSON file is the result.
	data, err := os.ReadFile(filepath.Join(cfg.OutDir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back Result
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatalf("results.json does not parse: %v", err)
	}
	for _, depth := range cfg.HandoffDepths {
		// A CPU profile is gzipped protobuf: at least a gzip header, never an HTML error page.
		p, err := os.ReadFile(filepath.Join(cfg.OutDir, "cpu-handoff-depth"+strconv.Itoa(depth)+".pprof"))
		if err != nil || len(p) < 2 || p[0] != 0x1f || p[1] != 0x8b {
			t.Errorf("no CPU profile of the manager at depth %d (%d bytes): %v", depth, len(p), err)
		}
	}

	check := func(what string, ok bool) {
		t.Helper()
		if !ok {
			t.Errorf("%s", what)
		}
	}
	latency := func(what string, l Latency, n int) {
		t.Helper()
		check(what+": want "+strconv.Itoa(n)+" samples", l.N == n)
		check(what+": percentiles must be positive and ordered", l.P50 > 0 && l.P50 <= l.P99 && l.P99 <= l.Max)
	}
	check("raw ops/s must be positive", back.Raw.SequentialOpsPerSec > 0 && back.Raw.ParallelOpsPerSec > 0)
	check("raw object size must be measured", back.Raw.ObjectBytes > 0 && back.Acquire.ObjectBytes > 0)
	latency("watch probe", back.Raw.Probe, cfg.ProbeSamples)
	latency("acquire", back.Acquire.Latency, cfg.AcquireSamples)
	// A grant writes at least the new ProjectLock and the request's status; the write counts
	// come from the API server, so zero would mean the accounting is broken.
	check("writes per grant must be counted", back.Acquire.WritesPerGrant >= 2)
	check("writes per release must be counted", back.Acquire.WritesPerRelease >= 1)
	check("throughput must grant", back.Throughput.Grants > 0 && back.Throughput.GrantsPerSec > 0)
	check("want one hand-off result per depth", len(back.Handoff) == len(cfg.HandoffDepths))
	for i, h := range back.Handoff {
		check("hand-off depth", h.Depth == cfg.HandoffDepths[i])
		latency("hand-off", h.Latency, cfg.HandoffSamples)
		latency("back-to-back hand-off", h.LoadedLatency, cfg.HandoffSamples)
		check("hand-offs/s must be positive", h.HandoffsPerSec > 0)
		check("a hand-off writes at least the ProjectLock and the new holder", h.WritesPerHandoff >= 2)
		check("every arrival is enqueued once", h.BackToBack.Transitions.Enqueued == cfg.HandoffSamples)
		check("every hand-off is a grant", h.BackToBack.Transitions.Granted == cfg.HandoffSamples)
		check("the manager's heap allocations are counted", h.AllocsPerHandoff > 0 && h.AllocKiBPerHandoff > 0 && h.GCsPerHandoff >= 0)
	}
	check("want one leaderelection result per config", len(back.LeaderElection) == len(cfg.LeaderElection))
	for i, le := range back.LeaderElection {
		latency("leaderelection", le.Latency, cfg.LeaderElection[i].Samples)
		check("leaderelection writes the Lease", le.WritesPerHandoff > 0)
	}
	if rr := back.Run; rr == nil {
		t.Error("no run phase in the result")
	} else {
		latency("true", rr.True, cfg.RunPhase.Samples)
		for _, p := range rr.Plugins {
			latency(p.Plugin+" run -- true", p.Overhead, cfg.RunPhase.Samples)
			latency(p.Plugin+" run hand-off", p.Handoff, cfg.RunPhase.Samples)
		}
	}
	if g := back.Gated; g == nil {
		t.Error("no gated phase in the result")
	} else {
		latency("gated grant → bound", g.GrantToBound, cfg.Gated.Samples)
		latency("gated create → bound", g.GatedCreateToBound, cfg.Gated.Samples)
		latency("ungated create → bound", g.UngatedCreateToBound, cfg.Gated.Samples)
	}

	if fr := back.Freeze; fr == nil {
		t.Error("no freeze phase in the result")
	} else {
		per := cfg.Freeze.Samples * cfg.Freeze.Rounds
		latency("writes with no freeze policy", fr.NoPolicy.All, per)
		check("want one freeze result per CommandLock count", len(fr.ByLocks) == len(cfg.Freeze.Locks))
		for i, w := range fr.ByLocks {
			check("freeze CommandLock count", w.Locks == cfg.Freeze.Locks[i])
			latency(fmt.Sprintf("writes with %d CommandLocks", w.Locks), w.All, per)
			latency("creates", w.Create, per/3)
			latency("deletes", w.Delete, per/3)
		}
	}
	if fr := back.Fleet; fr == nil {
		t.Error("no fleet phase in the result")
	} else {
		latency("fleet hand-off inside the hub", fr.Local, cfg.Fleet.Samples)
		latency("fleet hand-off between spokes", fr.Spokes, cfg.Fleet.Samples)
		latency("hub round trip", fr.HubRoundTrip, cfg.Fleet.Samples)
		latency("hub write", fr.HubWrite, cfg.Fleet.Samples)
		latency("spoke round trip", fr.SpokeRoundTrip, cfg.Fleet.Samples)
		for name, l := range map[string]Latency{"delete": fr.Steps.Delete, "release": fr.Steps.Release, "decide": fr.Steps.Decide, "copy": fr.Steps.Copy,
			"local release": fr.LocalSteps.Release, "local decide": fr.LocalSteps.Decide} {
			latency("fleet hand-off step "+name, l, cfg.Fleet.Samples)
		}
		if l := fr.Link; l == nil {
			t.Error("no link mode in the fleet result")
		} else {
			check("the link mode's latency is the config's", l.LatencyMs == float64(cfg.Fleet.Link.D().Milliseconds()))
			latency("fleet hand-off between spokes over the link", l.Spokes, cfg.Fleet.Samples)
			latency("hub round trip over the link", l.HubRoundTrip, cfg.Fleet.Samples)
			check("a hub round trip over the link takes both ways' latency", l.HubRoundTrip.P50 >= 2*l.LatencyMs)
		}
		n := cfg.Fleet.Spokes * cfg.Fleet.Requests
		check("fleet baseline: every request made and decided", fr.Baseline.Requests == n && fr.Baseline.Spokes == 0 && fr.Baseline.LoadSeconds > 0)
		check("fleet: every spoke's requests made and decided", fr.Fleet.Requests == n && fr.Fleet.Spokes == cfg.Fleet.Spokes && fr.Fleet.LoadSeconds > 0)
		check("fleet: the hub manager's heap and RSS read", fr.Baseline.HeapInUse > 0 && fr.Fleet.HeapInUse > 0 && fr.Fleet.RSS > 0 && fr.Fleet.IdleRSS > 0)
	}
	check("detection rounds", len(back.Detection.Rounds) == 2*cfg.DetectionRounds)
	check("detection on and off must both hand off", back.Detection.HandoffsPerSecOn > 0 && back.Detection.HandoffsPerSecOff > 0)
	for _, r := range back.Detection.Rounds {
		asked := r.ChecksPerHandoff + r.SkipsPerHandoff
		check("the detector looks at arrivals only when it is on", (asked > 0) == r.Detection)
	}
	if rl := back.Roll; rl == nil {
		t.Error("no roll phase in the result")
	} else {
		check("the roll phase hands off before and during the roll, losing none", rl.Steady.N > 0 && rl.Roll.N > 0 && rl.Lost == 0 && rl.RollSeconds > 0)
	}
	s := back.Scale
	check("scale must reconcile", s.ReconcileSeconds > 0 && s.FirstPhaseSeconds > 0 && s.FirstPhaseSeconds <= s.ReconcileSeconds)
	check("scale must measure memory", s.RSSBytes > 0 && s.PeakRSSBytes >= s.RSSBytes && s.IdleRSSBytes > 0)
	check("scale writes at least one status per request", s.WritesPerRequest >= 1)
	perNS := cfg.ScaleKeys / cfg.ScaleNamespaces
	check("deadlock check sees every waiter of its namespace", s.DeadlockCheck.Waiters == perNS*(cfg.ScaleRequests/cfg.ScaleKeys-1) && s.DeadlockCheck.KeysSeen == perNS)
	check("the scale curve has a fresh and a restarted run per point", len(back.ScaleCurve) == 2*(len(cfg.ScalePoints)+1))
	for _, p := range back.ScaleCurve {
		check("every scale run measures its cold start, list, heap (live too: the smoke profiles) and memory", p.ColdStartSeconds > 0 && p.ListSeconds > 0 && p.HeapBytes > 0 && p.HeapLiveBytes > 0 && p.RSSBytes > 0 && p.ReconcileSeconds >= p.ColdStartSeconds)
		check("a fresh scale run measures its write floor", p.Restart || p.WriteFloorSeconds > 0)
	}
	check("deadlock check timed", s.DeadlockCheck.FullMs > 0 && s.DeadlockCheck.Runs > 0)
	f := back.Failover
	check("want a failover result", f != nil)
	if f != nil {
		latency("failover kill", f.Kill, cfg.Failover.Kills)
		latency("failover rolling restart", f.Rolling, cfg.Failover.Replicas)
		latency("failover leader-election baseline", f.LeaderElection, cfg.Failover.LeaderElectionKills)
		check("a failover hand-off writes at least the ProjectLock and the new holder", f.KillWrites >= 2)
		check("409s are counted, never negative", f.KillConflicts >= 0 && f.RollingConflicts >= 0)
	}
	rp := back.Replicas
	check("want a replicas result with four modes", rp != nil && len(rp.Modes) == 4)
	if rp != nil {
		for _, m := range rp.Modes {
			check(m.Mode+": grants and hand-offs measured", m.G1 > 0 && m.HandoffP50Ms > 0 && m.HandoffsPerSec > 0)
			check(m.Mode+": a hand-off writes at least the ProjectLock and the new holder", m.WritesPerHandoff >= 2)
			check(m.Mode+": every manager's reconciles and CPU are counted", m.ReconcilesPerHandoff >= 1 && m.CPUPerHandoffMs > 0)
			check(m.Mode+": the deep queue hands off with detection on and off", m.G3a > 0 && m.G3b > 0 && m.G4 > 0 && m.DeepCPUPerHandoffMs > 0)
			check(m.Mode+": every manager's API requests are counted", m.RequestsPerHandoff >= m.WritesPerHandoff)
			check(m.Mode+": the results keep every round, to pool with another run's", len(m.Rounds) == rp.Rounds)
		}
		pooled, err := PoolReplicas([]Result{back, back})
		check("a run pools with itself into twice its rounds", err == nil && pooled.Replicas.Rounds == 2*rp.Rounds && len(pooled.Goals) == 27)
	}
	// F1–F4, 27 of the replicas (A, S, L 1–8 with 2a and 2b), the steady ones, M1–M5 of the
	// scale curve, R1–R2 of the roll and FL1, FL1w, FL2, FL3 of the fleet.
	check("want every goal", len(back.Goals) == 47+len(cfg.LeaderElection))
	for _, g := range back.Goals {
		switch g.ID {
		case "R2": // a count of lost hand-offs: 0 when none is lost
			check("R2 must count lost hand-offs", g.Value >= 0 && g.Value == math.Trunc(g.Value))
			continue
		case "M3", "FL2", "FL3": // differences of two readings (RSS; the fleet's CPU and heap per
			// spoke, fleet less baseline): at a tiny size, noise of either sign
			check(g.ID+" must be finite", !math.IsInf(g.Value, 0) && !math.IsNaN(g.Value))
			continue
		}
		check(g.ID+" must be a finite positive ratio", g.Value > 0 && !math.IsInf(g.Value, 0) && !math.IsNaN(g.Value))
	}
	for _, g := range back.Goals {
		check("the table names "+g.ID, strings.Contains(table.String(), "| "+g.ID+": "))
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
