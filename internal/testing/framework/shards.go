package framework

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/reporters"
	"github.com/onsi/ginkgo/v2/types"
)

// A suite's specs in shards side by side, each shard a process of its own (the test binary run
// again) with its own control plane and manager: a suite that mostly waits on clocks and on an
// API server runs in a fraction of its serial time, and `go test` alone can do it (Ginkgo's own
// parallel mode needs the ginkgo CLI's server).
//
// RunSuiteInShards first lists the specs that the run's flags select (-ginkgo.focus, -skip,
// -label-filter...) in a dry run of the binary, then splits them: an Ordered container stays
// whole, and the split is deterministic (the same specs, the same shards, on every run of the
// same code). Each shard runs exactly its specs, chosen by their full text, and then the parent
// checks that every listed spec ran exactly once. It prints each shard's spec count and time, the
// output of any shard that failed (all of them with -v, as go test -json gives), and one closing
// line in Ginkgo's form that counts the specs of every shard (what hack/testsummary reads).
//
// The split balances the shards by each spec's cost, taken from the SpecPriority decorator: a
// spec that takes far longer than the rest says so with SpecPriority(seconds it takes), which
// also makes Ginkgo start it first in its shard; every other spec counts 1.
const (
	// ShardsEnv, when set, overrides the number of shards; 1 runs the suite in this process, as
	// RunSuite does.
	ShardsEnv = "TURNSTILE_TEST_SHARDS"
	// shardPlanEnv names a shard's plan: the binary was run as one shard.
	shardPlanEnv = "TURNSTILE_TEST_SHARD_PLAN"
	// shardListEnv names the file a dry run reports to: the binary was run to list the specs.
	shardListEnv = "TURNSTILE_TEST_SHARD_LIST"
	// testLogEnv is the managers' log file of the suites that have one: each shard writes its own.
	testLogEnv = "TURNSTILE_TEST_LOG"
)

// shardPlan is what one shard runs, and where it reports.
type shardPlan struct {
	Shard, Of int
	Specs     []string // full texts, without the suite's description
	Weight    int
	Seed      int64  // -ginkgo.seed, the same in every shard
	Report    string // its JSON report
}

// shardResult is a shard's run: its output, its exit, its report.
type shardResult struct {
	plan   shardPlan
	out    bytes.Buffer
	err    error
	took   time.Duration
	report *types.Report
	ran    map[string]int // planned specs reported, by full text
	// The planned specs by outcome: skipped are those that called Skip() or came after an
	// Ordered container's failed spec.
	passed, failed, skipped int
}

// RunSuiteInShards is RunSuite with the specs split into shards processes that run side by side
// (fewer when fewer specs run; one, in this process, with TURNSTILE_TEST_SHARDS=1 or a single
// spec or Ordered container selected). Each process runs the suite's BeforeSuite and AfterSuite:
// the specs of one shard share its control plane, never another's.
func RunSuiteInShards(t *testing.T, description string, shards int) {
	if path := os.Getenv(shardPlanEnv); path != "" {
		runShard(t, description, path)
		return
	}
	if path := os.Getenv(shardListEnv); path != "" {
		listSpecs(t, description, path)
		return
	}
	if v := os.Getenv(ShardsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a number of shards, 1 or more", ShardsEnv, v)
		}
		shards = n
	}
	sc, rc := ginkgo.GinkgoConfiguration()
	if shards <= 1 || sc.DryRun || sc.ParallelTotal > 1 {
		RunSuite(t, description)
		return
	}
	dir := t.TempDir()
	listed, err := listInChild(t, dir, sc.RandomSeed)
	if err != nil {
		t.Fatal(err)
	}
	plans := planShards(listed.run, shards, dir, sc.RandomSeed)
	if len(plans) <= 1 {
		RunSuite(t, description)
		return
	}
	start := time.Now()
	results := runShards(t, plans)
	closeShards(t, description, listed, results, time.Since(start), rc)
}

