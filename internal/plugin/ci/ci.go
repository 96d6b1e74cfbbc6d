// Package ci reads what a pipeline's own variables say about a lock request (kubectl turnstile
// --from): the key, the holder and the command, from Atlantis's run-step variables or a GitHub
// Actions job's.
package ci

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// Sources for --from: where a pipeline's own variables say what to lock and for whom.
const (
	Atlantis      = "atlantis"
	GitHubActions = "github-actions"
)

// Request is what a pipeline's environment says about a lock: the key (when it names one),
// the holder and the command.
type Request struct {
	Target  *locksv1.LockTarget // nil: the environment names no key; --lock must
	Holder  locksv1.Holder
	Command string
	// Prefix starts the generated name of the request, e.g. "atlantis-100-".
	Prefix string
}

// FromEnv reads the request from the variables of source, looked up with getenv.
func FromEnv(source string, getenv func(string) string) (Request, error) {
	switch source {
	case Atlantis:
		return AtlantisEnv(getenv)
	case GitHubActions:
		return GitHubActionsEnv(getenv)
	default:
		return Request{}, fmt.Errorf("--from %q: want %s or %s", source, Atlantis, GitHubActions)
	}
}

// missingVars says which required variables are unset, or nil.
func missingVars(source, where string, getenv func(string) string, names ...string) error {
	var missing []string
	for _, n := range names {
		if getenv(n) == "" {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("--from %s: %s not set; %s", source, strings.Join(missing, ", "), where)
}

// AtlantisEnv reads the variables Atlantis sets for a custom run step: the key from
// BASE_REPO_OWNER/BASE_REPO_NAME, REPO_REL_DIR, WORKSPACE and PROJECT_NAME (empty for a project
// without a name), the holder from PULL_AUTHOR, PULL_NUM and PULL_URL, the command from
// COMMAND_NAME.
func AtlantisEnv(getenv func(string) string) (Request, error) {
	if err := missingVars(Atlantis, "Atlantis sets them in the run steps of a workflow (repos.yaml); see docs/atlantis.md",
		getenv, "BASE_REPO_OWNER", "BASE_REPO_NAME", "REPO_REL_DIR", "WORKSPACE", "PULL_NUM", "PULL_AUTHOR", "COMMAND_NAME"); err != nil {
		return Request{}, err
	}
	pull, err := strconv.ParseInt(getenv("PULL_NUM"), 10, 64)
	if err != nil || pull <= 0 {
		return Request{}, fmt.Errorf("--from %s: PULL_NUM=%q is not a pull request number", Atlantis, getenv("PULL_NUM"))
	}
	t := locksv1.LockTarget{
		Repo:      getenv("BASE_REPO_OWNER") + "/" + getenv("BASE_REPO_NAME"),
		Path:      getenv("REPO_REL_DIR"),
		Workspace: getenv("WORKSPACE"),
		Project:   getenv("PROJECT_NAME"),
	}
	return Request{
		Target:  &t,
		Holder:  locksv1.Holder{Owner: getenv("PULL_AUTHOR"), Pull: pull, URL: getenv("PULL_URL")},
		Command: commandName(getenv("COMMAND_NAME")),
		Prefix:  fmt.Sprintf("atlantis-%d-", pull),
	}, nil
}

// commandName makes an Atlantis command name a Turnstile command: Atlantis's names are
// lowercase words, some with "_" (import, state_rm, approve_policies).
func commandName(s string) string {
	return strings.ReplaceAll(strings.ToLower(s), "_", "-")
}

var pullRef = regexp.MustCompile(`^refs/pull/([0-9]+)/(merge|head)$`)

// gitHubEvent is the part of a pull_request event payload (GITHUB_EVENT_PATH) read here.
type gitHubEvent struct {
	PullRequest *struct {
		Number  int64  `json:"number"`
		HTMLURL string `json:"html_url"`
		User    struct {
			Login string `json:"login"`
		} `json:"user"`
	} `json:"pull_request"`
}

// GitHubActionsEnv reads the variables of a GitHub Actions job: the repository from
// GITHUB_REPOSITORY (the key is the repository's root unless --lock names one), the pull request
// number from GITHUB_REF (refs/pull/N/merge) or else the event payload, the holder from the pull
// request's author in the event payload or else GITHUB_ACTOR, and a link to the pull request
// (or, outside one, to the run).
func GitHubActionsEnv(getenv func(string) string) (Request, error) {
	const where = "GitHub Actions sets them in every job; see docs/github-actions.md"
	if err := missingVars(GitHubActions, where, getenv, "GITHUB_REPOSITORY", "GITHUB_ACTOR"); err != nil {
		return Request{}, err
	}
	var ev gitHubEvent
	if p := getenv("GITHUB_EVENT_PATH"); p != "" {
		data, err := os.ReadFile(p)
		if err != nil {
			return Request{}, fmt.Errorf("--from %s: GITHUB_EVENT_PATH: %w", GitHubActions, err)
		}
		if err := json.Unmarshal(data, &ev); err != nil {
			return Request{}, fmt.Errorf("--from %s: GITHUB_EVENT_PATH %s is not an event payload: %w", GitHubActions, p, err)
		}
	}
	repo := getenv("GITHUB_REPOSITORY")
	r := Request{
		Target: &locksv1.LockTarget{Repo: repo, Path: ".", Workspace: "default"},
		Holder: locksv1.Holder{Owner: getenv("GITHUB_ACTOR")},
	}
	if m := pullRef.FindStringSubmatch(getenv("GITHUB_REF")); m != nil {
		r.Holder.Pull, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if pr := ev.PullRequest; pr != nil {
		if r.Holder.Pull == 0 {
			r.Holder.Pull = pr.Number
		}
		if pr.User.Login != "" {
			r.Holder.Owner = pr.User.Login // the author, the same in every job of the pull request
		}
		r.Holder.URL = pr.HTMLURL
	}
	server := getenv("GITHUB_SERVER_URL")
	if server == "" {
		server = "https://github.com"
	}
	switch {
	case r.Holder.URL != "":
	case r.Holder.Pull != 0:
		r.Holder.URL = fmt.Sprintf("%s/%s/pull/%d", server, repo, r.Holder.Pull)
	case getenv("GITHUB_RUN_ID") != "":
		r.Holder.URL = fmt.Sprintf("%s/%s/actions/runs/%s", server, repo, getenv("GITHUB_RUN_ID"))
	}
	if r.Holder.Pull != 0 {
		r.Prefix = fmt.Sprintf("gha-%d-", r.Holder.Pull)
	} else {
		r.Prefix = "gha-"
	}
	return r, nil
}

// ErrNoPull is returned when bulk release has no pull request to release.
var ErrNoPull = errors.New("no pull request number: give --pull, or run in a pull request's job with --from")
