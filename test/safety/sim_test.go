package safety

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/controller"
	"github.com/turnstile-dev/turnstile/internal/deadlock"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/sharding"
	"github.com/turnstile-dev/turnstile/internal/testing/lag"
)

// The seeded simulation: three managers with their own lagging caches and skewed clocks run the
// real reconcilers (keys, CommandLock, deadlock detector) one step at a time, as active-active
// replicas whose membership changes (one dies, one joins with a fresh cache or comes back with
// the stale one it had, views of the membership lapse late), while the test
// creates, releases, deletes (with and without finalizers) and renews requests — single-key,
// multi-key and re-entrant —, force-unlocks keys, freezes and thaws, lets holder Leases lapse
// and time pass. After every step the store is checked against every promise, and every
// intermediate state of the requests (each watch event) against mutual exclusion and token
// order. At the end the environment stops, the caches catch up, and every key that someone
// can be granted must be held: progress.
//
// TURNSTILE_SIM_SEEDS (comma-separated) and TURNSTILE_SIM_STEPS choose the run; a failure
// prints its seed, and that seed replays it. `make test` runs a short budget, `make soak` a long
// one.

const simFinalizer = "sim.turnstile.dev/keep"

// simBudget is the seeds and steps to run. With no TURNSTILE_SIM_SEEDS, two seeds of the list
// and then more until the run has been everywhere it must go (simWant), so that a short budget
// still proves something on a machine whose timing sends a seed elsewhere; fixed says which.
func simBudget() (seeds []uint64, steps int, fixed bool) {
	seeds = []uint64{10, 3, 4, 13, 14, 15}
	steps = 1000
	if s := os.Getenv("TURNSTILE_SIM_SEEDS"); s != "" {
		fixed = true
		seeds = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
			Expect(err).NotTo(HaveOccurred(), "TURNSTILE_SIM_SEEDS=%q", s)
			seeds = append(seeds, n)
		}
	}
	if s := os.Getenv("TURNSTILE_SIM_STEPS"); s != "" {
		n, err := strconv.Atoi(s)
		Expect(err).NotTo(HaveOccurred(), "TURNSTILE_SIM_STEPS=%q", s)
		steps = n
	}
	return seeds, steps, fixed
}

// simWant is where the walk must have gone, or it proves nothing: every kind of step, and every
// outcome a request can come to.
var simWant = []string{"decide", "create", "release", "delete", "force-unlock", "crash", "die", "rejoin", "lapse", "freeze", "thaw",
	"time", "lose-lease", "drained", locksv1.ReasonGranted, locksv1.ReasonForceUnlocked, locksv1.ReasonExpired,
	locksv1.ReasonHolderLost, locksv1.ReasonReleased, "demoted", "reissued", "conflict"}

// simShared makes a third of the requests ask for Shared mode (TURNSTILE_SIM_SHARED=0 turns it
// off, to tell whether a failure needs shared requests).
var simShared = os.Getenv("TURNSTILE_SIM_SHARED") != "0"

// simCounted makes half of the shared requests counting locks, with maxHolders 1 to 3, so that
// requests on a key disagree (issue #45; TURNSTILE_SIM_COUNTED=0 turns it off).
var simCounted = simShared && os.Getenv("TURNSTILE_SIM_COUNTED") != "0"

func simMissing(total map[string]int) []string {
	var out []string
	want := simWant
	if simShared {
		want = append(slices.Clone(simWant), "shared together")
	}
	if simCounted {
		want = append(want, "counted together")
	}
	for _, w := range want {
		if total[w] == 0 {
			out = append(out, w)
		}
	}
	return out
}

var _ = Describe("The seeded simulation", func() {
	// The suite's longest spec by far (2.5 minutes on a 2-core machine, the others a few seconds
	// each): SpecPriority, in the others' worth, has RunSuiteInShards give it a shard of its own.
	It("keeps every promise with three managers on lagging caches, under force-unlocks, expiries, lost holders, deletions, freezes and crashes", SpecPriority(34), func() {
		seeds, steps, fixed := simBudget()
		total := map[string]int{}
		ran := 0
		for _, seed := range seeds {
			if !fixed && ran >= 2 && len(simMissing(total)) == 0 {
				break
			}
			ran++
			By(fmt.Sprintf("seed %d, %d steps (replay: TURNSTILE_SIM_SEEDS=%d TURNSTILE_SIM_STEPS=%d)", seed, steps, seed, steps))
			s := newSim(seed)
			s.run(steps)
			for k, n := range s.did {
				total[k] += n
			}
			GinkgoWriter.Printf("seed %d: %d steps, %d request events checked: %v\n", seed, steps, s.eventsChecked, s.did)
		}
		// The walk must have gone where the promises are at risk, or it proves nothing.
		Expect(simMissing(total)).To(BeEmpty(), "never reached in %d seeds x %d steps: %v", ran, steps, total)
		GinkgoWriter.Printf("simulation: %d seeds x %d steps, 3 managers: %v\n", ran, steps, total)
	})
})

