package framework

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/lincheck"
)

// Churn is a crowd of requesters: each loops creating a LockRequest on random keys, waiting for
// its grant, holding it briefly and releasing it, by deletion or spec.release at random.
type Churn struct {
	Namespace  string
	Requesters int
	Rounds     int // requests per requester
	Keys       int // distinct keys, k000..kNNN under repo acme/churn
	// MultiLock is the share of requests (0 to 1) that name two keys at once.
	MultiLock float64
	// WaitLimit bounds one request's wait for its grant (it must cover manager restarts).
	WaitLimit time.Duration
	// Poll is how often a requester reads its request while it waits; with Watch, how soon it
	// opens a watch again after one ends.
	Poll time.Duration
	// Watch, when set (and the client can watch), makes each requester wait for its grant on a
	// watch of its request rather than by reading it every Poll: fifty requesters polling every
	// 50 ms send the API server a thousand reads a second, most of a churn's CPU.
	Watch bool
	Seed  int64
	// History, when set, records what each requester observed — its acquire from the create
	// to the poll that saw the grant (with the grant's tokens), its release from the call to the
	// answer — for lincheck to check.
	History *lincheck.History
}

// Run runs the requesters to completion and returns how many grants they saw. A request that
// ends any other way than granted and then released is an error: nothing in a churn should
// expire, time out or fail.
func (c Churn) Run(ctx context.Context, cl client.Client) (int64, error) {
	if c.Poll == 0 {
		c.Poll = 25 * time.Millisecond
	}
	var (
		grants   atomic.Int64
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil {
			firstErr = err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for w := range c.Requesters {
		wg.Go(func() {
			rng := rand.New(rand.NewSource(c.Seed + int64(w)))
			for i := range c.Rounds {
				if err := c.round(ctx, cl, rng, w, i); err != nil {
					fail(err)
					cancel()
					return
				}
				grants.Add(1)
			}
		})
	}
	wg.Wait()
	return grants.Load(), firstErr
}

func (c Churn) round(ctx context.Context, cl client.Client, rng *rand.Rand, w, i int) error {
	name := fmt.Sprintf("r%02d-%03d", w, i)
	lr := &locksv1.LockRequest{}
	lr.Namespace, lr.Name = c.Namespace, name
	lr.Spec.Holder = locksv1.Holder{Owner: fmt.Sprintf("w%02d", w), Pull: int64(i + 1)}
	k := rng.Intn(c.Keys)
	lr.Spec.Locks = []locksv1.LockTarget{{Repo: "acme/churn", Path: fmt.Sprintf("k%03d", k), Workspace: "default"}}
	if c.Keys > 1 && rng.Float64() < c.MultiLock {
		k2 := (k + 1 + rng.Intn(c.Keys-1)) % c.Keys
		lr.Spec.Locks = append(lr.Spec.Locks, locksv1.LockTarget{Repo: "acme/churn", Path: fmt.Sprintf("k%03d", k2), Workspace: "default"})
	}
	if rng.Intn(4) == 0 {
		lr.Spec.Priority = locksv1.PriorityHigh
	}
	asked := c.now()
	if err := cl.Create(ctx, lr); err != nil {
		return fmt.Errorf("create %s: %w", name, err)
	}
	granted, err := c.awaitGrant(ctx, cl, client.ObjectKeyFromObject(lr))
	if err != nil {
		return err
	}
	c.record(lincheck.Acquire, granted, asked)
	time.Sleep(time.Duration(rng.Intn(5)) * time.Millisecond)
	releasing := c.now()
	if rng.Intn(2) == 0 {
		if err := cl.Delete(ctx, lr); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s: %w", name, err)
		}
		c.record(lincheck.Release, granted, releasing)
		return nil
	}
	for attempt := 0; ; attempt++ {
		var cur locksv1.LockRequest
		err := cl.Get(ctx, client.ObjectKeyFromObject(lr), &cur)
		if err == nil {
			cur.Spec.Release = true
			err = cl.Update(ctx, &cur)
		}
		if err == nil {
			c.record(lincheck.Release, granted, releasing)
			return nil
		}
		if !apierrors.IsConflict(err) || attempt > 50 || ctx.Err() != nil {
			return errors.Join(fmt.Errorf("release %s", name), err)
		}
	}
}

func (c Churn) now() int64 {
	if c.History == nil {
		return 0
	}
	return c.History.Now()
}

// record adds one operation per key of the granted request, called at call and answered now.
func (c Churn) record(kind lincheck.Kind, granted *locksv1.LockRequest, call int64) {
	if c.History == nil {
		return
	}
	ret := c.History.Now()
	for _, l := range granted.Status.Locks {
		c.History.Add(lincheck.Input{Kind: kind, Key: granted.Namespace + "/" + l.Name, Client: granted.Spec.Holder.ID()},
			lincheck.Output{KeyToken: l.FencingToken, RequestToken: granted.Status.FencingToken}, call, ret)
	}
}

// awaitGrant polls until the request is granted, ends otherwise, or WaitLimit passes. It
// returns the request as the poll that saw the grant read it.
func (c Churn) awaitGrant(ctx context.Context, cl client.Client, key client.ObjectKey) (*locksv1.LockRequest, error) {
	if wc, ok := cl.(client.WithWatch); ok && c.Watch {
		return c.watchGrant(ctx, wc, key)
	}
	deadline := time.Now().Add(c.WaitLimit)
	for {
		var cur locksv1.LockRequest
		err := cl.Get(ctx, key, &cur)
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil:
			// The API server may be briefly unreachable; keep waiting within the limit.
		case cur.Status.Phase == locksv1.PhaseGranted:
			return &cur, nil
		case cur.Status.Phase.IsFinal():
			return nil, fmt.Errorf("%s ended %s before it was granted: %s", key.Name, cur.Status.Phase, conditionText(&cur))
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s not granted within %s: %s", key.Name, c.WaitLimit, conditionText(&cur))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(c.Poll):
		}
	}
}

