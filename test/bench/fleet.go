package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/fleet/skew"
	"github.com/turnstile-dev/turnstile/internal/fleet/spoke"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// FleetConfig sizes the "fleet" phase (BENCH_PHASES=fleet, docs/fleet.md "Bench goals").
type FleetConfig struct {
	// Samples are the hand-offs timed per mode (inside the hub, between two spokes), in
	// alternation, each pair beside one hub round trip.
	Samples int `json:"samples"`
	// Spokes simulated spokes (in-process agents) make Requests requests each, over Requests
	// keys spread over Namespaces fleet namespaces: every key has one request of every spoke.
	Spokes     int `json:"spokes"`
	Requests   int `json:"requests"`
	Namespaces int `json:"namespaces"`
	// Lease is the simulated spokes' hub Lease duration (--hub-lease-duration; renewed every
	// third of it), Rest the window the hub is measured at rest in, with every request decided.
	Lease Duration `json:"lease"`
	Rest  Duration `json:"rest"`
	// Link is the one-way latency of the link mode: both spokes' agents, restarted, reach the
	// hub through a toxiproxy latency toxic of Link on each way (a hub in another region), and
	// the hub round trip is timed through one too; Samples more hand-offs of each kind. Zero:
	// no link mode.
	Link Duration `json:"link"`
	// BaselineManager is another manager binary (e.g. built from main) whose agents time the
	// same hand-offs between spokes, in each mode, after this one's: its agent beside this one's
	// in the same run. "": none.
	BaselineManager string `json:"-"`
}

// FleetResult is the fleet phase.
type FleetResult struct {
	Samples int `json:"samples"`
	// The hand-offs with every API server reached directly (one machine: a hub round trip
	// costs what a spoke's does).
	FleetHandoffs
	// Link is the same with both spokes' agents, and the hub round trip, through a latency
	// proxy (FleetConfig.Link); nil when not run.
	Link *FleetLink `json:"link,omitempty"`
	// Before is the same hand-offs with the agents of FleetConfig.BaselineManager; nil when
	// none was given.
	Before *FleetBefore `json:"before,omitempty"`
	// Hub is the hub manager serving the same requests made inside the hub (Baseline) and
	// from simulated spokes (Fleet).
	Baseline FleetLoad `json:"baseline"`
	Fleet    FleetLoad `json:"fleet"`
	// Per spoke: (Fleet - Baseline) / spokes at rest, and Fleet's load CPU over spokes.
	RestCPUPerSpokePct  float64 `json:"restCPUPerSpokePct"`
	HeapPerSpokeBytes   float64 `json:"heapPerSpokeBytes"`
	RSSPerSpokeBytes    float64 `json:"rssPerSpokeBytes"`
	LoadCPUPerSpokeSecs float64 `json:"loadCPUPerSpokeSeconds"`
}

// FleetHandoffs are hand-offs inside the hub and between two spokes, timed in alternation,
// each pair beside a hub round trip and a spoke round trip.
type FleetHandoffs struct {
	// Local is a hand-off inside the hub: the holder's request deleted → the waiter's seen
	// Granted, both made on the hub. Spokes is the same between two spokes, each a control plane
	// with the built manager as its agent: the holder's request deleted in spoke A → the
	// waiter's seen Granted in spoke B. HubWrite is one write to the hub (a Lease's renewTime,
	// as an agent renews it) and HubRoundTrip the same write → its event on a watch of the hub:
	// the hub round trip the goal counts, timed between the hand-offs. SpokeRoundTrip is the
	// same on spoke B's API server (the waiter's).
	Local          Latency `json:"local"`
	Spokes         Latency `json:"spokes"`
	HubWrite       Latency `json:"hubWrite"`
	HubRoundTrip   Latency `json:"hubRoundTrip"`
	SpokeRoundTrip Latency `json:"spokeRoundTrip"`
	// LocalSteps and Steps split the hand-offs where the bench's own watches see them.
	LocalSteps FleetLocalSteps `json:"localSteps"`
	Steps      FleetSteps      `json:"steps"`
	// AddedP50 and AddedP99 are Spokes - Local, ms; AddedRoundTrips is AddedP50 over the hub
	// round trip's p50 (the goal: at most 1).
	AddedP50        float64 `json:"addedP50Ms"`
	AddedP99        float64 `json:"addedP99Ms"`
	AddedRoundTrips float64 `json:"addedRoundTrips"`
}

// FleetLocalSteps split a hand-off inside the hub: the holder's deletion (t0) → Release, its
// Deleted event on the bench's watch of the hub → Decide, the waiter's Granted event there.
type FleetLocalSteps struct {
	Release Latency `json:"release"`
	Decide  Latency `json:"decide"`
}

// FleetSteps split a hand-off between spokes at the events the bench's watches see, one after
// the other (each from the one before): the holder's deletion in spoke A (t0; Delete is that
// call alone) → Release, the first event of A's hub request on the bench's watch of the hub
// that shows it released (spec.release, a final phase) or deleted (agent A saw the deletion and
// released the hub request, or deleted it: an agent before the hub's stop confirmations) →
// Decide, B's hub request's Granted event there (the hub manager, as inside the hub) → Copy,
// B's spoke request's Granted event on the bench's watch of spoke B (agent B saw the grant and
// wrote it there).
type FleetSteps struct {
	Delete  Latency `json:"delete"`
	Release Latency `json:"release"`
	Decide  Latency `json:"decide"`
	Copy    Latency `json:"copy"`
}

// FleetBefore is the hand-offs with another manager binary's agents (Manager), each mode
// timed after the same mode with this one's.
type FleetBefore struct {
	Manager string         `json:"manager"`
	Direct  FleetHandoffs  `json:"direct"`
	Link    *FleetHandoffs `json:"link,omitempty"`
}

// FleetLink is the link mode: FleetHandoffs with both spokes' agents and the hub round trip
// through a latency proxy of LatencyMs each way; the hand-offs inside the hub and the spoke
// round trip reach their API servers directly.
type FleetLink struct {
	LatencyMs float64 `json:"latencyMs"`
	FleetHandoffs
}

