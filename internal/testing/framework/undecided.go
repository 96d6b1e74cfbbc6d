package framework

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
)

// UndecidedMeter measures, from a test's own watch of a namespace's LockRequests and
// ProjectLocks, how long each key with work went undecided: a request that has no phase yet
// (from its creation to its first status), a holder asked to release (spec.release, or
// deleted) until its key lets it go, a granted request past its expiresAt until it is final,
// and a free key with a waiter queued behind nobody (reason Queued) until someone holds it.
// Each piece of work is timed from the event that showed it (or its expiry) to the event that
// showed it done, so what it measures is what a client of the key saw. A key that stood still
// shows as one long stretch (issue #47).
type UndecidedMeter struct {
	mu       sync.Mutex
	requests map[string]*locksv1.LockRequest // by name
	locks    map[string]*locksv1.ProjectLock // by name
	open     map[string]time.Time            // work not done yet, by what it is
	gone     map[string]goneHolder           // the deleted holders' releases among open
	longest  time.Duration
	what     string
	items    int
	log      io.Writer
	cancel   context.CancelFunc
	done     sync.WaitGroup
}

// StartUndecidedMeter starts watching namespace ns. log, when not nil, gets every event the
// meter saw (type, kind, name, resourceVersion, phase), to compare with what a manager heard.
func StartUndecidedMeter(ctx context.Context, c client.WithWatch, ns string, log io.Writer) (*UndecidedMeter, error) {
	ctx, cancel := context.WithCancel(ctx)
	m := &UndecidedMeter{requests: map[string]*locksv1.LockRequest{}, locks: map[string]*locksv1.ProjectLock{},
		open: map[string]time.Time{}, gone: map[string]goneHolder{}, log: log, cancel: cancel}
	for _, list := range []client.ObjectList{&locksv1.LockRequestList{}, &locksv1.ProjectLockList{}} {
		w, err := c.Watch(ctx, list, client.InNamespace(ns))
		if err != nil {
			cancel()
			m.done.Wait()
			return nil, fmt.Errorf("watch %T: %w", list, err)
		}
		m.done.Go(func() { m.follow(ctx, c, ns, list, w) })
	}
	return m, nil
}

// follow reads one watch, resuming it where it ended when the server closes it. When it cannot
// resume (an API server or etcd restarted: 410 Gone, or refused), it watches again from the
// current state, forgetting what it held of that kind: the objects deleted meanwhile are gone
// from it, and the work they showed is timed to then.
func (m *UndecidedMeter) follow(ctx context.Context, c client.WithWatch, ns string, list client.ObjectList, w watch.Interface) {
	rv := ""
	for {
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				// Most often 410 Gone: rv is past what the server keeps.
				rv = ""
				m.forget(list)
				break
			}
			if o, err := meta.Accessor(ev.Object); err == nil && o.GetResourceVersion() != "" {
				rv = o.GetResourceVersion()
			}
			m.observe(ev, time.Now())
		}
		w.Stop()
		for {
			if ctx.Err() != nil {
				return
			}
			var err error
			if w, err = c.Watch(ctx, list, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}}); err == nil {
				break
			}
			if rv != "" {
				rv = ""
				m.forget(list)
				continue
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}

// forget drops what the meter holds of list's kind, before a watch from the current state.
func (m *UndecidedMeter) forget(list client.ObjectList) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := list.(*locksv1.LockRequestList); ok {
		clear(m.requests)
	} else {
		clear(m.locks)
	}
}

// Report is a line that says what the meter measured on namespace ns, as the soak
// (hack/soak-undecided.sh) reads it.
func (m *UndecidedMeter) Report(ns string) string {
	longest, what, items := m.Longest()
	return fmt.Sprintf("undecided meter on %s: %d pieces of work, the longest undecided %s: %s", ns, items, longest.Round(time.Millisecond), what)
}

// Stop stops watching.
func (m *UndecidedMeter) Stop() {
	m.cancel()
	m.done.Wait()
}

// Longest is the longest time a piece of work went undecided, the work still open included
// (timed to now), what it was, and how many pieces of work the meter timed.
func (m *UndecidedMeter) Longest() (time.Duration, string, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	longest, what := m.longest, m.what
	now := time.Now()
	for w, since := range m.open {
		if d := now.Sub(since); d > longest {
			longest, what = d, w+" (still open)"
		}
	}
	return longest, what, m.items
}

