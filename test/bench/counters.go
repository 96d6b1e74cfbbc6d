package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"
)

// writeVerbs are the API server's verbs that change state.
var writeVerbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "APPLY": true, "DELETE": true, "DELETECOLLECTION": true}

// series is one apiserver_request_total series: the labels that matter here.
type series struct{ verb, resource, subresource, code string }

// apiCounts is a scrape of apiserver_request_total.
type apiCounts map[series]float64

// writes sums the write requests to resource (any subresource); code filters by a status code
// prefix ("" for all, "409" for conflicts).
func (a apiCounts) writes(resource, code string) float64 {
	n := 0.0
	for s, v := range a {
		if s.resource == resource && writeVerbs[s.verb] && strings.HasPrefix(s.code, code) {
			n += v
		}
	}
	return n
}

// scraper reads the API server's own /metrics with the admin credentials of the control plane.
type scraper struct {
	http *http.Client
	url  string
}

func newScraper(cfg *rest.Config) (*scraper, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	return &scraper{http: hc, url: strings.TrimSuffix(cfg.Host, "/") + "/metrics"}, nil
}

func (s *scraper) scrape(ctx context.Context) (apiCounts, error) {
	out := apiCounts{}
	err := scrapeText(ctx, s.http, s.url, func(name string, labels map[string]string, v float64) {
		if name == "apiserver_request_total" {
			out[series{labels["verb"], labels["resource"], labels["subresource"], labels["code"]}] += v
		}
	})
	return out, err
}

// scrapeText GETs a Prometheus text endpoint and calls f for every sample.
func scrapeText(ctx context.Context, hc *http.Client, url string, f func(name string, labels map[string]string, v float64)) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("scrape %s: %s: %s", url, resp.Status, body)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if name, labels, v, ok := parseSample(sc.Text()); ok {
			f(name, labels, v)
		}
	}
	return sc.Err()
}

// parseSample parses one line of the Prometheus text format: name{a="b",...} value [ts].
func parseSample(line string) (string, map[string]string, float64, bool) {
	if line == "" || line[0] == '#' {
		return "", nil, 0, false
	}
	labels := map[string]string{}
	name, rest := line, ""
	if i := strings.IndexByte(line, '{'); i >= 0 {
		name, rest = line[:i], line[i+1:]
		for {
			rest = strings.TrimLeft(rest, ", ")
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.Index(rest, `="`)
			if eq < 0 {
				return "", nil, 0, false
			}
			key := rest[:eq]
			rest = rest[eq+2:]
			var val strings.Builder
			closed := false
			for j := 0; j < len(rest); j++ {
				c := rest[j]
				if c == '\\' && j+1 < len(rest) {
					j++
					switch rest[j] {
					case 'n':
						val.WriteByte('\n')
					default:
						val.WriteByte(rest[j])
					}
					continue
				}
				if c == '"' {
					rest, closed = rest[j+1:], true
					break
				}
				val.WriteByte(c)
			}
			if !closed {
				return "", nil, 0, false
			}
			labels[key] = val.String()
		}
	} else if i := strings.IndexByte(line, ' '); i >= 0 {
		name, rest = line[:i], line[i:]
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return "", nil, 0, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return "", nil, 0, false
	}
	return name, labels, v, true
}

// managerCounts are the manager's own counters that explain a window.
type managerCounts struct {
	pid        int     // the process counted; 0 when no manager ran
	conflicts  float64 // turnstile_write_conflicts_total
	reconciles float64 // controller_runtime_reconcile_total of the lock controller
	checks     float64 // turnstile_deadlock_checks_total{outcome="checked"}
	skips      float64 // turnstile_deadlock_checks_total{outcome="skipped"}
	cpu        float64 // user+system CPU seconds of the process
	gets       float64 // rest_client_requests_total{method="GET"}: reads, lists and watches
	others     float64 // rest_client_requests_total of every other method: writes
	lockDepth  float64 // workqueue_depth of the lock controller
	heapInUse  float64 // go_memstats_heap_inuse_bytes
	heapAlloc  float64 // go_memstats_heap_alloc_bytes
	// allocs, allocBytes and gcs are the Go runtime's own counts of heap allocations (objects
	// and bytes) and of collections: the work the manager did, as the load on the machine does
	// not change it (CPU time per operation grows with the load on a shared machine).
	allocs     float64 // go_gc_heap_allocs_objects_total
	allocBytes float64 // go_gc_heap_allocs_bytes_total
	gcs        float64 // go_gc_cycles_total_gc_cycles_total
}

