package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
)

// grantedStatus is the status of a granted request as the manager writes it, so the raw
// baseline writes objects of the same size.
func grantedStatus(lr *locksv1.LockRequest, token int64) locksv1.LockRequestStatus {
	now := time.Now()
	t := metav1.NewTime(now.Truncate(time.Second))
	exp := metav1.NewTime(now.Add(30 * time.Minute).Truncate(time.Second))
	q := metav1.NewMicroTime(now)
	target := lr.Spec.Locks[0]
	msg := fmt.Sprintf("granted: holds %s (fencing token %d) until %s", lockkey.String(target), token, exp.UTC().Format(time.RFC3339))
	st := locksv1.LockRequestStatus{
		Phase:              locksv1.PhaseGranted,
		Locks:              []locksv1.LockStatus{{Key: lockkey.String(target), Name: lockkey.Name(target), Held: true}},
		FencingToken:       token,
		QueuedAt:           &q,
		GrantedAt:          &t,
		ExpiresAt:          &exp,
		ObservedGeneration: lr.Generation,
	}
	for _, c := range []struct {
		typ    string
		status metav1.ConditionStatus
		reason string
		msg    string
	}{
		{locksv1.ConditionGranted, metav1.ConditionTrue, locksv1.ReasonGranted, msg},
		{locksv1.ConditionReady, metav1.ConditionTrue, locksv1.ReasonGranted, msg},
		{locksv1.ConditionReconciling, metav1.ConditionFalse, locksv1.ReasonGranted, "granted"},
		{locksv1.ConditionStalled, metav1.ConditionFalse, locksv1.ReasonGranted, "granted"},
	} {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: c.typ, Status: c.status, Reason: c.reason,
			Message: c.msg, ObservedGeneration: lr.Generation, LastTransitionTime: t})
	}
	return st
}

// deleteAll deletes every LockRequest and ProjectLock of a namespace.
func (b *bench) deleteAll(ctx context.Context, ns string) error {
	if err := b.c.DeleteAllOf(ctx, &locksv1.LockRequest{}, client.InNamespace(ns)); err != nil {
		return fmt.Errorf("delete lockrequests in %s: %w", ns, err)
	}
	if err := b.c.DeleteAllOf(ctx, &locksv1.ProjectLock{}, client.InNamespace(ns)); err != nil {
		return fmt.Errorf("delete projectlocks in %s: %w", ns, err)
	}
	return nil
}

// AcquireResult is uncontended acquires, one at a time, each on a fresh key.
type AcquireResult struct {
	// Latency is create issued → Granted seen on the watch.
	Latency Latency `json:"latency"`
	// ObjectBytes is the JSON size of a granted LockRequest.
	ObjectBytes int `json:"objectBytes"`
	// WritesPerGrant and WritesPerRelease are the manager's writes to lockrequests and
	// projectlocks per request; EventsPerGrant its Kubernetes events.
	WritesPerGrant   float64 `json:"writesPerGrant"`
	EventsPerGrant   float64 `json:"eventsPerGrant"`
	WritesPerRelease float64 `json:"writesPerRelease"`
	Grant            Writes  `json:"grantWindow"`
	Release          Writes  `json:"releaseWindow"`
}

func (b *bench) acquire(ctx context.Context) (AcquireResult, error) {
	var res AcquireResult
	ns, err := b.namespace(ctx, "acquire")
	if err != nil {
		return res, err
	}
	n := b.cfg.AcquireSamples
	names := make([]string, n)
	w, err := b.open(ctx, ns)
	if err != nil {
		return res, err
	}
	var lat []time.Duration
	for i := range n {
		names[i] = b.name("acq")
		lr := request(ns, names[i], "bench/acquire", fmt.Sprintf("k%05d", i), fmt.Sprintf("owner%d", i), int64(i+1))
		t0 := time.Now()
		if err := b.create(ctx, lr); err != nil {
			return res, err
		}
		at, err := b.tracker.WaitGranted(ctx, ns, lr.Name, waitLimit)
		if err != nil {
			return res, err
		}
		lat = append(lat, at.Sub(t0))
	}
	if res.Grant, err = w.close(ctx); err != nil {
		return res, err
	}
	res.Latency = summarize(lat)
	res.WritesPerGrant = res.Grant.Controller / float64(n)
	res.EventsPerGrant = res.Grant.Events / float64(n)

	var granted locksv1.LockRequest
	if err := b.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: names[0]}, &granted); err != nil {
		return res, err
	}
	data, err := json.Marshal(&granted)
	if err != nil {
		return res, err
	}
	res.ObjectBytes = len(data)

	if w, err = b.open(ctx, ns); err != nil {
		return res, err
	}
	if err := parallel(ctx, n, b.cfg.Workers, func(ctx context.Context, i int) error { return b.remove(ctx, ns, names[i]) }); err != nil {
		return res, err
	}
	if err := b.waitReleased(ctx, ns); err != nil {
		return res, err
	}
	if res.Release, err = w.close(ctx); err != nil {
		return res, err
	}
	res.WritesPerRelease = res.Release.Controller / float64(n)
	return res, nil
}

