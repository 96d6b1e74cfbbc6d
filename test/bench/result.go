package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"
)

// Result is one run, written as results.json.
type Result struct {
	Started   time.Time `json:"started"`
	Seconds   float64   `json:"seconds"`
	CPUs      int       `json:"cpus"`
	GoVersion string    `json:"goVersion"`
	Config    Config    `json:"config"`

	Raw            RawResult              `json:"raw"`
	Acquire        AcquireResult          `json:"acquire"`
	Throughput     ThroughputResult       `json:"throughput"`
	Handoff        []HandoffResult        `json:"handoff"`
	LeaderElection []LeaderElectionResult `json:"leaderElection"`
	Detection      DetectionResult        `json:"detection"`
	Scale          ScaleResult            `json:"scale"`
	// ScaleCurve is every run of the scale phase: per point, this build fresh, then it and the
	// baseline restarted on the decided requests.
	ScaleCurve   []ScaleResult   `json:"scaleCurve,omitempty"`
	IdleRSSBytes int64           `json:"idleRSSBytes"`
	Run          *RunResult      `json:"run,omitempty"`
	Shared       *SharedResult   `json:"shared,omitempty"`
	Gated        *GatedResult    `json:"gated,omitempty"`
	Freeze       *FreezeResult   `json:"freeze,omitempty"`
	Fleet        *FleetResult    `json:"fleet,omitempty"`
	Replicas     *ReplicasResult `json:"replicas,omitempty"`
	Failover     *FailoverResult `json:"failover,omitempty"`
	Roll         *RollResult     `json:"roll,omitempty"`

	Goals []Goal `json:"goals"`
	// Error is why the run stopped early: the result holds what was measured before.
	Error string `json:"error,omitempty"`
}

// Goal is one of issue #6's targets, as measured. Goals are reported, never asserted.
type Goal struct {
	ID     string  `json:"id"`
	What   string  `json:"what"`
	Value  float64 `json:"value"`
	Op     string  `json:"op"` // ">=" or "<="
	Target float64 `json:"target"`
	Met    bool    `json:"met"`
	// Low and High, when set, are the smallest and largest of the per-round values whose
	// median Value is (the replicas phase's paired ratios).
	Low  float64 `json:"low,omitempty"`
	High float64 `json:"high,omitempty"`
	// AtLeastAsGood of Rounds per-round values are no worse than 1 (the mode did at least as
	// well as its baseline in that round); SignP is the two-sided sign test's p-value of that
	// count against a coin toss: small when one mode is better in most rounds.
	AtLeastAsGood int     `json:"atLeastAsGood,omitempty"`
	Rounds        int     `json:"rounds,omitempty"`
	SignP         float64 `json:"signP,omitempty"`
}

func goal(id, what string, value float64, op string, target float64) Goal {
	met := value >= target
	if op == "<=" {
		met = value <= target
	}
	return Goal{ID: id, What: what, Value: value, Op: op, Target: target, Met: met}
}

func computeGoals(r *Result) []Goal {
	var goals []Goal
	if f := r.Failover; f != nil {
		goals = append(goals,
			goal("F1", fmt.Sprintf("failover stall p50, ms: owner SIGKILLed, release → next Granted (%d replicas, %d kills)", f.Replicas, f.Kill.N), f.Kill.P50, "<=", 1000),
			goal("F2", "failover stall max, ms", f.Kill.Max, "<=", 2000),
			goal("F3", fmt.Sprintf("failover stall p50 ÷ the same with leader election (%s lease, %d kills)", f.LeaderElectionLease, f.LeaderElection.N),
				ratio(f.Kill.P50, f.LeaderElection.P50), "<=", 0.1),
			goal("F4", fmt.Sprintf("rolling restart stall max, ms (%d replicas, each in turn)", f.Rolling.N), f.Rolling.Max, "<=", 1000))
	}
	if rp := r.Replicas; rp != nil {
		goals = append(goals, replicasGoals(rp)...)
	}
	if fr := r.Fleet; fr != nil {
		goals = append(goals, fleetGoals(fr)...)
	}
	goals = append(goals, scaleGoals(r.ScaleCurve)...)
	if rl := r.Roll; rl != nil {
		goals = append(goals,
			goal("R1", fmt.Sprintf("hand-off gap p99 during a rolling replacement of %d replicas ÷ steady p99 (%d and %d hand-offs)", rl.Replicas, rl.Roll.N, rl.Steady.N),
				ratio(rl.Roll.P99, rl.Steady.P99), "<=", 1.5),
			goal("R2", "hand-offs lost during the roll (next request never Granted)", float64(rl.Lost), "<=", 0))
	}
	if len(r.Handoff) == 0 {
		return goals
	}
	return append(goals, steadyGoals(r)...)
}

