package controller

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/queue"
)

// Metrics are Turnstile's Prometheus metrics, served on the manager's metrics endpoint.
type Metrics struct {
	QueueDepth   *prometheus.GaugeVec
	GrantLatency prometheus.Histogram
	WaitDuration prometheus.Histogram
	HoldDuration prometheus.Histogram
	Grants       prometheus.Counter
	Finished     *prometheus.CounterVec
	Conflicts    prometheus.Counter
	// PlanWrites is how many writes each decision's plan made before it ended or stopped.
	PlanWrites prometheus.Histogram
	// StepConflicts counts the plan writes that lost a race, by protocol step.
	StepConflicts *prometheus.CounterVec
	// Demoted counts grants a ProjectLock listed that were taken back before their request was
	// told, because its command froze meanwhile (docs/protocol.md).
	Demoted   prometheus.Counter
	Deadlocks prometheus.Counter
	// DeadlockChecks counts each namespace a detector round looked at: checked, or skipped
	// because no new wait could close a cycle.
	DeadlockChecks *prometheus.CounterVec
	FrozenCommand  *prometheus.GaugeVec
	Blocked        *prometheus.GaugeVec
	// Bypasses counts grants that spec.bypassFreeze let past a freeze, by command.
	Bypasses *prometheus.CounterVec
	// BreakGlass counts break-glass grants a write freeze lists (spec.admission), by command.
	BreakGlass *prometheus.CounterVec
	// EventsDropped counts Kubernetes events over the recorder's budget (recorder.go).
	EventsDropped prometheus.Counter
	// UndecidedKeys counts the keys the watchdog found with work no decision had reached for
	// longer than --undecided-key-bound, by where the key was then (watchdog.go).
	UndecidedKeys *prometheus.CounterVec
	// LongestUndecided is how long the key with work that has waited longest for a decision
	// has waited, as of the watchdog's last look.
	LongestUndecided prometheus.Gauge
}

var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// NewMetrics creates the metrics and registers them with reg (nil: not registered, for tests).
// requests, when set, is read at scrape time to report requests by phase.
func NewMetrics(reg prometheus.Registerer, requests ...*RequestCounts) *Metrics {
	m := &Metrics{
		QueueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "turnstile_queue_depth", Help: "Requests waiting for a lock key.",
		}, []string{"namespace", "projectlock"}),
		GrantLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "turnstile_grant_latency_seconds", Help: "Time from a LockRequest's creation to its grant.", Buckets: latencyBuckets,
		}),
		WaitDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "turnstile_wait_duration_seconds", Help: "Time a request waited in the queue before its grant.", Buckets: latencyBuckets,
		}),
		HoldDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "turnstile_hold_duration_seconds", Help: "Time a grant was held before it was released, expired or lost.", Buckets: latencyBuckets,
		}),
		Grants: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "turnstile_grants_total", Help: "LockRequests granted.",
		}),
		Finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnstile_requests_finished_total", Help: "LockRequests that reached a final phase, by phase and reason (Expired, Timeout, Deadlock, HolderLost, ...).",
		}, []string{"phase", "reason"}),
		Conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "turnstile_write_conflicts_total", Help: "Optimistic writes that lost a race and were decided again.",
		}),
		PlanWrites: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "turnstile_plan_writes", Help: "Writes each decision's plan made before it ended or stopped at a conflict.", Buckets: []float64{0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64},
		}),
		StepConflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnstile_plan_conflicts_total", Help: "Plan writes that lost an optimistic race, by protocol step (the key is decided again from a fresh read).",
		}, []string{"step"}),
		Demoted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "turnstile_grants_demoted_total", Help: "Grants taken back before their request was told, because its command froze meanwhile.",
		}),
		Deadlocks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "turnstile_deadlocks_total", Help: "Deadlock cycles detected and broken.",
		}),
		DeadlockChecks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnstile_deadlock_checks_total", Help: "Namespace deadlock checks: checked, or skipped because no new waiter could close a cycle.",
		}, []string{"outcome"}),
		FrozenCommand: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "turnstile_command_frozen", Help: "1 while a CommandLock freezes its command.",
		}, []string{"command"}),
		Blocked: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "turnstile_command_blocked_requests", Help: "Requests waiting because their command is frozen.",
		}, []string{"command"}),
		Bypasses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnstile_freeze_bypasses_total", Help: "Grants that an admin's spec.bypassFreeze let past a freeze, by command.",
		}, []string{"command"}),
		BreakGlass: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnstile_admission_bypasses_total", Help: "Break-glass grants (a granted LockRequest with spec.bypassFreeze) that let their owner's writes past a write freeze, by command.",
		}, []string{"command"}),
		EventsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "turnstile_events_dropped_total", Help: "Kubernetes events not sent because they exceeded the recorder's budget (the request's status says the same).",
		}),
		UndecidedKeys: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnstile_undecided_keys_total",
			Help: "Keys found with work (a release asked for, a grant to write, an expiry, a free key with waiters, an undecided request) that no decision had reached for longer than --undecided-key-bound, and decided from a live read, by where the key was: queued (waiting for a worker), working (held by a worker), idle (neither: nothing would have decided it).",
		}, []string{"where"}),
		LongestUndecided: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "turnstile_undecided_seconds", Help: "How long the key with work that has waited longest for a decision has waited, as of the watchdog's last look (0: every key with work was decided).",
		}),
	}
	// Every place a key can be is exported from the start, at 0: the alert's increase() then
	// counts the first undecided key too.
	for _, where := range []string{"queued", "working", "idle"} {
		m.UndecidedKeys.WithLabelValues(where)
	}
	if reg != nil {
		reg.MustRegister(m.QueueDepth, m.GrantLatency, m.WaitDuration, m.HoldDuration, m.Grants, m.Finished,
			m.Conflicts, m.PlanWrites, m.StepConflicts, m.Demoted, m.Deadlocks, m.DeadlockChecks, m.FrozenCommand, m.Blocked, m.Bypasses, m.BreakGlass, m.EventsDropped,
			m.UndecidedKeys, m.LongestUndecided)
		if len(requests) > 0 {
			reg.MustRegister(&phaseCollector{counts: requests[0]})
		}
	}
	return m
}