// ThroughputResult is closed-loop acquire → Granted → release cycles by Workers clients, each
// on its own share of Keys keys, so no two clients contend. Several rounds, each just after a
// raw baseline round, are summarized by their median.
type ThroughputResult struct {
	Workers int `json:"workers"`
	Keys    int `json:"keys"`
	// Rounds are the grants/s of each round; GrantsPerSec their median.
	Rounds       []float64 `json:"rounds"`
	GrantsPerSec float64   `json:"grantsPerSec"`
	Grants       int       `json:"grants"`
	Seconds      float64   `json:"seconds"`
	// Latency is create → Granted seen, under this load, over every round.
	Latency Latency `json:"latency"`
	// WritesPerCycle is the manager's writes per acquire+release cycle.
	WritesPerCycle float64  `json:"writesPerCycle"`
	Windows        []Writes `json:"windows"`
	lat            []time.Duration
}

// mergeThroughput sums rounds into one result.
func mergeThroughput(runs []ThroughputResult) ThroughputResult {
	out := ThroughputResult{Workers: runs[0].Workers, Keys: runs[0].Keys}
	controller := 0.0
	for _, r := range runs {
		out.Rounds = append(out.Rounds, r.GrantsPerSec)
		out.Grants += r.Grants
		out.Seconds += r.Seconds
		out.lat = append(out.lat, r.lat...)
		out.Windows = append(out.Windows, r.Windows...)
		controller += r.Windows[0].Controller
	}
	out.GrantsPerSec = median(out.Rounds)
	out.Latency = summarize(out.lat)
	out.WritesPerCycle = ratio(controller, float64(out.Grants))
	return out
}

// throughputRounds alternates the raw parallel baseline and the grant throughput, the same
// number of clients and the same duration each, so G1's two sides see the same machine.
func (b *bench) throughputRounds(ctx context.Context, r *rawObjects, raw *RawResult) (ThroughputResult, error) {
	var runs []ThroughputResult
	dur := b.cfg.ThroughputDuration.D()
	for range b.cfg.ThroughputRounds {
		rate, err := r.run(ctx, b.cfg.Workers, dur)
		if err != nil {
			return ThroughputResult{}, fmt.Errorf("raw baseline: %w", err)
		}
		raw.ParallelRounds = append(raw.ParallelRounds, rate)
		tp, err := b.grantThroughput(ctx, "tput", dur)
		if err != nil {
			return ThroughputResult{}, err
		}
		runs = append(runs, tp)
	}
	raw.ParallelOpsPerSec = median(raw.ParallelRounds)
	return mergeThroughput(runs), nil
}

