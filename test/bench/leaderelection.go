package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// The peer's timings: client-go's and controller-runtime's defaults, which is what a user who
// takes a Lease as a mutex gets unless they tune it.
const leLeaseDuration, leRenewDeadline, leRetryPeriod = 15 * time.Second, 10 * time.Second, 2 * time.Second

// LeaderElectionResult is client-go leaderelection on one Lease used as a mutex.
type LeaderElectionResult struct {
	// Contenders electors run at once: one holds the Lease, the others wait for it.
	Contenders int `json:"contenders"`
	// Latency is the holder cancelling (ReleaseOnCancel empties the Lease) → the next
	// elector's OnStartedLeading.
	Latency Latency `json:"latency"`
	// WritesPerHandoff are writes to leases per hand-off.
	WritesPerHandoff float64 `json:"writesPerHandoff"`
	Writes           Writes  `json:"window"`
	LeaseDuration    string  `json:"leaseDuration"`
	RenewDeadline    string  `json:"renewDeadline"`
	RetryPeriod      string  `json:"retryPeriod"`
}

type elector struct {
	cancel context.CancelFunc
	done   chan struct{}
}

type leaderStart struct {
	id int
	at time.Time
}

// leaderElection runs le.Contenders electors on one Lease. Each time one leads, the harness
// cancels it at once and times how long the next one takes to lead; the cancelled one rejoins
// once the next leads (rejoining earlier, it could take the Lease straight back).
func (b *bench) leaderElection(ctx context.Context, le LEConfig) (LeaderElectionResult, error) {
	res := LeaderElectionResult{Contenders: le.Contenders, LeaseDuration: leLeaseDuration.String(),
		RenewDeadline: leRenewDeadline.String(), RetryPeriod: leRetryPeriod.String()}
	ns, err := b.namespace(ctx, "leaderelection")
	if err != nil {
		return res, err
	}
	cs, err := kubernetes.NewForConfig(b.env.Config)
	if err != nil {
		return res, err
	}
	// The electors log every attempt through klog; keep that out of the report.
	ctx = klog.NewContext(ctx, logr.Discard())
	c := &contest{ns: ns, cs: cs, started: make(chan leaderStart, le.Contenders*2), electors: make([]*elector, le.Contenders)}
	defer c.stopAll()
	for id := range le.Contenders {
		if err := c.join(ctx, id); err != nil {
			return res, err
		}
	}
	holder, err := c.next(ctx)
	if err != nil {
		return res, err
	}
	w, err := b.open(ctx, ns)
	if err != nil {
		return res, err
	}
	var lat []time.Duration
	for range le.Samples {
		t0 := time.Now()
		c.electors[holder.id].cancel()
		s, err := c.next(ctx)
		if err != nil {
			return res, err
		}
		lat = append(lat, s.at.Sub(t0))
		// The released elector has given the Lease up and returned; it queues again.
		<-c.electors[holder.id].done
		if err := c.join(ctx, holder.id); err != nil {
			return res, err
		}
		holder = s
	}
	if res.Writes, err = w.close(ctx); err != nil {
		return res, err
	}
	res.Latency = summarize(lat)
	res.WritesPerHandoff = res.Writes.Leases / float64(le.Samples)
	return res, nil
}

// contest is the electors contending for one Lease, and the channel on which each says it
// leads.
type contest struct {
	ns       string
	cs       *kubernetes.Clientset
	started  chan leaderStart
	electors []*elector
}

// join starts elector id (again).
func (c *contest) join(ctx context.Context, id int) error {
	ectx, cancel := context.WithCancel(ctx)
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: c.ns, Name: "mutex"},
		Client:     c.cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: fmt.Sprintf("contender-%d", id)},
	}
	el, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		Name:            "bench-mutex",
		LeaseDuration:   leLeaseDuration,
		RenewDeadline:   leRenewDeadline,
		RetryPeriod:     leRetryPeriod,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { c.started <- leaderStart{id: id, at: time.Now()} },
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		cancel()
		return err
	}
	e := &elector{cancel: cancel, done: make(chan struct{})}
	c.electors[id] = e
	go func() {
		defer close(e.done)
		el.Run(ectx)
	}()
	return nil
}

// next waits for the next elector to lead.
func (c *contest) next(ctx context.Context) (leaderStart, error) {
	select {
	case s := <-c.started:
		return s, nil
	case <-time.After(2 * leLeaseDuration):
		return leaderStart{}, fmt.Errorf("no elector led within %s", 2*leLeaseDuration)
	case <-ctx.Done():
		return leaderStart{}, ctx.Err()
	}
}

func (c *contest) stopAll() {
	for _, e := range c.electors {
		if e != nil {
			e.cancel()
			<-e.done
		}
	}
}