// scaleGoals (M1–M5) are issue #33's: this build's memory at the largest point, its marginal memory
// per request between the smallest and largest fresh runs, its settle time against the API
// server's write floor, and its cold start against a list of every request.
func scaleGoals(curve []ScaleResult) []Goal {
	var fresh, restart []ScaleResult
	for _, s := range curve {
		switch {
		case s.Manager != "turnstile":
		case s.Restart:
			restart = append(restart, s)
		default:
			fresh = append(fresh, s)
		}
	}
	if len(fresh) == 0 {
		return nil
	}
	last := fresh[len(fresh)-1]
	peak := last.PeakRSSBytes
	for _, s := range restart {
		if s.Requests == last.Requests {
			peak = max(peak, s.PeakRSSBytes)
		}
	}
	goals := []Goal{
		goal("M1", fmt.Sprintf("manager RSS, MiB, settled on %s requests", count(last.Requests)), float64(last.RSSBytes)/(1<<20), "<=", 256),
		goal("M2", fmt.Sprintf("manager peak RSS, MiB, start and settle on %s requests (fresh and restarted)", count(last.Requests)), float64(peak)/(1<<20), "<=", 256),
		goal("M4", fmt.Sprintf("settle on %s requests ÷ the API server's write floor for the same writes", count(last.Requests)), ratio(last.ReconcileSeconds, last.WriteFloorSeconds), "<=", 2),
	}
	if c := last.Container; c != nil {
		// A manager the kernel killed never settles, so no point would be recorded; this is the
		// cgroup's own word that the limit held without a kill.
		goals = append(goals, goal("M1c", fmt.Sprintf("OOM kills in a memory cgroup of %s MiB, settled on %s requests (anonymous memory then %s MiB, page cache %s MiB)",
			mib(c.LimitBytes), count(last.Requests), mib(c.AnonBytes), mib(c.FileBytes)), float64(c.OOMKills), "<=", 0))
	}
	if first := fresh[0]; len(fresh) > 1 && last.Requests > first.Requests {
		goals = append(goals, goal("M3", fmt.Sprintf("marginal RSS per request, KiB, %s → %s requests", count(first.Requests), count(last.Requests)),
			float64(last.RSSBytes-first.RSSBytes)/1024/float64(last.Requests-first.Requests), "<=", 2))
	}
	if len(restart) > 0 {
		r := restart[len(restart)-1]
		goals = append(goals, goal("M5", fmt.Sprintf("restart on %s decided requests: start → first key reconciled ÷ a paged list of them", count(r.Requests)),
			ratio(r.ColdStartSeconds, r.ListSeconds), "<=", 1.2))
	}
	return goals
}

func steadyGoals(r *Result) []Goal {
	small, deep := r.Handoff[0], r.Handoff[len(r.Handoff)-1]
	goals := []Goal{
		goal("G1", fmt.Sprintf("grants/s ÷ raw GET+UpdateStatus/s (%d clients each, median of %d rounds)", r.Throughput.Workers, len(r.Throughput.Rounds)),
			ratio(r.Throughput.GrantsPerSec, r.Raw.ParallelOpsPerSec), ">=", 0.4),
	}
	for i, le := range r.LeaderElection {
		id := "G2a"
		if i > 0 {
			id = fmt.Sprintf("G2a.%d", i+1)
		}
		goals = append(goals, goal(id, fmt.Sprintf("hand-off p50 (depth %d) ÷ leaderelection hand-off p50 (%d contenders)", small.Depth, le.Contenders),
			ratio(small.Latency.P50, le.Latency.P50), "<=", 0.05))
	}
	return append(goals,
		goal("G2b", fmt.Sprintf("hand-off p99 (depth %d) ÷ write→watch probe p99", small.Depth),
			ratio(small.Latency.P99, r.Raw.Probe.P99), "<=", 3),
		goal("G3a", fmt.Sprintf("writes per hand-off, depth %d ÷ depth %d", deep.Depth, small.Depth),
			ratio(deep.WritesPerHandoff, small.WritesPerHandoff), "<=", 1.1),
		goal("G3b", fmt.Sprintf("hand-offs/s, depth %d ÷ depth %d", deep.Depth, small.Depth),
			ratio(deep.HandoffsPerSec, small.HandoffsPerSec), ">=", 0.9),
		goal("G4", fmt.Sprintf("hand-offs/s at depth %d, deadlock detection on ÷ off", r.Detection.Depth),
			ratio(r.Detection.HandoffsPerSecOn, r.Detection.HandoffsPerSecOff), ">=", 0.95),
	)
}

