package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"os/signal"
	"path"
	"path/filepath"
	"sort"
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

// dryRun applies each selected mutant to an overlay of the tree (go build -overlay: the tree
// itself is never written, so there is nothing to restore) and checks that the packages it
// edits compile, and that they and its test package pass go vet with go test's checks (vet
// type-checks the tests too, so a mutant whose tests would not compile fails here). YAML edits
// are only applied: no Go reads them at build time.
//
// The mutants are checked in batches, one overlay and one go command per batch, because a go
// command per mutant cost CI half an hour (over 200 mutants, each relinking or re-vetting the same
// packages). The mutants of a batch edit different files, so no two of them share a function
// body or an import list: one could make another compile only by changing a package-level
// declaration, which no mutant does (and make mutants builds each one alone). A batch that fails
// is checked again one mutant at a time, so a failure names its mutant.
func dryRun(only string, found map[string]marker) int {
	tmp, err := os.MkdirTemp("", "mutants-dry-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer os.RemoveAll(tmp)
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var applied []dryMutant
	failed, n := 0, 0
	for _, m := range mutants {
		if !strings.Contains(m.name, only) {
			continue
		}
		n++
		files, err := mutate(".", m, found)
		if err != nil {
			failed++
			fmt.Printf("%-34s FAILS: %v\n", m.name, err)
			continue
		}
		applied = append(applied, dryMutant{m, files})
	}
	batches := batch(applied)
	for i, b := range batches {
		start := time.Now()
		if err := checkBuilds(b, wd, filepath.Join(tmp, fmt.Sprint(i))); err != nil {
			for j, dm := range b {
				if err := checkBuilds([]dryMutant{dm}, wd, filepath.Join(tmp, fmt.Sprintf("%d-%d", i, j))); err != nil {
					failed++
					fmt.Printf("%-34s FAILS: %v\n", dm.name, err)
					continue
				}
				fmt.Printf("%-34s applies and builds\n", dm.name)
			}
			continue
		}
		names := make([]string, len(b))
		for j, dm := range b {
			names[j] = dm.name
		}
		fmt.Printf("batch %d/%d: %d mutants apply and build (%s): %s\n", i+1, len(batches), len(b), time.Since(start).Round(100*time.Millisecond), strings.Join(names, " "))
	}
	fmt.Printf("dry run: %d markers, %d mutants in %d batches, %d fail\n", len(found), n, len(batches), failed)
	if failed > 0 {
		return 1
	}
	return 0
}

// dryMutant is a mutant with its edits applied: the content of every file it changes.
type dryMutant struct {
	mutant
	files map[string][]byte
}

// batch puts each mutant into the first batch none of whose mutants edits a file it edits.
func batch(ms []dryMutant) [][]dryMutant {
	var batches [][]dryMutant
	var used []map[string]bool
next:
	for _, m := range ms {
		for i := range batches {
			if !touchesAny(m.files, used[i]) {
				batches[i] = append(batches[i], m)
				for f := range m.files {
					used[i][f] = true
				}
				continue next
			}
		}
		u := map[string]bool{}
		for f := range m.files {
			u[f] = true
		}
		batches, used = append(batches, []dryMutant{m}), append(used, u)
	}
	return batches
}

func touchesAny(files map[string][]byte, used map[string]bool) bool {
	for f := range files {
		if used[f] {
			return true
		}
	}
	return false
}

// checkBuilds overlays the Go files the mutants change (prefix names the overlay's files), compiles
// the packages they edit (a main package is only type-checked, by vet: linking it tells nothing
// more and costs seconds a mutant) and vets those and the mutants' test packages.
func checkBuilds(ms []dryMutant, wd, prefix string) error {
	replace := map[string]string{}
	pkgs, compile := map[string]bool{}, map[string]bool{}
	for _, m := range ms {
		for f, b := range m.files {
			if !strings.HasSuffix(f, ".go") {
				continue
			}
			o := prefix + "-" + strings.ReplaceAll(f, "/", "_")
			if err := os.WriteFile(o, b, 0o644); err != nil {
				return err
			}
			replace[filepath.Join(wd, f)] = o
			p := "./" + path.Dir(f) + "/"
			pkgs[p] = true
			if !isMain(b) {
				compile[p] = true
			}
		}
		pkgs[m.pkg] = true
	}
	overlay := prefix + "-overlay.json"
	b, err := json.Marshal(map[string]any{"Replace": replace})
	if err != nil {
		return err
	}
	if err := os.WriteFile(overlay, b, 0o644); err != nil {
		return err
	}
	if build := sortedKeys(compile); len(build) > 0 {
		if out, err := goCmd(append([]string{"build", "-overlay", overlay}, build...)...); err != nil {
			return fmt.Errorf("go build %s:\n%s", strings.Join(build, " "), out)
		}
	}
	vet := sortedKeys(pkgs)
	if out, err := goCmd(append(append([]string{"vet", "-overlay", overlay}, testVet...), vet...)...); err != nil {
		return fmt.Errorf("go vet %s:\n%s", strings.Join(vet, " "), out)
	}
	return nil
}

// isMain says whether a Go file is of package main.
func isMain(src []byte) bool {
	f, err := parser.ParseFile(token.NewFileSet(), "", src, parser.PackageClauseOnly)
	return err == nil && f.Name.Name == "main"
}

// testVet: the checks go test runs before the tests (go help test), and no others: a mutant
// may well leave unreachable code, which vet's other checks would hold against it.
var testVet = []string{"-atomic", "-bool", "-buildtags", "-directive", "-errorsas", "-ifaceassert", "-nilfunc", "-printf", "-stringintconv", "-tests"}

func sortedKeys(m map[string]bool) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func goCmd(args ...string) (string, error) {
	cmd := exec.Command("go", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
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