func (b *bench) grantThroughput(ctx context.Context, prefix string, dur time.Duration) (ThroughputResult, error) {
	workers, keys := b.cfg.Workers, b.cfg.ThroughputKeys
	res := ThroughputResult{Workers: workers, Keys: keys}
	ns, err := b.namespace(ctx, prefix)
	if err != nil {
		return res, err
	}
	w, err := b.open(ctx, ns)
	if err != nil {
		return res, err
	}
	var mu sync.Mutex
	var lat []time.Duration
	start := time.Now()
	deadline := start.Add(dur)
	err = parallel(ctx, workers, workers, func(ctx context.Context, worker int) error {
		var mine []time.Duration
		defer func() {
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
		for k := worker; time.Now().Before(deadline); {
			name := b.name("tp")
			lr := request(ns, name, "bench/throughput", fmt.Sprintf("k%03d", k), fmt.Sprintf("worker%d", worker), int64(k+1))
			t0 := time.Now()
			if err := b.create(ctx, lr); err != nil {
				return err
			}
			at, err := b.tracker.WaitGranted(ctx, ns, name, waitLimit)
			if err != nil {
				return err
			}
			mine = append(mine, at.Sub(t0))
			if err := b.remove(ctx, ns, name); err != nil {
				return err
			}
			// This worker's keys are k ≡ worker (mod workers); the next one, wrapping around.
			if k += workers; k >= keys {
				k = worker
			}
		}
		return nil
	})
	elapsed := time.Since(start)
	if err != nil {
		return res, err
	}
	if err := b.waitReleased(ctx, ns); err != nil {
		return res, err
	}
	win, err := w.close(ctx)
	if err != nil {
		return res, err
	}
	res.Windows = []Writes{win}
	res.Grants = len(lat)
	res.Seconds = elapsed.Seconds()
	res.GrantsPerSec = perSecond(len(lat), elapsed)
	res.Rounds = []float64{res.GrantsPerSec}
	res.lat = lat
	res.Latency = summarize(lat)
	res.WritesPerCycle = ratio(win.Controller, float64(len(lat)))
	return res, nil
}

// queueState is one contended key: a holder and depth waiters, kept at that depth by adding a
// waiter after every hand-off.
type queueState struct {
	ns, repo, path string
	holder         string
	depth          int
}

func (q *queueState) waiter(b *bench) *locksv1.LockRequest {
	n := b.names.Add(1)
	return request(q.ns, fmt.Sprintf("w-%06d", n), q.repo, q.path, fmt.Sprintf("waiter%d", n), n)
}

func (b *bench) setupQueue(ctx context.Context, depth int) (*queueState, error) {
	ns, err := b.namespace(ctx, fmt.Sprintf("depth%d", depth))
	if err != nil {
		return nil, err
	}
	q := &queueState{ns: ns, repo: "bench/handoff", path: "one-key", depth: depth}
	holder := request(ns, b.name("holder"), q.repo, q.path, "first-holder", 1)
	if err := b.create(ctx, holder); err != nil {
		return nil, err
	}
	if _, err := b.tracker.WaitGranted(ctx, ns, holder.Name, waitLimit); err != nil {
		return nil, err
	}
	q.holder = holder.Name
	if err := parallel(ctx, depth, b.cfg.Workers, func(ctx context.Context, _ int) error { return b.create(ctx, q.waiter(b)) }); err != nil {
		return nil, err
	}
	if _, err := b.tracker.WaitAllPhased(ctx, ns, depth+1, waitLimit); err != nil {
		return nil, err
	}
	return q, nil
}

// handoffs releases the holder (by deleting it, the documented way) samples times, each time
// timing the release → the next holder's Granted seen on the watch, then adding a waiter at
// the back. isolated waits until that waiter is queued before the next release, so a
// hand-off never overlaps an arrival.
func (b *bench) handoffs(ctx context.Context, q *queueState, samples int, isolated bool) ([]time.Duration, time.Duration, error) {
	var lat []time.Duration
	start := time.Now()
	for range samples {
		idx := b.tracker.GrantCount(q.ns)
		released := q.holder
		t0 := time.Now()
		if err := b.remove(ctx, q.ns, released); err != nil {
			return nil, 0, err
		}
		g, err := b.tracker.WaitGrant(ctx, q.ns, idx, waitLimit)
		if err != nil {
			return nil, 0, err
		}
		if g.name == released {
			return nil, 0, fmt.Errorf("the released holder %s was granted again", released)
		}
		lat = append(lat, g.at.Sub(t0))
		q.holder = g.name
		lr := q.waiter(b)
		if err := b.create(ctx, lr); err != nil {
			return nil, 0, err
		}
		if isolated {
			if err := b.tracker.WaitPhased(ctx, q.ns, lr.Name, waitLimit); err != nil {
				return nil, 0, err
			}
		}
	}
	return lat, time.Since(start), nil
}

// HandoffResult is hand-offs on one key with a queue of Depth waiters.
type HandoffResult struct {
	Depth int `json:"depth"`
	// Latency is release issued → next holder's Granted seen, with each arrival queued
	// before the next release (isolated run).
	Latency Latency `json:"latency"`
	// HandoffsPerSec and LoadedLatency are from the back-to-back run: release, wait for the
	// grant, add a waiter, release again.
	HandoffsPerSec float64 `json:"handoffsPerSec"`
	LoadedLatency  Latency `json:"loadedLatency"`
	// WritesPerHandoff is the manager's writes to lockrequests and projectlocks per hand-off in
	// the back-to-back run, in the steady state of a queue that keeps its depth: one arrival
	// per hand-off, so the arrival's writes (its enqueue, the ProjectLock's queue length) are
	// in it. RefreshesPerHandoff is the part that only refreshes waiters' queue positions,
	// ConflictsPerHandoff the writes answered 409 (a lost optimistic race, decided again).
	WritesPerHandoff     float64 `json:"writesPerHandoff"`
	RefreshesPerHandoff  float64 `json:"refreshesPerHandoff"`
	ConflictsPerHandoff  float64 `json:"conflictsPerHandoff"`
	EventsPerHandoff     float64 `json:"eventsPerHandoff"`
	ReconcilesPerHandoff float64 `json:"reconcilesPerHandoff"`
	CPUPerHandoffMs      float64 `json:"managerCPUPerHandoffMs"`
	// AllocsPerHandoff, AllocKiBPerHandoff and GCsPerHandoff are the manager's heap
	// allocations and collections per hand-off in the back-to-back run: its work per hand-off,
	// which the load on a shared machine does not change as it changes CPUPerHandoffMs.
	AllocsPerHandoff   float64 `json:"managerAllocsPerHandoff"`
	AllocKiBPerHandoff float64 `json:"managerAllocKiBPerHandoff"`
	GCsPerHandoff      float64 `json:"managerGCsPerHandoff"`
	SetupSeconds       float64 `json:"setupSeconds"`
	BackToBack         Writes  `json:"backToBackWindow"`
	Isolated           Writes  `json:"isolatedWindow"`
}

func (b *bench) handoffDepth(ctx context.Context, depth int) (HandoffResult, *queueState, error) {
	res := HandoffResult{Depth: depth}
	t := time.Now()
	q, err := b.setupQueue(ctx, depth)
	if err != nil {
		return res, nil, err
	}
	res.SetupSeconds = time.Since(t).Seconds()
	n := b.cfg.HandoffSamples

	w, err := b.open(ctx, q.ns)
	if err != nil {
		return res, nil, err
	}
	profiled := b.profile(ctx, fmt.Sprintf("cpu-handoff-depth%d%s", depth, b.profileTag))
	lat, elapsed, err := b.handoffs(ctx, q, n, false)
	if err != nil {
		return res, nil, err
	}
	if res.BackToBack, err = w.close(ctx); err != nil {
		return res, nil, err
	}
	if err := profiled(); err != nil {
		return res, nil, err
	}
	res.HandoffsPerSec = perSecond(n, elapsed)
	res.LoadedLatency = summarize(lat)
	res.WritesPerHandoff = res.BackToBack.Controller / float64(n)
	res.RefreshesPerHandoff = float64(res.BackToBack.Transitions.Refresh) / float64(n)
	res.ConflictsPerHandoff = res.BackToBack.Conflicts / float64(n)
	res.EventsPerHandoff = res.BackToBack.Events / float64(n)
	res.ReconcilesPerHandoff = res.BackToBack.Reconciles / float64(n)
	res.CPUPerHandoffMs = res.BackToBack.ManagerCPU * 1000 / float64(n)
	res.AllocsPerHandoff = res.BackToBack.ManagerAllocs / float64(n)
	res.AllocKiBPerHandoff = res.BackToBack.ManagerAllocBytes / 1024 / float64(n)
	res.GCsPerHandoff = res.BackToBack.ManagerGCs / float64(n)

	if w, err = b.open(ctx, q.ns); err != nil {
		return res, nil, err
	}
	if lat, _, err = b.handoffs(ctx, q, n, true); err != nil {
		return res, nil, err
	}
	if res.Isolated, err = w.close(ctx); err != nil {
		return res, nil, err
	}
	res.Latency = summarize(lat)
	return res, q, nil
}