type sim struct {
	seed     uint64
	rng      *rand.Rand
	ns       string
	cfg      queue.Config
	command  string // the command the simulation freezes
	ms       []*manager
	dets     []*controller.DeadlockDetector
	targets  []locksv1.LockTarget
	keys     []types.NamespacedName
	ids      []locksv1.Holder
	now      time.Time // the simulation's clock: it moves a little each step and jumps with "time"
	inv      *lag.Invariants
	replay   *lag.Invariants // checks every request event, in the store's order
	replayed int
	seq      int
	did      map[string]int

	// Membership (issue #18), on its own random stream: dead[i] says manager i's process is
	// gone; members[i] is whom manager i counts as live (it learns of a death only at a
	// "lapse"), and routes by: the owner of a key decides first.
	mrng    *rand.Rand
	dead    []bool
	members [][]string

	// Shared locks (issue #31), on their own random stream so the walk's other choices stay
	// those of its seed: a third of the requests ask for their keys in Shared mode.
	srng *rand.Rand
	// Counting locks (issue #45), on a stream of their own too.
	crng *rand.Rand

	eventsChecked int
	trace         bool             // TURNSTILE_SIM_TRACE=1 prints every step
	tokens        map[string]int64 // request/key -> the last per-key token seen, for re-issues
}

func newSim(seed uint64) *sim {
	s := &sim{
		seed: seed, rng: rand.New(rand.NewPCG(seed, 0x7475726e)), ns: newNamespace(),
		cfg: queue.Config{DefaultTTL: 40 * time.Second, MaxTTL: 2 * time.Minute, AgingStep: 30 * time.Second, QueueCap: 8, HeadSize: 5},
		did: map[string]int{}, tokens: map[string]int64{}, trace: os.Getenv("TURNSTILE_SIM_TRACE") != "",
		mrng: rand.New(rand.NewPCG(seed, 0x6d656d62)),
		srng: rand.New(rand.NewPCG(seed, 0x73686172)),
		crng: rand.New(rand.NewPCG(seed, 0x636f756e)),
	}
	s.command = fmt.Sprintf("apply-%s", s.ns)
	// Ahead of the API server's clock, so that no creationTimestamp is in the simulation's
	// future (a manager would count a request's arrival from it, by real time).
	s.now = time.Now().Add(time.Hour)
	for i := range 3 {
		skew := time.Duration(s.rng.IntN(4000)-2000) * time.Millisecond
		m := newManager(fmt.Sprintf("m%d", i), skew, s.cfg)
		m.simNow = &s.now
		s.ms = append(s.ms, m)
		s.dets = append(s.dets, s.detector(m))
		s.dead = append(s.dead, false)
	}
	for range s.ms {
		s.members = append(s.members, []string{"m0", "m1", "m2"})
	}
	for _, p := range []string{"net", "app", "db"} {
		t := target(p)
		s.targets = append(s.targets, t)
		s.keys = append(s.keys, keyOf(s.ns, t))
	}
	// Owner "alice#1" without a pull and bob's second session are identities of their own (hole C
	// of issue #26): a joined owner#pull string would make them alice's pull 1 and bob.
	s.ids = []locksv1.Holder{{Owner: "alice", Pull: 1}, {Owner: "alice", Pull: 2}, {Owner: "bob"}, {Owner: "carol", Pull: 3},
		{Owner: "alice#1"}, {Owner: "bob", Session: "s2"}}
	s.inv = lag.NewInvariants(k8s)
	s.inv.Structural = true
	s.inv.NoOps = history
	s.replay = lag.NewInvariants(k8s)
	cl := &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: s.command}}
	Expect(k8s.Create(ctx, cl)).To(Succeed())
	DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(ctx, cl))).To(Succeed()) })
	syncHistory()
	s.replayed = history.Len(lag.LockRequests)
	for _, m := range s.ms {
		m.view.CatchUp()
	}
	return s
}

