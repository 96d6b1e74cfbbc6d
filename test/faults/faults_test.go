package faults

import (
	"context"
	"fmt"
	"math/rand"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	turnstile "github.com/turnstile-dev/turnstile/pkg/client"
)

// The run's shape: clients, keys, how long a hold's work takes, and the judge's bound.
const (
	workers   = 5
	keyCount  = 2
	holdWork  = 30 * time.Millisecond
	callLimit = 3 * time.Second
	waitLimit = 90 * time.Second
	// liveBound is the judge's promise: every acquire is granted within this long of its call,
	// or of the heal of a fault that was on while it waited.
	liveBound = 15 * time.Second
	// readyLimit is how long a restarted API server may take to answer /readyz ok: its own
	// start (RBAC's bootstrap roles took over 15 s on a loaded machine), which is not judged;
	// the judge's liveness and the recovery count from when it is ready.
	readyLimit = 60 * time.Second
	warmup     = 2 * time.Second
)

// run is one fault run: a control plane, proxies, replicas, clients.
type run struct {
	cl        *cluster
	ns        string
	rng       *rand.Rand
	ps        *proxies
	mgrPx     []*proxy
	clientPx  []*proxy
	replicas  []replica
	binaries  []*binary
	clocks    []*skewClock
	throttles []*throttle
	gone      *goneWatcher
	injected  string
	clockBase time.Duration // manager-0's clock offset before a jump
	// mgrCfg, when set, is the identity the replicas run as (else the admin's).
	mgrCfg *rest.Config
	// tooMany counts the 429s the replicas were answered.
	tooMany atomic.Int64
	// trace notes each component's first successful requests after the heal.
	trace *tracer
}

// class is a fault class: what it needs, how it injects the fault, and how it heals it.
type class struct {
	name string
	// restart is a control plane restart: healed when the API server answers /readyz ok.
	restart bool
	// binaries runs the replicas as the real manager binary (to SIGSTOP one).
	binaries bool
	// noWatchCache runs on a control plane of its own whose API server has no watch cache.
	noWatchCache bool
	// apf runs on a control plane of its own with a small concurrency limit, the replicas as a
	// user that API Priority and Fairness does not exempt.
	apf bool
	// inject starts the fault and returns once it is on; heal ends it and returns when healed.
	inject func(r *run, d time.Duration) error
	heal   func(r *run) error
	// check asserts what the class must have caused (e.g. that a 410 was answered).
	check func(r *run)
}

// targets picks, by seed, where a network fault goes: one manager replica, some clients, or
// both; it names them in r.injected.
func (r *run) targets() []*proxy {
	var out []*proxy
	half := r.clientPx[:len(r.clientPx)/2+1]
	switch r.rng.Intn(3) {
	case 0:
		out = []*proxy{r.mgrPx[0]}
	case 1:
		out = half
	default:
		out = append([]*proxy{r.mgrPx[0]}, half...)
	}
	var names []string
	for _, p := range out {
		names = append(names, p.name)
	}
	r.injected = strings.Join(names, ",")
	return out
}

var healTargets = func(r *run) error {
	for _, p := range append(slices.Clone(r.mgrPx), r.clientPx...) {
		p.heal()
	}
	return nil
}

// network is a class that adds toxics to the targets' proxies; attrs returns each toxic
// (type, stream, attributes) from the seed.
func network(name string, toxics func(r *run) [][3]string) class {
	return class{name: name, heal: healTargets, inject: func(r *run, _ time.Duration) error {
		ts := toxics(r)
		for _, p := range r.targets() {
			for _, t := range ts {
				if err := p.toxic(t[0], t[1], t[2]); err != nil {
					return err
				}
			}
		}
		r.injected += fmt.Sprintf(" %v", ts)
		return nil
	}}
}

