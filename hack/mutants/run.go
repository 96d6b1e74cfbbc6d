package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	only := flag.String("only", "", "run only the mutants whose name contains this")
	dry := flag.Bool("dry", false, "check the markers, and that each mutant applies and its packages build and vet, without running tests (the tree is not touched)")
	flag.Parse()
	os.Exit(runMutants(*only, *dry))
}

// runMutants runs the mutants whose name contains only and returns the exit status; every file
// it touched is restored before it returns.
func runMutants(only string, dry bool) int {
	found, err := findMarkers(".")
	if err == nil {
		err = checkMarkers(mutants, found)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "markers:\n%v\n", err)
		return 2
	}
	if dry {
		return dryRun(only, found)
	}
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run `make mutants` (the envtest suites would fail in setup, which kills no mutant)")
		return 2
	}
	originals := map[string][]byte{}
	restore := func() {
		for f, b := range originals {
			if err := os.WriteFile(f, b, 0o644); err != nil {
				fmt.Fprintf(os.Stderr, "RESTORE %s BY HAND: %v\n", f, err)
			}
		}
		clear(originals)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	go func() { <-sig; restore(); os.Exit(130) }()
	defer restore()

	survived, killed, broken := 0, 0, 0
	for _, m := range mutants {
		if !strings.Contains(m.name, only) {
			continue
		}
		files, err := mutate(".", m, found)
		if err == nil {
			err = write(files, originals)
		}
		if err != nil {
			restore()
			fmt.Fprintf(os.Stderr, "mutant %s: %v\n", m.name, err)
			return 2
		}
		start := time.Now()
		out, err := run(m)
		restore()
		first := firstFailure(out)
		verdict := "KILLED by " + first
		switch {
		case err == nil:
			verdict = "SURVIVED: no test noticed"
			survived++
		case notAKill(first, out):
			// A suite that cannot start, or code that does not compile, says nothing of the guard.
			verdict = "BROKEN (not a kill): " + first
			broken++
		default:
			killed++
		}
		fmt.Printf("%-26s %-8s %s (%s)\n  guard: %s\n", m.name, time.Since(start).Round(time.Second), verdict, m.focus, m.guard)
	}
	fmt.Printf("%d mutants killed, %d survived, %d broken\n", killed, survived, broken)
	switch {
	case survived > 0:
		return 1
	case broken > 0:
		return 2
	}
	return 0
}

// mutate returns the content of every file (relative to root) the mutant changes, with its edits applied in
// order (each found in its marker's region of the file as the earlier edits left it).
func mutate(root string, m mutant, found map[string]marker) (map[string][]byte, error) {
	files := map[string][]byte{}
	for _, e := range m.edits {
		mk, ok := found[e.marker]
		if !ok {
			return nil, fmt.Errorf("marker guard:%s is not in the code", e.marker)
		}
		src, ok := files[mk.file]
		if !ok {
			b, err := os.ReadFile(filepath.Join(root, mk.file))
			if err != nil {
				return nil, err
			}
			src = b
		}
		// Read the marker again from the file as it is now: an earlier edit may have moved it.
		ms, err := markersIn(mk.file, src, markerPrefix(mk.file))
		if err != nil {
			return nil, err
		}
		i := slicesIndex(ms, e.marker)
		if i < 0 {
			return nil, fmt.Errorf("%s: an earlier edit of mutant %s removed marker guard:%s", mk.file, m.name, e.marker)
		}
		if src, err = applyEdit(src, ms[i], e); err != nil {
			return nil, err
		}
		files[mk.file] = src
	}
	return files, nil
}

func slicesIndex(ms []marker, name string) int {
	for i, m := range ms {
		if m.name == name {
			return i
		}
	}
	return -1
}

// write writes the mutated files into the tree, keeping each one's original in originals.
func write(files, originals map[string][]byte) error {
	for f, b := range files {
		if _, ok := originals[f]; !ok {
			o, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			originals[f] = o
		}
		if err := os.WriteFile(f, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// notAKill: the run failed before any spec or test could judge the mutant (a suite's setup or
// teardown, or the build).
func notAKill(first, out string) bool {
	return strings.Contains(first, "[BeforeSuite]") || strings.Contains(first, "[AfterSuite]") ||
		strings.Contains(first, "[SynchronizedBeforeSuite]") || strings.Contains(out, "[build failed]") ||
		strings.Contains(first, "build failed")
}

func run(m mutant) (string, error) {
	args := []string{"test", "-count=1", m.pkg}
	if strings.HasPrefix(m.focus, "run:") {
		args = append(args, "-run", strings.TrimPrefix(m.focus, "run:"))
	} else {
		args = append(args, "-ginkgo.focus", m.focus)
	}
	return goCmd(args...)
}

// firstFailure names the first failed spec or test in go test's output.
func firstFailure(out string) string {
	for _, line := range strings.Split(out, "\n") {
		if i := strings.Index(line, "[FAIL]"); i >= 0 {
			return strings.TrimSpace(stripColor(line[i+len("[FAIL]"):]))
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "--- FAIL") || strings.Contains(line, "build failed") {
			return strings.TrimSpace(line)
		}
	}
	return "a failing run"
}

func stripColor(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == 0x1b {
			for i < len(s) && s[i] != 'm' {
				i++
			}
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