// childCmd runs this test binary again, only this test, with the run's flags and env added.
func childCmd(t *testing.T, seed int64, env ...string) *exec.Cmd {
	args := slices.Clone(os.Args[1:])
	args = append(args, "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.count=1",
		"-ginkgo.seed="+strconv.FormatInt(seed, 10))
	if deadline, ok := t.Deadline(); ok {
		// A shard that hangs times out (and prints its goroutines) before this process does.
		left := time.Until(deadline)
		args = append(args, "-test.timeout="+(left-min(time.Minute, left/10)).String())
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// listed is what a dry run found: the specs that will run, and the counts of those that will not.
type listed struct {
	run              []types.SpecReport
	total            int
	pending, skipped int
}

// listInChild lists the specs this run selects, in a dry run of the test binary.
func listInChild(t *testing.T, dir string, seed int64) (listed, error) {
	path := filepath.Join(dir, "list.json")
	cmd := childCmd(t, seed, shardListEnv+"="+path)
	if out, err := cmd.CombinedOutput(); err != nil {
		return listed{}, fmt.Errorf("listing the specs (a dry run of %s): %w\n%s", os.Args[0], err, out)
	}
	report, err := readReport(path)
	if err != nil {
		return listed{}, fmt.Errorf("listing the specs: %w", err)
	}
	var l listed
	for _, s := range report.SpecReports {
		if s.LeafNodeType != types.NodeTypeIt {
			continue
		}
		l.total++
		switch s.State {
		case types.SpecStatePending:
			l.pending++
		case types.SpecStateSkipped:
			l.skipped++
		default:
			l.run = append(l.run, s)
		}
	}
	return l, nil
}

// listSpecs is the dry run, in the child.
func listSpecs(t *testing.T, description, path string) {
	_ = os.Unsetenv(shardListEnv)
	sc, _ := ginkgo.GinkgoConfiguration()
	sc.DryRun = true
	RunSuite(t, description, sc, types.ReporterConfig{Succinct: true, NoColor: true, JSONReport: path})
}

// planShards splits the specs into at most n shards: each Ordered container whole, the costliest
// group first, each group to the shard with the least cost so far (the lowest-numbered of equals).
func planShards(specs []types.SpecReport, n int, dir string, seed int64) []shardPlan {
	type group struct {
		key    string
		texts  []string
		weight int
	}
	byKey := map[string]*group{}
	var groups []*group
	for _, s := range specs {
		key := "spec " + s.FullText()
		if s.IsInOrderedContainer {
			// Ginkgo keeps an Ordered container's specs in one process, in order; so do the shards.
			key = "ordered " + s.ContainerHierarchyTexts[0]
		}
		g := byKey[key]
		if g == nil {
			g = &group{key: key}
			byKey[key] = g
			groups = append(groups, g)
		}
		g.texts = append(g.texts, s.FullText())
		g.weight += max(1, s.SpecPriority)
	}
	slices.SortFunc(groups, func(a, b *group) int {
		if a.weight != b.weight {
			return b.weight - a.weight
		}
		return strings.Compare(a.key, b.key)
	})
	plans := make([]shardPlan, min(n, len(groups)))
	for i := range plans {
		plans[i] = shardPlan{Shard: i + 1, Of: len(plans), Seed: seed, Report: filepath.Join(dir, fmt.Sprintf("shard%d.json", i+1))}
	}
	for _, g := range groups {
		least := &plans[0]
		for i := range plans {
			if plans[i].Weight < least.Weight {
				least = &plans[i]
			}
		}
		least.Specs = append(least.Specs, g.texts...)
		least.Weight += g.weight
	}
	return plans
}

// runShards runs every shard at once and waits for them all.
func runShards(t *testing.T, plans []shardPlan) []*shardResult {
	results := make([]*shardResult, len(plans))
	var wg sync.WaitGroup
	for i, p := range plans {
		r := &shardResult{plan: p}
		results[i] = r
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		path := strings.TrimSuffix(p.Report, ".json") + ".plan"
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		env := []string{shardPlanEnv + "=" + path}
		if log := os.Getenv(testLogEnv); log != "" {
			env = append(env, fmt.Sprintf("%s=%s.shard%d", testLogEnv, log, p.Shard))
		}
		cmd := childCmd(t, p.Seed, env...)
		cmd.Stdout, cmd.Stderr = &r.out, &r.out
		wg.Go(func() {
			start := time.Now()
			r.err = cmd.Run()
			r.took = time.Since(start)
		})
	}
	wg.Wait()
	for _, r := range results {
		r.check()
	}
	return results
}

// runShard is one shard, in the child: the suite with only the plan's specs selected.
func runShard(t *testing.T, description, path string) {
	_ = os.Unsetenv(shardPlanEnv)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var p shardPlan
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	exact := make([]string, len(p.Specs))
	for i, s := range p.Specs {
		exact[i] = regexp.QuoteMeta(description + " " + s)
	}
	sc, rc := ginkgo.GinkgoConfiguration()
	// The dry run applied the run's own filters: the plan is what they selected.
	sc.FocusStrings = []string{"^(?:" + strings.Join(exact, "|") + ")$"}
	sc.SkipStrings, sc.FocusFiles, sc.SkipFiles, sc.LabelFilter, sc.SemVerFilter = nil, nil, nil, "", ""
	rc.JSONReport, rc.GoJSONReport, rc.JUnitReport, rc.TeamcityReport = p.Report, "", "", ""
	rc.SilenceSkips = true // the other shards' specs
	fmt.Printf("shard %d of %d: %d specs\n", p.Shard, p.Of, len(p.Specs))
	RunSuite(t, description, sc, rc)
}

// check reads a shard's report: that it selected exactly its specs, and how they did.
func (r *shardResult) check() {
	report, err := readReport(r.plan.Report)
	if err != nil {
		r.err = errors.Join(r.err, err)
		return
	}
	r.report = report
	if n := report.PreRunStats.SpecsThatWillRun; n != len(r.plan.Specs) {
		r.err = errors.Join(r.err, fmt.Errorf("selected %d specs, want the %d of its plan", n, len(r.plan.Specs)))
	}
	planned := map[string]bool{}
	for _, s := range r.plan.Specs {
		planned[s] = true
	}
	r.ran = map[string]int{}
	for _, s := range report.SpecReports {
		if s.LeafNodeType != types.NodeTypeIt {
			continue
		}
		text := s.FullText()
		if !planned[text] {
			if !s.State.Is(types.SpecStateSkipped | types.SpecStatePending) {
				r.err = errors.Join(r.err, fmt.Errorf("ran %q, another shard's spec", text))
			}
			continue
		}
		r.ran[text]++
		switch {
		case s.State.Is(types.SpecStatePassed):
			r.passed++
		case s.State.Is(types.SpecStateFailureStates):
			r.failed++
		default:
			r.skipped++ // Skip(), or after an Ordered container's failed spec
		}
	}
}

func readReport(path string) (*types.Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var reports []types.Report
	if err := json.Unmarshal(b, &reports); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(reports) != 1 {
		return nil, fmt.Errorf("%s: %d suites reported, want 1", path, len(reports))
	}
	return &reports[0], nil
}

// closingLine matches Ginkgo's closing line, which hack/testsummary counts: a shard's is
// reworded so that only the parent's, over every shard, is counted.
var closingLine = regexp.MustCompile(`(\d+) Passed \| (\d+) Failed \| (\d+) Pending \| (\d+) Skipped`)

// closeShards prints the shards' outcome, checks that every listed spec ran exactly once, and
// fails the test if any shard failed.
func closeShards(t *testing.T, description string, l listed, results []*shardResult, took time.Duration, rc types.ReporterConfig) {
	got := map[string]int{}
	passed, failed, skipped := 0, 0, l.skipped
	for _, r := range results {
		for text, n := range r.ran {
			got[text] += n
		}
		passed, failed, skipped = passed+r.passed, failed+r.failed, skipped+r.skipped
		if r.err != nil || r.failed > 0 || testing.Verbose() {
			fmt.Printf("\n----- shard %d of %d (%d specs, %s) -----\n", r.plan.Shard, r.plan.Of, len(r.plan.Specs), r.took.Round(time.Second))
			fmt.Print(shardOutput(r))
			fmt.Printf("----- end of shard %d of %d -----\n", r.plan.Shard, r.plan.Of)
		}
		if r.err != nil {
			t.Errorf("shard %d of %d: %v", r.plan.Shard, r.plan.Of, r.err)
		}
	}
	want := map[string]int{}
	for _, s := range l.run {
		want[s.FullText()]++
	}
	once := true
	for text, n := range want {
		if got[text] != n {
			once = false
			t.Errorf("spec %q: reported %d times by the shards, want %d", text, got[text], n)
			failed += max(0, n-got[text]) // never reported: count it failed
		}
	}
	fmt.Printf("\n%s in %d shards (-ginkgo.seed=%d):", description, len(results), results[0].plan.Seed)
	for _, r := range results {
		fmt.Printf(" shard %d ran %d specs in %s;", r.plan.Shard, len(r.ran), r.took.Round(time.Second))
	}
	fmt.Printf(" %d specs listed, each reported by one shard once: %t\n", len(l.run), once)
	verdict := "SUCCESS!"
	if t.Failed() || failed > 0 {
		verdict = "FAIL!"
	}
	fmt.Printf("Ran %d of %d Specs in %.3f seconds\n%s -- %d Passed | %d Failed | %d Pending | %d Skipped\n",
		passed+failed, l.total, took.Seconds(), verdict, passed, failed, l.pending, skipped)
	if err := writeMergedReports(description, results, took, rc); err != nil {
		t.Error(err)
	}
}

// writeMergedReports writes the reports this run's flags asked for (-ginkgo.json-report...): one
// suite with every shard's specs, and each shard's suite-level nodes (BeforeSuite...).
func writeMergedReports(description string, results []*shardResult, took time.Duration, rc types.ReporterConfig) error {
	if !rc.WillGenerateReport() {
		return nil
	}
	var merged *types.Report
	for _, r := range results {
		if r.report == nil {
			continue
		}
		if merged == nil {
			merged = &types.Report{}
			*merged = *r.report
			merged.SpecReports = nil
			merged.SuiteDescription = description
		}
		merged.SuiteSucceeded = merged.SuiteSucceeded && r.report.SuiteSucceeded && r.err == nil
		for _, s := range r.report.SpecReports {
			if s.LeafNodeType != types.NodeTypeIt || r.ran[s.FullText()] > 0 {
				merged.SpecReports = append(merged.SpecReports, s)
			}
		}
	}
	if merged == nil {
		return errors.New("no shard reported: no report to write")
	}
	merged.RunTime = took
	var errs []error
	for _, w := range []struct {
		path     string
		generate func(types.Report, string) error
	}{
		{rc.JSONReport, reporters.GenerateJSONReport}, {rc.GoJSONReport, reporters.GenerateGoTestJSONReport},
		{rc.JUnitReport, reporters.GenerateJUnitReport}, {rc.TeamcityReport, reporters.GenerateTeamcityReport},
	} {
		if w.path != "" {
			errs = append(errs, w.generate(*merged, w.path))
		}
	}
	return errors.Join(errs...)
}

// shardOutput is a shard's output as this process prints it: each line prefixed with the shard,
// without go test -json's framing marks (so that test2json does not take the shard's own
// "--- FAIL: TestXxx" lines for this process's), its closing line reworded (closingLine).
func shardOutput(r *shardResult) string {
	// go test -json runs the shards with -test.v=test2json: their framing lines carry ^V, which
	// test2json reads wherever it is in a line.
	out := strings.ReplaceAll(stripANSI(r.out.String()), "\x16", "")
	out = closingLine.ReplaceAllStringFunc(out, strings.ToLower)
	prefix := fmt.Sprintf("[shard %d/%d] ", r.plan.Shard, r.plan.Of)
	var b strings.Builder
	for line := range strings.Lines(out) {
		b.WriteString(prefix + line)
	}
	if !strings.HasSuffix(out, "\n") {
		b.WriteString("\n")
	}
	return b.String()
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;]*m`)

func stripANSI(s string) string { return ansi.ReplaceAllString(s, "") }
