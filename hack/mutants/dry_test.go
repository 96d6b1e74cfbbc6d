package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestBatchKeepsFilesApart(t *testing.T) {
	m := func(name string, files ...string) dryMutant {
		dm := dryMutant{mutant: mutant{name: name}, files: map[string][]byte{}}
		for _, f := range files {
			dm.files[f] = nil
		}
		return dm
	}
	got := batch([]dryMutant{m("a", "x.go"), m("b", "x.go", "y.go"), m("c", "y.go"), m("d", "z.go"), m("e", "x.go")})
	var names [][]string
	for _, b := range got {
		var ns []string
		for _, dm := range b {
			ns = append(ns, dm.name)
		}
		names = append(names, ns)
	}
	want := [][]string{{"a", "c", "d"}, {"b"}, {"e"}}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("batches (-want +got):\n%s", diff)
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
