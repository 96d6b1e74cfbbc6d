package main

// Markers: every guard a mutant takes out is named in the code, as gofail's failpoints are. A
// marker is a comment line of its own, directly above the guarded statement(s):
//
//	<indentation>// guard:<name>     in a non-test .go file
//	<indentation># guard:<name>      in a .yaml file (the admission policies under config/)
//
// A name is lower-case letters, digits and '-', with an optional "/N" suffix for a mutant's
// second, third... edit (no-finalizer, no-finalizer/2).
//
// The region a marker marks (the only text its edit may change) is the lines after it, up to
// but not including the first of:
//
//   - a blank line,
//   - a line indented less than the marker (the closing brace of the block the marker is in,
//     or the end of the YAML item it is in),
//   - another marker that is not part of the marker's own stack,
//   - the end of the file.
//
// Several markers on consecutive lines form a stack: they all mark the region below the last
// of them (two mutants that take out the same guard, each seen by a different suite).
//
// The tool fails loudly when a marker is missing or named twice in the repository, when an
// edit's old text is not in its marker's region or is there more than once, and when a marker
// in the code is named by no mutant (a marker cannot outlive its mutant).

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// markerName is what may follow "guard:".
var markerName = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*(/[0-9]+)?$`)

// marker is one marker comment found in the code.
type marker struct {
	name string
	file string // relative to the repository root, with '/'
	line int    // 1-based line of the marker comment
	// start and end are the byte offsets of the region it marks in the file: [start, end).
	start, end int
}

// markerPrefix returns the comment that starts a marker in a file of this name, or "" if the
// file cannot hold markers.
func markerPrefix(path string) string {
	switch {
	case strings.HasSuffix(path, "_test.go"):
		return ""
	case strings.HasSuffix(path, ".go"):
		return "// guard:"
	case strings.HasSuffix(path, ".yaml"), strings.HasSuffix(path, ".yml"):
		return "# guard:"
	}
	return ""
}

// skipDir: directories that hold no source of the project (build outputs, VCS, fixtures).
func skipDir(name string) bool {
	return name != "." && (strings.HasPrefix(name, ".") || name == "bin" || name == "vendor" ||
		name == "testdata" || name == "node_modules")
}

// findMarkers walks the repository at root and returns every marker by name. A name found
// twice, or a malformed marker, is an error.
func findMarkers(root string) (map[string]marker, error) {
	found := map[string]marker{}
	var problems []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skipDir(d.Name()) && path != root {
				return filepath.SkipDir
			}
			return nil
		}
		prefix := markerPrefix(d.Name())
		if prefix == "" {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !bytes.Contains(src, []byte(prefix)) {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		ms, err := markersIn(filepath.ToSlash(rel), src, prefix)
		if err != nil {
			problems = append(problems, err.Error())
			return nil
		}
		for _, m := range ms {
			if was, dup := found[m.name]; dup {
				problems = append(problems, fmt.Sprintf("marker guard:%s is in %s:%d and %s:%d: a marker must be unique", m.name, was.file, was.line, m.file, m.line))
				continue
			}
			found[m.name] = m
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return nil, fmt.Errorf("%s", strings.Join(problems, "\n"))
	}
	return found, nil
}

// line is one line of a file: its text without the newline, and where it starts and ends
// (the end includes the newline).
type line struct {
	text       string
	start, end int
}

func splitLines(src []byte) []line {
	var ls []line
	for off := 0; off < len(src); {
		n := bytes.IndexByte(src[off:], '\n')
		end := off + n + 1
		if n < 0 {
			end = len(src)
		}
		ls = append(ls, line{text: strings.TrimRight(string(src[off:end]), "\r\n"), start: off, end: end})
		off = end
	}
	return ls
}

func indentation(s string) string { return s[:len(s)-len(strings.TrimLeft(s, " \t"))] }

// markerAt returns the marker name on the line, whether the line is a marker, and an error for
// a line that starts like a marker but names nothing valid.
func markerAt(text, prefix string) (string, bool, error) {
	t := strings.TrimSpace(text)
	if !strings.HasPrefix(t, prefix) {
		return "", false, nil
	}
	name := strings.TrimPrefix(t, prefix)
	if !markerName.MatchString(name) {
		return "", false, fmt.Errorf("malformed marker %q (want %s<name>, name %s)", t, prefix, markerName)
	}
	return name, true, nil
}

// markersIn finds the markers of one file and the region each marks (see the rule at the top).
func markersIn(file string, src []byte, prefix string) ([]marker, error) {
	ls := splitLines(src)
	var out []marker
	for i := 0; i < len(ls); i++ {
		name, ok, err := markerAt(ls[i].text, prefix)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", file, i+1, err)
		}
		if !ok {
			continue
		}
		// The stack: this marker and the markers on the lines right below it.
		stack := []marker{{name: name, file: file, line: i + 1}}
		indent := indentation(ls[i].text)
		j := i + 1
		for ; j < len(ls); j++ {
			n, ok, err := markerAt(ls[j].text, prefix)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", file, j+1, err)
			}
			if !ok {
				break
			}
			if indentation(ls[j].text) != indent {
				return nil, fmt.Errorf("%s:%d: marker guard:%s is stacked on guard:%s at another indentation", file, j+1, n, name)
			}
			stack = append(stack, marker{name: n, file: file, line: j + 1})
		}
		start, end := len(src), len(src)
		if j < len(ls) {
			start = ls[j].start
			end = start
		}
		for k := j; k < len(ls); k++ {
			t := ls[k].text
			if strings.TrimSpace(t) == "" || len(indentation(t)) < len(indent) {
				break
			}
			if _, isMarker, _ := markerAt(t, prefix); isMarker {
				break
			}
			end = ls[k].end
		}
		if start == end {
			return nil, fmt.Errorf("%s:%d: marker guard:%s marks nothing (it must be directly above the guarded statement)", file, i+1, name)
		}
		for _, m := range stack {
			m.start, m.end = start, end
			out = append(out, m)
		}
		i = j - 1
	}
	return out, nil
}

// region returns the text a marker marks, read from src (the file's current content).
func (m marker) region(src []byte) string { return string(src[m.start:m.end]) }

// applyEdit replaces e.old with e.new inside the region of its marker in src. old must occur
// exactly once in the region. It returns the file's new content.
func applyEdit(src []byte, m marker, e edit) ([]byte, error) {
	r := m.region(src)
	switch n := strings.Count(r, e.old); n {
	case 1:
	case 0:
		return nil, fmt.Errorf("%s:%d: guard:%s: %q is not in the marked region:\n%s", m.file, m.line, m.name, e.old, r)
	default:
		return nil, fmt.Errorf("%s:%d: guard:%s: %q occurs %d times in the marked region, want once", m.file, m.line, m.name, e.old, n)
	}
	out := make([]byte, 0, len(src)+len(e.new))
	out = append(out, src[:m.start]...)
	out = append(out, strings.Replace(r, e.old, e.new, 1)...)
	return append(out, src[m.end:]...), nil
}

// checkMarkers: every marker a mutant names is in the code, every marker in the code is named
// by a mutant, and a mutant names only its own markers (its name, or its name/N).
func checkMarkers(ms []mutant, found map[string]marker) error {
	var problems []string
	named := map[string]bool{}
	for _, m := range ms {
		if len(m.edits) == 0 {
			problems = append(problems, fmt.Sprintf("mutant %s has no edit", m.name))
		}
		for _, e := range m.edits {
			if e.marker != m.name && !strings.HasPrefix(e.marker, m.name+"/") {
				problems = append(problems, fmt.Sprintf("mutant %s names marker guard:%s: a mutant's markers are its name or its name/N", m.name, e.marker))
			}
			if named[e.marker] {
				problems = append(problems, fmt.Sprintf("marker guard:%s is named by two edits", e.marker))
			}
			named[e.marker] = true
			if _, ok := found[e.marker]; !ok {
				problems = append(problems, fmt.Sprintf("mutant %s: marker guard:%s is not in the code (a refactor dropped it: put it back above the guard)", m.name, e.marker))
			}
		}
	}
	for name, mk := range found {
		if !named[name] {
			problems = append(problems, fmt.Sprintf("%s:%d: marker guard:%s is named by no mutant (add the mutant to hack/mutants or remove the marker)", mk.file, mk.line, name))
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return fmt.Errorf("%s", strings.Join(problems, "\n"))
	}
	return nil
}