// FleetLoad is the hub manager (a fresh process) serving Spokes × Requests requests.
type FleetLoad struct {
	Spokes   int `json:"spokes"`
	Requests int `json:"requests"`
	// IdleCPUPct is the manager's CPU, % of a core, over Rest before any request; RestCPUPct
	// the same with every request decided (and, in the fleet, every spoke's Leases renewed and
	// its watch open).
	IdleCPUPct float64 `json:"idleCPUPct"`
	RestCPUPct float64 `json:"restCPUPct"`
	// LoadSeconds is the first create → the last request decided (as seen where it was made),
	// LoadCPUSeconds the manager's CPU meanwhile.
	LoadSeconds    float64 `json:"loadSeconds"`
	LoadCPUSeconds float64 `json:"loadCPUSeconds"`
	// HeapInUse is the median of go_memstats_heap_inuse_bytes sampled every second at rest,
	// IdleHeapInUse the same before any request; RSS at the end of the rest window.
	IdleHeapInUse int64 `json:"idleHeapInUseBytes"`
	HeapInUse     int64 `json:"heapInUseBytes"`
	IdleRSS       int64 `json:"idleRSSBytes"`
	RSS           int64 `json:"rssBytes"`
	// SettleSeconds is the last request decided → no LockRequest or ProjectLock write on the
	// hub for 4 s (the queue positions written), when the rest window starts.
	SettleSeconds float64 `json:"settleSeconds"`
	// HubWrites are the hub API server's writes per second at rest (Lease renewals, from its
	// own counters).
	RestWritesPerSec float64 `json:"restWritesPerSec"`
}

// fleetMember is one spoke control plane of the hand-off and its agent, the built manager.
type fleetMember struct {
	name    string
	env     *framework.Env
	tracker *tracker
	mgr     *framework.Process
}

// fleetRun is the phase's state.
type fleetRun struct {
	b      *bench
	dir    string
	spokes []*fleetMember
}

const (
	fleetNamespace   = "turnstile-fleet"
	fleetMembersName = "turnstile-fleet-members"
	simLabel         = "bench.turnstile.dev/spoke"
)

// fleet runs the fleet phase on the steady-state manager into res.Fleet.
func (b *bench) fleet(ctx context.Context, res *Result) error {
	if err := b.ensureManager(ctx); err != nil {
		return err
	}
	r, err := b.fleetPhase(ctx)
	// What was measured before a failure is kept: the run's result is marked partial.
	res.Fleet = &r
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	return nil
}

// fleetPhase measures FleetResult on the running manager, which is the hub.
func (b *bench) fleetPhase(ctx context.Context) (res FleetResult, err error) {
	fc := b.cfg.Fleet
	res.Samples = fc.Samples
	f := &fleetRun{b: b, dir: filepath.Join(b.cfg.OutDir, "fleet")}
	if err := os.MkdirAll(f.dir, 0o755); err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, f.stop()) }()
	sims := make([]string, fc.Spokes)
	for i := range sims {
		sims[i] = fmt.Sprintf("sim-%03d", i)
	}
	b.step("fleet: config/fleet on the hub, two spoke control planes with the built manager as their agents")
	hubNS := make([]string, fc.Namespaces)
	for i := range hubNS {
		hubNS[i] = fmt.Sprintf("bench-fleet-%d", i)
	}
	if err := f.installHub(ctx, append([]string{"spoke-a", "spoke-b"}, sims...), append([]string{"bench-fleet-handoff"}, hubNS...)); err != nil {
		return res, err
	}
	for _, name := range []string{"spoke-a", "spoke-b"} {
		if err := f.startSpoke(ctx, name); err != nil {
			return res, fmt.Errorf("spoke %s: %w", name, err)
		}
	}
	b.step(fmt.Sprintf("fleet: %d hand-offs inside the hub and %d between two spokes, in turn, each beside a hub round trip", fc.Samples, fc.Samples))
	if err := f.handoffs(ctx, b.env.Config, &res.FleetHandoffs); err != nil {
		return res, err
	}
	// The hand-off's agents stop once they have deleted their last hub requests; spoke A's API
	// server is the simulated spokes' spoke side.
	if err := f.stopAgents(ctx); err != nil {
		return res, err
	}
	if fc.BaselineManager != "" {
		res.Before = &FleetBefore{Manager: fc.BaselineManager}
		b.step(fmt.Sprintf("fleet: the agents restarted from %s, %d hand-offs of each kind again", fc.BaselineManager, fc.Samples))
		if err := f.restartedHandoffs(ctx, fc.BaselineManager, nil, &res.Before.Direct); err != nil {
			return res, fmt.Errorf("baseline agents: %w", err)
		}
	}
	if fc.Link > 0 {
		link := &FleetLink{LatencyMs: float64(fc.Link.D()) / float64(time.Millisecond)}
		res.Link = link
		p, err := f.newLinks()
		if err != nil {
			return res, err
		}
		defer p.stop()
		b.step(fmt.Sprintf("fleet: the agents restarted behind a latency proxy (%s each way to the hub), %d hand-offs of each kind again", fc.Link.D(), fc.Samples))
		if err := f.restartedHandoffs(ctx, b.cfg.Manager, p, &link.FleetHandoffs); err != nil {
			return res, fmt.Errorf("link: %w", err)
		}
		if fc.BaselineManager != "" {
			res.Before.Link = &FleetHandoffs{}
			b.step(fmt.Sprintf("fleet: the agents restarted from %s behind the latency proxy, %d hand-offs of each kind again", fc.BaselineManager, fc.Samples))
			if err := f.restartedHandoffs(ctx, fc.BaselineManager, p, res.Before.Link); err != nil {
				return res, fmt.Errorf("baseline agents, link: %w", err)
			}
		}
	}

	b.step(fmt.Sprintf("fleet baseline: a fresh hub manager, %d requests made inside the hub (%d owners × %d keys in %d namespaces)", fc.Spokes*fc.Requests, fc.Spokes, fc.Requests, fc.Namespaces))
	if res.Baseline, err = f.load(ctx, sims, hubNS, false); err != nil {
		return res, fmt.Errorf("baseline: %w", err)
	}
	b.step(fmt.Sprintf("fleet: a fresh hub manager, %d simulated spokes (in-process agents) with %d requests each", fc.Spokes, fc.Requests))
	if res.Fleet, err = f.load(ctx, sims, hubNS, true); err != nil {
		return res, fmt.Errorf("simulated spokes: %w", err)
	}
	n := float64(fc.Spokes)
	res.RestCPUPerSpokePct = (res.Fleet.RestCPUPct - res.Baseline.RestCPUPct) / n
	res.HeapPerSpokeBytes = float64(res.Fleet.HeapInUse-res.Baseline.HeapInUse) / n
	res.RSSPerSpokeBytes = float64(res.Fleet.RSS-res.Baseline.RSS) / n
	res.LoadCPUPerSpokeSecs = res.Fleet.LoadCPUSeconds / n
	return res, nil
}

