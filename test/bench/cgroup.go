package bench

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ContainerStats is a memory cgroup's account of the manager it held, as a pod's container
// cgroup keeps it: the kernel counts the process's anonymous memory and the page cache it
// faulted in (the binary's code and data pages) against the limit, takes page cache back when
// the sum reaches it, and kills the process when it cannot.
type ContainerStats struct {
	// LimitBytes is the cgroup's memory limit; UsageBytes its usage once settled, AnonBytes
	// and FileBytes the anonymous memory and page cache in it; PeakBytes its high-water mark
	// since the manager started.
	LimitBytes int64 `json:"limitBytes"`
	UsageBytes int64 `json:"usageBytes"`
	AnonBytes  int64 `json:"anonBytes"`
	FileBytes  int64 `json:"fileBytes"`
	PeakBytes  int64 `json:"peakBytes"`
	// LimitHits is how often usage reached the limit and the kernel had to reclaim (v1
	// memory.failcnt, v2 memory.events max); OOMKills how often it killed a process in it.
	LimitHits int64 `json:"limitHits"`
	OOMKills  int64 `json:"oomKills"`
}

// container is a memory cgroup that holds one manager process.
type container struct {
	dir   string
	v2    bool
	limit int64
}

// cgroupRoot is where memory cgroups are made: the unified hierarchy when it controls memory,
// else the v1 memory hierarchy.
func cgroupRoot() (dir string, v2 bool, err error) {
	if ctl, err := os.ReadFile("/sys/fs/cgroup/cgroup.subtree_control"); err == nil && strings.Contains(string(ctl), "memory") {
		return "/sys/fs/cgroup", true, nil
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err == nil {
		return "/sys/fs/cgroup/memory", false, nil
	}
	return "", false, errors.New("no writable memory cgroup hierarchy (needs root, and /sys/fs/cgroup with the memory controller, v1 or v2)")
}

// newContainer makes a memory cgroup name limited to limit bytes.
func newContainer(name string, limit int64) (*container, error) {
	root, v2, err := cgroupRoot()
	if err != nil {
		return nil, err
	}
	c := &container{dir: filepath.Join(root, name), v2: v2, limit: limit}
	if err := os.Mkdir(c.dir, 0o755); err != nil {
		return nil, fmt.Errorf("memory cgroup: %w", err)
	}
	file, value := "memory.limit_in_bytes", strconv.FormatInt(limit, 10)
	if v2 {
		file = "memory.max"
	}
	if err := os.WriteFile(filepath.Join(c.dir, file), []byte(value), 0o644); err != nil {
		_ = os.Remove(c.dir)
		return nil, fmt.Errorf("memory cgroup limit: %w", err)
	}
	if !v2 {
		// No swap: a container's memory limit is all it has.
		_ = os.WriteFile(filepath.Join(c.dir, "memory.swappiness"), []byte("0"), 0o644)
	}
	return c, nil
}

// command is binary with args run inside the cgroup: a shell that moves itself in, then execs
// the binary (same pid), so everything the manager ever maps is charged to the cgroup. The
// binary's page cache is dropped first: pages another process faulted in stay charged to that
// process's cgroup, and a container's image is read by the container itself.
func (c *container) command(binary string, args []string) (string, []string, error) {
	if err := dropPageCache(binary); err != nil {
		return "", nil, err
	}
	script := `echo $$ > "$TURNSTILE_BENCH_CGROUP/cgroup.procs" && exec "$0" "$@"`
	return "/bin/sh", append([]string{"-c", script, binary}, args...), nil
}

// env is what command needs in the environment.
func (c *container) env() string { return "TURNSTILE_BENCH_CGROUP=" + c.dir }

// dropPageCache asks the kernel to drop the cached pages of path that no process maps.
func dropPageCache(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}

// cgroupFiles are where each hierarchy keeps a cgroup's account: the files of a single
// number, the keys of memory.stat, and the file and keys of its events.
type cgroupFiles struct {
	usage, peak, hits string // a number each ("" for hits: an event below)
	anon, file        string // keys of memory.stat
	events            string
	hitsKey, oomKey   string // keys of events
}

var (
	cgroupV1 = cgroupFiles{usage: "memory.usage_in_bytes", peak: "memory.max_usage_in_bytes", hits: "memory.failcnt",
		anon: "rss", file: "cache", events: "memory.oom_control", oomKey: "oom_kill"}
	cgroupV2 = cgroupFiles{usage: "memory.current", peak: "memory.peak",
		anon: "anon", file: "file", events: "memory.events", hitsKey: "max", oomKey: "oom_kill"}
)

// stats reads the cgroup's account.
func (c *container) stats() (ContainerStats, error) {
	files := cgroupV1
	if c.v2 {
		files = cgroupV2
	}
	// read parses a file of one number, or of "key number" lines.
	read := func(file string) (map[string]int64, int64, error) {
		data, err := os.ReadFile(filepath.Join(c.dir, file))
		if err != nil {
			return nil, 0, err
		}
		fields := map[string]int64{}
		var single int64
		for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
			f := strings.Fields(line)
			switch len(f) {
			case 1:
				single, _ = strconv.ParseInt(f[0], 10, 64)
			case 2:
				fields[f[0]], _ = strconv.ParseInt(f[1], 10, 64)
			}
		}
		return fields, single, nil
	}
	s := ContainerStats{LimitBytes: c.limit}
	var err error
	if _, s.UsageBytes, err = read(files.usage); err != nil {
		return s, err
	}
	if _, s.PeakBytes, err = read(files.peak); err != nil {
		return s, err
	}
	stat, _, err := read("memory.stat")
	if err != nil {
		return s, err
	}
	events, _, err := read(files.events)
	if err != nil {
		return s, err
	}
	s.AnonBytes, s.FileBytes, s.OOMKills = stat[files.anon], stat[files.file], events[files.oomKey]
	if files.hits != "" {
		_, s.LimitHits, err = read(files.hits)
	} else {
		s.LimitHits = events[files.hitsKey]
	}
	return s, err
}

// remove deletes the cgroup once its process has gone: up to 30 s, as a process killed while
// its cgroup thrashes takes a while to give its memory back.
func (c *container) remove() error {
	var err error
	for range 300 {
		if err = os.Remove(c.dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("remove memory cgroup %s: %w", c.dir, err)
}
