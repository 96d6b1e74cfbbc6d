// Package docs keeps README.md and docs/ from drifting from what Turnstile does. Every fenced
// shell block says what it is: "```sh runnable" blocks are run here, file by file and in order,
// in one fresh `bash -e` per file (nothing of this process's environment but a HOME), from the
// repository's root, after the lines `make dev` prints, against a control plane started as
// `make dev` starts it (hack/dev: the shipped install, the manager as its ServiceAccount). A
// line that starts with "! " must fail. "```sh norun: WHY" blocks are not run, and say why.
// Relative links must point at files that exist.
//
// Run it with `make test`, or alone with:
//
//	make k8s-bins build && KUBEBUILDER_ASSETS=$PWD/bin/k8s/1.37.2-linux-amd64 go test -count=1 -v ./test/docs/
package docs

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// block is a fenced code block of a Markdown file.
type block struct {
	file string
	line int    // of the opening fence
	info string // what follows the fence: "sh runnable", "sh norun: why", "yaml"
	body string
}

var shells = []string{"sh", "bash", "shell", "console"}

// blocks are the fenced blocks of a Markdown file.
func blocks(path, rel string) ([]block, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []block
	var cur *block
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &block{file: rel, line: n, info: strings.TrimSpace(strings.TrimPrefix(line, "```"))}
		case cur != nil && strings.TrimSpace(line) == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.body += line + "\n"
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: a fence that is never closed", rel, cur.line)
	}
	return out, sc.Err()
}

func (b block) shell() bool {
	lang, _, _ := strings.Cut(b.info, " ")
	return slices.Contains(shells, lang)
}

func (b block) runnable() bool {
	f := strings.Fields(b.info)
	return b.shell() && len(f) > 1 && f[1] == "runnable"
}

// marked: "runnable", or "norun:" with a reason.
func (b block) marked() bool {
	_, rest, _ := strings.Cut(b.info, " ")
	rest = strings.TrimSpace(rest)
	if rest == "runnable" {
		return true
	}
	why, ok := strings.CutPrefix(rest, "norun:")
	return ok && strings.TrimSpace(why) != ""
}

// markdown is README.md and every docs/*.md, by path relative to root.
func markdown(t *testing.T, root string) []string {
	t.Helper()
	files := []string{"README.md"}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range more {
		rel, _ := filepath.Rel(root, m)
		files = append(files, filepath.ToSlash(rel))
	}
	return files
}

// TestShellBlocksAreMarked: a reader can tell which examples are checked.
func TestShellBlocksAreMarked(t *testing.T) {
	root := repoRoot(t)
	runnable := 0
	for _, f := range markdown(t, root) {
		bs, err := blocks(filepath.Join(root, f), f)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bs {
			if !b.shell() {
				continue
			}
			if b.runnable() {
				runnable++
			}
			if !b.marked() {
				t.Errorf("%s:%d: ```%s: mark it ```%s runnable (make test runs it) or ```%s norun: WHY", f, b.line, b.info, b.info, b.info)
			}
		}
	}
	if runnable < 5 {
		t.Errorf("only %d runnable blocks: the README's walkthrough has more", runnable)
	}
}

var mdLink = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)

// TestRelativeLinksResolve: a page moved or renamed does not leave links to nothing.
func TestRelativeLinksResolve(t *testing.T) {
	root := repoRoot(t)
	for _, f := range markdown(t, root) {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		// Links inside code blocks are code, not links.
		text := regexp.MustCompile("(?s)```.*?```").ReplaceAllString(string(data), "")
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			p := filepath.Join(root, filepath.Dir(f), target)
			if _, err := os.Stat(p); err != nil {
				t.Errorf("%s: link to %s: %v", f, m[1], err)
			}
		}
	}
}

// TestRunnableBlocks runs every runnable block against a control plane started as `make dev`
// starts it.
func TestRunnableBlocks(t *testing.T) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run through `make test` (it builds kube-apiserver, etcd and kubectl first)")
	}
	root := repoRoot(t)
	for _, bin := range []string{"manager", "kubectl-turnstile"} {
		if _, err := os.Stat(filepath.Join(root, "bin", bin)); err != nil {
			t.Fatalf("bin/%s: %v: run through `make test` (make build)", bin, err)
		}
	}
	state := t.TempDir()
	dev := filepath.Join(state, "turnstile-dev")
	if out, err := exec.Command("go", "build", "-o", dev, filepath.Join(root, "hack", "dev")).CombinedOutput(); err != nil {
		t.Fatalf("build hack/dev: %v\n%s", err, out)
	}
	cmd := exec.Command(dev, "--assets", assets, "--manager", filepath.Join(root, "bin", "manager"), "--state", state)
	cmd.Dir = root
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &framework.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
		select {
		case err := <-exited:
			if t.Failed() {
				t.Logf("hack/dev ended: %v", err)
			}
		case <-time.After(60 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		if t.Failed() {
			t.Logf("hack/dev printed:\n%s", out)
		}
	})

	// The export lines hack/dev prints: what a reader pastes before the README's blocks.
	var exports []string
	for deadline := time.Now().Add(3 * time.Minute); len(exports) < 2; time.Sleep(100 * time.Millisecond) {
		select {
		case err := <-exited:
			t.Fatalf("hack/dev exited (%v):\n%s", err, out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("hack/dev printed no export lines within 3 minutes:\n%s", out)
		}
		exports = regexp.MustCompile(`(?m)^\s*(export \S+=\S+)\s*$`).FindAllString(out.String(), -1)
	}

	for _, f := range markdown(t, root) {
		bs, err := blocks(filepath.Join(root, f), f)
		if err != nil {
			t.Fatal(err)
		}
		var script strings.Builder
		script.WriteString("set -e\n")
		for _, e := range exports {
			script.WriteString(strings.TrimSpace(e) + "\n")
		}
		n := 0
		for _, b := range bs {
			if !b.runnable() {
				continue
			}
			n++
			fmt.Fprintf(&script, "echo '>>> %s:%d'\n", b.file, b.line)
			script.WriteString(mustFail(b.body))
		}
		if n == 0 {
			continue
		}
		t.Run(f, func(t *testing.T) {
			sh := exec.Command("env", "-i", "HOME="+t.TempDir(), "bash", "--norc", "--noprofile", "-c", script.String())
			sh.Dir = root
			got, err := sh.CombinedOutput()
			t.Logf("%s's %d runnable blocks:\n%s", f, n, got)
			if err != nil {
				t.Errorf("%s: a runnable block failed (%v); the last >>> line above names it", f, err)
			}
		})
	}
}

// mustFail turns each line "! COMMAND" into one that fails the script when COMMAND succeeds
// (bash -e ignores a negated command's status).
func mustFail(body string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(body, "\n"), "\n") {
		if cmd, ok := strings.CutPrefix(line, "! "); ok {
			fmt.Fprintf(&b, "if %s; then echo %q >&2; exit 1; fi\n", cmd, "expected to fail: "+cmd)
			continue
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}