var classes = []class{
	network("partition", func(*run) [][3]string {
		return [][3]string{{"timeout", "upstream", `{"timeout":0}`}, {"timeout", "downstream", `{"timeout":0}`}}
	}),
	network("one-way partition", func(*run) [][3]string {
		return [][3]string{{"timeout", "downstream", `{"timeout":0}`}}
	}),
	network("latency+jitter", func(r *run) [][3]string {
		a := fmt.Sprintf(`{"latency":%d,"jitter":%d}`, 100+r.rng.Intn(400), 50+r.rng.Intn(250))
		return [][3]string{{"latency", "upstream", a}, {"latency", "downstream", a}}
	}),
	network("bandwidth", func(r *run) [][3]string {
		a := fmt.Sprintf(`{"rate":%d}`, 4+r.rng.Intn(28)) // KB/s
		return [][3]string{{"bandwidth", "upstream", a}, {"bandwidth", "downstream", a}}
	}),
	network("resets", func(r *run) [][3]string {
		return [][3]string{{"reset_peer", "upstream", fmt.Sprintf(`{"timeout":%d}`, r.rng.Intn(300))}}
	}),
	{
		name:    "API server restart",
		restart: true,
		inject: func(r *run, d time.Duration) error {
			how, err := r.cl.stopAPIServer()
			r.injected = fmt.Sprintf("kube-apiserver stopped (%s), started again %s after the stop began", how, d)
			return err
		},
		heal: func(r *run) error { return r.cl.startAPIServer() },
	},
	{
		name:    "etcd restart",
		restart: true,
		inject: func(r *run, d time.Duration) error {
			r.injected = fmt.Sprintf("etcd stopped for %s under a running kube-apiserver", d)
			return r.cl.stopEtcd()
		},
		heal: func(r *run) error { return r.cl.startEtcd() },
	},
	{
		name:     "hung manager",
		binaries: true,
		inject: func(r *run, d time.Duration) error {
			r.injected = fmt.Sprintf("manager-0 SIGSTOPped for %s (membership lapse 3s)", d)
			return r.binaries[0].signal(syscall.SIGSTOP)
		},
		heal: func(r *run) error { return r.binaries[0].signal(syscall.SIGCONT) },
	},
	{
		name:         "relist after 410",
		noWatchCache: true,
		inject: func(r *run, d time.Duration) error {
			if err := r.mgrPx[0].toxic("timeout", "upstream", `{"timeout":0}`); err != nil {
				return err
			}
			if err := r.mgrPx[0].toxic("timeout", "downstream", `{"timeout":0}`); err != nil {
				return err
			}
			// Let the clients write while manager-0 is cut off, then compact past what it saw.
			time.Sleep(d / 2)
			rev, err := r.cl.compactEtcd(ctx)
			r.injected = fmt.Sprintf("manager-0 partitioned %s, etcd compacted at revision %d meanwhile (no watch cache)", d, rev)
			return err
		},
		heal: healTargets,
		check: func(r *run) {
			Expect(r.gone.gone.Load()).To(BeNumerically(">", 0), "manager-0's watches should have been answered 410 Gone after the compaction")
		},
	},
	{
		name: "429 throttling",
		inject: func(r *run, _ time.Duration) error {
			share := 0.5 + 0.4*r.rng.Float64()
			for _, t := range r.throttles {
				t.share = share
				t.on.Store(true)
			}
			r.injected = fmt.Sprintf("%.0f%% of every replica's requests answered 429 Retry-After: 1", share*100)
			return nil
		},
		heal: func(r *run) error {
			for _, t := range r.throttles {
				t.on.Store(false)
			}
			return nil
		},
		check: func(r *run) {
			var n int64
			for _, t := range r.throttles {
				n += t.rejected.Load()
			}
			Expect(n).To(BeNumerically(">", 0), "the throttle should have answered some requests 429")
		},
	},
	{
		name: "429 from APF",
		apf:  true,
		inject: func(r *run, _ time.Duration) error {
			plc, fs := apfThrottle()
			if err := r.cl.client.Create(ctx, plc); err != nil {
				return err
			}
			r.injected = "a FlowSchema puts the manager's user on a priority level of 1 seat that rejects (limitResponse Reject)"
			return r.cl.client.Create(ctx, fs)
		},
		heal: func(r *run) error {
			r.injected += fmt.Sprintf("; APF answered %d of the replicas' requests 429", r.tooMany.Load())
			plc, fs := apfThrottle()
			if err := r.cl.client.Delete(ctx, fs); err != nil {
				return err
			}
			return r.cl.client.Delete(ctx, plc)
		},
		check: func(r *run) {
			Expect(r.tooMany.Load()).To(BeNumerically(">", 0), "API Priority and Fairness should have answered some of the replicas' requests 429")
		},
	},
	{
		name: "clock skew",
		inject: func(r *run, _ time.Duration) error {
			jump := time.Duration(5+r.rng.Intn(10)) * time.Second
			if r.rng.Intn(2) == 0 {
				jump = -jump
			}
			c := r.clocks[0]
			c.set(time.Duration(c.offset.Load()) + jump)
			var offs []string
			for _, c := range r.clocks {
				offs = append(offs, time.Duration(c.offset.Load()).String())
			}
			r.injected = fmt.Sprintf("replica clocks %v; manager-0 jumped %s, and back at the heal", offs, jump)
			return nil
		},
		heal: func(r *run) error {
			r.clocks[0].set(r.clockBase)
			return nil
		},
	},
}

