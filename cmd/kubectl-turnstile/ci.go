package main

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
	fromAtlantis      = "atlantis"
	fromGitHubActions = "github-actions"
)

// ciRequest is what a pipeline's environment says about a lock: the key (when it names one),
// the holder and the command.
type ciRequest struct {
	target  *locksv1.LockTarget // nil: the environment names no key; --lock must
	holder  locksv1.Holder
	command string
	// prefix starts the generated name of the request, e.g. "atlantis-100-".
	prefix string
}

// fromEnv reads the request from the variables of source, looked up with getenv.
func fromEnv(source string, getenv func(string) string) (ciRequest, error) {
	switch source {
	case fromAtlantis:
		return fromAtlantisEnv(getenv)
	case fromGitHubActions:
		return fromGitHubActionsEnv(getenv)
	default:
		return ciRequest{}, fmt.Errorf("--from %q: want %s or %s", source, fromAtlantis, fromGitHubActions)
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

// fromAtlantisEnv reads the variables Atlantis sets for a custom run step: the key from
// BASE_REPO_OWNER/BASE_REPO_NAME, REPO_REL_DIR, WORKSPACE and PROJECT_NAME (empty for a project
// without a name), the holder from PULL_AUTHOR, PULL_NUM and PULL_URL, the command from
// COMMAND_NAME.
func fromAtlantisEnv(getenv func(string) string) (ciRequest, error) {
	if err := missingVars(fromAtlantis, "Atlantis sets them in the run steps of a workflow (repos.yaml); see docs/atlantis.md",
		getenv, "BASE_REPO_OWNER", "BASE_REPO_NAME", "REPO_REL_DIR", "WORKSPACE", "PULL_NUM", "PULL_AUTHOR", "COMMAND_NAME"); err != nil {
		return ciRequest{}, err
	}
	pull, err := strconv.ParseInt(getenv("PULL_NUM"), 10, 64)
	if err != nil || pull <= 0 {
		return ciRequest{}, fmt.Errorf("--from %s: PULL_NUM=%q is not a pull request number", fromAtlantis, getenv("PULL_NUM"))
	}
	t := locksv1.LockTarget{
		Repo:      getenv("BASE_REPO_OWNER") + "/" + getenv("BASE_REPO_NAME"),
		Path:      getenv("REPO_REL_DIR"),
		Workspace: getenv("WORKSPACE"),
		Project:   getenv("PROJECT_NAME"),
	}
	return ciRequest{
		target:  &t,
		holder:  locksv1.Holder{Owner: getenv("PULL_AUTHOR"), Pull: pull, URL: getenv("PULL_URL")},
		command: commandName(getenv("COMMAND_NAME")),
		prefix:  fmt.Sprintf("atlantis-%d-", pull),
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

// fromGitHubActionsEnv reads the variables of a GitHub Actions job: the repository from
// GITHUB_REPOSITORY (the key is the repository's root unless --lock names one), the pull request
// number from GITHUB_REF (refs/pull/N/merge) or else the event payload, the holder from the pull
// request's author in the event payload or else GITHUB_ACTOR, and a link to the pull request
// (or, outside one, to the run).
func fromGitHubActionsEnv(getenv func(string) string) (ciRequest, error) {
	const where = "GitHub Actions sets them in every job; see docs/github-actions.md"
	if err := missingVars(fromGitHubActions, where, getenv, "GITHUB_REPOSITORY", "GITHUB_ACTOR"); err != nil {
		return ciRequest{}, err
	}
	var ev gitHubEvent
	if p := getenv("GITHUB_EVENT_PATH"); p != "" {
		data, err := os.ReadFile(p)
		if err != nil {
			return ciRequest{}, fmt.Errorf("--from %s: GITHUB_EVENT_PATH: %w", fromGitHubActions, err)
		}
		if err := json.Unmarshal(data, &ev); err != nil {
			return ciRequest{}, fmt.Errorf("--from %s: GITHUB_EVENT_PATH %s is not an event payload: %w", fromGitHubActions, p, err)
		}
	}
	repo := getenv("GITHUB_REPOSITORY")
	r := ciRequest{
		target: &locksv1.LockTarget{Repo: repo, Path: ".", Workspace: "default"},
		holder: locksv1.Holder{Owner: getenv("GITHUB_ACTOR")},
	}
	if m := pullRef.FindStringSubmatch(getenv("GITHUB_REF")); m != nil {
		r.holder.Pull, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if pr := ev.PullRequest; pr != nil {
		if r.holder.Pull == 0 {
			r.holder.Pull = pr.Number
		}
		if pr.User.Login != "" {
			r.holder.Owner = pr.User.Login // the author, the same in every job of the pull request
		}
		r.holder.URL = pr.HTMLURL
	}
	server := getenv("GITHUB_SERVER_URL")
	if server == "" {
		server = "https://github.com"
	}
	switch {
	case r.holder.URL != "":
	case r.holder.Pull != 0:
		r.holder.URL = fmt.Sprintf("%s/%s/pull/%d", server, repo, r.holder.Pull)
	case getenv("GITHUB_RUN_ID") != "":
		r.holder.URL = fmt.Sprintf("%s/%s/actions/runs/%s", server, repo, getenv("GITHUB_RUN_ID"))
	}
	if r.holder.Pull != 0 {
		r.prefix = fmt.Sprintf("gha-%d-", r.holder.Pull)
	} else {
		r.prefix = "gha-"
	}
	return r, nil
}

// errNoPull is returned when bulk release has no pull request to release.
var errNoPull = errors.New("no pull request number: give --pull, or run in a pull request's job with --from")
