package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// regions maps each marker of src to the text it marks.
func regions(t *testing.T, src string) map[string]string {
	t.Helper()
	ms, err := markersIn("x.go", []byte(src), "// guard:")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, m := range ms {
		got[m.name] = m.region([]byte(src))
	}
	return got
}

func TestRegionRule(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      map[string]string
	}{{
		name: "ends at a blank line",
		src:  "func f() {\n\t// guard:a\n\tif x {\n\t\treturn\n\t}\n\ty()\n\n\tz()\n}\n",
		want: map[string]string{"a": "\tif x {\n\t\treturn\n\t}\n\ty()\n"},
	}, {
		name: "ends at the closing brace of its block",
		src:  "func f() {\n\tif x {\n\t\t// guard:a\n\t\ty()\n\t}\n\tz()\n}\n",
		want: map[string]string{"a": "\t\ty()\n"},
	}, {
		name: "ends at the next marker",
		src:  "func f() {\n\t// guard:a\n\ty()\n\t// guard:b\n\tz()\n}\n",
		want: map[string]string{"a": "\ty()\n", "b": "\tz()\n"},
	}, {
		name: "a stack marks the region below it",
		src:  "func f() {\n\t// guard:a\n\t// guard:a-too/2\n\ty()\n}\n",
		want: map[string]string{"a": "\ty()\n", "a-too/2": "\ty()\n"},
	}, {
		name: "a case clause runs to the end of its switch",
		src:  "\tswitch {\n\t// guard:a\n\tcase x:\n\t\ty()\n\tcase z:\n\t}\n",
		want: map[string]string{"a": "\tcase x:\n\t\ty()\n\tcase z:\n\t}\n"},
	}, {
		name: "ends at the end of the file",
		src:  "// guard:a\nvar x = 1",
		want: map[string]string{"a": "var x = 1"},
	}, {
		name: "an ordinary comment mentioning guards is no marker",
		src:  "// the guard: below\n// guards:a\nvar x = 1\n",
		want: map[string]string{},
	}} {
		if diff := cmp.Diff(tc.want, regions(t, tc.src)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

func TestMarkerErrors(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"marks nothing: a blank line below", "// guard:a\n\nvar x = 1\n", "marks nothing"},
		{"marks nothing: the block closes below", "func f() {\n\t// guard:a\n}\n", "marks nothing"},
		{"marks nothing: end of file", "var x = 1\n// guard:a\n", "marks nothing"},
		{"malformed name", "// guard:Not_A_Name\nvar x = 1\n", "malformed marker"},
		{"text after the name", "// guard:a because\nvar x = 1\n", "malformed marker"},
		{"stacked at another indentation", "\t// guard:a\n// guard:b\nvar x = 1\n", "another indentation"},
	} {
		_, err := markersIn("x.go", []byte(tc.src), "// guard:")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.want)
		}
	}
}

// tree writes files (path: content) under a temporary directory and returns it.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, s := range files {
		f := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestFindMarkers(t *testing.T) {
	root := tree(t, map[string]string{
		"a/a.go":                 "package a\n\n// guard:go-marker\nvar x = 1\n",
		"a/a_test.go":            "package a\n\n// guard:in-a-test\nvar y = 1\n",
		"config/policy.yaml":     "rules:\n# guard:yaml-marker\n- expression: \"true\"\n",
		"bin/x.go":               "// guard:in-bin\nvar z = 1\n",
		"a/testdata/x.go":        "// guard:in-testdata\nvar z = 1\n",
		"a/notes.md":             "// guard:in-markdown\ntext\n",
		".hidden/x.go":           "// guard:hidden\nvar z = 1\n",
		"config/yaml-in-go.yaml": "// guard:wrong-comment\nx: 1\n",
	})
	found, err := findMarkers(root)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for name, m := range found {
		got[name] = m.file
	}
	want := map[string]string{"go-marker": "a/a.go", "yaml-marker": "config/policy.yaml"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("markers found (-want +got):\n%s", diff)
	}
}

func TestFindMarkersDuplicate(t *testing.T) {
	root := tree(t, map[string]string{
		"a/a.go": "package a\n\n// guard:twice\nvar x = 1\n",
		"b/b.go": "package b\n\n// guard:twice\nvar y = 1\n",
	})
	_, err := findMarkers(root)
	if err == nil || !strings.Contains(err.Error(), "a/a.go:3 and b/b.go:3") {
		t.Errorf("error %v, want the duplicated marker named with both places", err)
	}
}

func TestCheckMarkers(t *testing.T) {
	found := map[string]marker{"m": {name: "m", file: "a.go", line: 3}, "m/2": {name: "m/2", file: "a.go", line: 9}, "stray": {name: "stray", file: "b.go", line: 5}}
	ms := []mutant{
		{name: "m", edits: []edit{{marker: "m"}, {marker: "m/2"}}},
		{name: "gone", edits: []edit{{marker: "gone"}}},
		{name: "thief", edits: []edit{{marker: "m"}}},
	}
	err := checkMarkers(ms, found)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		"marker guard:gone is not in the code",
		"b.go:5: marker guard:stray is named by no mutant",
		"mutant thief names marker guard:m",
		"marker guard:m is named by two edits",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if err := checkMarkers(ms[:1], map[string]marker{"m": found["m"], "m/2": found["m/2"]}); err != nil {
		t.Errorf("a mutant naming its own markers: %v", err)
	}
}

func TestMutate(t *testing.T) {
	src := "package a\n\nfunc f() {\n\t// guard:m\n\tif x {\n\t\ty()\n\t}\n\n\t// guard:m/2\n\tif x {\n\t\tz()\n\t}\n}\n"
	root := tree(t, map[string]string{"a/a.go": src})
	found, err := findMarkers(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		edits []edit
		want  string // the mutated file, or the error's text
	}{{
		name: "edits in order, the second where the first left its marker",
		// The first edit adds lines, so the second marker moves down.
		edits: []edit{{"m", "\tif x {\n", "\tif true {\n\t\tw()\n"}, {"m/2", "if x {", "if false {"}},
		want:  "package a\n\nfunc f() {\n\t// guard:m\n\tif true {\n\t\tw()\n\t\ty()\n\t}\n\n\t// guard:m/2\n\tif false {\n\t\tz()\n\t}\n}\n",
	}, {
		name:  "old text outside its region (it is in the other marker's)",
		edits: []edit{{"m", "z()", "_ = 0"}},
		want:  "is not in the marked region",
	}, {
		name:  "old text twice in its region",
		edits: []edit{{"m", "\t", ""}},
		want:  "occurs 4 times in the marked region",
	}} {
		files, err := mutate(root, mutant{name: "m", edits: tc.edits}, found)
		got := ""
		if err != nil {
			got = err.Error()
		} else {
			got = string(files["a/a.go"])
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("%s: got\n%s\nwant it to contain\n%s", tc.name, got, tc.want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(root, "a/a.go")); err != nil || string(b) != src {
		t.Errorf("mutate wrote the tree: %q, %v", b, err)
	}
}

// TestEveryMutantApplies: the repository's markers check, and every mutant's edits apply (the
// quick half of make mutants-dry, which also builds each mutant).
func TestEveryMutantApplies(t *testing.T) {
	root := filepath.Join("..", "..")
	found, err := findMarkers(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkMarkers(mutants, found); err != nil {
		t.Fatal(err)
	}
	for _, m := range mutants {
		if _, err := mutate(root, m, found); err != nil {
			t.Errorf("mutant %s: %v", m.name, err)
		}
	}
}