func (s *sim) detector(m *manager) *controller.DeadlockDetector {
	return controller.NewDeadlockDetector(m.view, nopRecorder{}, controller.WithConfig(s.cfg), controller.WithDeadlockPolicy(deadlock.PolicyNewest), controller.WithClock(m.clock), controller.WithLiveReader(k8s))
}

// where says where a failure happened, with the seed that replays it.
func (s *sim) where(step int, what string) string {
	return fmt.Sprintf("seed %d step %d (%s); replay with TURNSTILE_SIM_SEEDS=%d", s.seed, step, what, s.seed)
}

func (s *sim) run(steps int) {
	for step := 0; step < steps; step++ {
		s.now = s.now.Add(20 * time.Millisecond)
		before := history.Mark()
		var what string
		if s.mrng.IntN(100) < 3 {
			what = s.membership()
		} else {
			what = s.step()
		}
		s.did[strings.Fields(what)[0]]++
		s.check(step, what, before)
		if strings.HasPrefix(what, "decide") {
			s.countShared()
		}
	}
	s.settle(steps)
	s.tally()
}

// simSteps are the random things a simulation step does, each chosen when a roll of 0..99 is below
// its bound and the bounds before it: decide 55%, create 11%, and so on.
var simSteps = []struct {
	below int
	do    func(*sim) string
}{
	{55, (*sim).decide},
	{66, (*sim).create},
	{72, (*sim).release},
	{76, (*sim).remove},
	{78, (*sim).unfinalize},
	{81, (*sim).forceUnlock},
	{83, (*sim).renew},
	{88, (*sim).freeze},
	{91, (*sim).tick},
	{95, (*sim).lease},
	{96, (*sim).scanDeadlocks},
	{100, (*sim).crash},
}

// step does one random thing and says what.
func (s *sim) step() string {
	k := s.rng.IntN(100)
	for _, st := range simSteps {
		if k < st.below {
			return st.do(s)
		}
	}
	panic(fmt.Sprintf("no step for roll %d", k))
}

// tick moves the clock forward by 2 to 31 seconds.
func (s *sim) tick() string {
	d := time.Duration(2+s.rng.IntN(30)) * time.Second
	s.now = s.now.Add(d)
	return fmt.Sprintf("time +%s", d)
}

// crash stops a manager between two writes of a decision.
func (s *sim) crash() string {
	// A crash between two writes of a decision: the reconcile stops after a random number of
	// them, and the manager comes back with nothing remembered and a fresh cache.
	m := s.ms[s.pickManager()]
	s.advance(m)
	k := s.keys[s.rng.IntN(len(s.keys))]
	writes := s.rng.IntN(4)
	m.view.CrashAfter(writes)
	_, err := m.reconcileKey(k)
	if err != nil && !errors.Is(err, lag.ErrCrashed) {
		Expect(err).NotTo(HaveOccurred(), "%s: reconcile %s", m.name, k.Name)
	}
	m.view.Revive()
	s.tallyOne(m)
	m.restart(s.cfg)
	s.dets[slices.Index(s.ms, m)] = s.detector(m)
	m.view.CatchUp() // a new process lists afresh
	return fmt.Sprintf("crash %s deciding %s after %d writes", m.name, k.Name, writes)
}

// advance moves each of m's caches forward by a random amount: sometimes all the way, sometimes
// not at all, independently per kind.
func (s *sim) advance(m *manager) {
	for _, k := range lag.Kinds {
		behind := m.view.Behind(k)
		switch r := s.rng.IntN(4); {
		case behind == 0 || r == 0:
		case r == 1:
			m.view.Advance(k, behind)
		default:
			m.view.Advance(k, 1+s.rng.IntN(behind))
		}
	}
}

