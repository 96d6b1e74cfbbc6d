package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Mutants share a batch unless they touch a declaration of one Go file.
func TestBatchKeepsDeclarationsApart(t *testing.T) {
	type touch struct {
		file       string
		start, end int
		parts      []int
	}
	m := func(name string, ts ...touch) dryMutant {
		dm := dryMutant{mutant: mutant{name: name}, changes: map[string]change{}}
		for _, tc := range ts {
			dm.changes[tc.file] = change{start: tc.start, end: tc.end, parts: tc.parts}
		}
		return dm
	}
	got := batch([]dryMutant{
		m("a", touch{"x.go", 10, 12, []int{1}}),
		m("b", touch{"x.go", 50, 52, []int{3}}, touch{"y.go", 5, 6, []int{wholeFile}}),
		m("c", touch{"x.go", 11, 11, []int{1}}),                                      // a's declaration
		m("d", touch{"y.go", 90, 91, []int{0}}),                                      // b's whole y.go
		m("e", touch{"x.go", 20, 60, []int{1, 2, 3}}),                                // spans a's and b's
		m("f", touch{"x.go", 0, 2, []int{wholeFile}}, touch{"z.go", 1, 2, []int{0}}), // outside every declaration
		m("g", touch{"z.go", 30, 31, []int{4}}),
	})
	var names [][]string
	for _, b := range got {
		var ns []string
		for _, dm := range b {
			ns = append(ns, dm.name)
		}
		names = append(names, ns)
	}
	want := [][]string{{"a", "b", "g"}, {"c", "d"}, {"e"}, {"f"}}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("batches (-want +got):\n%s", diff)
	}
}

// A mutant's change is the one span that differs, and the declarations it touches.
func TestDiff(t *testing.T) {
	src := "package p\n\nimport \"fmt\"\n\nfunc a() { fmt.Println(1) }\n\nfunc b() int { return 2 }\n"
	for _, tc := range []struct {
		name, old, new string
		want           []int
	}{
		{"in a function", "return 2", "return 3", []int{2}},
		{"in the imports", `"fmt"`, `"fmt"; _ "os"`, []int{0}},
		{"between declarations", "\n\nfunc b", "\n// b\nfunc b", []int{wholeFile}},
		{"the package clause", "package p", "package q", []int{wholeFile}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mutated := strings.Replace(src, tc.old, tc.new, 1)
			c := diff("p.go", []byte(src), []byte(mutated))
			if diff := cmp.Diff(tc.want, c.parts); diff != "" {
				t.Errorf("parts (-want +got):\n%s", diff)
			}
			got := src[:c.start] + string(c.repl) + src[c.end:]
			if got != mutated {
				t.Errorf("the change makes\n%s\nwant\n%s", got, mutated)
			}
		})
	}
}

func TestIsMain(t *testing.T) {
	for src, want := range map[string]bool{
		"// Command x.\npackage main\n":    true,
		"package mainly\n":                 false,
		"package controller\n\nfunc f(){}": false,
	} {
		if got := isMain([]byte(src)); got != want {
			t.Errorf("isMain(%q) = %v, want %v", src, got, want)
		}
	}
}
