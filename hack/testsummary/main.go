// Command testsummary reads `go test -json` on stdin, prints the test output as it comes, and
// ends with one summary line: "N passed, N failed, N skipped". Ginkgo suites count each spec,
// not just their single Go test. It exits non-zero when anything failed.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64 // seconds, on a package's or a test's final event
}

// ginkgoResult matches Ginkgo's closing line, e.g. "SUCCESS! -- 12 Passed | 0 Failed | 0 Pending | 1 Skipped",
// once its colors are gone.
var ginkgoResult = regexp.MustCompile(`(\d+) Passed \| (\d+) Failed \| \d+ Pending \| (\d+) Skipped`)

// ansiEscape matches the terminal color codes Ginkgo writes around each number.
var ansiEscape = regexp.MustCompile(`\x1b\[[0-9;]*m`)

// ginkgoCounts reads a Ginkgo closing line: its passed, failed and skipped specs.
func ginkgoCounts(line string) (passed, failed, skipped int, ok bool) {
	m := ginkgoResult.FindStringSubmatch(ansiEscape.ReplaceAllString(line, ""))
	if m == nil {
		return 0, 0, 0, false
	}
	passed, _ = strconv.Atoi(m[1])
	failed, _ = strconv.Atoi(m[2])
	skipped, _ = strconv.Atoi(m[3])
	return passed, failed, skipped, true
}

// failureHeadings are how Ginkgo's closing "Summarizing N Failures:" block starts each failed
// spec's line: its state, then the spec's full text and where it failed.
var failureHeadings = []string{"[FAIL]", "[PANICKED!]", "[ABORTED]", "[TIMEDOUT]", "[INTERRUPTED]"}

// shardPrefix is the name framework.RunSuiteInShards writes before each line of a shard's output.
var shardPrefix = regexp.MustCompile(`^\[shard \d+/\d+\]`)

// failedSpec reads one line of a Ginkgo suite's closing failure summary: the failed spec's
// heading and text, or false for any other line.
func failedSpec(line string) (string, bool) {
	line = strings.TrimSpace(ansiEscape.ReplaceAllString(line, ""))
	// A sharded suite (framework.RunSuiteInShards) prints a failed shard's output with its name
	// before each line.
	shard := shardPrefix.FindString(line)
	line = strings.TrimSpace(line[len(shard):])
	for _, h := range failureHeadings {
		if strings.HasPrefix(line, h+" ") {
			return strings.TrimSpace(shard + " " + line), true
		}
	}
	return "", false
}

// pkgTime is how long a package's tests ran.
type pkgTime struct {
	pkg     string
	elapsed float64
}

// slowest names the n packages whose tests ran longest, longest first: where CI's minutes go.
func slowest(took []pkgTime, n int) string {
	sort.SliceStable(took, func(i, j int) bool { return took[i].elapsed > took[j].elapsed })
	var total float64
	for _, t := range took {
		total += t.elapsed
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d packages ran %.0fs of tests; the longest:", len(took), total)
	for _, t := range took[:min(n, len(took))] {
		fmt.Fprintf(&b, "\n  %6.0fs %s", t.elapsed, t.pkg)
	}
	return b.String()
}

func main() {
	if summarize(os.Stdin, os.Stdout) > 0 {
		os.Exit(1)
	}
}

// summarize copies the test output of the `go test -json` stream in to out, then the summary,
// and returns how many failed.
func summarize(in io.Reader, out io.Writer) int {
	var passed, failed, skipped int
	ginkgoTests := map[string]bool{} // package/test of Go tests that ran a Ginkgo suite
	var failedNames, failedSpecs []string
	pkgFailed := map[string]bool{}
	buildFailed := false
	var took []pkgTime
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if err := json.Unmarshal(line, &ev); err != nil {
			fmt.Fprintln(out, string(line)) // build errors are not JSON
			if strings.Contains(string(line), "build failed") || strings.HasPrefix(string(line), "#") {
				buildFailed = true
			}
			continue
		}
		switch ev.Action {
		case "output":
			fmt.Fprint(out, ev.Output)
			// A failed spec is named again at the end, where CI's shortened log still shows it.
			for _, l := range strings.Split(ev.Output, "\n") {
				if spec, ok := failedSpec(l); ok {
					failedSpecs = append(failedSpecs, ev.Package+": "+spec)
				}
			}
			if p, f, s, ok := ginkgoCounts(ev.Output); ok {
				passed, failed, skipped = passed+p, failed+f, skipped+s
				ginkgoTests[ev.Package+"/"+ev.Test] = true
			}
		case "build-output":
			fmt.Fprint(out, ev.Output)
		case "build-fail":
			buildFailed = true
		case "pass", "fail", "skip":
			if ev.Test == "" {
				took = append(took, pkgTime{ev.Package, ev.Elapsed})
				// A package that failed with no failed test: a panic, a timeout, a TestMain error.
				if ev.Action == "fail" && !pkgFailed[ev.Package] {
					failed++
					failedNames = append(failedNames, ev.Package+" (package)")
				}
				continue
			}
			if ginkgoTests[ev.Package+"/"+ev.Test] {
				continue // its specs were counted
			}
			switch ev.Action {
			case "pass":
				passed++
			case "fail":
				failed++
				pkgFailed[ev.Package] = true
				failedNames = append(failedNames, ev.Package+" "+ev.Test)
			case "skip":
				skipped++
			}
		}
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, slowest(took, 8))
	for _, n := range failedNames {
		fmt.Fprintln(out, "FAILED:", n)
	}
	for _, n := range failedSpecs {
		fmt.Fprintln(out, "FAILED spec:", n)
	}
	if buildFailed {
		fmt.Fprintln(out, "some packages failed to build")
		failed++
	}
	fmt.Fprintf(out, "%d passed, %d failed, %d skipped\n", passed, failed, skipped)
	return failed
}