func classIndex(name string) int {
	return slices.IndexFunc(classes, func(c class) bool { return c.name == name })
}

// matrix is the runs to make: TURNSTILE_FAULTS_SEEDS and TURNSTILE_FAULTS_REPLICAS (comma
// lists) for `make faults`; by default one seed per class, with 3 replicas where the class is
// about replicas (hung manager, clock skew) and 1 elsewhere.
func matrix() []TableEntry {
	seeds := ints(os.Getenv("TURNSTILE_FAULTS_SEEDS"))
	reps := ints(os.Getenv("TURNSTILE_FAULTS_REPLICAS"))
	var out []TableEntry
	for _, c := range classes {
		rs := reps
		if len(rs) == 0 {
			rs = []int{1}
			if c.name == "hung manager" || c.name == "clock skew" || c.name == "partition" {
				rs = []int{3}
			}
		}
		ss := seeds
		if len(ss) == 0 {
			ss = []int{1}
		}
		for _, n := range rs {
			for _, s := range ss {
				out = append(out, Entry(fmt.Sprintf("%s, %d replica(s), seed %d", c.name, n, s), c.name, n, int64(s)))
			}
		}
	}
	return out
}

func ints(s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil {
			out = append(out, n)
		}
	}
	return out
}

var _ = Describe("Faults, judged from the clients' records", func() {
	DescribeTable("a fault class", func(name string, replicas int, seed int64) {
		c := classes[classIndex(name)]
		r := &run{rng: rand.New(rand.NewSource(seed)), cl: shared}
		if c.noWatchCache {
			cl, err := startCluster(GinkgoT().TempDir(), false)
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(cl.stop)
			r.cl = cl
		}
		if c.apf {
			// 15 seats in all: a priority level of 1 share gets one (ceil(15 × 1/246)).
			cl, err := startCluster(GinkgoT().TempDir(), true, [2]string{"max-requests-inflight", "10"}, [2]string{"max-mutating-requests-inflight", "5"})
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(cl.stop)
			r.cl = cl
			r.mgrCfg, err = cl.managerUser(ctx, apfUser)
			Expect(err).NotTo(HaveOccurred())
		}
		r.ns = framework.CreateNamespace(ctx, r.cl.client, "faults-")
		// How long a key with work went undecided, fault and recovery included (make
		// soak-undecided reads the line).
		meter, err := framework.StartUndecidedMeter(ctx, r.cl.client, r.ns, nil)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() {
			GinkgoWriter.Println(meter.Report(r.ns))
			meter.Stop()
		})
		r.ps = newProxies(r.cl.apiAddr)
		DeferCleanup(r.ps.stop)
		clk := clock{start: time.Now()}
		r.trace = newTracer(clk)
		r.start(c, replicas)

		rec := &records{}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var keys []string
		for k := range keyCount {
			keys = append(keys, fmt.Sprintf("key-%d", k))
		}
		for i := range workers {
			px, err := r.ps.add(fmt.Sprintf("client-%d", i))
			Expect(err).NotTo(HaveOccurred())
			r.clientPx = append(r.clientPx, px)
			cfg := turnstile.BoundRetryAfter(px.config(r.cl.cfg), time.Second)
			cfg.Wrap(r.trace.wrap(px.name))
			k8s, err := client.NewWithWatch(cfg, client.Options{Scheme: framework.Scheme})
			Expect(err).NotTo(HaveOccurred())
			w := &worker{name: fmt.Sprintf("client-%d", i), c: turnstile.New(k8s, r.ns), keys: keys,
				rng: rand.New(rand.NewSource(seed*100 + int64(i))), clk: clk, rec: rec,
				hold: holdWork, callLimit: callLimit, waitLimit: waitLimit}
			wg.Add(1)
			go func() { defer GinkgoRecover(); defer wg.Done(); w.run(ctx, stop) }()
		}
		stopped := false
		stopWorkers := func() {
			if !stopped {
				stopped = true
				close(stop)
				wg.Wait()
			}
		}
		DeferCleanup(stopWorkers)

		time.Sleep(warmup)
		d := time.Duration(3000+r.rng.Intn(3000)) * time.Millisecond
		if c.name == "hung manager" {
			d += 3 * time.Second // past the 3 s membership lapse
		}
		start := clk.now()
		Expect(c.inject(r, d)).To(Succeed())
		By("injected: " + r.injected)
		time.Sleep(max(0, d-(clk.now()-start)))
		healCall := clk.now()
		r.trace.since(healCall)
		readyz := make(chan error, 1)
		var ready time.Duration
		go func() {
			var err error
			ready, err = r.cl.readyAfter(ctx, clk, readyLimit)
			readyz <- err
		}()
		Expect(c.heal(r)).To(Succeed())
		heal := clk.now()
		Expect(<-readyz).To(Succeed())
		// The fault is healed when its heal returned or, for a control plane restart, when the
		// API server answers /readyz ok again, whichever is earlier: the judge's liveness counts
		// from then. Recovery counts from when the API server was ready after the heal.
		served := max(heal, ready)
		if c.restart {
			heal, served = min(heal, ready), ready
		}
		By(fmt.Sprintf("healed after %s; the API server's /readyz answered ok %s after the heal began",
			(heal - start).Round(time.Millisecond), (ready - healCall).Round(time.Millisecond)))
		// How long after the heal the API server itself serves LockRequests again (an admin
		// list, straight to it): the part of the recovery that is not Turnstile's.
		var apiReady time.Duration
		for {
			lctx, cancel := context.WithTimeout(ctx, time.Second)
			err := r.cl.client.List(lctx, &locksv1.LockRequestList{}, client.InNamespace(r.ns), client.Limit(1))
			cancel()
			if err == nil || clk.now()-heal > liveBound {
				apiReady = clk.now() - heal
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		// Diagnosis, not judgment: an admin poller straight to the API server notes when each
		// request is first seen Granted on the server, so a recovery splits into the managers'
		// part (to the grant's write) and the client's (to its watch showing it).
		serverGrant := map[string]time.Duration{}
		var sgMu sync.Mutex
		pollStop := make(chan struct{})
		pollDone := make(chan struct{})
		go func() {
			defer close(pollDone)
			for {
				select {
				case <-pollStop:
					return
				case <-time.After(25 * time.Millisecond):
				}
				var list locksv1.LockRequestList
				if err := r.cl.client.List(ctx, &list, client.InNamespace(r.ns)); err != nil {
					continue
				}
				now := clk.now()
				sgMu.Lock()
				for _, lr := range list.Items {
					if _, ok := serverGrant[lr.Name]; !ok && (lr.Status.Phase == locksv1.PhaseGranted || lr.Status.Phase == locksv1.PhaseReleased) {
						serverGrant[lr.Name] = now
					}
				}
				sgMu.Unlock()
			}
		}()
		// Run on until every key has been granted after the heal (or the judge's bound is
		// past), and a little more.
		deadline := time.Now().Add(liveBound + 5*time.Second)
		for time.Now().Before(deadline) {
			granted := map[string]bool{}
			for _, h := range rec.all() {
				if h.Granted > served {
					granted[h.Key] = true
				}
			}
			if len(granted) == keyCount {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(time.Second)
		stopWorkers()

		close(pollStop)
		<-pollDone
		holds := rec.all()
		v := Judge(holds, []Fault{{Start: start, Heal: heal, Served: served}}, liveBound)
		for _, k := range keys {
			var first *Hold
			for i, h := range holds {
				if h.Key == k && h.Err == "" && h.Call <= served && h.Granted >= served && (first == nil || h.Granted < first.Granted) {
					first = &holds[i]
				}
			}
			if first == nil {
				continue
			}
			sg, ok := serverGrant[first.Request]
			server := "not seen"
			if ok {
				server = (sg - served).Round(time.Millisecond).String()
			}
			GinkgoWriter.Printf("  %s: first waiter at the heal %s: granted on the server by +%s, seen by its client at +%s (after the API server was ready)\n",
				k, first.Request, server, (first.Granted - served).Round(time.Millisecond))
		}
		for _, h := range holds {
			if h.Call < heal+3*time.Second && (h.Release == 0 || h.Release > heal-2*time.Second) {
				rel := func(d time.Duration) string {
					if d == 0 {
						return "-"
					}
					return (d - served).Round(time.Millisecond).String()
				}
				GinkgoWriter.Printf("    %s %s: call %s, granted %s (server %s), released %s acknowledged %s %s\n", h.Key, h.Request, rel(h.Call), rel(h.Granted),
					rel(serverGrant[h.Request]), rel(h.ReleaseCall), rel(h.Release), h.Err)
			}
		}
		GinkgoWriter.Printf("  after the API server was ready: the heal returned at %s; first successes and failures since the heal began:\n%s",
			(heal - served).Round(time.Millisecond), r.trace.report(served))
		record(row{class: c.name, replicas: replicas, seed: seed, holds: v.Holds, violations: len(v.Violations),
			p50: percentile(v.Recovery, 0.5), max: percentile(v.Recovery, 1), recoveries: len(v.Recovery), note: r.injected, apiReady: apiReady}, v.Recovery)
		GinkgoWriter.Printf("%s, %d replica(s), seed %d: %s; %d holds checked; porcupine %s; API server serving %s after the heal; recovery after heal %v\n",
			c.name, replicas, seed, r.injected, v.Holds, v.Porcupine, apiReady.Round(time.Millisecond), v.Recovery)
		Expect(v.Violations).To(BeEmpty(), "%s: %s", c.name, r.injected)
		Expect(v.Holds).To(BeNumerically(">", 0))
		if c.check != nil {
			c.check(r)
		}
		// Nothing is left behind on the server either: every request the clients released
		// ends Released.
		Eventually(func() []string { return unfinished(r) }, 30*time.Second, 200*time.Millisecond).Should(BeEmpty())
	}, matrix())
})

// start starts the replicas, each on its own proxy.
func (r *run) start(c class, n int) {
	GinkgoHelper()
	if c.name == "clock skew" {
		r.clockBase = time.Duration(r.rng.Intn(6001)-3000) * time.Millisecond
	}
	for i := range n {
		name := fmt.Sprintf("manager-%d", i)
		px, err := r.ps.add(name)
		Expect(err).NotTo(HaveOccurred())
		r.mgrPx = append(r.mgrPx, px)
		base := r.cl.cfg
		if r.mgrCfg != nil {
			base = r.mgrCfg
		}
		cfg := px.config(base)
		cfg.Wrap(r.trace.wrap(name))
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(req *http.Request) (*http.Response, error) {
				resp, err := rt.RoundTrip(req)
				if err == nil && resp.StatusCode == http.StatusTooManyRequests {
					r.tooMany.Add(1)
				}
				return resp, err
			})
		})
		if c.binaries {
			b, err := startBinary(framework.ManagerBinary(), GinkgoT().TempDir(), name, cfg, n > 1, r.ns)
			Expect(err).NotTo(HaveOccurred())
			r.binaries = append(r.binaries, b)
			r.replicas = append(r.replicas, b)
			DeferCleanup(b.stop)
			continue
		}
		clk := &skewClock{}
		if c.name == "clock skew" {
			off := time.Duration(r.rng.Intn(6001)-3000) * time.Millisecond
			if i == 0 {
				off = r.clockBase
			}
			clk.set(off)
		}
		r.clocks = append(r.clocks, clk)
		th := &throttle{rng: rand.New(rand.NewSource(r.rng.Int63()))}
		r.throttles = append(r.throttles, th)
		cfg.Wrap(th.wrap)
		if i == 0 {
			r.gone = &goneWatcher{}
			cfg.Wrap(r.gone.wrap)
		}
		rep, err := startInProcess(replicaOptions{cfg: cfg, clock: clk, activeActive: n > 1, namespace: r.ns, identity: name})
		Expect(err).NotTo(HaveOccurred())
		r.replicas = append(r.replicas, rep)
		DeferCleanup(rep.stop)
	}
	if c.binaries {
		// The binaries sync their caches on their own; wait until one answers a request.
		probe := &locksv1.LockRequest{}
		probe.Name, probe.Namespace = "probe", r.ns
		probe.Spec.Locks = []locksv1.LockTarget{{Repo: repo, Path: "probe", Workspace: "default"}}
		probe.Spec.Holder = locksv1.Holder{Owner: "probe"}
		Expect(r.cl.client.Create(ctx, probe)).To(Succeed())
		Eventually(func() locksv1.LockRequestPhase {
			_ = r.cl.client.Get(ctx, client.ObjectKeyFromObject(probe), probe)
			return probe.Status.Phase
		}, 60*time.Second, 100*time.Millisecond).Should(Equal(locksv1.PhaseGranted), "the manager binaries did not start deciding")
		Expect(r.cl.client.Delete(ctx, probe)).To(Succeed())
	}
}

