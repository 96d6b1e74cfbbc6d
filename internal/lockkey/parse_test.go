package lockkey

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

func TestParse(t *testing.T) {
	for name, tc := range map[string]struct {
		key     string
		want    locksv1.LockTarget
		wantErr string
	}{
		"repo and path, the workspace defaulted": {key: "acme/infra:modules/vpc", want: locksv1.LockTarget{Repo: "acme/infra", Path: "modules/vpc", Workspace: "default"}},
		"every part":                             {key: "acme/infra:.:prod:web", want: locksv1.LockTarget{Repo: "acme/infra", Path: ".", Workspace: "prod", Project: "web"}},
		"an empty workspace is the default":      {key: "acme/infra:vpc::web", want: locksv1.LockTarget{Repo: "acme/infra", Path: "vpc", Workspace: "default", Project: "web"}},
		"an empty project is none":               {key: "acme/infra:vpc:prod:", want: locksv1.LockTarget{Repo: "acme/infra", Path: "vpc", Workspace: "prod"}},
		"a nested group, a comma in the path":    {key: "gitlab/group/repo:a,b", want: locksv1.LockTarget{Repo: "gitlab/group/repo", Path: "a,b", Workspace: "default"}},
		"no path":                                {key: "acme/infra", wantErr: `"acme/infra": want REPO:PATH[:WORKSPACE[:PROJECT]], e.g. acme/infra:modules/vpc:default`},
		"too many parts":                         {key: "a/b:c:d:e:f", wantErr: `"a/b:c:d:e:f": want REPO:PATH`},
		"a repo without its owner":               {key: "infra:vpc", wantErr: `"infra:vpc": repo must be owner/name`},
		"a dot segment in the repo":              {key: "acme/..:vpc", wantErr: "repo must not contain '.' or '..' segments"},
		"a repo too long":                        {key: "a/" + strings.Repeat("r", 199) + ":vpc", wantErr: "repo must be 3 to 200 characters, not 201"},
		"an absolute path":                       {key: "acme/infra:/vpc", wantErr: "path must be relative to the repository root"},
		"a path out of the repository":           {key: "acme/infra:../etc", wantErr: "path must not contain '.' or '..' segments"},
		"a trailing slash":                       {key: "acme/infra:vpc/", wantErr: "path must be slash-separated directory names"},
		"a path too long":                        {key: "acme/infra:" + strings.Repeat("p", 254), wantErr: "path must be 1 to 253 characters, not 254"},
		"a workspace starting with a dot":        {key: "acme/infra:vpc:.prod", wantErr: "workspace must be letters, digits"},
		"a workspace too long":                   {key: "acme/infra:vpc:" + strings.Repeat("w", 64), wantErr: "workspace must be at most 63 characters, not 64"},
		"a project with a slash":                 {key: "acme/infra:vpc:prod:a/b", wantErr: "project must be letters, digits"},
		"a project too long":                     {key: "acme/infra:vpc:prod:" + strings.Repeat("p", 64), wantErr: "project must be at most 63 characters, not 64"},
		"not ASCII":                              {key: "acme/infra:vpc:prød", wantErr: "workspace must be letters, digits"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := Parse(tc.key)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse(%q) = %+v, %v; want an error containing %q", tc.key, got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Parse(%q) (-want +got):\n%s", tc.key, diff)
			}
		})
	}
}

func TestParseList(t *testing.T) {
	got, err := ParseList(" acme/infra:a,acme/infra:b:prod\tacme/infra:c::web\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []locksv1.LockTarget{
		{Repo: "acme/infra", Path: "a", Workspace: "default"},
		{Repo: "acme/infra", Path: "b", Workspace: "prod"},
		{Repo: "acme/infra", Path: "c", Workspace: "default", Project: "web"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseList (-want +got):\n%s", diff)
	}
	for value, wantErr := range map[string]string{
		" , ":            "names no lock",
		"acme/infra:a\r": `"acme/infra:a\r": path must be slash-separated`, // a carriage return separates nothing, as in the policy
		"a/b:c, :d":      `":d": want REPO:PATH`,
	} {
		if _, err := ParseList(value); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("ParseList(%q) error %v, want one containing %q", value, err, wantErr)
		}
	}
}
