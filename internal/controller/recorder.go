package controller

import (
	"sync/atomic"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
)

// Event budget: the recorder sends at most eventRate events a second (eventBurst at once) and
// drops the rest. client-go's events broadcaster keeps every event it sends for six minutes
// (to fold repeats into a series) and starts a goroutine for each: a manager that starts on
// 100,000 new requests would otherwise hold 100,000 Queued events and as many goroutines.
// Events say what the status already says; the status is the record.
const (
	eventRate  = 20
	eventBurst = 200
)

// boundedRecorder is an events.EventRecorder that drops what exceeds its budget.
type boundedRecorder struct {
	inner   events.EventRecorder
	limit   *rate.Limiter
	dropped atomic.Int64
	onDrop  func()
}

// newBoundedRecorder wraps inner with a budget of perSecond events (burst at once); onDrop,
// when set, is called for each dropped event.
func newBoundedRecorder(inner events.EventRecorder, perSecond float64, burst int, onDrop func()) *boundedRecorder {
	return &boundedRecorder{inner: inner, limit: rate.NewLimiter(rate.Limit(perSecond), burst), onDrop: onDrop}
}

// Eventf records the event when the budget allows.
func (r *boundedRecorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	// guard:event-budget
	if !r.limit.Allow() {
		r.dropped.Add(1)
		if r.onDrop != nil {
			r.onDrop()
		}
		return
	}
	r.inner.Eventf(regarding, related, eventtype, reason, action, note, args...)
}