func (s *sim) decide() string {
	m := s.ms[s.pickManager()]
	s.advance(m)
	if s.rng.IntN(8) == 0 {
		_, err := m.reconcileCommand(s.command)
		Expect(err).NotTo(HaveOccurred(), "%s: commandlock", m.name)
		return "drained " + m.name
	}
	k := s.keys[s.rng.IntN(len(s.keys))]
	// Routing: the key's owner, by this manager's view of the membership, decides at once; this
	// manager, a backup, after the backup delay. Either may come first.
	self := slices.Index(s.ms, m)
	if i := slices.IndexFunc(s.ms, func(o *manager) bool { return o.name == sharding.Owner(s.members[self], k.String()) }); i >= 0 && i != self && !s.dead[i] && s.mrng.IntN(2) == 0 {
		m = s.ms[i]
		s.advance(m)
	}
	// Now and then the command freezes or thaws between two writes of the decision, with the
	// reason it had (hole A of issue #26): a demotion then finds the status it would write
	// already stored, and only a fence that changes the object stops the grant in flight.
	// Another manager may decide the key right then, as manager B of the hole did.
	flip := ""
	if s.rng.IntN(6) == 0 {
		n := 1 + s.rng.IntN(3)
		other := s.ms[s.pickManager()]
		nested := other != m && s.rng.IntN(2) == 0
		m.view.BeforeWrite(n, func() {
			flip = fmt.Sprintf(", %s before its write %d", s.freeze(), n)
			if nested {
				syncHistory()
				s.advance(other)
				_, err := other.reconcileKey(k)
				other.view.CancelHooks()
				Expect(err).NotTo(HaveOccurred(), "%s: reconcile %s inside %s's decision", other.name, k.Name, m.name)
				flip += fmt.Sprintf(", and %s decides it then", other.name)
			}
			s.did["flip"]++
		})
	}
	_, err := m.reconcileKey(k)
	m.view.CancelHooks()
	Expect(err).NotTo(HaveOccurred(), "%s: reconcile %s", m.name, k.Name)
	return fmt.Sprintf("decide %s by %s at %v%s", k.Name, m.name, m.view.Pos(), flip)
}

// pickManager picks a live manager: a random one, or the next live one after it.
func (s *sim) pickManager() int {
	i := s.rng.IntN(len(s.ms))
	for s.dead[i] {
		i = (i + 1) % len(s.ms)
	}
	return i
}

// membership changes who runs: a replica dies (never more than two at once), a dead one comes
// back — as a new process with a fresh cache, or with the stale cache it had, as after a
// network partition —, or the live ones notice the membership as it is (a lapse).
func (s *sim) membership() string {
	var live, gone []int
	for i := range s.ms {
		if s.dead[i] {
			gone = append(gone, i)
		} else {
			live = append(live, i)
		}
	}
	switch r := s.mrng.IntN(3); {
	case r == 0 && len(live) > 1:
		i := live[s.mrng.IntN(len(live))]
		s.tallyOne(s.ms[i])
		s.dead[i] = true
		return "die " + s.ms[i].name
	case r == 1 && len(gone) > 0:
		i := gone[s.mrng.IntN(len(gone))]
		m := s.ms[i]
		m.restart(s.cfg)
		s.dets[i] = s.detector(m)
		s.dead[i] = false
		if s.mrng.IntN(2) == 0 {
			m.view.CatchUp()
			s.members[i] = s.liveNames()
			return "join " + m.name + " with a fresh cache"
		}
		// Its caches and its view of the membership are where they were when it went.
		return fmt.Sprintf("rejoin %s with its stale cache at %v", m.name, m.view.Pos())
	default:
		names := s.liveNames()
		for _, i := range live {
			s.members[i] = names
		}
		return fmt.Sprintf("lapse (the live replicas count %v)", names)
	}
}

func (s *sim) liveNames() []string {
	var out []string
	for i, m := range s.ms {
		if !s.dead[i] {
			out = append(out, m.name)
		}
	}
	return out
}

