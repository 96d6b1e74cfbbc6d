package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// dryRun applies each selected mutant to an overlay of the tree (go build -overlay: the tree
// itself is never written, so there is nothing to restore) and checks that the packages it
// edits compile and pass go vet with go test's checks, their tests included (vet type-checks
// the tests too, so a mutant whose package's tests would not compile fails here). YAML edits are
// only applied: no Go reads them at build time.
//
// Only the edited packages are built and vetted, not the mutant's test package elsewhere
// (test/safety, test/admission, ...): a mutant changes statements and expressions inside one
// declaration and never an exported signature, so a package that imports the edited one
// compiles with it as it did before, and vetting those suites cost CI minutes for nothing.
//
// The mutants are checked in batches, one overlay and one go command per batch, because a go
// command per mutant cost CI half an hour (over 200 mutants, each relinking or re-vetting the
// same packages). No two mutants of a batch edit the same top-level declaration of a Go file,
// so none of them shares a function body or an import list with
// another: one could make another compile only by changing a package-level declaration, which
// no mutant does (and make mutants builds each one alone). A batch that fails is checked again
// one mutant at a time, so a failure names its mutant.
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
		dm, err := prepare(m, found)
		if err != nil {
			failed++
			fmt.Printf("%-34s FAILS: %v\n", m.name, err)
			continue
		}
		applied = append(applied, dm)
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

// dryMutant is a mutant with its edits applied: for every Go file it changes, the one span of
// the original file that differs and what replaces it, and the parts of the file that span touches.
type dryMutant struct {
	mutant
	changes map[string]change
}

// change is a mutant's edit of one Go file: bytes [start, end) of the original become repl.
// parts names what it touches: the indexes of the top-level declarations the span overlaps, or
// wholeFile (a span outside every declaration, or a file that does not parse).
type change struct {
	start, end int
	repl       []byte
	parts      []int
}

const wholeFile = -1

// prepare applies m's edits and reduces each edited Go file to its change. A YAML file's edits
// are only applied: no Go reads it at build time, so it takes no part in a batch.
func prepare(m mutant, found map[string]marker) (dryMutant, error) {
	files, err := mutate(".", m, found)
	if err != nil {
		return dryMutant{}, err
	}
	dm := dryMutant{mutant: m, changes: map[string]change{}}
	for f, mutated := range files {
		if !strings.HasSuffix(f, ".go") {
			continue // applied (mutate found its edits), and nothing builds it
		}
		orig, err := os.ReadFile(f)
		if err != nil {
			return dryMutant{}, err
		}
		dm.changes[f] = diff(f, orig, mutated)
	}
	return dm, nil
}

// diff is the change that turns orig into mutated: the span between their common prefix and
// common suffix.
func diff(file string, orig, mutated []byte) change {
	p := 0
	for p < len(orig) && p < len(mutated) && orig[p] == mutated[p] {
		p++
	}
	s := 0
	for s < len(orig)-p && s < len(mutated)-p && orig[len(orig)-1-s] == mutated[len(mutated)-1-s] {
		s++
	}
	c := change{start: p, end: len(orig) - s, repl: slices.Clone(mutated[p : len(mutated)-s])}
	c.parts = declsTouched(file, orig, c.start, c.end)
	return c
}

// declsTouched: the indexes of the top-level declarations of the Go file src that the span
// [start, end) overlaps or borders; wholeFile when it overlaps none.
func declsTouched(file string, src []byte, start, end int) []int {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.SkipObjectResolution)
	if err != nil {
		return []int{wholeFile}
	}
	var parts []int
	for i, d := range f.Decls {
		ds, de := fset.Position(d.Pos()).Offset, fset.Position(d.End()).Offset
		if start <= de && ds <= end {
			parts = append(parts, i)
		}
	}
	if len(parts) == 0 {
		return []int{wholeFile}
	}
	return parts
}

// batch puts each mutant into the first batch none of whose mutants touches a part of a file
// it touches.
func batch(ms []dryMutant) [][]dryMutant {
	var batches [][]dryMutant
	var used []map[string][]change
next:
	for _, m := range ms {
		for i := range batches {
			if !conflicts(m.changes, used[i]) {
				batches[i] = append(batches[i], m)
				for f, c := range m.changes {
					used[i][f] = append(used[i][f], c)
				}
				continue next
			}
		}
		u := map[string][]change{}
		for f, c := range m.changes {
			u[f] = []change{c}
		}
		batches, used = append(batches, []dryMutant{m}), append(used, u)
	}
	return batches
}

// conflicts: a change of cs shares a part, or overlaps the span, of a change already made to
// its file.
func conflicts(cs map[string]change, used map[string][]change) bool {
	for f, c := range cs {
		for _, u := range used[f] {
			if c.start <= u.end && u.start <= c.end {
				return true
			}
			for _, p := range c.parts {
				if p == wholeFile || slices.Contains(u.parts, p) || slices.Contains(u.parts, wholeFile) {
					return true
				}
			}
		}
	}
	return false
}

// apply makes the content of every file the mutants of ms change, all their changes made.
func apply(ms []dryMutant) (map[string][]byte, error) {
	byFile := map[string][]change{}
	for _, m := range ms {
		for f, c := range m.changes {
			byFile[f] = append(byFile[f], c)
		}
	}
	files := map[string][]byte{}
	for f, cs := range byFile {
		src, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		// From the last span to the first, so that each one's offsets still hold.
		slices.SortFunc(cs, func(a, b change) int { return b.start - a.start })
		for _, c := range cs {
			src = slices.Concat(src[:c.start], c.repl, src[c.end:])
		}
		files[f] = src
	}
	return files, nil
}

// checkBuilds overlays the Go files the mutants change (prefix names the overlay's files), compiles
// the packages they edit (a main package is only type-checked, by vet: linking it tells nothing
// more and costs seconds a mutant) and vets them with their tests.
func checkBuilds(ms []dryMutant, wd, prefix string) error {
	files, err := apply(ms)
	if err != nil {
		return err
	}
	replace := map[string]string{}
	pkgs, compile := map[string]bool{}, map[string]bool{}
	for f, b := range files {
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
	if len(pkgs) == 0 {
		return nil
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
	slices.Sort(ks)
	return ks
}

func goCmd(args ...string) (string, error) {
	cmd := exec.Command("go", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}