// watchGrant is awaitGrant on a watch of the one request: each watch starts with the request as
// it is, then its changes; one that ends (the API server closes watches now and then) is opened
// again after Poll. It returns the request as the event that showed the grant carried it.
func (c Churn) watchGrant(ctx context.Context, cl client.WithWatch, key client.ObjectKey) (*locksv1.LockRequest, error) {
	waitCtx, cancel := context.WithTimeout(ctx, c.WaitLimit)
	defer cancel()
	var last locksv1.LockRequest
	for {
		w, err := cl.Watch(waitCtx, &locksv1.LockRequestList{}, client.InNamespace(key.Namespace),
			client.MatchingFields{"metadata.name": key.Name})
		if err == nil {
			granted, err := watchUntilDecided(w, &last)
			if granted != nil || err != nil {
				return granted, err
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-waitCtx.Done():
			return nil, fmt.Errorf("%s not granted within %s: %s", key.Name, c.WaitLimit, conditionText(&last))
		case <-time.After(c.Poll):
		}
	}
}

// watchUntilDecided reads w until its request is granted (returned), ends otherwise or is deleted
// (an error), or w ends (nil, nil). last keeps the request as the latest event carried it.
func watchUntilDecided(w watch.Interface, last *locksv1.LockRequest) (*locksv1.LockRequest, error) {
	defer w.Stop()
	for ev := range w.ResultChan() {
		lr, ok := ev.Object.(*locksv1.LockRequest)
		if !ok {
			return nil, nil // an error event: the watch ends, to be opened again
		}
		*last = *lr
		switch {
		case ev.Type == watch.Deleted:
			return nil, fmt.Errorf("%s deleted before it was granted: %s", lr.Name, conditionText(lr))
		case lr.Status.Phase == locksv1.PhaseGranted:
			return lr, nil
		case lr.Status.Phase.IsFinal():
			return nil, fmt.Errorf("%s ended %s before it was granted: %s", lr.Name, lr.Status.Phase, conditionText(lr))
		}
	}
	return nil, nil
}

func conditionText(lr *locksv1.LockRequest) string {
	for _, c := range lr.Status.Conditions {
		if c.Type == locksv1.ConditionGranted {
			return fmt.Sprintf("phase %q, %s/%s: %s", lr.Status.Phase, c.Status, c.Reason, c.Message)
		}
	}
	return fmt.Sprintf("phase %q, no Granted condition", lr.Status.Phase)
}