// installHub installs config/fleet on the hub as its admin does (kubectl apply -k), lists
// members as the fleet's members, binds the spoke role in every namespace of nss (made on the
// hub) and makes each member's ServiceAccount.
func (f *fleetRun) installHub(ctx context.Context, members, nss []string) error {
	b := f.b
	root, err := framework.RepoRoot()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, b.env.Kubectl(), "--kubeconfig", b.kubeconfig, "apply", "--server-side", "-k", filepath.Join(root, "config", "fleet"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kubectl apply -k config/fleet: %w: %s", err, out)
	}
	var cm corev1.ConfigMap
	if err := b.c.Get(ctx, client.ObjectKey{Namespace: fleetNamespace, Name: fleetMembersName}, &cm); err != nil {
		return err
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	for _, m := range members {
		cm.Data[m] = "{}"
	}
	if err := b.c.Update(ctx, &cm); err != nil {
		return fmt.Errorf("list the members: %w", err)
	}
	for _, ns := range nss {
		if err := b.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return err
		}
		b.namespaces = append(b.namespaces, ns)
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "turnstile-fleet-spoke"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "turnstile-fleet-spoke"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:serviceaccounts:" + fleetNamespace}},
		}
		if err := b.c.Create(ctx, rb); err != nil {
			return err
		}
	}
	for _, m := range members {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: fleetNamespace, Name: spoke.LeaseName(m)}}
		if err := b.c.Create(ctx, sa); err != nil {
			return err
		}
	}
	return nil
}

// stopAgents stops the hand-off's agents once they have deleted their last hub requests.
func (f *fleetRun) stopAgents(ctx context.Context) error {
	if err := f.waitHubEmpty(ctx, []string{"spoke-a", "spoke-b"}); err != nil {
		return err
	}
	for _, s := range f.spokes {
		if s.mgr == nil {
			continue
		}
		if err := s.mgr.Stop(30 * time.Second); err != nil {
			return fmt.Errorf("stop the agent of %s: %w", s.name, err)
		}
		s.mgr = nil
	}
	return nil
}

// links are the link mode's latency proxies to the hub: toxiproxy, in this process, a latency
// toxic of FleetConfig.Link on each way; one per spoke (its agent's) and one for the hub round
// trip's probe.
type links struct {
	servers map[string]string // "https://127.0.0.1:port" by spoke name, and "probe"
	stops   []func()
}

func (f *fleetRun) newLinks() (*links, error) {
	host, err := url.Parse(f.b.env.Config.Host)
	if err != nil {
		return nil, err
	}
	// The toxics log through zerolog's global logger; nothing there is news.
	zerolog.SetGlobalLevel(zerolog.WarnLevel)
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	latency := fmt.Sprintf(`{"latency":%d,"jitter":0}`, f.b.cfg.Fleet.Link.D().Milliseconds())
	l := &links{servers: map[string]string{}}
	names := []string{"probe"}
	for _, s := range f.spokes {
		names = append(names, s.name)
	}
	for _, name := range names {
		p := toxiproxy.NewProxy(srv, "hub-"+name, "127.0.0.1:0", host.Host)
		if err := p.Start(); err != nil {
			l.stop()
			return nil, fmt.Errorf("proxy %s: %w", name, err)
		}
		l.stops = append(l.stops, p.Stop)
		for _, stream := range []string{"upstream", "downstream"} {
			body := fmt.Sprintf(`{"name":"latency_%s","type":"latency","stream":%q,"toxicity":1,"attributes":%s}`, stream, stream, latency)
			if _, err := p.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
				l.stop()
				return nil, fmt.Errorf("proxy %s: toxic %s: %w", name, body, err)
			}
		}
		// TLS goes through untouched: the API server's certificate is for 127.0.0.1, whatever
		// the port.
		l.servers[name] = "https://" + p.Listen
	}
	return l, nil
}

func (l *links) stop() {
	for _, stop := range l.stops {
		stop()
	}
	l.stops = nil
}

// restartedHandoffs starts both spokes' agents from manager, with the hub behind the latency
// proxies l (nil: directly), times the hand-offs again (the hub round trip through l's probe
// proxy) and stops the agents. The hub's manager and the bench's watches reach their API
// servers directly.
func (f *fleetRun) restartedHandoffs(ctx context.Context, manager string, l *links, res *FleetHandoffs) error {
	hub := rest.CopyConfig(f.b.env.Config)
	for _, s := range f.spokes {
		server := ""
		if l != nil {
			server = l.servers[s.name]
		}
		if err := f.startAgent(ctx, s, manager, server); err != nil {
			return fmt.Errorf("spoke %s: %w", s.name, err)
		}
	}
	if l != nil {
		hub.Host = l.servers["probe"]
	}
	if err := f.handoffs(ctx, hub, res); err != nil {
		return err
	}
	return f.stopAgents(ctx)
}

