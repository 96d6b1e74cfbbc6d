package hub

import (
	"context"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/utils/clock"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// The per-spoke gauges, read from the Spokes in the cache at scrape time: a Spoke deleted
// leaves no series behind, and the heartbeat's age is the scrape's.
var (
	connectedDesc = prometheus.NewDesc("turnstile_fleet_spoke_connected",
		"1 while a hub Lease of the spoke is live (Spoke status.connection Connected), 0 when Unreachable or Never connected.", []string{"cluster"}, nil)
	heartbeatAgeDesc = prometheus.NewDesc("turnstile_fleet_spoke_heartbeat_age_seconds",
		"Seconds since the spoke's latest hub Lease renewal (Spoke status.lastHeartbeat), by the hub's clock; +Inf for a member never heard from.", []string{"cluster"}, nil)
	skewDesc = prometheus.NewDesc("turnstile_fleet_spoke_clock_skew_seconds",
		"The clock skew bound the spoke's agent measured against the hub (Spoke status.clockSkewMilliseconds); absent before its first measure.", []string{"cluster"}, nil)
	holdersDesc = prometheus.NewDesc("turnstile_fleet_spoke_holders",
		"The hub's granted requests whose holder is in the spoke's cluster.", []string{"cluster"}, nil)
	waitersDesc = prometheus.NewDesc("turnstile_fleet_spoke_waiters",
		"The hub's pending requests whose holder is in the spoke's cluster.", []string{"cluster"}, nil)
	keepRunningDesc = prometheus.NewDesc("turnstile_fleet_spoke_keep_running",
		"The spoke's holders that opted out of the partition stop (fleet.turnstile.dev/on-partition: keep-running): the hub keeps their locks while the spoke is unreachable, until released.", []string{"cluster"}, nil)
	agentDesc = prometheus.NewDesc("turnstile_fleet_spoke_agent_info",
		"1, labelled with the version the spoke's agent publishes (Spoke status.agentVersion); absent before its first. count by (version) shows the fleet's agent versions.", []string{"cluster", "version"}, nil)
)

// listTimeout bounds a scrape's read of the cache.
const listTimeout = 5 * time.Second

// Collector exports the fleet view's gauges, one series per Spoke.
type Collector struct {
	reader client.Reader
	clock  clock.PassiveClock
}

// NewCollector reads Spokes from reader (the manager's cache) at each scrape; clk is the hub's
// clock (nil: the real one).
func NewCollector(reader client.Reader, clk clock.PassiveClock) *Collector {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Collector{reader: reader, clock: clk}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{connectedDesc, heartbeatAgeDesc, skewDesc, holdersDesc, waitersDesc, keepRunningDesc, agentDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. A failed read reports the error as an invalid
// metric, so the scrape says so rather than showing no spoke.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), listTimeout)
	defer cancel()
	var spokes locksv1.SpokeList
	if err := c.reader.List(ctx, &spokes, client.UnsafeDisableDeepCopy); err != nil {
		ch <- prometheus.NewInvalidMetric(connectedDesc, err)
		return
	}
	now := c.clock.Now()
	for i := range spokes.Items {
		sp := &spokes.Items[i]
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, sp.Name)
		}
		connected := 0.0
		if sp.Status.Connection == locksv1.SpokeConnected {
			connected = 1
		}
		gauge(connectedDesc, connected)
		// A spoke never heard from is infinitely old: the series exists for every member, so an
		// alert on it (TurnstileKeepRunningHeldByLostSpoke) has something to select.
		age := math.Inf(1)
		if hb := sp.Status.LastHeartbeat; hb != nil {
			age = max(now.Sub(hb.Time), 0).Seconds()
		}
		gauge(heartbeatAgeDesc, age)
		if ms := sp.Status.ClockSkewMilliseconds; ms != nil {
			gauge(skewDesc, float64(*ms)/1000)
		}
		gauge(holdersDesc, float64(sp.Status.Holders))
		gauge(waitersDesc, float64(sp.Status.Waiters))
		gauge(keepRunningDesc, float64(sp.Status.KeepRunning))
		if v := sp.Status.AgentVersion; v != "" {
			ch <- prometheus.MustNewConstMetric(agentDesc, prometheus.GaugeValue, 1, sp.Name, v)
		}
	}
}

// CacheOptions is what the manager's cache holds of ConfigMaps: the members ConfigMap alone
// (the manager's RBAC reads no other), so a hub's manager does not cache every ConfigMap of the
// cluster for one.
func CacheOptions() ctrlcache.ByObject {
	return ctrlcache.ByObject{
		Namespaces: map[string]ctrlcache.Config{Namespace: {}},
		Field:      fields.OneTermEqualSelector("metadata.name", MembersConfigMap),
	}
}

// CacheObject is the object CacheOptions scopes.
func CacheObject() client.Object { return &corev1.ConfigMap{} }
