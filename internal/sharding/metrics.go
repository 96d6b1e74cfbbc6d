package sharding

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// BackupDeferrals counts the items a backup left to their key's owner for one more backup
// delay because the owner was seen deciding the key (WithProgress). Each due item is deferred
// at most once, so this is also the number of backup decisions that came a delay late.
var BackupDeferrals = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "turnstile_backup_deferrals_total",
	Help: "Backup decisions put off one backup delay because the key's owner was seen deciding the key (at most once per item).",
})

func init() { metrics.Registry.MustRegister(BackupDeferrals) }