// hubConfig is the hub as member's ServiceAccount: a kubeconfig file, as a user gives it to
// the spoke's manager.
func (f *fleetRun) hubConfig(ctx context.Context, member string) (string, error) {
	return f.b.env.WriteServiceAccountKubeconfig(ctx, f.dir, fleetNamespace, spoke.LeaseName(member))
}

// startSpoke starts a spoke control plane and the built manager as its agent.
func (f *fleetRun) startSpoke(ctx context.Context, name string) error {
	env, err := framework.Start(f.b.cfg.Assets)
	if err != nil {
		return err
	}
	s := &fleetMember{name: name, env: env}
	f.spokes = append(f.spokes, s)
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench-fleet-handoff"}}); err != nil {
		return err
	}
	kubeconfig := filepath.Join(f.dir, name+".kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		return err
	}
	if s.tracker, err = startTracker(ctx, env.Config); err != nil {
		return err
	}
	return f.startAgent(ctx, s, f.b.cfg.Manager, "")
}

// startAgent starts manager (the built manager, or a baseline's) as s's agent, with the hub at
// server ("": the hub's own address) in its hub kubeconfig.
func (f *fleetRun) startAgent(ctx context.Context, s *fleetMember, manager, server string) error {
	hub, err := f.hubConfig(ctx, s.name)
	if err != nil {
		return err
	}
	if server != "" {
		cfg, err := clientcmd.LoadFromFile(hub)
		if err != nil {
			return err
		}
		for _, c := range cfg.Clusters {
			c.Server = server
		}
		hub = strings.TrimSuffix(hub, ".kubeconfig") + "-link.kubeconfig"
		if err := clientcmd.WriteToFile(*cfg, hub); err != nil {
			return err
		}
	}
	fmt.Fprintf(f.b.mgrLog, "\n===== %s starting the agent of %s (%s, hub %s)\n", time.Now().Format(time.RFC3339), s.name, manager, cmp.Or(server, "direct"))
	// The agent as a user starts it: --hub-kubeconfig and --cluster-name, the default Lease,
	// and the client rate the bench gives its hub manager, so the limiter is never measured.
	s.mgr, err = framework.StartProcess(manager, filepath.Join(f.dir, s.name+".kubeconfig"), f.b.mgrLog,
		"--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--kube-api-qps="+strconv.Itoa(managerQPS), "--kube-api-burst="+strconv.Itoa(managerBurst),
		"--hub-kubeconfig="+hub, "--cluster-name="+s.name)
	return err
}

// stop stops what the phase started that still runs.
func (f *fleetRun) stop() error {
	var errs []error
	for _, s := range f.spokes {
		if s.mgr != nil {
			errs = append(errs, s.mgr.Stop(30*time.Second))
		}
		if s.tracker != nil {
			s.tracker.Stop()
		}
		errs = append(errs, s.env.Stop())
	}
	f.spokes = nil
	return errors.Join(errs...)
}

// handoffs times Samples hand-offs in each mode, alternating, with a hub round trip (by hub,
// a probe of the hub as the agents reach it) and a round trip of spoke B between.
func (f *fleetRun) handoffs(ctx context.Context, hub *rest.Config, res *FleetHandoffs) error {
	b := f.b
	const ns = "bench-fleet-handoff"
	a, bb := f.spokes[0], f.spokes[1]
	probe, err := newProbe(ctx, hub, ns)
	if err != nil {
		return err
	}
	defer probe.stop()
	spokeProbe, err := newProbe(ctx, bb.env.Config, ns)
	if err != nil {
		return err
	}
	defer spokeProbe.stop()
	var local, spokes, write, trip, spokeTrip []time.Duration
	var ls fleetLocalSamples
	var ss fleetSpokeSamples
	// One unmeasured round first: the agents' first requests make their hub Leases.
	for i := -1; i < b.cfg.Fleet.Samples; i++ {
		d, err := f.localHandoff(ctx, ns, &ls)
		if err != nil {
			return fmt.Errorf("hand-off inside the hub: %w", err)
		}
		w, t, err := probe.roundTrip(ctx)
		if err != nil {
			return fmt.Errorf("hub round trip: %w", err)
		}
		_, st, err := spokeProbe.roundTrip(ctx)
		if err != nil {
			return fmt.Errorf("spoke round trip: %w", err)
		}
		s, err := f.spokeHandoff(ctx, ns, a, bb, &ss)
		if err != nil {
			return fmt.Errorf("hand-off between spokes: %w", err)
		}
		if i < 0 {
			ls, ss = fleetLocalSamples{}, fleetSpokeSamples{}
			continue
		}
		local, spokes, write, trip, spokeTrip = append(local, d), append(spokes, s), append(write, w), append(trip, t), append(spokeTrip, st)
	}
	res.Local, res.Spokes, res.HubWrite, res.HubRoundTrip = summarize(local), summarize(spokes), summarize(write), summarize(trip)
	res.SpokeRoundTrip = summarize(spokeTrip)
	res.LocalSteps = FleetLocalSteps{Release: summarize(ls.release), Decide: summarize(ls.decide)}
	res.Steps = FleetSteps{Delete: summarize(ss.delete), Release: summarize(ss.release), Decide: summarize(ss.decide), Copy: summarize(ss.copy)}
	res.AddedP50, res.AddedP99 = res.Spokes.P50-res.Local.P50, res.Spokes.P99-res.Local.P99
	res.AddedRoundTrips = ratio(res.AddedP50, res.HubRoundTrip.P50)
	return nil
}

// fleetLocalSamples and fleetSpokeSamples are the steps of the hand-offs (FleetLocalSteps,
// FleetSteps).
type fleetLocalSamples struct{ release, decide []time.Duration }

type fleetSpokeSamples struct{ delete, release, decide, copy []time.Duration }