// procStats is the manager's memory.
type procStats struct {
	RSS, PeakRSS int64
	// AnonRSS is the anonymous part of RSS (RssAnon), without the binary's file pages.
	AnonRSS int64
}

// readProcStatus reads VmRSS and VmHWM (the peak) of pid.
func readProcStatus(pid int) (procStats, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procStats{}, err
	}
	var ps procStats
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			ps.RSS = kb * 1024
		case "VmHWM:":
			ps.PeakRSS = kb * 1024
		case "RssAnon:":
			ps.AnonRSS = kb * 1024
		}
	}
	return ps, nil
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times; 100 on every Linux
// architecture Go supports.
const clockTicks = 100

// readCPU returns the user+system CPU seconds pid has used.
func readCPU(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may contain spaces; the fields after its ')' are fixed.
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	return (utime + stime) / clockTicks, nil
}

// window measures what happened between open and close: API writes by resource (the harness's
// own subtracted), the manager's conflicts, reconciles and CPU, and the watch's transitions.
type window struct {
	b       *bench
	ns      string
	start   time.Time
	api     apiCounts
	harness int64
	mgr     managerCounts
	peers   []managerCounts // of b.peers, in order
	trans   Transitions
}

// Writes is what a window saw.
type Writes struct {
	Seconds float64 `json:"seconds"`
	// Controller is the writes to lockrequests and projectlocks (any subresource, any status
	// code) that the harness did not make.
	Controller float64 `json:"controllerWrites"`
	// LockRequests and ProjectLocks split Controller by resource.
	LockRequests float64 `json:"lockRequestWrites"`
	ProjectLocks float64 `json:"projectLockWrites"`
	// Conflicts are writes to either resource answered 409 (the harness makes none that can
	// conflict).
	Conflicts float64 `json:"conflicts"`
	// Events are writes to events (the manager's Kubernetes events); Leases to leases.
	Events float64 `json:"eventWrites"`
	Leases float64 `json:"leaseWrites"`
	// Harness is the harness's own writes, subtracted above.
	Harness float64 `json:"harnessWrites"`
	// Reconciles, ManagerConflicts (optimistic writes that lost a race and were decided again)
	// and ManagerCPU are from the manager (zero when it is not running).
	Reconciles       float64 `json:"reconciles"`
	ManagerConflicts float64 `json:"managerConflicts"`
	ManagerCPU       float64 `json:"managerCPUSeconds"`
	// ManagerAllocs, ManagerAllocBytes and ManagerGCs are the manager's heap allocations
	// (objects, bytes) and garbage collections: its work, which the machine's load does not
	// change as it changes ManagerCPU.
	ManagerAllocs     float64 `json:"managerAllocs"`
	ManagerAllocBytes float64 `json:"managerAllocBytes"`
	ManagerGCs        float64 `json:"managerGCs"`
	// PeerReconciles and PeerCPU are the same of the manager's peers (active-active or
	// standing by), summed.
	PeerReconciles float64 `json:"peerReconciles,omitempty"`
	PeerCPU        float64 `json:"peerCPUSeconds,omitempty"`
	// Gets and Requests are the API requests every manager sent (its client's own count):
	// Gets its GETs (reads, lists, watches), Requests all of them.
	Gets     float64 `json:"managerGets"`
	Requests float64 `json:"managerRequests"`
	// DeadlockChecks are the namespace checks the detector ran; DeadlockSkips the ones it
	// skipped because no new waiter could close a cycle.
	DeadlockChecks float64 `json:"deadlockChecks"`
	DeadlockSkips  float64 `json:"deadlockSkips"`
	// Transitions are the LockRequest status writes of the window's namespace as the watch saw
	// them.
	Transitions Transitions `json:"transitions"`
}

