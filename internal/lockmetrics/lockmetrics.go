// Package lockmetrics exports, at scrape time, what the manager's cache says about each lock
// key: when its holder was granted it. On-call engineers need that for "a lock held longer
// than expected" (the TurnstileLockHeldTooLong alert, the dashboard's longest holds), and no
// counter or histogram can say it: a histogram of hold times learns of a hold only when it ends.
//
// It reads the cache the controllers already keep, like turnstile_lockrequests, so the numbers
// are true at every scrape with no bookkeeping on the grant path. Every replica exports them
// (followers keep a synced cache too); read them with max by (namespace, projectlock).
package lockmetrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// HeldSinceName is the metric's name.
const HeldSinceName = "turnstile_lock_held_since_timestamp_seconds"

var heldSinceDesc = prometheus.NewDesc(HeldSinceName,
	"When the current holder of a lock key was granted it (ProjectLock status.holder.since), in Unix seconds; one series per held key.",
	[]string{"namespace", "projectlock"}, nil)

// listTimeout bounds one scrape's read of the cache.
const listTimeout = 5 * time.Second

// HolderCollector is a prometheus.Collector over the ProjectLocks a reader (the manager's
// cache) holds.
type HolderCollector struct{ reader client.Reader }

var _ prometheus.Collector = (*HolderCollector)(nil)

// NewHolderCollector returns a collector reading ProjectLocks from reader.
func NewHolderCollector(reader client.Reader) *HolderCollector {
	return &HolderCollector{reader: reader}
}

// Describe implements prometheus.Collector.
func (c *HolderCollector) Describe(ch chan<- *prometheus.Desc) { ch <- heldSinceDesc }

// Collect implements prometheus.Collector: one sample per ProjectLock that has a holder. A
// failed read reports the error as an invalid metric, so the scrape says so rather than
// showing every lock free.
func (c *HolderCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), listTimeout)
	defer cancel()
	var locks locksv1.ProjectLockList
	// Read only, so not copied: a scrape of a cache of 10,000 keys would copy each status
	// (with its queue's head) once more.
	if err := c.reader.List(ctx, &locks, client.UnsafeDisableDeepCopy); err != nil {
		ch <- prometheus.NewInvalidMetric(heldSinceDesc, err)
		return
	}
	for i := range locks.Items {
		pl := &locks.Items[i]
		var at metav1.Time
		switch {
		case pl.Status.Holder != nil:
			at = pl.Status.Holder.Since
		case len(pl.Status.SharedHolders) > 0:
			at = pl.Status.SharedHolders[0].GrantedAt // the oldest shared holder's grant
		default:
			continue
		}
		since := float64(at.UnixNano()) / float64(time.Second)
		ch <- prometheus.MustNewConstMetric(heldSinceDesc, prometheus.GaugeValue, since, pl.Namespace, pl.Name)
	}
}
