package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	turnstile "github.com/turnstile-dev/turnstile/pkg/client"
)

// clock is the test host's monotonic clock, shared by every client's records and the fault
// schedule: durations since the run began.
type clock struct{ start time.Time }

func (c clock) now() time.Duration { return time.Since(c.start) }

// Hold is one client's record of one lock: when it asked, when it saw the grant, when its work
// began and ended, and when it asked to release and the API server acknowledged that, all on the
// test host's monotonic clock. Err is set when the lock was not held to the end: the request
// ended without a grant, or the grant ended before the release.
type Hold struct {
	Client, Request, Key string
	Token                int64
	Call, Granted        time.Duration
	WorkStart, WorkEnd   time.Duration
	ReleaseCall, Release time.Duration
	Err                  string
}

// records is every client's holds, appended as they finish.
type records struct {
	mu    sync.Mutex
	holds []Hold
}

func (r *records) add(h Hold) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.holds = append(r.holds, h)
}

func (r *records) all() []Hold {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Hold(nil), r.holds...)
}

// worker is one client: a pkg/client on its own proxy that acquires a random key, holds it while
// it "works", releases it, and again, until stop.
type worker struct {
	name      string
	c         *turnstile.Client
	keys      []string
	rng       *rand.Rand
	clk       clock
	rec       *records
	hold      time.Duration // work takes hold plus up to hold more
	callLimit time.Duration // one API call's deadline before the worker tries again
	waitLimit time.Duration // the longest a worker waits for one grant before it records a failure
}

const repo = "acme/faults"

// run works until stop closes, finishing the lock in hand.
func (w *worker) run(ctx context.Context, stop <-chan struct{}) {
	for i := 1; ; i++ {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		default:
		}
		w.once(ctx, i)
	}
}

func (w *worker) once(ctx context.Context, i int) {
	key := w.keys[w.rng.Intn(len(w.keys))]
	h := Hold{Client: w.name, Request: fmt.Sprintf("%s-%d", w.name, i), Key: key, Call: w.clk.now()}
	defer func() { w.rec.add(h) }()
	req := turnstile.Request{
		Name:   h.Request,
		Locks:  []locksv1.LockTarget{{Repo: repo, Path: key, Workspace: "default"}},
		Holder: locksv1.Holder{Owner: w.name, Pull: int64(i)},
		TTL:    10 * time.Minute,
	}
	waitCtx, cancel := context.WithTimeout(ctx, w.waitLimit)
	defer cancel()
	// Create, again until the API server answers: a create whose answer was lost may have
	// landed (AlreadyExists then says so; the name is this attempt's own).
	for {
		cctx, ccancel := context.WithTimeout(waitCtx, w.callLimit)
		_, err := w.c.Create(cctx, req)
		ccancel()
		if err == nil || apierrors.IsAlreadyExists(err) {
			break
		}
		if waitCtx.Err() != nil {
			h.Err = fmt.Sprintf("create: %v", err)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	var lock *turnstile.Lock
	for {
		l, err := w.c.Wait(waitCtx, h.Request)
		var ng *turnstile.NotGrantedError
		if err == nil {
			lock = l
			break
		}
		if errors.As(err, &ng) || waitCtx.Err() != nil {
			h.Err = fmt.Sprintf("wait: %v", err)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	h.Granted = w.clk.now()
	h.Token = lock.FencingToken
	h.WorkStart = w.clk.now()
	time.Sleep(w.hold + time.Duration(w.rng.Int63n(int64(w.hold))))
	h.WorkEnd = w.clk.now()
	h.ReleaseCall = w.clk.now()
	// Release until the API server acknowledges it; a release is idempotent.
	relCtx, relCancel := context.WithTimeout(context.WithoutCancel(ctx), w.waitLimit)
	defer relCancel()
	for {
		cctx, ccancel := context.WithTimeout(relCtx, w.callLimit)
		err := lock.Release(cctx)
		ccancel()
		var ng *turnstile.NotGrantedError
		switch {
		case err == nil:
			h.Release = w.clk.now()
			return
		case errors.As(err, &ng):
			h.Release = w.clk.now()
			h.Err = fmt.Sprintf("release: %v", err)
			return
		case relCtx.Err() != nil:
			h.Err = fmt.Sprintf("release: %v", err)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
