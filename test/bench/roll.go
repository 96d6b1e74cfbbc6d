package bench

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// RollConfig sizes the roll phase (BENCH_PHASES=roll).
type RollConfig struct {
	// Replicas active-active managers; Keys keys handed off back to back the whole time.
	Replicas int `json:"replicas"`
	Keys     int `json:"keys"`
	// Steady is how long the hand-offs run before the roll (the steady state they are compared
	// with); Rounds how many times every replica is then replaced, back to back.
	Steady Duration `json:"steady"`
	Rounds int      `json:"rounds"`
}

// RollResult is hand-offs during a rolling replacement of every replica against the steady
// state of the same run: a gap is a holder's release → the next request seen Granted.
type RollResult struct {
	Replicas int `json:"replicas"`
	Keys     int `json:"keys"`
	// Steady are the gaps before the roll; Roll those while replicas were replaced one by one
	// (a new one started and Ready, then an old one stopped with SIGTERM, as a Deployment with
	// maxUnavailable 0 does).
	Steady      Latency `json:"steady"`
	Roll        Latency `json:"roll"`
	Rounds      int     `json:"rounds"`
	RollSeconds float64 `json:"rollSeconds"`
	// Lost counts hand-offs whose next request was not Granted within waitLimit.
	Lost int `json:"lost"`
}

// gap is one hand-off's release → grant, and whether it started during the roll.
type gap struct {
	d      time.Duration
	inRoll bool
}

// roll runs the phase.
func (b *bench) roll(ctx context.Context) (RollResult, error) {
	rc := b.cfg.Roll
	res := RollResult{Replicas: rc.Replicas, Keys: rc.Keys, Rounds: rc.Rounds}
	ns, err := b.namespace(ctx, "roll")
	if err != nil {
		return res, err
	}
	f := &fleet{b: b, prefix: "roll", args: func(id string) []string {
		return []string{"--active-active", "--membership-namespace=" + ns, "--membership-id=" + id}
	}}
	defer f.stopAll()
	for range rc.Replicas {
		if err := f.start(); err != nil {
			return res, err
		}
	}
	for _, r := range f.live {
		if err := r.waitReady(); err != nil {
			return res, err
		}
	}
	var (
		mu     sync.Mutex
		gaps   []gap
		lost   int
		inRoll bool
	)
	dctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make(chan error, rc.Keys)
	for k := range rc.Keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- b.handOffLoop(dctx, ns, k, func(d time.Duration, ok bool) {
				mu.Lock()
				defer mu.Unlock()
				if !ok {
					lost++
					return
				}
				gaps = append(gaps, gap{d, inRoll})
			})
		}()
	}
	time.Sleep(rc.Steady.D())
	mu.Lock()
	inRoll = true
	mu.Unlock()
	t := time.Now()
	var rollErr error
	for range rc.Rounds {
		if rollErr = b.replaceAll(f); rollErr != nil {
			break
		}
	}
	res.RollSeconds = time.Since(t).Seconds()
	stop()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil && rollErr == nil {
			rollErr = err
		}
	}
	var steady, rolling []time.Duration
	for _, g := range gaps {
		if g.inRoll {
			rolling = append(rolling, g.d)
		} else {
			steady = append(steady, g.d)
		}
	}
	res.Steady, res.Roll, res.Lost = summarize(steady), summarize(rolling), lost
	return res, rollErr
}

// replaceAll replaces every replica of f in turn: a new one started and Ready first, then the
// oldest stopped with SIGTERM (it leaves the membership and hands its keys over).
func (b *bench) replaceAll(f *fleet) error {
	old := append([]*replica(nil), f.live...)
	for _, victim := range old {
		if err := f.start(); err != nil {
			return err
		}
		if err := f.live[len(f.live)-1].waitReady(); err != nil {
			return err
		}
		b.step(fmt.Sprintf("roll: %s ready, stopping %s", f.live[len(f.live)-1].id, victim.id))
		if err := victim.p.Stop(30 * time.Second); err != nil {
			return fmt.Errorf("%s did not stop cleanly: %w", victim.id, err)
		}
		f.remove(victim)
	}
	return nil
}

// handOffLoop hands key k off back to back until ctx ends: a holder, the next request queued
// behind it, the holder released, the next one's grant awaited; report gets each gap, or
// ok=false for a grant that never came.
func (b *bench) handOffLoop(ctx context.Context, ns string, k int, report func(d time.Duration, ok bool)) error {
	path := fmt.Sprintf("roll-%d", k)
	holder := b.name("roll")
	if err := b.create(ctx, request(ns, holder, "bench/roll", path, "owner-"+holder, 1)); err != nil {
		return err
	}
	if _, err := b.tracker.WaitGranted(ctx, ns, holder, waitLimit); err != nil {
		return err
	}
	for i := int64(2); ctx.Err() == nil; i++ {
		next := b.name("roll")
		if err := b.create(ctx, request(ns, next, "bench/roll", path, "owner-"+next, i)); err != nil {
			return ignoreDone(ctx, err)
		}
		if err := b.tracker.WaitPhased(ctx, ns, next, waitLimit); err != nil {
			return ignoreDone(ctx, err)
		}
		t0 := time.Now()
		if err := b.remove(ctx, ns, holder); err != nil {
			return ignoreDone(ctx, err)
		}
		// Not ctx: a hand-off started before the end is awaited to its grant.
		at, err := b.tracker.WaitGranted(context.WithoutCancel(ctx), ns, next, waitLimit)
		report(at.Sub(t0), err == nil)
		if err != nil {
			return nil
		}
		holder = next
	}
	return nil
}

// ignoreDone is nil once ctx has ended (the loop was told to stop), else err.
func ignoreDone(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}
