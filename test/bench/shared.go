package bench

import (
	"context"
	"fmt"
	"time"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// SharedResult is the shared phase (issue #31): hand-offs on one key held by Readers shared
// readers and one writer, and, in the same run on the same manager, hand-offs on a key with a
// queue of Readers exclusive requests.
type SharedResult struct {
	Readers int `json:"readers"`
	Samples int `json:"samples"`
	// ReadersToWriter is the last reader's release (a delete) → the waiting writer's Granted
	// seen on the watch.
	ReadersToWriter Latency `json:"readersToWriter"`
	// WriterToReaders is the writer's release → the last of the Readers readers waiting behind
	// it Granted seen: one decision grants them all.
	WriterToReaders Latency `json:"writerToReaders"`
	// Exclusive is release → next Granted seen on a key with Readers exclusive waiters, each
	// arrival queued before the next release (as the isolated hand-off run).
	Exclusive Latency `json:"exclusive"`
}

// sharedReaders is how many shared readers the shared phase holds the key with.
const sharedReaders = 10

func sharedRequest(ns, name string, n int64) *locksv1.LockRequest {
	lr := request(ns, name, "bench/shared", "one-key", fmt.Sprintf("reader%d", n), n)
	lr.Spec.Locks[0].Mode = locksv1.ModeShared
	lr.Spec.Command = "plan"
	return lr
}

// sharedPhase measures SharedResult with HandoffSamples samples of each.
func (b *bench) sharedPhase(ctx context.Context) (SharedResult, error) {
	res := SharedResult{Readers: sharedReaders, Samples: b.cfg.HandoffSamples}
	ns, err := b.namespace(ctx, "shared")
	if err != nil {
		return res, err
	}
	held, err := b.sharedReaders(ctx, ns)
	if err != nil {
		return res, err
	}
	var toWriter, toReaders []time.Duration
	for range b.cfg.HandoffSamples {
		var w, r time.Duration
		if held, w, r, err = b.sharedSample(ctx, ns, held); err != nil {
			return res, err
		}
		toWriter, toReaders = append(toWriter, w), append(toReaders, r)
	}
	res.ReadersToWriter, res.WriterToReaders = summarize(toWriter), summarize(toReaders)

	q, err := b.setupQueue(ctx, sharedReaders)
	if err != nil {
		return res, err
	}
	lat, _, err := b.handoffs(ctx, q, b.cfg.HandoffSamples, true)
	if err != nil {
		return res, err
	}
	res.Exclusive = summarize(lat)
	return res, nil
}

// sharedReaders creates sharedReaders shared requests on the key and waits until each has a phase.
func (b *bench) sharedReaders(ctx context.Context, ns string) ([]string, error) {
	names := make([]string, sharedReaders)
	for i := range names {
		n := b.names.Add(1)
		names[i] = fmt.Sprintf("r-%06d", n)
		if err := b.create(ctx, sharedRequest(ns, names[i], n)); err != nil {
			return nil, err
		}
	}
	for _, r := range names {
		if err := b.tracker.WaitPhased(ctx, ns, r, waitLimit); err != nil {
			return nil, err
		}
	}
	return names, nil
}

// sharedSample is one sample: a writer queues behind the held readers, they release (the last
// release → the writer Granted), new readers queue behind the writer, it releases (→ all of
// them Granted). It returns the new readers, which hold the key.
func (b *bench) sharedSample(ctx context.Context, ns string, held []string) ([]string, time.Duration, time.Duration, error) {
	for _, r := range held {
		if _, err := b.tracker.WaitGranted(ctx, ns, r, waitLimit); err != nil {
			return nil, 0, 0, err
		}
	}
	n := b.names.Add(1)
	writer := request(ns, fmt.Sprintf("w-%06d", n), "bench/shared", "one-key", fmt.Sprintf("writer%d", n), n)
	if err := b.create(ctx, writer); err != nil {
		return nil, 0, 0, err
	}
	if err := b.tracker.WaitPhased(ctx, ns, writer.Name, waitLimit); err != nil {
		return nil, 0, 0, err
	}
	for _, r := range held[:len(held)-1] {
		if err := b.remove(ctx, ns, r); err != nil {
			return nil, 0, 0, err
		}
	}
	t0 := time.Now()
	if err := b.remove(ctx, ns, held[len(held)-1]); err != nil {
		return nil, 0, 0, err
	}
	at, err := b.tracker.WaitGranted(ctx, ns, writer.Name, waitLimit)
	if err != nil {
		return nil, 0, 0, err
	}
	toWriter := at.Sub(t0)

	if held, err = b.sharedReaders(ctx, ns); err != nil { // they wait behind the writer
		return nil, 0, 0, err
	}
	t0 = time.Now()
	if err := b.remove(ctx, ns, writer.Name); err != nil {
		return nil, 0, 0, err
	}
	var last time.Time
	for _, r := range held {
		at, err := b.tracker.WaitGranted(ctx, ns, r, waitLimit)
		if err != nil {
			return nil, 0, 0, err
		}
		last = maxTime(last, at)
	}
	return held, toWriter, last.Sub(t0), nil
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