// WriteJSON writes the result to path.
func (r *Result) WriteJSON(path string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// WriteTable writes the result as two Markdown tables (measurements, goals), ready to paste
// into the README.
func (r *Result) WriteTable(out io.Writer) {
	t := &table{}
	if len(r.Handoff) > 0 {
		r.steadyRows(t)
	}
	if len(r.ScaleCurve) > 0 {
		r.scaleRows(t)
	}
	r.runRows(t)
	r.sharedRows(t)
	r.replicasRows(t)
	r.failoverRows(t)
	if rl := r.Roll; rl != nil {
		t.add(fmt.Sprintf("Roll: %d replicas replaced one by one, %d times (%s s), %d keys handing off: gap p50 / p99, steady vs during the roll (lost)", rl.Replicas, rl.Rounds, num(rl.RollSeconds), rl.Keys),
			fmt.Sprintf("%s vs %s (%d lost)", lat(rl.Steady), lat(rl.Roll), rl.Lost))
	}
	fmt.Fprintln(out, "| Measurement | Result |")
	fmt.Fprintln(out, "|---|---|")
	for _, row := range t.rows {
		fmt.Fprintf(out, "| %s | %s |\n", row[0], row[1])
	}
	fmt.Fprintln(out)
	r.writeGoals(out)
	fmt.Fprintf(out, "\n%d CPUs, %s, %.0f s in all.\n", r.CPUs, r.GoVersion, r.Seconds)
}

// table collects the measurement rows.
type table struct{ rows [][2]string }

func (t *table) add(k, v string) { t.rows = append(t.rows, [2]string{k, v}) }

func lat(l Latency) string { return fmt.Sprintf("%s / %s ms", num(l.P50), num(l.P99)) }

func (r *Result) steadyRows(t *table) {
	add := t.add
	add("Raw GET+UpdateStatus, 1 client", fmt.Sprintf("%s ops/s", num(r.Raw.SequentialOpsPerSec)))
	add(fmt.Sprintf("Raw GET+UpdateStatus, %d clients, median of %d rounds", r.Raw.Workers, len(r.Raw.ParallelRounds)), fmt.Sprintf("%s ops/s", num(r.Raw.ParallelOpsPerSec)))
	add("Write → watch delivery p50 / p99", lat(r.Raw.Probe))
	add("Acquire, free key: create → Granted seen, p50 / p99", lat(r.Acquire.Latency))
	add(fmt.Sprintf("Grants/s, %d clients over %d keys (acquire → Granted → release), median of %d rounds", r.Throughput.Workers, r.Throughput.Keys, len(r.Throughput.Rounds)),
		fmt.Sprintf("%s grants/s (create → Granted p50 / p99 %s)", num(r.Throughput.GrantsPerSec), lat(r.Throughput.Latency)))
	add("API writes per grant / per release (LockRequest + ProjectLock)",
		fmt.Sprintf("%s / %s (+ %s events per grant)", num(r.Acquire.WritesPerGrant), num(r.Acquire.WritesPerRelease), num(r.Acquire.EventsPerGrant)))
	for _, h := range r.Handoff {
		add(fmt.Sprintf("Hand-off at depth %d: release → next Granted seen, p50 / p99", h.Depth), lat(h.Latency))
		add(fmt.Sprintf("Hand-offs/s at depth %d, back to back (p50 / p99)", h.Depth),
			fmt.Sprintf("%s hand-offs/s (%s)", num(h.HandoffsPerSec), lat(h.LoadedLatency)))
		add(fmt.Sprintf("API writes per hand-off at depth %d, one arrival each (of which refreshes; 409s)", h.Depth),
			fmt.Sprintf("%s (%s; %s) + %s events", num(h.WritesPerHandoff), num(h.RefreshesPerHandoff), num(h.ConflictsPerHandoff), num(h.EventsPerHandoff)))
		add(fmt.Sprintf("Manager CPU per hand-off at depth %d (reconciles per hand-off)", h.Depth),
			fmt.Sprintf("%s ms (%s)", num(h.CPUPerHandoffMs), num(h.ReconcilesPerHandoff)))
		add(fmt.Sprintf("Manager heap allocations per hand-off at depth %d (collections per 100 hand-offs)", h.Depth),
			fmt.Sprintf("%s objects, %s KiB (%s)", num(h.AllocsPerHandoff), num(h.AllocKiBPerHandoff), num(100*h.GCsPerHandoff)))
	}
	for _, le := range r.LeaderElection {
		add(fmt.Sprintf("leaderelection Lease mutex, %d contenders: cancel → next leads, p50 / p99", le.Contenders), lat(le.Latency))
		add(fmt.Sprintf("leaderelection Lease writes per hand-off (%d contenders)", le.Contenders), num(le.WritesPerHandoff))
	}
	d := r.Detection
	add(fmt.Sprintf("Hand-offs/s at depth %d, deadlock detection on / off (median of %d)", d.Depth, len(d.Rounds)/2),
		fmt.Sprintf("%s / %s", num(d.HandoffsPerSecOn), num(d.HandoffsPerSecOff)))
	add(fmt.Sprintf("Manager CPU per hand-off at depth %d, deadlock detection on / off", d.Depth),
		fmt.Sprintf("%s / %s ms", num(d.CPUPerHandoffMsOn), num(d.CPUPerHandoffMsOff)))
	add(fmt.Sprintf("Deadlock checks per hand-off at depth %d (one arrival each): run / skipped", d.Depth),
		fmt.Sprintf("%s / %s", num(d.ChecksPerHandoffOn), num(d.SkipsPerHandoffOn)))
	add("Grants/s (uncontended, detection never runs), deadlock detection on / off",
		fmt.Sprintf("%s / %s (manager CPU per grant %s / %s ms)", num(d.GrantsPerSecOn), num(d.GrantsPerSecOff), num(d.CPUPerGrantMsOn), num(d.CPUPerGrantMsOff)))
}

func (r *Result) scaleRows(t *table) {
	s := r.Scale
	t.add(fmt.Sprintf("Deadlock check over %s waiters on %s keys (one namespace): full / cache list / graph", count(s.DeadlockCheck.Waiters), count(s.DeadlockCheck.KeysSeen)),
		fmt.Sprintf("%s / %s / %s ms", num(s.DeadlockCheck.FullMs), num(s.DeadlockCheck.ListMs), num(s.DeadlockCheck.GraphMs)))
	for _, p := range r.ScaleCurve {
		what := "fresh (no request has a phase): start → all phased, queue empty"
		if p.Restart {
			what = "restarted on decided requests: start → every key reconciled, queue empty"
		}
		live := ""
		if p.HeapLiveBytes > 0 {
			live = fmt.Sprintf(" · live heap %s MiB", mib(p.HeapLiveBytes))
		}
		if p.AnonRSSBytes > 0 {
			live += fmt.Sprintf(" · anonymous RSS %s MiB", mib(p.AnonRSSBytes))
		}
		if c := p.Container; c != nil {
			live += fmt.Sprintf(" · cgroup of %s MiB: usage %s (anonymous %s, page cache %s), peak %s, %d reclaims at the limit, %d OOM kills",
				mib(c.LimitBytes), mib(c.UsageBytes), mib(c.AnonBytes), mib(c.FileBytes), mib(c.PeakBytes), c.LimitHits, c.OOMKills)
		}
		t.add(fmt.Sprintf("Scale, %s: %s requests, %s keys, %s namespaces, %s", p.Manager, count(p.Requests), count(p.Keys), count(p.Namespaces), what),
			fmt.Sprintf("settle %s s (write floor %s s) · first key %s s (list %s s) · RSS %s / peak %s / heap %s MiB (idle %s)%s",
				num(p.ReconcileSeconds), num(p.WriteFloorSeconds), num(p.ColdStartSeconds), num(p.ListSeconds),
				mib(p.RSSBytes), mib(p.PeakRSSBytes), mib(p.HeapBytes), mib(p.IdleRSSBytes), live))
	}
}

func (r *Result) runRows(t *table) {
	add := t.add
	if rr := r.Run; rr != nil {
		add(fmt.Sprintf("`true` on its own, p50 / p99 of %d", rr.True.N), lat(rr.True))
		for _, p := range rr.Plugins {
			add(fmt.Sprintf("`%s run -l KEY -- true`, free key: wall time p50 / p99", p.Plugin), lat(p.Overhead))
			add(fmt.Sprintf("`%s run`, hand-off: first command's end → next command's start, p50 / p99", p.Plugin), lat(p.Handoff))
		}
	}
}

func (r *Result) sharedRows(t *table) {
	add := t.add
	if sr := r.Shared; sr != nil {
		add(fmt.Sprintf("Shared (%d readers, one writer, %d samples): last reader's release → writer Granted, p50 / p99", sr.Readers, sr.Samples), lat(sr.ReadersToWriter))
		add(fmt.Sprintf("Shared: writer's release → all %d readers Granted, p50 / p99", sr.Readers), lat(sr.WriterToReaders))
		add(fmt.Sprintf("Exclusive, same run (%d waiters): release → next Granted, p50 / p99", sr.Readers), lat(sr.Exclusive))
	}
	t.rows = append(t.rows, r.gatedRows()...)
	t.rows = append(t.rows, r.freezeRows()...)
	t.rows = append(t.rows, r.fleetRows()...)
}

func (r *Result) replicasRows(t *table) {
	add := t.add
	if rp := r.Replicas; rp != nil {
		for _, m := range rp.Modes {
			add(fmt.Sprintf("Replicas, %s (%d managers; median of %d rounds): G1 · hand-off p50 / p99 · G2b · hand-offs/s · writes (409s) · reconciles · managers' API requests (GETs) · CPU ms per hand-off", m.Mode, m.Managers, rp.Rounds),
				fmt.Sprintf("%s · %s / %s ms · %s · %s · %s (%s) · %s · %s (%s) · %s", num(m.G1), num(m.HandoffP50Ms), num(m.HandoffP99Ms), num(m.G2b),
					num(m.HandoffsPerSec), num(m.WritesPerHandoff), num(m.ConflictsPerHandoff), num(m.ReconcilesPerHandoff),
					num(m.RequestsPerHandoff), num(m.GetsPerHandoff), num(m.CPUPerHandoffMs)))
			add(fmt.Sprintf("Replicas, %s, deep queue: G3a · G3b · G4 · hand-offs/s · CPU ms per hand-off", m.Mode),
				fmt.Sprintf("%s · %s · %s · %s · %s", num(m.G3a), num(m.G3b), num(m.G4), num(m.DeepHandoffsPerSec), num(m.DeepCPUPerHandoffMs)))
		}
	}
}

func (r *Result) failoverRows(t *table) {
	add := t.add
	if f := r.Failover; f != nil {
		maxLat := func(l Latency) string { return fmt.Sprintf("%s / %s ms", num(l.P50), num(l.Max)) }
		add(fmt.Sprintf("Failover, %d replicas active-active (backup delay %s, lapse %s): owner SIGKILLed, release → next Granted, p50 / max of %d", f.Replicas, f.BackupDelay, f.Lapse, f.Kill.N), maxLat(f.Kill))
		add("Failover: API writes per hand-off (409s)", fmt.Sprintf("%s (%s)", num(f.KillWrites), num(f.KillConflicts)))
		add(fmt.Sprintf("Failover baseline, 2 replicas with leader election (%s lease): leader SIGKILLed, release → next Granted, p50 / max of %d", f.LeaderElectionLease, f.LeaderElection.N), maxLat(f.LeaderElection))
		add(fmt.Sprintf("Rolling restart, each of %d replicas in turn (SIGTERM as its key's holder releases): p50 / max (409s per hand-off)", f.Rolling.N),
			fmt.Sprintf("%s (%s)", maxLat(f.Rolling), num(f.RollingConflicts)))
	}

}

func (r *Result) writeGoals(out io.Writer) {
	fmt.Fprintln(out, "| Goal | Measured | Target | Met |")
	fmt.Fprintln(out, "|---|---|---|---|")
	for _, g := range r.Goals {
		met := "no"
		if g.Met {
			met = "yes"
		}
		value := num(g.Value)
		if g.Low != 0 || g.High != 0 {
			value += fmt.Sprintf(" (%s–%s)", num(g.Low), num(g.High))
		}
		if g.Rounds > 0 {
			value += fmt.Sprintf("; no worse in %d of %d rounds, sign test p = %.2f", g.AtLeastAsGood, g.Rounds, g.SignP)
		}
		fmt.Fprintf(out, "| %s: %s | %s | %s %s | %s |\n", g.ID, g.What, value, g.Op, num(g.Target), met)
	}
}

// num formats with three significant digits, thousands separated.
func num(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return fmt.Sprint(v)
	case v == 0:
		return "0"
	case math.Abs(v) >= 1000:
		s := fmt.Sprintf("%.0f", v)
		var b strings.Builder
		neg := strings.HasPrefix(s, "-")
		s = strings.TrimPrefix(s, "-")
		if neg {
			b.WriteByte('-')
		}
		for i, c := range s {
			if i > 0 && (len(s)-i)%3 == 0 {
				b.WriteByte(',')
			}
			b.WriteRune(c)
		}
		return b.String()
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	case math.Abs(v) >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

// count formats an integer, thousands separated.
func count(n int) string {
	if n >= 1000 || n <= -1000 {
		return num(float64(n))
	}
	return fmt.Sprint(n)
}

func mib(b int64) string { return num(float64(b) / (1 << 20)) }

// replicasGoals: active-active in steady state against one active manager, alone and as the
// leader of a replicated Deployment, and the mode's own cost apart from a second process;
// "no worse" within 5%. Each ratio pairs the two modes round by round, since the rounds run
// back to back and a round's load reaches both alike: the value is the median of the
// per-round ratios, with their range.
func replicasGoals(rp *ReplicasResult) []Goal {
	modes := map[string]ReplicaMode{}
	for _, m := range rp.Modes {
		modes[m.Mode] = m
	}
	one := modes[modeOne]
	var goals []Goal
	for _, c := range []struct {
		id         string
		of, base   ReplicaMode
		what, over string
	}{
		{"A", modes[modeAlone], one, "active-active alone", "one manager"},
		{"S", modes[modeActiveActive], one, fmt.Sprintf("%d active-active", rp.Replicas), "one manager"},
		{"L", modes[modeActiveActive], modes[modeLeaderElection], fmt.Sprintf("%d active-active", rp.Replicas), fmt.Sprintf("%d with leader election", rp.Replicas)},
	} {
		what := c.what + " ÷ " + c.over
		// Every mode has Rounds rounds (at least 1), measured in the same order.
		paired := func(id, name string, f func(ReplicaRound) float64, op string, target float64) Goal {
			xs := make([]float64, len(c.base.Rounds))
			for i := range xs {
				xs[i] = ratio(f(c.of.Rounds[i]), f(c.base.Rounds[i]))
			}
			g := goal(c.id+id, name+", "+what, median(xs), op, target)
			g.Low, g.High = slices.Min(xs), slices.Max(xs)
			g.Rounds = len(xs)
			for _, x := range xs {
				if (op == ">=" && x >= 1) || (op == "<=" && x <= 1) {
					g.AtLeastAsGood++
				}
			}
			g.SignP = signTest(g.AtLeastAsGood, g.Rounds)
			return g
		}
		goals = append(goals,
			paired("1", "G1 (grants/s ÷ raw ops/s)", func(r ReplicaRound) float64 { return r.G1 }, ">=", 0.95),
			paired("2a", "hand-off p50 (depth 10)", func(r ReplicaRound) float64 { return r.HandoffP50Ms }, "<=", 1.05),
			paired("2b", "G2b (hand-off p99 ÷ write→watch p99)", func(r ReplicaRound) float64 { return r.G2b }, "<=", 1.05),
			paired("3", "hand-offs/s back to back (depth 10)", func(r ReplicaRound) float64 { return r.HandoffsPerSec }, ">=", 0.95),
			paired("4", "API writes per hand-off", func(r ReplicaRound) float64 { return r.WritesPerHandoff }, "<=", 1.05),
			paired("5", "manager CPU per hand-off, all managers", func(r ReplicaRound) float64 { return r.CPUPerHandoffMs }, "<=", 1.05),
			paired("6", "G3a (writes per hand-off, deep queue ÷ depth 10)", func(r ReplicaRound) float64 { return r.G3a }, "<=", 1.05),
			paired("7", "G3b (hand-offs/s, deep queue ÷ depth 10)", func(r ReplicaRound) float64 { return r.G3b }, ">=", 0.95),
			paired("8", "G4 (hand-offs/s on the deep queue, deadlock detection on ÷ off)", func(r ReplicaRound) float64 { return r.G4 }, ">=", 0.95))
	}
	return goals
}

// signTest is the two-sided sign test's p-value of k successes in n trials of a fair coin:
// twice the probability of a count at least as far from n/2, at most 1.
func signTest(k, n int) float64 {
	if n == 0 {
		return 1
	}
	k = min(k, n-k)
	p, c := 0.0, 1.0 // c is n choose i
	for i := 0; i <= k; i++ {
		p += c
		c = c * float64(n-i) / float64(i+1)
	}
	return min(1, 2*p/math.Pow(2, float64(n)))
}