// localHandoff is busyKey and handOff on the hub, with no owner to steer to, its steps into
// steps.
func (f *fleetRun) localHandoff(ctx context.Context, ns string, steps *fleetLocalSamples) (time.Duration, error) {
	b := f.b
	key := b.name("local")
	holder, waiter := b.name("holder"), b.name("waiter")
	if err := b.create(ctx, request(ns, holder, "bench/fleet", key, "alice", 1)); err != nil {
		return 0, err
	}
	if _, err := b.tracker.WaitGranted(ctx, ns, holder, waitLimit); err != nil {
		return 0, err
	}
	if err := b.create(ctx, request(ns, waiter, "bench/fleet", key, "bob", 2)); err != nil {
		return 0, err
	}
	if err := b.tracker.WaitPhased(ctx, ns, waiter, waitLimit); err != nil {
		return 0, err
	}
	b.tracker.ExpectGone(ns, holder)
	t0 := time.Now()
	if err := b.remove(ctx, ns, holder); err != nil {
		return 0, err
	}
	granted, err := b.tracker.WaitGranted(ctx, ns, waiter, waitLimit)
	if err != nil {
		return 0, err
	}
	gone, err := b.tracker.WaitGone(ctx, ns, holder, waitLimit)
	if err != nil {
		return 0, err
	}
	b.tracker.Released(ns, holder)
	steps.release = append(steps.release, gone.Sub(t0))
	steps.decide = append(steps.decide, granted.Sub(gone))
	return granted.Sub(t0), b.remove(ctx, ns, waiter)
}

// spokeHandoff puts a holder in spoke a and a waiter in spoke c on one key (the waiter has the
// hub's Pending), deletes the holder in a and times until the waiter is seen Granted in c, its
// steps into steps: as the bench's watch of the hub sees the holder's hub request deleted and
// the waiter's granted.
func (f *fleetRun) spokeHandoff(ctx context.Context, ns string, a, c *fleetMember, steps *fleetSpokeSamples) (time.Duration, error) {
	key := f.b.name("fleet")
	holder, waiter := f.b.name("holder"), f.b.name("waiter")
	hubHolder, hubWaiter := spoke.HubName(a.name, holder), spoke.HubName(c.name, waiter)
	if err := a.env.Client.Create(ctx, request(ns, holder, "bench/fleet", key, "alice", 1)); err != nil {
		return 0, err
	}
	if _, err := a.tracker.WaitGranted(ctx, ns, holder, waitLimit); err != nil {
		return 0, err
	}
	if err := c.env.Client.Create(ctx, request(ns, waiter, "bench/fleet", key, "bob", 2)); err != nil {
		return 0, err
	}
	// A phase in the spoke is the hub's decision copied back: the waiter is queued on the hub.
	if err := c.tracker.WaitPhased(ctx, ns, waiter, waitLimit); err != nil {
		return 0, err
	}
	hub := f.b.tracker
	hub.ExpectGone(ns, hubHolder)
	t0 := time.Now()
	if err := a.env.Client.Delete(ctx, lockRequest(ns, holder)); err != nil {
		return 0, err
	}
	deleted := time.Now()
	at, err := c.tracker.WaitGranted(ctx, ns, waiter, waitLimit)
	if err != nil {
		return 0, err
	}
	if _, err := hub.WaitGone(ctx, ns, hubHolder, waitLimit); err != nil {
		return 0, err
	}
	released := hub.Released(ns, hubHolder)
	granted, err := hub.WaitGranted(ctx, ns, hubWaiter, waitLimit)
	if err != nil {
		return 0, err
	}
	steps.delete = append(steps.delete, deleted.Sub(t0))
	steps.release = append(steps.release, released.Sub(t0))
	steps.decide = append(steps.decide, granted.Sub(released))
	steps.copy = append(steps.copy, at.Sub(granted))
	return at.Sub(t0), c.env.Client.Delete(ctx, lockRequest(ns, waiter))
}

// probe times a write to an API server (a Lease's renewTime, what an agent renews on the hub)
// and the write → its event on a watch of that server.
type probe struct {
	c      client.WithWatch
	lease  *coordinationv1.Lease
	w      watch.Interface
	cancel context.CancelFunc
}

// newProbe makes the probe's Lease in ns (a new name each time) and opens its watch.
func newProbe(ctx context.Context, cfg *rest.Config, ns string) (*probe, error) {
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: framework.Scheme})
	if err != nil {
		return nil, err
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "bench-fleet-probe-"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("bench"), LeaseDurationSeconds: ptr.To[int32](40)}}
	if err := c.Create(ctx, lease); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	w, err := c.Watch(ctx, &coordinationv1.LeaseList{}, client.InNamespace(ns),
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: lease.ResourceVersion}})
	if err != nil {
		cancel()
		return nil, err
	}
	return &probe{c: c, lease: lease, w: w, cancel: cancel}, nil
}

func (p *probe) roundTrip(ctx context.Context) (write, trip time.Duration, err error) {
	p.lease.Spec.RenewTime = ptr.To(metav1.NowMicro())
	t0 := time.Now()
	if err := p.c.Update(ctx, p.lease); err != nil {
		return 0, 0, err
	}
	write = time.Since(t0)
	timeout := time.After(waitLimit)
	for {
		select {
		case ev, ok := <-p.w.ResultChan():
			if !ok {
				return 0, 0, errors.New("the probe's watch ended")
			}
			if l, isLease := ev.Object.(*coordinationv1.Lease); isLease && l.Name == p.lease.Name && l.ResourceVersion == p.lease.ResourceVersion {
				return write, time.Since(t0), nil
			}
		case <-timeout:
			return 0, 0, errors.New("the probe's write never came back on the watch")
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		}
	}
}

func (p *probe) stop() {
	p.w.Stop()
	p.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = p.c.Delete(ctx, p.lease) // the probe's own Lease; a leftover is harmless
}

