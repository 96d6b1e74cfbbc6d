package ci

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func atlantisEnv(over map[string]string) map[string]string {
	m := map[string]string{
		"BASE_REPO_OWNER": "acme", "BASE_REPO_NAME": "infra", "REPO_REL_DIR": "modules/vpc", "WORKSPACE": "staging",
		"PROJECT_NAME": "vpc", "PULL_NUM": "100", "PULL_AUTHOR": "alice", "PULL_URL": "https://github.com/acme/infra/pull/100",
		"COMMAND_NAME": "apply",
	}
	for k, v := range over {
		if v == "" {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	return m
}

func TestFromAtlantis(t *testing.T) {
	for name, tc := range map[string]struct {
		env     map[string]string
		want    Request
		wantErr string
	}{
		"every variable": {
			env: atlantisEnv(nil),
			want: Request{
				Target:  &locksv1.LockTarget{Repo: "acme/infra", Path: "modules/vpc", Workspace: "staging", Project: "vpc"},
				Holder:  locksv1.Holder{Owner: "alice", Pull: 100, URL: "https://github.com/acme/infra/pull/100"},
				Command: "apply", Prefix: "atlantis-100-",
			},
		},
		"an unnamed project at the root; a command with _": {
			env: atlantisEnv(map[string]string{"PROJECT_NAME": "", "REPO_REL_DIR": ".", "COMMAND_NAME": "state_rm"}),
			want: Request{
				Target:  &locksv1.LockTarget{Repo: "acme/infra", Path: ".", Workspace: "staging"},
				Holder:  locksv1.Holder{Owner: "alice", Pull: 100, URL: "https://github.com/acme/infra/pull/100"},
				Command: "state-rm", Prefix: "atlantis-100-",
			},
		},
		"missing variables are all named": {
			env:     atlantisEnv(map[string]string{"BASE_REPO_OWNER": "", "PULL_AUTHOR": ""}),
			wantErr: "--from atlantis: BASE_REPO_OWNER, PULL_AUTHOR not set; Atlantis sets them in the run steps of a workflow (repos.yaml); see docs/atlantis.md",
		},
		"a pull number that is none": {
			env:     atlantisEnv(map[string]string{"PULL_NUM": "abc"}),
			wantErr: `--from atlantis: PULL_NUM="abc" is not a pull request number`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := FromEnv(Atlantis, envOf(tc.env))
			checkCI(t, tc.want, got, tc.wantErr, err)
		})
	}
}

func TestFromGitHubActions(t *testing.T) {
	dir := t.TempDir()
	event := func(name, payload string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(payload), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pr := event("pr.json", `{"pull_request": {"number": 7, "html_url": "https://github.com/acme/infra/pull/7", "user": {"login": "alice"}}}`)
	push := event("push.json", `{"ref": "refs/heads/main"}`)
	root := &locksv1.LockTarget{Repo: "acme/infra", Path: ".", Workspace: "default"}
	for name, tc := range map[string]struct {
		env     map[string]string
		want    Request
		wantErr string
	}{
		"a pull_request job: the pull from GITHUB_REF, the author from the event": {
			env:  map[string]string{"GITHUB_REPOSITORY": "acme/infra", "GITHUB_ACTOR": "pusher", "GITHUB_REF": "refs/pull/7/merge", "GITHUB_EVENT_PATH": pr},
			want: Request{Target: root, Holder: locksv1.Holder{Owner: "alice", Pull: 7, URL: "https://github.com/acme/infra/pull/7"}, Prefix: "gha-7-"},
		},
		"a pull_request_target job: the pull from the event": {
			env:  map[string]string{"GITHUB_REPOSITORY": "acme/infra", "GITHUB_ACTOR": "pusher", "GITHUB_REF": "refs/heads/main", "GITHUB_EVENT_PATH": pr},
			want: Request{Target: root, Holder: locksv1.Holder{Owner: "alice", Pull: 7, URL: "https://github.com/acme/infra/pull/7"}, Prefix: "gha-7-"},
		},
		"no event payload: GITHUB_ACTOR and a URL built from the pull": {
			env: map[string]string{"GITHUB_REPOSITORY": "acme/infra", "GITHUB_ACTOR": "bob", "GITHUB_REF": "refs/pull/12/head",
				"GITHUB_SERVER_URL": "https://ghe.example.com"},
			want: Request{Target: root, Holder: locksv1.Holder{Owner: "bob", Pull: 12, URL: "https://ghe.example.com/acme/infra/pull/12"}, Prefix: "gha-12-"},
		},
		"a push: no pull, the run's URL": {
			env:  map[string]string{"GITHUB_REPOSITORY": "acme/infra", "GITHUB_ACTOR": "bob", "GITHUB_REF": "refs/heads/main", "GITHUB_EVENT_PATH": push, "GITHUB_RUN_ID": "42"},
			want: Request{Target: root, Holder: locksv1.Holder{Owner: "bob", URL: "https://github.com/acme/infra/actions/runs/42"}, Prefix: "gha-"},
		},
		"missing variables are all named": {
			env:     map[string]string{"GITHUB_REF": "refs/pull/7/merge"},
			wantErr: "--from github-actions: GITHUB_REPOSITORY, GITHUB_ACTOR not set; GitHub Actions sets them in every job; see docs/github-actions.md",
		},
		"an unreadable event payload": {
			env:     map[string]string{"GITHUB_REPOSITORY": "acme/infra", "GITHUB_ACTOR": "bob", "GITHUB_EVENT_PATH": filepath.Join(dir, "missing.json")},
			wantErr: "--from github-actions: GITHUB_EVENT_PATH: open " + filepath.Join(dir, "missing.json") + ": no such file or directory",
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := FromEnv(GitHubActions, envOf(tc.env))
			checkCI(t, tc.want, got, tc.wantErr, err)
		})
	}
	if _, err := FromEnv("jenkins", envOf(nil)); err == nil || err.Error() != `--from "jenkins": want atlantis or github-actions` {
		t.Errorf("an unknown source: err = %v", err)
	}
}

func checkCI(t *testing.T, want, got Request, wantErr string, err error) {
	t.Helper()
	if wantErr != "" {
		if err == nil || err.Error() != wantErr {
			t.Fatalf("err = %v, want %q", err, wantErr)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
}
