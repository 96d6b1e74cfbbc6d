package controller

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/turnstile-dev/turnstile/internal/deadlock"
	"github.com/turnstile-dev/turnstile/internal/queue"
)

// SetupOptions configure every Turnstile controller.
type SetupOptions struct {
	Queue               queue.Config
	Freeze              queue.FreezeFlags
	Workers             int
	Retention           time.Duration
	PositionRefreshRate float64
	DeadlockPolicy      deadlock.Policy
	// DeadlockScan is the full-scan period; 0 disables it. Detection on new waiters stays on
	// unless DisableDeadlockDetection is set.
	DeadlockScan             time.Duration
	DisableDeadlockDetection bool
	// Registry receives the metrics; nil leaves them unregistered.
	Registry prometheus.Registerer
}

// Setup registers the indexes, controllers and the deadlock detector with mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, o SetupOptions) error {
	if err := SetupIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	recorder := mgr.GetEventRecorder("turnstile")
	m := NewMetrics(o.Registry, mgr.GetCache())
	opts := []LockOption{WithConfig(o.Queue), WithFreezeFlags(o.Freeze), WithMetrics(m)}
	if o.Workers > 0 {
		opts = append(opts, WithWorkers(o.Workers))
	}
	if o.PositionRefreshRate > 0 {
		opts = append(opts, WithPositionRefreshRate(o.PositionRefreshRate, max(1, int(o.PositionRefreshRate))))
	}
	if !o.DisableDeadlockDetection {
		policy := o.DeadlockPolicy
		if policy == "" {
			policy = deadlock.PolicyNewest
		}
		det := NewDeadlockDetector(mgr.GetClient(), recorder, o.Queue, o.Freeze, policy, o.DeadlockScan, m, nil)
		if err := mgr.Add(det); err != nil {
			return err
		}
		opts = append(opts, WithDeadlockChecker(det))
	}
	locks := NewLockReconciler(mgr.GetClient(), mgr.GetAPIReader(), recorder, opts...)
	if err := locks.SetupWithManager(mgr); err != nil {
		return err
	}
	if err := NewCommandLockReconciler(mgr.GetClient(), recorder, o.Freeze, m, nil).SetupWithManager(mgr); err != nil {
		return err
	}
	return NewRetentionReconciler(mgr.GetClient(), o.Retention, nil).SetupWithManager(mgr)
}
