package framework

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/queue"
)

// InvariantChecker watches every LockRequest and checks, after each event, the safety
// invariant: no lock key is held by two different holder identities at once unless all hold it
// Shared, and never by more requests than the lowest maxHolders among them (a counting lock), as
// the requests' own statuses say (phase Granted, or a held flag on a Pending multi-lock
// request). A single watch delivers events in the store's order, so each check sees a state
// that really existed.
type InvariantChecker struct {
	mu         sync.Mutex
	requests   map[string]*locksv1.LockRequest // namespace/name
	violations []string
	events     int
	grants     int
	cancel     context.CancelFunc
	done       chan struct{}
}

// StartInvariantChecker starts watching LockRequests in all namespaces (or one, if given).
func StartInvariantChecker(ctx context.Context, c client.WithWatch, namespace string) (*InvariantChecker, error) {
	ctx, cancel := context.WithCancel(ctx)
	opts := []client.ListOption{}
	if namespace != "" {
		opts = append(opts, client.InNamespace(namespace))
	}
	w, err := c.Watch(ctx, &locksv1.LockRequestList{}, opts...)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watch lockrequests: %w", err)
	}
	ic := &InvariantChecker{requests: map[string]*locksv1.LockRequest{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(ic.done)
		rv := ""
		for {
			for ev := range w.ResultChan() {
				if m, ok := ev.Object.(metav1.Object); ok && m.GetResourceVersion() != "" {
					rv = m.GetResourceVersion()
				}
				ic.observe(ev)
			}
			w.Stop()
			if ctx.Err() != nil {
				return
			}
			// The server closed the watch (a timeout): resume from the last resourceVersion
			// seen, so no event is missed.
			raw := &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: false}
			var err error
			w, err = c.Watch(ctx, &locksv1.LockRequestList{}, append(opts, &client.ListOptions{Raw: raw})...)
			if err != nil {
				if ctx.Err() != nil {
					return // Stop was called while it resumed: not a lost sight
				}
				ic.mu.Lock()
				ic.violations = append(ic.violations, "watch could not resume: the checker lost sight of the requests: "+err.Error())
				ic.mu.Unlock()
				return
			}
		}
	}()
	return ic, nil
}

func (ic *InvariantChecker) observe(ev watch.Event) {
	lr, ok := ev.Object.(*locksv1.LockRequest)
	if !ok {
		return
	}
	ic.mu.Lock()
	defer ic.mu.Unlock()
	ic.events++
	key := lr.Namespace + "/" + lr.Name
	switch ev.Type {
	case watch.Deleted:
		delete(ic.requests, key)
		return
	case watch.Added, watch.Modified:
		prev := ic.requests[key]
		if lr.Status.Phase == locksv1.PhaseGranted && (prev == nil || prev.Status.Phase != locksv1.PhaseGranted) {
			ic.grants++
		}
		ic.requests[key] = lr
	default:
		return
	}
	// Who holds each key now, by the requests' own word.
	holders := map[string]map[locksv1.HolderID][]string{} // ns/lockName -> identity (field by field) -> request names
	exclusive := map[string]bool{}                        // ns/lockName -> held by an exclusive request
	count, bound := map[string]int{}, map[string]int32{}  // ns/lockName -> holding requests, their lowest maxHolders
	for k, r := range ic.requests {
		for _, l := range queue.HeldLocks(r) {
			lk := r.Namespace + "/" + l.Name
			if holders[lk] == nil {
				holders[lk] = map[locksv1.HolderID][]string{}
			}
			id := r.Spec.Holder.ID()
			holders[lk][id] = append(holders[lk][id], k)
			exclusive[lk] = exclusive[lk] || !queue.SharedOn(r, l.Name)
			count[lk]++
			if b := queue.MaxHoldersOn(r, l.Name); b > 0 && (bound[lk] == 0 || b < bound[lk]) {
				bound[lk] = b
			}
		}
	}
	// A counting lock: no more holders than the lowest bound among them.
	for lk, n := range count {
		if b := bound[lk]; b > 0 && n > int(b) {
			ic.violations = append(ic.violations, fmt.Sprintf("after %s of %s (rv %s): %s held by %d requests, one of them with maxHolders %d",
				ev.Type, key, lr.ResourceVersion, lk, n, b))
		}
	}
	// No exclusive holder beside a holder of another identity; shared holders hold together.
	for lk, ids := range holders {
		if len(ids) < 2 || !exclusive[lk] {
			continue
		}
		var parts []string
		for id, reqs := range ids {
			parts = append(parts, fmt.Sprintf("%s via %v", id, reqs))
		}
		sort.Strings(parts)
		ic.violations = append(ic.violations, fmt.Sprintf("after %s of %s (rv %s): %s held by %d identities: %s",
			ev.Type, key, lr.ResourceVersion, lk, len(ids), strings.Join(parts, "; ")))
	}
}

// Stop stops watching.
func (ic *InvariantChecker) Stop() {
	ic.cancel()
	<-ic.done
}

// Violations returns every violation seen so far.
func (ic *InvariantChecker) Violations() []string {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	return append([]string(nil), ic.violations...)
}

// Stats returns how many events and grants the checker saw, so a test can prove it watched.
func (ic *InvariantChecker) Stats() (events, grants int) {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	return ic.events, ic.grants
}
