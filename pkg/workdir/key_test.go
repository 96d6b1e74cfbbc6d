package workdir

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestKeyString(t *testing.T) {
	cases := map[string]struct {
		key  Key
		want string
	}{
		"guard":            {key: Key{Repo: "acme/infra", Pull: 12, Workspace: "default", Path: "modules/vpc"}, want: "acme/infra#12/default/modules/vpc"},
		"repository root":  {key: Key{Repo: "acme/infra", Pull: 12, Workspace: "default", Path: "."}, want: "acme/infra#12/default/."},
		"pull scope":       {key: Key{Repo: "acme/infra", Pull: 12}, want: "acme/infra#12"},
		"workspace scope":  {key: Key{Repo: "acme/infra", Pull: 12, Workspace: "staging"}, want: "acme/infra#12/staging"},
		"path in every ws": {key: Key{Repo: "acme/infra", Pull: 12, Path: "modules"}, want: "acme/infra#12/*/modules"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.key.String(); got != tc.want {
				t.Errorf("String() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestKeyGuardKey(t *testing.T) {
	base := Key{Repo: "acme/infra", Pull: 12, Workspace: "default"}
	with := func(p string) Key { k := base; k.Path = p; return k }
	cases := map[string]struct {
		key     Key
		want    Key
		wantErr bool
	}{
		"clean path kept":        {key: with("modules/vpc"), want: with("modules/vpc")},
		"dot slash cleaned":      {key: with("./modules/vpc"), want: with("modules/vpc")},
		"trailing slash cleaned": {key: with("modules/vpc/"), want: with("modules/vpc")},
		"root":                   {key: with("."), want: with(".")},
		"root spelled ./":        {key: with("./"), want: with(".")},
		"dotdot inside repo":     {key: with("modules/../envs"), want: with("envs")},
		"escapes repo":           {key: with("../other"), wantErr: true},
		"absolute":               {key: with("/etc"), wantErr: true},
		"empty path":             {key: with(""), wantErr: true},
		"no workspace":           {key: Key{Repo: "acme/infra", Pull: 12, Path: "."}, wantErr: true},
		"no repo":                {key: Key{Pull: 12, Workspace: "default", Path: "."}, wantErr: true},
		"negative pull":          {key: Key{Repo: "acme/infra", Pull: -1, Workspace: "default", Path: "."}, wantErr: true},
		"pull zero allowed":      {key: Key{Repo: "acme/infra", Workspace: "default", Path: "."}, want: Key{Repo: "acme/infra", Workspace: "default", Path: "."}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := tc.key.guardKey()
			if (err != nil) != tc.wantErr {
				t.Fatalf("guardKey() error = %v, wantErr %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("guardKey() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestKeyOverlaps(t *testing.T) {
	k := func(pull int64, ws, p string) Key { return Key{Repo: "acme/infra", Pull: pull, Workspace: ws, Path: p} }
	cases := map[string]struct {
		scope, key Key
		want       bool
	}{
		"whole pull":                  {scope: k(12, "", ""), key: k(12, "default", "modules/vpc"), want: true},
		"other pull":                  {scope: k(12, "", ""), key: k(13, "default", "."), want: false},
		"other repo":                  {scope: Key{Repo: "acme/app", Pull: 12}, key: k(12, "default", "."), want: false},
		"same workspace":              {scope: k(12, "default", ""), key: k(12, "default", "a"), want: true},
		"other workspace":             {scope: k(12, "staging", ""), key: k(12, "default", "a"), want: false},
		"path in every workspace":     {scope: k(12, "", "a"), key: k(12, "staging", "a/b"), want: true},
		"directory contains guard":    {scope: k(12, "default", "modules"), key: k(12, "default", "modules/vpc"), want: true},
		"guard contains directory":    {scope: k(12, "default", "modules/vpc"), key: k(12, "default", "modules"), want: true},
		"root contains everything":    {scope: k(12, "default", "."), key: k(12, "default", "modules/vpc"), want: true},
		"guard at root":               {scope: k(12, "default", "modules/vpc"), key: k(12, "default", "."), want: true},
		"sibling sharing a prefix":    {scope: k(12, "default", "modules/vpc"), key: k(12, "default", "modules/vpc2"), want: false},
		"sibling directories":         {scope: k(12, "default", "modules/a"), key: k(12, "default", "modules/b"), want: false},
		"same directory":              {scope: k(12, "default", "modules/a"), key: k(12, "default", "modules/a"), want: true},
		"workspace differs, same dir": {scope: k(12, "staging", "modules/a"), key: k(12, "default", "modules/a"), want: false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.scope.overlaps(tc.key); got != tc.want {
				t.Errorf("%s overlaps %s = %v, want %v", tc.scope, tc.key, got, tc.want)
			}
			if got := tc.key.overlaps(tc.scope); got != tc.want {
				t.Errorf("overlap is not symmetric: %s overlaps %s = %v, want %v", tc.key, tc.scope, got, tc.want)
			}
		})
	}
}