func (s *sim) create() string {
	s.seq++
	id := s.ids[s.rng.IntN(len(s.ids))]
	lr := &locksv1.LockRequest{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: fmt.Sprintf("r%04d", s.seq)}}
	lr.Spec.Holder = id
	first := s.rng.IntN(len(s.targets))
	lr.Spec.Locks = []locksv1.LockTarget{s.targets[first]}
	if s.rng.IntN(4) == 0 {
		lr.Spec.Locks = append(lr.Spec.Locks, s.targets[(first+1+s.rng.IntN(len(s.targets)-1))%len(s.targets)])
	}
	switch s.rng.IntN(4) {
	case 0, 1:
		lr.Spec.Command = s.command
	case 2:
		lr.Spec.Command = "plan"
	}
	if s.rng.IntN(4) == 0 {
		lr.Spec.Priority = locksv1.PriorityHigh
	}
	switch s.rng.IntN(6) {
	case 0:
		lr.Spec.TTL = &metav1.Duration{Duration: 10 * time.Second}
	case 1:
		lr.Spec.TTL = &metav1.Duration{Duration: 5 * time.Minute} // over MaxTTL: Invalid
	}
	if s.rng.IntN(8) == 0 {
		lr.Spec.WaitTimeout = &metav1.Duration{Duration: time.Duration(s.rng.IntN(2)) * 30 * time.Second}
	}
	if s.rng.IntN(4) == 0 {
		lr.Spec.Holder.Lease = s.ensureLease(id)
	}
	if s.rng.IntN(5) == 0 {
		lr.Finalizers = []string{simFinalizer}
	}
	if s.srng.IntN(3) == 0 && simShared {
		bound := int32(0)
		if simCounted && s.crng.IntN(2) == 0 {
			bound = int32(1 + s.crng.IntN(3))
		}
		for i := range lr.Spec.Locks {
			lr.Spec.Locks[i].Mode = locksv1.ModeShared
			lr.Spec.Locks[i].MaxHolders = bound
		}
	}
	Expect(k8s.Create(ctx, lr)).To(Succeed())
	return "create " + lr.Name
}

func (s *sim) requests(keep func(*locksv1.LockRequest) bool) []locksv1.LockRequest {
	var list locksv1.LockRequestList
	Expect(k8s.List(ctx, &list, client.InNamespace(s.ns))).To(Succeed())
	return slices.DeleteFunc(list.Items, func(lr locksv1.LockRequest) bool { return !keep(&lr) })
}

func (s *sim) pick(keep func(*locksv1.LockRequest) bool) *locksv1.LockRequest {
	c := s.requests(keep)
	if len(c) == 0 {
		return nil
	}
	return &c[s.rng.IntN(len(c))]
}

func (s *sim) release() string {
	lr := s.pick(func(lr *locksv1.LockRequest) bool { return !lr.Status.Phase.IsFinal() && !lr.Spec.Release })
	if lr == nil {
		return "release none"
	}
	lr.Spec.Release = true
	if err := k8s.Update(ctx, lr); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
		Expect(err).NotTo(HaveOccurred())
	}
	return "release " + lr.Name
}

func (s *sim) remove() string {
	lr := s.pick(func(lr *locksv1.LockRequest) bool { return lr.DeletionTimestamp == nil })
	if lr == nil {
		return "delete none"
	}
	Expect(client.IgnoreNotFound(k8s.Delete(ctx, lr))).To(Succeed())
	return "delete " + lr.Name
}

func (s *sim) unfinalize() string {
	lr := s.pick(func(lr *locksv1.LockRequest) bool { return lr.DeletionTimestamp != nil })
	if lr == nil {
		return "unfinalize none"
	}
	lr.Finalizers = nil
	if err := k8s.Update(ctx, lr); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
		Expect(err).NotTo(HaveOccurred())
	}
	return "unfinalize " + lr.Name
}

func (s *sim) forceUnlock() string {
	k := s.keys[s.rng.IntN(len(s.keys))]
	pl := &locksv1.ProjectLock{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}}
	Expect(client.IgnoreNotFound(k8s.Delete(ctx, pl))).To(Succeed())
	return "force-unlock " + k.Name
}

func (s *sim) renew() string {
	lr := s.pick(func(lr *locksv1.LockRequest) bool { return lr.Status.Phase == locksv1.PhaseGranted })
	if lr == nil {
		return "renew none"
	}
	lr.Spec.TTL = &metav1.Duration{Duration: time.Duration(20+s.rng.IntN(60)) * time.Second}
	if err := k8s.Update(ctx, lr); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
		Expect(err).NotTo(HaveOccurred())
	}
	return "renew " + lr.Name
}

func (s *sim) freeze() string {
	var cl locksv1.CommandLock
	Expect(k8s.Get(ctx, client.ObjectKey{Name: s.command}, &cl)).To(Succeed())
	cl.Spec.Locked = !cl.Spec.Locked
	cl.Spec.Reason = "simulated maintenance"
	Expect(k8s.Update(ctx, &cl)).To(Succeed())
	if cl.Spec.Locked {
		return "freeze " + s.command
	}
	return "thaw " + s.command
}

