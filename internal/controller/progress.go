package controller

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
	"github.com/turnstile-dev/turnstile/internal/sharding"
)

// decisions records, per key, when the watch last showed a decision written on it by any
// replica: a ProjectLock's status, or a change of a LockRequest's status that belongs to the
// key (decidedKeys). Only the controllers write statuses, so a key decided a moment ago has an
// owner at work on it; a backup reads this to leave such a key alone, for one more backup
// delay at most (sharding.WithProgress). Progress is judged per key: a request's status names
// all its keys, but a write that another key's queue made (a refreshed position there) says
// nothing about this key's owner, and membership renewals count for nothing.
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
			names := decidedKeys(lr, &was.Status)
			keys := make([]types.NamespacedName, 0, len(names))
			for _, n := range names {
				keys = append(keys, types.NamespacedName{Namespace: lr.Namespace, Name: n})
			}
			d.saw(keys...)
		},
	})
	return err
}

// decidedKeys are the ProjectLocks a change of lr's status from was decided: a key whose
// entry in status.locks changed (held, token), and the key the request waits in before or
// after the change (the first one in canonical order it does not hold), whose queue writes its
// position, blocker, conditions and phase. Any other key's owner had no part in the write: a
// busy key's position refreshes of a multi-lock request are not progress on the request's
// other keys, and a renewal of a granted request (renewedAt, expiresAt) is progress on none.
func decidedKeys(lr *locksv1.LockRequest, was *locksv1.LockRequestStatus) []string {
	var out []string
	add := func(name string) {
		if name != "" && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	for _, l := range lr.Status.Locks {
		// A first status lists every key unheld: only the key it waits in decided that.
		i := slices.IndexFunc(was.Locks, func(o locksv1.LockStatus) bool { return o.Name == l.Name })
		// guard:progress-counts-every-listed-key
		if (i < 0 && l != locksv1.LockStatus{Key: l.Key, Name: l.Name}) || (i >= 0 && was.Locks[i] != l) {
			add(l.Name)
		}
	}
	refs := lockkey.Refs(lr.Spec.Locks)
	add(waitsIn(refs, was))
	add(waitsIn(refs, &lr.Status))
	return out
}

// waitsIn is the ProjectLock a request with status st waits in: the first of its keys in
// canonical order that st does not say it holds; "" when it waits in none (granted, final).
func waitsIn(refs []lockkey.Ref, st *locksv1.LockRequestStatus) string {
	if st.Phase == locksv1.PhaseGranted || st.Phase.IsFinal() {
		return ""
	}
	for _, r := range refs {
		if r.Index >= len(st.Locks) || st.Locks[r.Index].Name != r.Name || !st.Locks[r.Index].Held {
			return r.Name
		}
	}
	return ""
}