// unfinished lists the requests of the run's namespace that are not final.
func unfinished(r *run) []string {
	var list locksv1.LockRequestList
	if err := r.cl.client.List(ctx, &list, client.InNamespace(r.ns)); err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, lr := range list.Items {
		if !lr.Status.Phase.IsFinal() {
			out = append(out, fmt.Sprintf("%s: %q", lr.Name, lr.Status.Phase))
		}
	}
	return out
}

const apfUser = "turnstile-faults-manager"

// apfThrottle is a priority level of one nominal share that neither lends nor borrows and
// rejects what does not fit, and a FlowSchema that puts every request of apfUser on it.
func apfThrottle() (*flowcontrolv1.PriorityLevelConfiguration, *flowcontrolv1.FlowSchema) {
	plc := &flowcontrolv1.PriorityLevelConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "turnstile-faults"},
		Spec: flowcontrolv1.PriorityLevelConfigurationSpec{Type: flowcontrolv1.PriorityLevelEnablementLimited,
			Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
				NominalConcurrencyShares: ptr.To[int32](1), LendablePercent: ptr.To[int32](0), BorrowingLimitPercent: ptr.To[int32](0),
				LimitResponse: flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeReject},
			}}}
	fs := &flowcontrolv1.FlowSchema{ObjectMeta: metav1.ObjectMeta{Name: "turnstile-faults"},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: plc.Name},
			MatchingPrecedence:         100,
			DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindUser, User: &flowcontrolv1.UserSubject{Name: apfUser}}},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"},
					ClusterScope: true, Namespaces: []string{"*"}}},
				NonResourceRules: []flowcontrolv1.NonResourcePolicyRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}},
			}},
		}}
	return plc, fs
}