// load runs a fresh hub manager with Spokes × Requests requests: made inside the hub, or by
// simulated spokes (real agents, in this process, against spoke A's API server).
func (f *fleetRun) load(ctx context.Context, sims, nss []string, fleet bool) (FleetLoad, error) {
	b, fc := f.b, f.b.cfg.Fleet
	out := FleetLoad{Requests: fc.Spokes * fc.Requests}
	if err := b.restartManager(ctx, true); err != nil {
		return out, err
	}
	if err := f.rest(ctx, &out.IdleCPUPct, &out.IdleHeapInUse, &out.IdleRSS, nil); err != nil {
		return out, err
	}
	var agents *simSpokes
	if fleet {
		out.Spokes = fc.Spokes
		for _, ns := range nss {
			err := f.spokes[0].env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return out, err
			}
		}
		var err error
		if agents, err = f.startSims(ctx, sims); err != nil {
			return out, err
		}
		defer agents.stop()
	}
	before, err := b.mgr.counts(ctx)
	if err != nil {
		return out, err
	}
	t0 := time.Now()
	// Spoke i makes one request on each key; the keys spread over the namespaces.
	made := func(ctx context.Context, n int) error {
		i, k := n/fc.Requests, n%fc.Requests
		ns := nss[k%len(nss)]
		lr := request(ns, fmt.Sprintf("r-%s-%04d", sims[i], k), "bench/fleet", fmt.Sprintf("k%04d", k), sims[i], int64(n+1))
		if !fleet {
			return retried(ctx, func() error { return ignore(b.create(ctx, lr.DeepCopy()), apierrors.IsAlreadyExists) })
		}
		lr.Labels = map[string]string{simLabel: sims[i]}
		return retried(ctx, func() error {
			return ignore(f.spokes[0].env.Client.Create(ctx, lr.DeepCopy()), apierrors.IsAlreadyExists)
		})
	}
	if err := parallel(ctx, out.Requests, 8, made); err != nil {
		return out, err
	}
	seen := b.tracker
	if fleet {
		seen = f.spokes[0].tracker // decided = the hub's status copied into the spoke
	}
	last, err := seen.WaitPhasedIn(ctx, nss, out.Requests, 10*waitLimit)
	if err != nil {
		return out, err
	}
	after, err := b.mgr.counts(ctx)
	if err != nil {
		return out, err
	}
	out.LoadSeconds, out.LoadCPUSeconds = last.Sub(t0).Seconds(), after.cpu-before.cpu
	// Every request has its first decision, but the queues' positions are still being written
	// (at most --position-refresh-rate a second per key): at rest is once they are.
	if out.SettleSeconds, err = f.settle(ctx); err != nil {
		return out, err
	}
	if err := f.rest(ctx, &out.RestCPUPct, &out.HeapInUse, &out.RSS, &out.RestWritesPerSec); err != nil {
		return out, err
	}
	b.step(fmt.Sprintf("fleet: %d requests decided in %.1f s; releasing them", out.Requests, out.LoadSeconds))
	return out, f.release(ctx, sims, nss, fleet)
}

// release deletes the requests load made, where it made them, and waits until the hub holds
// no lock of them.
func (f *fleetRun) release(ctx context.Context, sims, nss []string, fleet bool) error {
	b, fc := f.b, f.b.cfg.Fleet
	requests := fc.Spokes * fc.Requests
	// Released newest first, so nearly every deletion is a waiter's and the release is not a
	// chain of 5,000 hand-offs. One by one: a deletecollection of thousands outlasts the API
	// server's request timeout on this machine.
	release := func(ctx context.Context, n int) error {
		n = requests - 1 - n
		i, k := n/fc.Requests, n%fc.Requests
		lr := lockRequest(nss[k%len(nss)], fmt.Sprintf("r-%s-%04d", sims[i], k))
		if !fleet {
			return retried(ctx, func() error { return ignore(b.remove(ctx, lr.Namespace, lr.Name), apierrors.IsNotFound) })
		}
		return retried(ctx, func() error { return ignore(f.spokes[0].env.Client.Delete(ctx, lr), apierrors.IsNotFound) })
	}
	if err := parallel(ctx, requests, 8, release); err != nil {
		return err
	}
	if fleet {
		// The agents delete their hub requests.
		if err := f.waitHubEmpty(ctx, sims); err != nil {
			return err
		}
	}
	for _, ns := range nss {
		if err := b.waitReleased(ctx, ns); err != nil {
			return err
		}
	}
	return nil
}

// rest measures the hub manager over the Rest window: CPU as % of a core, the median heap in
// use sampled every second, RSS at the end, and (when writes is set) the hub's writes per
// second from its counters.
func (f *fleetRun) rest(ctx context.Context, cpuPct *float64, heap, rss *int64, writes *float64) error {
	b := f.b
	d := b.cfg.Fleet.Rest.D()
	before, err := b.mgr.counts(ctx)
	if err != nil {
		return err
	}
	apiBefore, err := b.api.scrape(ctx)
	if err != nil {
		return err
	}
	t0 := time.Now()
	var heaps []float64
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for time.Since(t0) < d {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		c, err := b.mgr.counts(ctx)
		if err != nil {
			return err
		}
		heaps = append(heaps, c.heapInUse)
	}
	after, err := b.mgr.counts(ctx)
	if err != nil {
		return err
	}
	elapsed := time.Since(t0).Seconds()
	*cpuPct = 100 * (after.cpu - before.cpu) / elapsed
	*heap = int64(median(heaps))
	*rss = b.mgr.rss().RSS
	if writes != nil {
		apiAfter, err := b.api.scrape(ctx)
		if err != nil {
			return err
		}
		total := 0.0
		for s, v := range apiAfter {
			if writeVerbs[s.verb] {
				total += v - apiBefore[s]
			}
		}
		*writes = total / elapsed
	}
	return nil
}

