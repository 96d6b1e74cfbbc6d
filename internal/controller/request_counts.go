package controller

import (
	"slices"
	"sync"

	toolscache "k8s.io/client-go/tools/cache"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// RequestCounts counts the cached LockRequests by namespace and phase, kept current by the
// informer's events. The requests-by-phase metric and the deadlock detector's periodic scan
// read it instead of listing every request from the cache: a list copies each object (100,000
// requests are about 100 MiB of garbage per scrape), the counts are one map entry per
// namespace and phase.
type RequestCounts struct {
	mu     sync.Mutex
	counts map[string]map[locksv1.LockRequestPhase]int
}

// NewRequestCounts returns empty counts; register them as an event handler of the LockRequest
// informer.
func NewRequestCounts() *RequestCounts {
	return &RequestCounts{counts: map[string]map[locksv1.LockRequestPhase]int{}}
}

// phaseOf is the phase a request counts under: a request not yet decided is Pending.
func phaseOf(lr *locksv1.LockRequest) locksv1.LockRequestPhase {
	if lr.Status.Phase == "" {
		return locksv1.PhasePending
	}
	return lr.Status.Phase
}

func (c *RequestCounts) add(obj any, delta int) {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	lr, ok := obj.(*locksv1.LockRequest)
	if !ok {
		return
	}
	p := phaseOf(lr)
	c.mu.Lock()
	defer c.mu.Unlock()
	byPhase := c.counts[lr.Namespace]
	if byPhase == nil {
		byPhase = map[locksv1.LockRequestPhase]int{}
		c.counts[lr.Namespace] = byPhase
	}
	byPhase[p] += delta
	// guard:request-counts-forget-empty
	if byPhase[p] <= 0 {
		delete(byPhase, p)
		if len(byPhase) == 0 {
			delete(c.counts, lr.Namespace)
		}
	}
}

// OnAdd counts a request the informer added.
func (c *RequestCounts) OnAdd(obj any, _ bool) { c.add(obj, 1) }

// OnUpdate moves a request from its old phase to its new one.
func (c *RequestCounts) OnUpdate(oldObj, newObj any) {
	c.add(oldObj, -1)
	c.add(newObj, 1)
}

// OnDelete uncounts a deleted request (or its tombstone).
func (c *RequestCounts) OnDelete(obj any) { c.add(obj, -1) }

// Namespaces are the namespaces that have requests, sorted.
func (c *RequestCounts) Namespaces() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.counts))
	for ns := range c.counts {
		out = append(out, ns)
	}
	slices.Sort(out)
	return out
}

// Each calls f with every namespace and phase that has requests, and their number.
func (c *RequestCounts) Each(f func(namespace string, phase locksv1.LockRequestPhase, n int)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for ns, byPhase := range c.counts {
		for p, n := range byPhase {
			f(ns, p, n)
		}
	}
}
