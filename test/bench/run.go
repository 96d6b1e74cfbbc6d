package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// RunConfig sizes the "run" phase: what `kubectl turnstile run` costs a pipeline.
type RunConfig struct {
	// Plugin is the kubectl-turnstile binary measured; Baseline, when set, another one measured
	// side by side, sample by sample (a build of main, say).
	Plugin   string `json:"plugin"`
	Baseline string `json:"baseline,omitempty"`
	// Samples per measurement and plugin.
	Samples int `json:"samples"`
}

// RunResult is the run phase: `true` on its own, and per plugin `run -- true` on a free key and
// the hand-off between two runs on one key.
type RunResult struct {
	True    Latency           `json:"true"`
	Plugins []RunPluginResult `json:"plugins"`
}

// RunPluginResult is one plugin binary's figures.
type RunPluginResult struct {
	Plugin string `json:"plugin"`
	// Overhead is the wall time of `run -l KEY -- true` on a free key: ask, grant, run, release.
	Overhead Latency `json:"overhead"`
	// Handoff is from the first run's command writing its last timestamp to the waiting second
	// run's command writing its first, as the commands record them.
	Handoff Latency `json:"handoff"`
}

// runPhase measures `run` with each plugin, interleaving them sample by sample so both see the
// same load.
func (b *bench) runPhase(ctx context.Context) (RunResult, error) {
	cfg := b.cfg.RunPhase
	plugins := []string{cfg.Plugin}
	if cfg.Baseline != "" {
		plugins = append(plugins, cfg.Baseline)
	}
	for _, p := range plugins {
		if _, err := os.Stat(p); err != nil {
			return RunResult{}, fmt.Errorf("plugin binary: %w (run `make build`)", err)
		}
	}
	ns, err := b.namespace(ctx, "run")
	if err != nil {
		return RunResult{}, err
	}
	dir, err := os.MkdirTemp("", "bench-run-")
	if err != nil {
		return RunResult{}, err
	}
	defer os.RemoveAll(dir)

	var res RunResult
	var trues []time.Duration
	overhead := make([][]time.Duration, len(plugins))
	handoff := make([][]time.Duration, len(plugins))
	b.step(fmt.Sprintf("run: %d samples of `run -- true` and of a hand-off between two runs, per plugin", cfg.Samples))
	for i := range cfg.Samples {
		start := time.Now()
		if err := exec.CommandContext(ctx, "true").Run(); err != nil {
			return res, err
		}
		trues = append(trues, time.Since(start))
		for j, p := range plugins {
			d, err := b.runTrue(ctx, p, ns, fmt.Sprintf("bench/run:%d-%d", i, j))
			if err != nil {
				return res, fmt.Errorf("%s run -- true: %w", p, err)
			}
			overhead[j] = append(overhead[j], d)
			h, err := b.runHandoff(ctx, p, ns, fmt.Sprintf("bench/handoff:%d-%d", i, j), filepath.Join(dir, fmt.Sprintf("%d-%d", i, j)))
			if err != nil {
				return res, fmt.Errorf("%s hand-off: %w", p, err)
			}
			handoff[j] = append(handoff[j], h)
		}
	}
	res.True = summarize(trues)
	for j, p := range plugins {
		res.Plugins = append(res.Plugins, RunPluginResult{Plugin: p, Overhead: summarize(overhead[j]), Handoff: summarize(handoff[j])})
	}
	return res, nil
}

// runCmd is the plugin's `run` on lock, against the bench's control plane.
func (b *bench) runCmd(ctx context.Context, plugin, ns, lock, owner string, command ...string) *exec.Cmd {
	args := append([]string{"--kubeconfig", b.kubeconfig, "-n", ns, "run", "-l", lock, "--owner", owner, "--"}, command...)
	return exec.CommandContext(ctx, plugin, args...)
}

// runTrue times `run -- true` on a free key.
func (b *bench) runTrue(ctx context.Context, plugin, ns, lock string) (time.Duration, error) {
	cmd := b.runCmd(ctx, plugin, ns, lock, "bench", "true")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return time.Since(start), nil
}

// runHandoff starts a first run whose command waits for a go-ahead file, queues a second run
// behind it, gives the go-ahead once the second says it waits, and returns the time between
// the first command's end and the second command's start, as each wrote it.
func (b *bench) runHandoff(ctx context.Context, plugin, ns, lock, prefix string) (time.Duration, error) {
	goFile, endFile, startFile := prefix+".go", prefix+".end", prefix+".start"
	first := b.runCmd(ctx, plugin, ns, lock, "first",
		"sh", "-c", fmt.Sprintf(`while [ ! -e %s ]; do sleep 0.01; done; date +%%s%%N > %s`, goFile, endFile))
	second := b.runCmd(ctx, plugin, ns, lock, "second", "sh", "-c", fmt.Sprintf(`date +%%s%%N > %s`, startFile))
	firstDone, err := startSaying(first, "granted")
	if err != nil {
		return 0, err
	}
	if err := firstDone.wait(ctx); err != nil {
		firstDone.kill()
		return 0, err
	}
	secondDone, err := startSaying(second, "waiting")
	if err != nil {
		firstDone.kill()
		return 0, err
	}
	if err := secondDone.wait(ctx); err != nil {
		firstDone.kill()
		secondDone.kill()
		return 0, err
	}
	if err := os.WriteFile(goFile, nil, 0o600); err != nil {
		return 0, err
	}
	for _, d := range []*saying{firstDone, secondDone} {
		if err := <-d.exited; err != nil {
			return 0, fmt.Errorf("%w: %s", err, d.stderr.String())
		}
	}
	end, err := readNanos(endFile)
	if err != nil {
		return 0, err
	}
	start, err := readNanos(startFile)
	if err != nil {
		return 0, err
	}
	return start.Sub(end), nil
}

// saying is a started plugin process whose stderr is watched for a word.
type saying struct {
	cmd    *exec.Cmd
	said   chan struct{}
	exited chan error
	stderr *bytes.Buffer
}

func startSaying(cmd *exec.Cmd, word string) (*saying, error) {
	pr, pw := io.Pipe()
	s := &saying{cmd: cmd, said: make(chan struct{}), exited: make(chan error, 1), stderr: &bytes.Buffer{}}
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(pr)
		closed := false
		for sc.Scan() {
			s.stderr.WriteString(sc.Text() + "\n")
			if !closed && strings.Contains(sc.Text(), word) {
				close(s.said)
				closed = true
			}
		}
	}()
	go func() {
		err := cmd.Wait()
		_ = pw.Close()
		s.exited <- err
	}()
	return s, nil
}

// wait waits until the process said its word, failing if it exits first or ctx ends.
func (s *saying) wait(ctx context.Context) error {
	select {
	case <-s.said:
		return nil
	case err := <-s.exited:
		s.exited <- err
		return fmt.Errorf("exited before saying so (%w): %s", err, s.stderr.String())
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Minute):
		return fmt.Errorf("not said within a minute: %s", s.stderr.String())
	}
}

// kill stops the process and waits until it is reaped.
func (s *saying) kill() {
	_ = s.cmd.Process.Kill()
	err := <-s.exited
	_ = err // "signal: killed", or the exit it had already made: the caller reports its own error
}

func readNanos(path string) (time.Time, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %w", path, err)
	}
	return time.Unix(0, n), nil
}