// leaseName is the holder Lease of id: one per identity, named by its place in s.ids (an owner
// may contain characters a Lease name may not).
func (s *sim) leaseName(id locksv1.Holder) string {
	for i, other := range s.ids {
		if other.ID() == id.ID() {
			return fmt.Sprintf("lease-%d", i)
		}
	}
	panic(fmt.Sprintf("identity %s is not one of the simulation's", id.ID()))
}

// ensureLease makes sure the holder Lease of id exists and is renewed at the simulated now.
func (s *sim) ensureLease(id locksv1.Holder) string {
	name := s.leaseName(id)
	var l coordinationv1.Lease
	err := k8s.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: name}, &l)
	now := metav1.NewMicroTime(s.now)
	switch {
	case apierrors.IsNotFound(err):
		l = coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name}}
		l.Spec.LeaseDurationSeconds = ptr.To[int32](20)
		l.Spec.RenewTime = &now
		Expect(k8s.Create(ctx, &l)).To(Succeed())
	default:
		Expect(err).NotTo(HaveOccurred())
		l.Spec.RenewTime = &now
		Expect(k8s.Update(ctx, &l)).To(Succeed())
	}
	return name
}

// lease renews or deletes a random holder's Lease (a lapse is time passing without renewal).
func (s *sim) lease() string {
	id := s.ids[s.rng.IntN(len(s.ids))]
	if s.rng.IntN(3) == 0 {
		name := s.leaseName(id)
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name}}
		Expect(client.IgnoreNotFound(k8s.Delete(ctx, l))).To(Succeed())
		return "lose-lease " + name
	}
	return "renew-lease " + s.ensureLease(id)
}

func (s *sim) scanDeadlocks() string {
	i := s.pickManager()
	s.advance(s.ms[i])
	Expect(s.dets[i].Check(ctx, s.ns)).To(Succeed())
	return "deadlock-scan " + s.ms[i].name
}

// check judges the store after a step, and every request event since the last check.
func (s *sim) check(step int, what string, before lag.Mark) {
	GinkgoHelper()
	st, err := lag.ReadState(ctx, k8s, s.ns)
	Expect(err).NotTo(HaveOccurred())
	// Every change is in the history before the next step moves a cache, so a seed replays.
	var leases coordinationv1.LeaseList
	Expect(k8s.List(ctx, &leases, client.InNamespace(s.ns))).To(Succeed())
	Expect(history.SyncWith(lag.LockRequests, s.ns, &st.Requests)).To(Succeed())
	Expect(history.SyncWith(lag.ProjectLocks, s.ns, &st.ProjectLocks)).To(Succeed())
	Expect(history.SyncWith(lag.CommandLocks, "", &st.CommandLocks)).To(Succeed())
	Expect(history.SyncWith(lag.Leases, s.ns, &leases)).To(Succeed())
	violations := s.inv.CheckState(st)
	if s.trace || len(violations) > 0 {
		// The step and what it wrote: a failure shows its cause even where it does not replay.
		GinkgoWriter.Printf("seed %d step %d: %s -> %v\n", s.seed, step, what, history.Mark())
		for _, k := range lag.Kinds {
			for _, ev := range history.Events(k, before[k], history.Len(k)) {
				GinkgoWriter.Printf("    %s %s %s\n", k, ev.Type, lag.Summary(ev.Object))
			}
		}
	}
	Expect(violations).To(BeEmpty(), s.where(step, what))
	end := history.Len(lag.LockRequests)
	v := s.replay.Replay(s.ns, history.Events(lag.LockRequests, s.replayed, end))
	s.eventsChecked += end - s.replayed
	s.replayed = end
	Expect(v).To(BeEmpty(), s.where(step, what)+": an intermediate state")
	s.count(st.Requests.Items)
}

// count tallies the outcomes the requests show, so the run can prove it went where it matters.
func (s *sim) count(reqs []locksv1.LockRequest) {
	for _, lr := range reqs {
		for _, c := range lr.Status.Conditions {
			if c.Type != locksv1.ConditionGranted {
				continue
			}
			key := lr.Name + "/" + c.Reason
			if _, seen := s.tokens[key]; !seen {
				s.tokens[key] = 0
				s.did[c.Reason]++
			}
		}
		for _, l := range lr.Status.Locks {
			key := lr.Name + "@" + l.Name
			if prev := s.tokens[key]; l.FencingToken != 0 && prev != 0 && l.FencingToken != prev {
				s.did["reissued"]++
			}
			if l.FencingToken != 0 {
				s.tokens[key] = l.FencingToken
			}
		}
	}
}