// simSpokes are the simulated spokes: each a real agent (spoke.SetupWithManager, the code the
// manager runs with --hub-kubeconfig) in a manager of its own in this process, on the hub as
// its own ServiceAccount (the shipped RBAC and admission policies), with its own hub client,
// Lease renewals and label-selected watch of its cluster's hub requests, exactly as a spoke's
// manager has them. What is simulated is only the spoke side: the spokes share one API server
// (spoke A's), each agent's cache selecting its own spoke's requests by a label, which the hub
// cannot tell from 50 clusters.
type simSpokes struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
}

func (f *fleetRun) startSims(ctx context.Context, sims []string) (*simSpokes, error) {
	fc := f.b.cfg.Fleet
	spokeCfg := rest.CopyConfig(f.spokes[0].env.Config)
	// The manager's default client rate (--kube-api-qps, --kube-api-burst), as a spoke has it.
	spokeCfg.QPS, spokeCfg.Burst = 200, 400
	settings := skew.Defaults()
	if fc.Lease.D() != settings.Lease {
		settings = skew.Settings{Lease: fc.Lease.D(), Grace: 0, MaxSkew: skew.DefaultMaxSkew}
	}
	runCtx, cancel := context.WithCancel(ctx)
	s := &simSpokes{cancel: cancel}
	for _, name := range sims {
		path, err := f.hubConfig(ctx, name)
		if err != nil {
			s.stop()
			return nil, err
		}
		hub, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			s.stop()
			return nil, err
		}
		hub.QPS, hub.Burst = 200, 400
		mine := labels.SelectorFromSet(labels.Set{simLabel: name})
		mgr, err := ctrl.NewManager(spokeCfg, ctrl.Options{
			Scheme:                 framework.Scheme,
			Metrics:                metricsserver.Options{BindAddress: "0"},
			HealthProbeBindAddress: "0",
			Cache:                  cache.Options{ByObject: map[client.Object]cache.ByObject{&locksv1.LockRequest{}: {Label: mine}}},
			// Every agent's controller is named fleet-spoke, as in its own process.
			Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		})
		if err != nil {
			s.stop()
			return nil, err
		}
		if _, err := spoke.SetupWithManager(mgr, spoke.Options{Cluster: name, Hub: hub, Settings: settings}); err != nil {
			s.stop()
			return nil, err
		}
		s.wg.Go(func() {
			if err := mgr.Start(runCtx); err != nil {
				s.mu.Lock()
				s.errs = append(s.errs, fmt.Errorf("agent %s: %w", name, err))
				s.mu.Unlock()
			}
		})
	}
	return s, nil
}

func (s *simSpokes) stop() {
	s.cancel()
	s.wg.Wait()
}

// fleetRows are the fleet phase's rows of WriteTable.
func (r *Result) fleetRows() [][2]string {
	fr := r.Fleet
	if fr == nil {
		return nil
	}
	rows := handoffRows("", fr.FleetHandoffs)
	if l := fr.Link; l != nil {
		rows = append(rows, handoffRows(fmt.Sprintf("link of %s ms each way to the hub: ", num(l.LatencyMs)), l.FleetHandoffs)...)
	}
	if bf := fr.Before; bf != nil {
		rows = append(rows, beforeRow("", bf.Direct, fr.FleetHandoffs))
		if bf.Link != nil && fr.Link != nil {
			rows = append(rows, beforeRow(fmt.Sprintf("link of %s ms each way to the hub: ", num(fr.Link.LatencyMs)), *bf.Link, fr.Link.FleetHandoffs))
		}
	}
	for _, l := range []FleetLoad{fr.Baseline, fr.Fleet} {
		who := fmt.Sprintf("%d requests made inside the hub", l.Requests)
		if l.Spokes > 0 {
			who = fmt.Sprintf("%d simulated spokes × %d requests", l.Spokes, l.Requests/l.Spokes)
		}
		rows = append(rows, [2]string{
			fmt.Sprintf("Hub manager, %s: decided in s (CPU s) · settled in s · CPU %% of a core idle → at rest · heap in use idle → at rest · RSS idle → at rest · hub API writes/s at rest", who),
			fmt.Sprintf("%s (%s) · %s · %s → %s %% · %s → %s MiB · %s → %s MiB · %s", num(l.LoadSeconds), num(l.LoadCPUSeconds), num(l.SettleSeconds), num(l.IdleCPUPct), num(l.RestCPUPct),
				mib(l.IdleHeapInUse), mib(l.HeapInUse), mib(l.IdleRSS), mib(l.RSS), num(l.RestWritesPerSec)),
		})
	}
	rows = append(rows, [2]string{"Hub manager per simulated spoke (fleet - baseline, ÷ spokes): CPU % of a core at rest · heap in use · RSS · CPU s to decide its requests",
		fmt.Sprintf("%s %% · %s KiB · %s KiB · %s", num(fr.RestCPUPerSpokePct), num(fr.HeapPerSpokeBytes/1024), num(fr.RSSPerSpokeBytes/1024), num(fr.LoadCPUPerSpokeSecs))})
	return rows
}

// handoffRows are the rows of one mode's hand-offs, each name after prefix.
func handoffRows(prefix string, h FleetHandoffs) [][2]string {
	return [][2]string{
		{fmt.Sprintf("Fleet %shand-off inside the hub: release → next Granted, p50 / p99 of %d (steps: deletion seen on the hub · → next Granted there)", prefix, h.Local.N),
			fmt.Sprintf("%s (%s · %s)", lat(h.Local), lat(h.LocalSteps.Release), lat(h.LocalSteps.Decide))},
		{fmt.Sprintf("Fleet %shand-off between two spokes (release in spoke A → Granted in spoke B, through the hub), same run: p50 / p99 (added p50 / p99)", prefix),
			fmt.Sprintf("%s (%s / %s ms)", lat(h.Spokes), signed(h.AddedP50), signed(h.AddedP99))},
		{fmt.Sprintf("Fleet %shand-off between two spokes, steps p50 / p99: the delete in A (the call) · → A's hub request released (or gone) on the hub · → B's Granted on the hub · → B's Granted in spoke B", prefix),
			fmt.Sprintf("%s · %s · %s · %s", lat(h.Steps.Delete), lat(h.Steps.Release), lat(h.Steps.Decide), lat(h.Steps.Copy))},
		{fmt.Sprintf("Fleet %shub round trip, same run: a write (Lease renewal) → its watch event, p50 / p99 (the write alone) · spoke B's round trip", prefix),
			fmt.Sprintf("%s (%s) · %s", lat(h.HubRoundTrip), lat(h.HubWrite), lat(h.SpokeRoundTrip))},
	}
}

