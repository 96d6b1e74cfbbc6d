package controller

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/sharding"
)

// decisions records, per key, when the watch last showed a decision written on it by any
// replica: a ProjectLock's status, or a LockRequest's status that names the key. Only the
// controllers write statuses, so a key decided a moment ago has an owner at work on it; a
// backup reads this to leave such a key alone (sharding.WithProgress). A request's status
// names all its keys, so a write for one counts for each: a backup of the others waits one
// more backup delay at most, as it would for an owner that wrote late.
type decisions struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	last  map[string]time.Time
}

var _ sharding.Progress = (*decisions)(nil)

func newDecisions(c clock.PassiveClock) *decisions {
	return &decisions{clock: c, last: map[string]time.Time{}}
}

// LastDecided implements sharding.Progress; key is namespace/ProjectLock name.
func (d *decisions) LastDecided(key string) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.last[key]
}

func (d *decisions) saw(keys ...types.NamespacedName) {
	now := d.clock.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, k := range keys {
		d.last[k.String()] = now
	}
}

// forget drops a key whose ProjectLock is gone: nobody decides it until a request names it
// again, and the map does not grow with every key ever locked.
func (d *decisions) forget(key types.NamespacedName) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.last, key.String())
}

// watch feeds d from the informers the key reconciler uses.
func (d *decisions) watch(ctx context.Context, c cache.Cache) error {
	locks, err := c.GetInformer(ctx, &locksv1.ProjectLock{})
	if err != nil {
		return err
	}
	if _, err := locks.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) {
			if pl, ok := o.(*locksv1.ProjectLock); ok {
				d.saw(types.NamespacedName{Namespace: pl.Namespace, Name: pl.Name})
			}
		},
		UpdateFunc: func(o, n any) {
			was, ok1 := o.(*locksv1.ProjectLock)
			pl, ok2 := n.(*locksv1.ProjectLock)
			if ok1 && ok2 && !equality.Semantic.DeepEqual(was.Status, pl.Status) {
				d.saw(types.NamespacedName{Namespace: pl.Namespace, Name: pl.Name})
			}
		},
		DeleteFunc: func(o any) {
			if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if pl, ok := o.(*locksv1.ProjectLock); ok {
				d.forget(types.NamespacedName{Namespace: pl.Namespace, Name: pl.Name})
			}
		},
	}); err != nil {
		return err
	}
	requests, err := c.GetInformer(ctx, &locksv1.LockRequest{})
	if err != nil {
		return err
	}
	_, err = requests.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(o, n any) {
			was, ok1 := o.(*locksv1.LockRequest)
			lr, ok2 := n.(*locksv1.LockRequest)
			if !ok1 || !ok2 || equality.Semantic.DeepEqual(was.Status, lr.Status) {
				return
			}
			keys := make([]types.NamespacedName, 0, len(lr.Status.Locks))
			for _, l := range lr.Status.Locks {
				keys = append(keys, types.NamespacedName{Namespace: lr.Namespace, Name: l.Name})
			}
			d.saw(keys...)
		},
	})
	return err
}