func (m *UndecidedMeter) observe(ev watch.Event, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch o := ev.Object.(type) {
	case *locksv1.LockRequest:
		if m.log != nil {
			fmt.Fprintf(m.log, "%s %s LockRequest %s rv=%s phase=%s release=%v\n", now.Format(time.RFC3339Nano), ev.Type, o.Name, o.ResourceVersion, o.Status.Phase, o.Spec.Release)
		}
		switch ev.Type {
		case watch.Added, watch.Modified:
			m.requests[o.Name] = o
		case watch.Deleted:
			delete(m.requests, o.Name)
			m.deleted(o, now)
		}
	case *locksv1.ProjectLock:
		if m.log != nil {
			fmt.Fprintf(m.log, "%s %s ProjectLock %s rv=%s holder=%v\n", now.Format(time.RFC3339Nano), ev.Type, o.Name, o.ResourceVersion, o.Status.HolderRequests())
		}
		switch ev.Type {
		case watch.Added, watch.Modified:
			m.locks[o.Name] = o
		case watch.Deleted:
			delete(m.locks, o.Name)
		}
	default:
		return
	}
	m.judge(now)
}

// deleted opens the release of a holder deleted while its key still lists it; a release it
// was already asked for goes on being timed from when it was asked.
func (m *UndecidedMeter) deleted(lr *locksv1.LockRequest, now time.Time) {
	since := now
	if t, ok := m.open["the release of "+lr.Name]; ok {
		since = t
	}
	for _, name := range lockkey.Names(lr.Spec.Locks) {
		if pl, ok := m.locks[name]; ok && lists(pl, lr.Name) {
			w := fmt.Sprintf("the release of %s (deleted) by %s", lr.Name, name)
			m.gone[w] = goneHolder{request: lr.Name, key: name}
			m.start(w, since)
		}
	}
}

// goneHolder is a deleted request a ProjectLock still listed when it went.
type goneHolder struct{ request, key string }

// judge opens the work the state shows and closes the work it no longer shows.
func (m *UndecidedMeter) judge(now time.Time) {
	showing := map[string]time.Time{}
	for _, lr := range m.requests {
		switch {
		case lr.Status.Phase == "":
			showing["the first status of "+lr.Name] = now
		case lr.Status.Phase == locksv1.PhaseGranted && lr.Spec.Release:
			showing["the release of "+lr.Name] = now
		case lr.Status.Phase == locksv1.PhaseGranted && lr.Status.ExpiresAt != nil && lr.Status.ExpiresAt.Time.Before(now):
			showing["the expiry of "+lr.Name] = lr.Status.ExpiresAt.Time
		}
	}
	for name, pl := range m.locks {
		if pl.Status.Held() {
			continue
		}
		for _, lr := range m.requests {
			if queuedOn(lr, name) {
				showing["a holder for "+name+", free with "+lr.Name+" queued"] = now
				break
			}
		}
	}
	// A deleted holder's release is done when its ProjectLock no longer lists it.
	for w, g := range m.gone {
		if pl, ok := m.locks[g.key]; ok && lists(pl, g.request) {
			showing[w] = now
		} else {
			delete(m.gone, w)
		}
	}
	for w, since := range m.open {
		if _, ok := showing[w]; !ok {
			m.finish(w, since, now)
		}
	}
	for w, since := range showing {
		m.start(w, since)
	}
}

func (m *UndecidedMeter) start(w string, since time.Time) {
	if _, ok := m.open[w]; !ok {
		m.open[w] = since
	}
}

func (m *UndecidedMeter) finish(w string, since, now time.Time) {
	delete(m.open, w)
	m.items++
	if d := now.Sub(since); d > m.longest {
		m.longest, m.what = d, w
	}
}

// lists says whether pl lists the request named name as a holder.
func lists(pl *locksv1.ProjectLock, name string) bool {
	for _, h := range pl.Status.HolderRequests() {
		if h.Name == name {
			return true
		}
	}
	return false
}

// queuedOn says whether lr waits in key name behind a holder (reason Queued), as opposed to a
// freeze, a window or a cycle: on a free key, that is work for the key.
func queuedOn(lr *locksv1.LockRequest, name string) bool {
	if lr.Status.Phase != locksv1.PhasePending {
		return false
	}
	c := meta.FindStatusCondition(lr.Status.Conditions, locksv1.ConditionGranted)
	if c == nil || c.Reason != locksv1.ReasonQueued {
		return false
	}
	for _, r := range lockkey.Refs(lr.Spec.Locks) {
		if r.Index < len(lr.Status.Locks) && lr.Status.Locks[r.Index].Held {
			continue
		}
		return r.Name == name
	}
	return false
}