// beforeRow compares the baseline agents' hand-offs between spokes (before) with this
// manager's (now), each beside its own hand-offs inside the hub and hub round trips.
func beforeRow(prefix string, before, now FleetHandoffs) [2]string {
	return [2]string{
		fmt.Sprintf("Fleet %sbaseline agents (--fleet-baseline) → these: between spokes p50 / p99 · added p50 ÷ hub round trip p50 · steps p50: → released (or gone) on the hub · → Granted on the hub · → Granted in spoke B", prefix),
		fmt.Sprintf("%s → %s · %s → %s · %s / %s / %s → %s / %s / %s ms", lat(before.Spokes), lat(now.Spokes), num(before.AddedRoundTrips), num(now.AddedRoundTrips),
			num(before.Steps.Release.P50), num(before.Steps.Decide.P50), num(before.Steps.Copy.P50), num(now.Steps.Release.P50), num(now.Steps.Decide.P50), num(now.Steps.Copy.P50)),
	}
}

// fleetGoals are docs/fleet.md's bench goals.
func fleetGoals(fr *FleetResult) []Goal {
	goals := []Goal{
		goal("FL1", "hand-off between two spokes, added p50 ÷ hub round trip p50 (same run)", fr.AddedRoundTrips, "<=", 1),
	}
	if l := fr.Link; l != nil {
		goals = append(goals, goal("FL1w", fmt.Sprintf("the same with the hub %s ms away each way (a latency proxy), added p50 ÷ hub round trip p50 through it", num(l.LatencyMs)), l.AddedRoundTrips, "<=", 1))
	}
	return append(goals,
		goal("FL2", fmt.Sprintf("hub manager CPU per simulated spoke at rest, %% of a core (%d spokes)", fr.Fleet.Spokes), fr.RestCPUPerSpokePct, "<=", 1),
		goal("FL3", "hub manager heap in use per simulated spoke, MiB", fr.HeapPerSpokeBytes/(1<<20), "<=", 2),
	)
}

// settle waits until the hub's API server has seen no LockRequest or ProjectLock write for 4
// s, at most 10 minutes, and returns how long that took.
func (f *fleetRun) settle(ctx context.Context) (float64, error) {
	t0 := time.Now()
	writes := func() (float64, error) {
		c, err := f.b.api.scrape(ctx)
		return c.writes("lockrequests", "") + c.writes("projectlocks", ""), err
	}
	last, err := writes()
	if err != nil {
		return 0, err
	}
	quiet := 0
	for quiet < 2 {
		if time.Since(t0) > 10*time.Minute {
			return 0, fmt.Errorf("the hub's requests still written after %s", time.Since(t0).Round(time.Second))
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(2 * time.Second):
		}
		now, err := writes()
		if err != nil {
			return 0, err
		}
		if now == last {
			quiet++
		} else {
			quiet = 0
		}
		last = now
	}
	return time.Since(t0).Seconds(), nil
}

// waitHubEmpty waits until the hub has no request of the clusters (their agents delete them
// after their spoke requests).
func (f *fleetRun) waitHubEmpty(ctx context.Context, clusters []string) error {
	sel, err := labels.NewRequirement(spoke.LabelCluster, selection.In, clusters)
	if err != nil {
		return err
	}
	for deadline := time.Now().Add(10 * waitLimit); ; {
		var list metav1.PartialObjectMetadataList
		list.SetGroupVersionKind(locksv1.GroupVersion.WithKind("LockRequestList"))
		if err := f.b.c.List(ctx, &list, client.MatchingLabelsSelector{Selector: labels.NewSelector().Add(*sel)}); err != nil {
			return err
		}
		if len(list.Items) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d hub requests of %d spokes left %s after their spoke requests were deleted", len(list.Items), len(clusters), 10*waitLimit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// retried calls f until it succeeds, at most 5 times a second apart while the API server
// answers that it timed out or is overloaded (a 2-core machine loaded far past its cores
// makes a write outlast the server's timeout now and then); any other error at once.
func retried(ctx context.Context, f func() error) error {
	for attempt := 1; ; attempt++ {
		err := f()
		if err == nil || attempt == 5 || !overloaded(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// overloaded is an error of an API server that timed out or was too busy to answer.
func overloaded(err error) bool {
	return apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsInternalError(err) || errors.Is(err, context.DeadlineExceeded)
}

// ignore is err unless it is one that is fine to see (a retried create that had succeeded).
func ignore(err error, fine func(error) bool) error {
	if err != nil && fine(err) {
		return nil
	}
	return err
}

// valid checks FleetConfig.
func (fc FleetConfig) valid() error {
	if fc.Samples < 1 || fc.Spokes < 1 || fc.Requests < 1 || fc.Namespaces < 1 || fc.Rest < Duration(time.Second) {
		return errors.New("the fleet phase needs a sample, a spoke, a request, a namespace and a rest window of at least 1s")
	}
	if fc.Link < 0 || fc.Link%Duration(time.Millisecond) != 0 {
		return errors.New("the fleet phase's link latency is whole milliseconds, 0 for none")
	}
	if fc.Lease.D() != skew.DefaultLease {
		if err := (skew.Settings{Lease: fc.Lease.D(), MaxSkew: skew.DefaultMaxSkew}).Validate(); err != nil {
			return fmt.Errorf("fleet lease: %w", err)
		}
	}
	return nil
}

// lockRequest is a LockRequest's name, to delete it by.
func lockRequest(ns, name string) *locksv1.LockRequest {
	return &locksv1.LockRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}