// countShared counts the keys held shared by more than one request now ("shared together"),
// those among them that are counting locks ("counted together"), and those held by as many as
// the lowest bound of their holders allows ("counted full").
func (s *sim) countShared() {
	var pls locksv1.ProjectLockList
	Expect(k8s.List(ctx, &pls, client.InNamespace(s.ns))).To(Succeed())
	for _, pl := range pls.Items {
		if len(pl.Status.SharedHolders) > 1 {
			s.did["shared together"]++
			if pl.Status.MaxHolders > 0 {
				s.did["counted together"]++
			}
			if pl.Status.MaxHolders > 1 && pl.Status.HolderCount == pl.Status.MaxHolders {
				s.did["counted full"]++
			}
		}
	}
}

// tally adds what the managers' metrics counted: lost races, and grants taken back.
func (s *sim) tally() {
	for i, m := range s.ms {
		if !s.dead[i] { // a dead one was counted when it died
			s.tallyOne(m)
		}
	}
}

// tallyOne adds m's counts; m's metrics are not read again (it is restarting, or the run ends).
func (s *sim) tallyOne(m *manager) {
	s.did["conflict"] += int(testutil.ToFloat64(m.metrics.Conflicts))
	s.did["demoted"] += int(testutil.ToFloat64(m.metrics.Demoted))
}

// settle stops the environment, lets every cache catch up and every manager decide until
// nothing changes, then checks progress: a key that someone waits for and may be granted is
// held.
func (s *sim) settle(steps int) {
	GinkgoHelper()
	var cl locksv1.CommandLock
	Expect(k8s.Get(ctx, client.ObjectKey{Name: s.command}, &cl)).To(Succeed())
	cl.Spec.Locked = false
	Expect(k8s.Update(ctx, &cl)).To(Succeed())
	for _, lr := range s.requests(func(lr *locksv1.LockRequest) bool { return len(lr.Finalizers) > 0 }) {
		lr.Finalizers = nil
		Expect(client.IgnoreNotFound(k8s.Update(ctx, &lr))).To(Succeed())
	}
	for round := 0; ; round++ {
		Expect(round).To(BeNumerically("<", 40), s.where(steps, "settling")+": the managers do not settle (the trace above shows the last rounds' writes)")
		// The last rounds before giving up print what they write: the loop that does not settle.
		s.trace = s.trace || round >= 36
		syncHistory()
		before := history.Mark()
		for i, m := range s.ms {
			if s.dead[i] {
				continue // progress must come from the survivors alone
			}
			m.view.CatchUp()
			for _, k := range s.keys {
				m.decide(k)
			}
			_, err := m.reconcileCommand(s.command)
			Expect(err).NotTo(HaveOccurred())
			Expect(s.dets[i].Check(ctx, s.ns)).To(Succeed())
			s.check(steps, "settling by "+m.name, history.Mark())
		}
		syncHistory()
		if history.Mark() == before {
			break
		}
	}
	// Progress: every key with a waiter that has reached it (holds the keys before it) is held.
	reqs := s.requests(func(lr *locksv1.LockRequest) bool { return !lr.Status.Phase.IsFinal() })
	for _, k := range s.keys {
		var pl locksv1.ProjectLock
		err := k8s.Get(ctx, k, &pl)
		held := err == nil && pl.Status.Held()
		for _, lr := range reqs {
			ref, ok := queue.FirstUnheld(&lr)
			if !ok || ref.Name != k.Name || held {
				continue
			}
			Fail(fmt.Sprintf("%s: key %s is free while %s waits for it (%s)", s.where(steps, "progress"), k.Name, lr.Name, describe(&lr)))
		}
	}
}

func describe(lr *locksv1.LockRequest) string {
	for _, c := range lr.Status.Conditions {
		if c.Type == locksv1.ConditionGranted {
			return fmt.Sprintf("%s %s/%s: %s", lr.Status.Phase, c.Status, c.Reason, c.Message)
		}
	}
	return string(lr.Status.Phase)
}
