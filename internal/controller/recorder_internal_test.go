package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

type countingRecorder struct{ n int }

func (c *countingRecorder) Eventf(runtime.Object, runtime.Object, string, string, string, string, ...any) {
	c.n++
}

// TestBoundedRecorder: events over the budget are dropped and counted, the rest sent.
func TestBoundedRecorder(t *testing.T) {
	inner := &countingRecorder{}
	drops := 0
	r := newBoundedRecorder(inner, 1e-9, 2, func() { drops++ })
	for range 5 {
		r.Eventf(&locksv1.LockRequest{}, nil, corev1.EventTypeNormal, "Queued", "Queue", "waiting")
	}
	if inner.n != 2 || drops != 3 || r.dropped.Load() != 3 {
		t.Errorf("sent %d, dropped %d (counter %d): want 2 sent, 3 dropped", inner.n, drops, r.dropped.Load())
	}
}