func (b *bench) open(ctx context.Context, ns string) (*window, error) {
	w := &window{b: b, ns: ns, harness: b.harnessWrites.Load(), trans: b.tracker.Stats(ns)}
	var err error
	if w.api, err = b.api.scrape(ctx); err != nil {
		return nil, err
	}
	if b.mgr != nil {
		if w.mgr, err = b.mgr.counts(ctx); err != nil {
			return nil, err
		}
	}
	for _, p := range b.peers {
		c, err := p.counts(ctx)
		if err != nil {
			return nil, err
		}
		w.peers = append(w.peers, c)
	}
	w.start = time.Now()
	return w, nil
}

// settle is how long a window waits before its last scrape, so writes whose watch event the
// harness already saw are also counted by the server (it counts when the response is sent).
const settle = 300 * time.Millisecond

func (w *window) close(ctx context.Context) (Writes, error) {
	elapsed := time.Since(w.start)
	time.Sleep(settle)
	api, err := w.b.api.scrape(ctx)
	if err != nil {
		return Writes{}, err
	}
	var mgr managerCounts
	if w.b.mgr != nil {
		if mgr, err = w.b.mgr.counts(ctx); err != nil {
			return Writes{}, err
		}
	}
	d := func(resource, code string) float64 { return api.writes(resource, code) - w.api.writes(resource, code) }
	harness := float64(w.b.harnessWrites.Load() - w.harness)
	out := Writes{
		Seconds:      elapsed.Seconds(),
		LockRequests: d("lockrequests", ""),
		ProjectLocks: d("projectlocks", ""),
		Conflicts:    d("lockrequests", "409") + d("projectlocks", "409"),
		Events:       d("events", ""),
		Leases:       d("leases", ""),
		Harness:      harness,
		Transitions:  w.b.tracker.Stats(w.ns).minus(w.trans),
	}
	// The harness writes only lockrequests.
	out.LockRequests -= harness
	out.Controller = out.LockRequests + out.ProjectLocks
	if mgr.pid != w.mgr.pid {
		w.mgr = managerCounts{} // the manager started during the window: count all of it
	}
	out.Reconciles = mgr.reconciles - w.mgr.reconciles
	out.ManagerConflicts = mgr.conflicts - w.mgr.conflicts
	out.ManagerCPU = mgr.cpu - w.mgr.cpu
	out.ManagerAllocs = mgr.allocs - w.mgr.allocs
	out.ManagerAllocBytes = mgr.allocBytes - w.mgr.allocBytes
	out.ManagerGCs = mgr.gcs - w.mgr.gcs
	out.DeadlockChecks = mgr.checks - w.mgr.checks
	out.DeadlockSkips = mgr.skips - w.mgr.skips
	out.Gets = mgr.gets - w.mgr.gets
	out.Requests = out.Gets + mgr.others - w.mgr.others
	for i, p := range w.b.peers {
		c, err := p.counts(ctx)
		if err != nil {
			return Writes{}, err
		}
		if i < len(w.peers) && w.peers[i].pid == c.pid {
			c.reconciles -= w.peers[i].reconciles
			c.cpu -= w.peers[i].cpu
			c.gets -= w.peers[i].gets
			c.others -= w.peers[i].others
		}
		out.PeerReconciles += c.reconciles
		out.PeerCPU += c.cpu
		out.Gets += c.gets
		out.Requests += c.gets + c.others
	}
	return out, nil
}