func (m *Metrics) queueDepth(namespace, name string, n int) {
	if n == 0 {
		m.QueueDepth.DeleteLabelValues(namespace, name)
		return
	}
	m.QueueDepth.WithLabelValues(namespace, name).Set(float64(n))
}

func (m *Metrics) granted(u queue.Update, now time.Time) {
	// Only a new grant counts: a renewal's event rides on an update of a request already granted.
	if u.Status.Phase != locksv1.PhaseGranted || u.Request.Status.Phase == locksv1.PhaseGranted {
		return
	}
	m.Grants.Inc()
	m.GrantLatency.Observe(now.Sub(u.Request.CreationTimestamp.Time).Seconds())
	if q := u.Status.QueuedAt; q != nil {
		m.WaitDuration.Observe(now.Sub(q.Time).Seconds())
	}
}

func (m *Metrics) finished(u queue.Update, now time.Time) {
	reason := ""
	if u.Event != nil {
		reason = u.Event.Reason
	}
	m.Finished.WithLabelValues(string(u.Status.Phase), reason).Inc()
	if g := u.Request.Status.GrantedAt; g != nil {
		m.HoldDuration.Observe(now.Sub(g.Time).Seconds())
	}
}

// phaseCollector reports requests by phase from the informer-kept counts at scrape time, so
// the numbers are always true without bookkeeping in the reconcilers.
type phaseCollector struct{ counts *RequestCounts }

var phaseDesc = prometheus.NewDesc("turnstile_lockrequests", "LockRequests by namespace and phase.", []string{"namespace", "phase"}, nil)

func (c *phaseCollector) Describe(ch chan<- *prometheus.Desc) { ch <- phaseDesc }

func (c *phaseCollector) Collect(ch chan<- prometheus.Metric) {
	c.counts.Each(func(ns string, phase locksv1.LockRequestPhase, n int) {
		ch <- prometheus.MustNewConstMetric(phaseDesc, prometheus.GaugeValue, float64(n), ns, string(phase))
	})
}
