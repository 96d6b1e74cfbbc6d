package lockkey

import (
	"regexp"
	"testing"

	"github.com/google/go-cmp/cmp"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

func TestStringAndName(t *testing.T) {
	cases := map[string]struct {
		tc       locksv1.LockTarget
		wantKey  string
		wantName string
	}{
		"defaults filled": {
			tc:       locksv1.LockTarget{Repo: "acme/infra"},
			wantKey:  "acme/infra/./default",
			wantName: "acme-infra-default-",
		},
		"project is part of the key": {
			tc:       locksv1.LockTarget{Repo: "acme/infra", Path: "modules/vpc", Workspace: "prod", Project: "edge"},
			wantKey:  "acme/infra/modules/vpc/prod/edge",
			wantName: "acme-infra-modules-vpc-prod-edge-",
		},
		"punctuation collapses": {
			tc:       locksv1.LockTarget{Repo: "Acme/Infra.Live", Path: "a__b/c", Workspace: "default"},
			wantKey:  "Acme/Infra.Live/a__b/c/default",
			wantName: "acme-infra-live-a-b-c-default-",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.wantKey, String(tc.tc)); diff != "" {
				t.Errorf("String() mismatch (-want +got):\n%s", diff)
			}
			got := Name(tc.tc)
			if len(got) != len(tc.wantName)+hashLen || got[:len(tc.wantName)] != tc.wantName {
				t.Errorf("Name() = %q, want prefix %q and a %d-char hash", got, tc.wantName, hashLen)
			}
			if !dnsLabel.MatchString(got) {
				t.Errorf("Name() = %q is not a DNS label", got)
			}
		})
	}
}

// TestNormalizeCleansPath: one directory has one key however it is spelled, and the key is
// the one the API would store (it admits only clean paths, "." for the root).
func TestNormalizeCleansPath(t *testing.T) {
	cases := map[string]struct {
		path     string
		wantPath string
	}{
		"unset is the root":           {path: "", wantPath: "."},
		"the root":                    {path: ".", wantPath: "."},
		"the root with a slash":       {path: "./", wantPath: "."},
		"clean path unchanged":        {path: "modules/vpc", wantPath: "modules/vpc"},
		"inner . segment":             {path: "a/./b", wantPath: "a/b"},
		"leading . segment":           {path: "./modules/vpc", wantPath: "modules/vpc"},
		"trailing slash":              {path: "modules/vpc/", wantPath: "modules/vpc"},
		"empty segment":               {path: "a//b", wantPath: "a/b"},
		"trailing . segment":          {path: "a/b/.", wantPath: "a/b"},
		"dotted directory names":      {path: ".github/v1.2", wantPath: ".github/v1.2"},
		"inner .. resolves lexically": {path: "a/x/../b", wantPath: "a/b"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			in := locksv1.LockTarget{Repo: "acme/infra", Path: tc.path}
			want := locksv1.LockTarget{Repo: "acme/infra", Path: tc.wantPath, Workspace: DefaultWorkspace}
			if diff := cmp.Diff(want, Normalize(in)); diff != "" {
				t.Errorf("Normalize() mismatch (-want +got):\n%s", diff)
			}
			if got, wantKey := String(in), String(want); got != wantKey {
				t.Errorf("String() = %q, want %q", got, wantKey)
			}
			if got, wantName := Name(in), Name(want); got != wantName {
				t.Errorf("Name() = %q, want %q (the clean path's lock)", got, wantName)
			}
			if Less(in, want) || Less(want, in) {
				t.Errorf("%q and %q order apart", tc.path, tc.wantPath)
			}
		})
	}
}

func TestNameDistinguishesKeys(t *testing.T) {
	// Each pair renders to the same readable prefix; the hash must still tell them apart.
	pairs := [][2]locksv1.LockTarget{
		{{Repo: "acme/infra", Path: "a/b", Workspace: "c"}, {Repo: "acme/infra", Path: "a", Workspace: "b-c"}},
		{{Repo: "acme/Infra"}, {Repo: "acme/infra"}},
		{{Repo: "acme/infra", Project: "x"}, {Repo: "acme/infra", Workspace: "default-x"}},
	}
	for _, p := range pairs {
		if Name(p[0]) == Name(p[1]) {
			t.Errorf("Name(%v) == Name(%v) = %q", p[0], p[1], Name(p[0]))
		}
	}
}

func TestNameLongKeyFits(t *testing.T) {
	long := locksv1.LockTarget{Repo: "acme/" + string(make([]byte, 0)) + "a-very-long-repository-name-that-goes-on", Path: "modules/networking/transit-gateway/attachments/us-east-1", Workspace: "production-blue"}
	got := Name(long)
	if len(got) > maxNameLen || !dnsLabel.MatchString(got) {
		t.Fatalf("Name() = %q (%d chars), want a DNS label of at most %d", got, len(got), maxNameLen)
	}
}

func TestRefsCanonicalOrder(t *testing.T) {
	targets := []locksv1.LockTarget{
		{Repo: "acme/infra", Path: "z"},
		{Repo: "acme/app", Path: "b"},
		{Repo: "acme/infra", Path: "a"},
	}
	var got []int
	for _, r := range Refs(targets) {
		got = append(got, r.Index)
	}
	if diff := cmp.Diff([]int{1, 2, 0}, got); diff != "" {
		t.Errorf("Refs() order mismatch (-want +got):\n%s", diff)
	}
	// Any permutation of the same targets yields the same order of keys.
	rev := []locksv1.LockTarget{targets[2], targets[1], targets[0]}
	var a, b []string
	for _, r := range Refs(targets) {
		a = append(a, r.Key)
	}
	for _, r := range Refs(rev) {
		b = append(b, r.Key)
	}
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("canonical order depends on spec order (-a +b):\n%s", diff)
	}
}
