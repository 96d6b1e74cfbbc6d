package queue

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// simulate drives one key through random arrivals, releases, deletions, renewals, freezes,
// lost leases, force-unlocks and crashes between the decision's writes, feeding every decision
// back the statuses it wrote, and checks the grant invariant after each step.
// It returns how often each outcome happened (finish reasons, "Granted", "handoff").
func simulate(t testing.TB, seed uint64, rounds int) map[string]int {
	t.Helper()
	return simulateModes(t, seed, rounds, modes{})
}

// modes says which modes a random walk asks for besides Exclusive.
type modes struct {
	shared  bool // a third of the requests Shared
	counted bool // and half of those a counting lock (maxHolders 1 to 3)
}

// simulateModes is simulate, with a third of the requests Shared when m.shared is set, and half
// of those counted when m.counted is.
func simulateModes(t testing.TB, seed uint64, rounds int, m modes) map[string]int {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0x7475726e7374696c))
	cfg := Config{DefaultTTL: 20 * time.Second, MaxTTL: time.Minute, AgingStep: 15 * time.Second, QueueCap: 5, HeadSize: 3}
	// "alice#1" without a pull and bob's second session are identities of their own: a joined
	// owner#pull string would take the first for alice's pull 1 and the second for bob. So is
	// bob's second session in a spoke of a fleet (docs/fleet.md "Identity is per cluster").
	holders := []locksv1.Holder{{Owner: "alice", Pull: 1}, {Owner: "alice", Pull: 2}, {Owner: "bob"}, {Owner: "carol", Pull: 3},
		{Owner: "alice#1"}, {Owner: "bob", Session: "s2"}, {Owner: "bob", Session: "s2", Cluster: "eu-west-1"}}
	priorities := []locksv1.Priority{locksv1.PriorityLow, locksv1.PriorityNormal, locksv1.PriorityHigh, locksv1.PriorityCritical}
	commands := []string{"", "plan", "apply"}

	w := newWorld(t)
	clock := t0
	applyLocked := false
	var highest int64 // the highest token the ProjectLock ever showed
	tm := grantTokens{}
	seq := 0
	pick := func(keep func(*locksv1.LockRequest) bool) *locksv1.LockRequest {
		var c []*locksv1.LockRequest
		for _, uid := range w.order {
			if r := w.reqs[uid]; r != nil && keep(r) {
				c = append(c, r)
			}
		}
		if len(c) == 0 {
			return nil
		}
		return c[rng.IntN(len(c))]
	}
	active := func(r *locksv1.LockRequest) bool { return !r.Status.Phase.IsFinal() }
	seen := map[string]int{}

	for round := 0; round < rounds; round++ {
		// At least a millisecond per round: more grants per microsecond than that would be needed
		// to outrun the wall clock a re-created ProjectLock counts from.
		clock = clock.Add(time.Millisecond + time.Duration(rng.IntN(3000))*time.Millisecond)
		var did string
		switch k := rng.IntN(20); {
		case k < 8:
			seq++
			h := holders[rng.IntN(len(holders))]
			b := makeReq(fmt.Sprintf("r%03d", seq)).Owner(h.Owner, h.Pull).Session(h.Session).Cluster(h.Cluster).
				Priority(priorities[rng.IntN(len(priorities))]).
				Command(commands[rng.IntN(len(commands))]).
				Creation(clock.Truncate(time.Second))
			switch rng.IntN(4) {
			case 1:
				b.TTL(5 * time.Second)
			case 2:
				b.TTL(45 * time.Second)
			case 3:
				b.TTL(90 * time.Second) // over MaxTTL
			}
			switch rng.IntN(4) {
			case 1:
				b.WaitTimeout(0)
			case 2:
				b.WaitTimeout(10 * time.Second)
			case 3:
				b.WaitTimeout(40 * time.Second)
			}
			if m.shared && rng.IntN(3) == 0 {
				b.Shared()
				if m.counted && rng.IntN(2) == 0 {
					b.MaxHolders(int32(1 + rng.IntN(3)))
				}
			}
			w.add(b.Obj())
			did = "arrive " + b.Name
		case k < 11:
			if r := pick(active); r != nil && !r.Spec.Release {
				r.Spec.Release = true
				r.Generation++
				did = "release " + r.Name
			}
		case k < 13:
			if r := pick(func(*locksv1.LockRequest) bool { return true }); r != nil {
				w.del(r.UID)
				did = "delete " + r.Name
				if rng.IntN(3) == 0 {
					w.forgetGone() // the controller restarted: the delete event is not known
					did += ", unseen"
				}
			}
		case k < 14:
			if r := pick(func(r *locksv1.LockRequest) bool { return r.Status.Phase == locksv1.PhaseGranted }); r != nil {
				r.Spec.TTL = &metav1.Duration{Duration: TTL(r, cfg) + 10*time.Second}
				r.Generation++
				did = "renew " + r.Name
			}
		case k < 15:
			w.forceUnlock(name1)
			did = "force-unlock"
		case k < 16:
			applyLocked = !applyLocked
			did = fmt.Sprintf("apply frozen=%v", applyLocked)
		case k < 17:
			if r := pick(active); r != nil {
				w.lost = map[types.UID]string{r.UID: "Lease lapsed"}
				did = "lose lease of " + r.Name
			}
		}
		// Retention: finished requests are deleted a while after they finish.
		for uid, r := range w.reqs {
			if f := r.Status.FinishedAt; f != nil && clock.Sub(f.Time) > 30*time.Second {
				w.del(uid)
			}
		}

		var cls []locksv1.CommandLock
		if applyLocked {
			cls = append(cls, commandLock("apply", true, "maintenance window", nil))
		}
		w.freezes, _ = ResolveFreezes(cls, FreezeFlags{}, clock)

		var prev *locksv1.ProjectLock
		if l := w.locks[name1]; l != nil {
			prev = l.DeepCopy()
		}
		// One reconcile: a decision, and — as the controller goes on after creating the
		// ProjectLock, and the finalizer's removal wakes the key again — the next one. A crash
		// can stop any of them after any of its writes.
		var d Decision
		stage := stageAll
		// A counted grant has the write to itself: the controller decides again at once
		// (Decision.More), once for each waiter it left, bounded here by the queue cap.
		for step := 0; step < 4+cfg.QueueCap && stage == stageAll; step++ {
			in := w.input(name1, clock, cfg)
			before := w.input(name1, clock, cfg)
			d = Decide(in)
			if !equality.Semantic.DeepEqual(before.Lock, in.Lock) || !equality.Semantic.DeepEqual(before.Requests, in.Requests) {
				t.Fatalf("seed %d round %d: Decide modified its input", seed, round)
			}
			if rng.IntN(6) == 0 {
				stage = stageFinish + rng.IntN(3) // crash after Finish, Lock or Grant
			}
			w.apply(name1, in, d, stage)
			// Every write changes the object it was read as: the API server keeps the
			// resourceVersion of an update equal to the stored object, and such a write fences
			// nothing (docs/protocol.md, "A fence must change the stored object").
			for _, us := range [][]Update{d.Finish, d.Demote, d.Grant, d.Waiting} {
				for _, u := range us {
					if equality.Semantic.DeepEqual(u.Request.Status, u.Status) {
						t.Fatalf("seed %d round %d: %s is written the status it was read with (a no-op):\n%s", seed, round, u.Request.Name, describeDecision(d))
					}
				}
			}
			if d.Lock != nil && in.Lock != nil && equality.Semantic.DeepEqual(in.Lock.Status, *d.Lock) {
				t.Fatalf("seed %d round %d: the ProjectLock is written the status it was read with (a no-op)", seed, round)
			}
			// A request is written as newly holding only after the same decision's ProjectLock
			// write listed it (docs/protocol.md).
			for _, u := range d.Grant {
				if u.Acquires && d.Lock == nil {
					t.Fatalf("seed %d round %d: %s newly holds the key with no ProjectLock write:\n%s", seed, round, u.Request.Name, describeDecision(d))
				}
			}
			if d.More {
				seen["more"]++
			}
			if !d.DecidesAgain() && !d.ReleaseFinalizer {
				break
			}
		}
		w.lost = nil

		for _, u := range d.Finish {
			seen[u.Event.Reason]++
		}
		for _, u := range d.Grant {
			if u.Event != nil {
				seen[u.Event.Reason]++
			}
		}
		for _, u := range d.Waiting {
			if u.Status.Phase == locksv1.PhasePending && u.Status.QueuePosition > 1 {
				seen["deep queue"]++
			}
			if strings.Contains(u.Status.BlockedBy, "writer preference") {
				seen["writer preference"]++
			}
		}
		if l := w.locks[name1]; l != nil && len(l.Status.SharedHolders) > 1 {
			seen["shared together"]++
			if l.Status.MaxHolders > 0 && l.Status.HolderCount == l.Status.MaxHolders {
				seen["counted full"]++
			}
		}

		where := fmt.Sprintf("seed %d round %d (%s, stage %d)", seed, round, did, stage)
		checkInvariants(t, where, w, prev, d, stage, &highest)
		tm.check(t, where, w)
		checkBounds(t, where, w)
		// MaxTTL bounds every grant, renewed or not, from the moment its ttl counts from.
		for _, r := range w.reqs {
			if st := r.Status; st.Phase == locksv1.PhaseGranted && st.GrantedAt != nil && st.ExpiresAt != nil {
				from := st.GrantedAt
				if st.RenewedAt != nil {
					from = st.RenewedAt
				}
				if st.ExpiresAt.Sub(from.Time) > cfg.MaxTTL {
					t.Fatalf("%s: %s is granted until %s, more than MaxTTL %s after %s", where, r.Name, st.ExpiresAt.UTC(), cfg.MaxTTL, from.UTC())
				}
			}
		}
		if len(d.Queue) > cfg.QueueCap {
			t.Fatalf("%s: %d waiting, over the cap of %d", where, len(d.Queue), cfg.QueueCap)
		}
		if stage != stageAll {
			continue
		}
		// Progress: a key left without a holder has nobody it could grant.
		if !d.HasHolder {
			for _, r := range d.Queue {
				if _, frozen := w.freezes.For(r.Spec.Command); !frozen {
					t.Fatalf("%s: key free while %s (command %q) waits", where, r.Name, r.Spec.Command)
				}
			}
		}
		// Fixed point: the same inputs decide nothing new.
		if again := Decide(w.input(name1, clock, cfg)); !empty(again) {
			t.Fatalf("%s: deciding again writes:\n%s", where, describeDecision(again))
		}
	}
	return seen
}

// checkInvariants: at most one identity holds the key, every Granted request is listed by the
// ProjectLock and carries its token, and the token moves up whenever the key changes hands.
func checkInvariants(t testing.TB, where string, w *world, prev *locksv1.ProjectLock, d Decision, stage int, highest *int64) {
	t.Helper()
	lock := w.locks[name1]
	listed := map[types.UID]bool{}
	var lockID locksv1.HolderID
	locked := false
	sharedTok := map[types.UID]int64{}
	if lock != nil && lock.Status.Holder != nil {
		h := lock.Status.Holder
		lockID, locked = h.ID(), true
		for _, hr := range h.Requests {
			listed[types.UID(hr.UID)] = true
			if r := w.reqs[types.UID(hr.UID)]; r != nil && r.Spec.Holder.ID() != lockID {
				t.Fatalf("%s: ProjectLock holder %#v lists %s of %#v", where, lockID, r.Name, r.Spec.Holder.ID())
			}
		}
		if len(lock.Status.SharedHolders) > 0 {
			t.Fatalf("%s: ProjectLock lists an exclusive holder and shared holders: %+v", where, lock.Status)
		}
	}
	// Shared holders: every one asked for Shared mode, whatever their identities, and none
	// shows a token above the ProjectLock's.
	if lock != nil && len(lock.Status.SharedHolders) > 0 {
		locked = true
		for _, sh := range lock.Status.SharedHolders {
			uid := types.UID(sh.Request.UID)
			listed[uid], sharedTok[uid] = true, sh.FencingToken
			if r := w.reqs[uid]; r != nil && !r.Spec.Locks[0].Mode.IsShared() {
				t.Fatalf("%s: %s (Exclusive) is listed as a shared holder beside %d others", where, r.Name, len(lock.Status.SharedHolders)-1)
			}
			if sh.FencingToken > lock.Status.FencingToken {
				t.Fatalf("%s: shared holder %s has token %d above the ProjectLock's %d", where, sh.Request.Name, sh.FencingToken, lock.Status.FencingToken)
			}
		}
		lockID = lock.Status.SharedHolders[0].ID()
	}
	for _, r := range w.reqs {
		if r.Status.Phase.IsFinal() {
			continue
		}
		claims := len(r.Status.Locks) > 0 && r.Status.Locks[0].Held
		if r.Status.Phase != locksv1.PhaseGranted && !claims {
			continue
		}
		if !listed[r.UID] {
			t.Fatalf("%s: %s is %s (held=%v) but the ProjectLock lists %v", where, r.Name, r.Status.Phase, claims, lock)
		}
		want, shared := sharedTok[r.UID]
		if !shared {
			want = lock.Status.FencingToken
		}
		// A decision cut short after its ProjectLock write (a crash) may leave a confirmed holder
		// of an exclusive holding below the token just written, which its grant write raises:
		// a shared holder's own request joining it took a new token. Not new with shared locks:
		// an unconfirmed grant re-issued beside a confirmed request of the same identity raises
		// both (exclusive requests only; with the check strict, TestDecideRandomized fails at
		// seeds 20, 174, 245, 262, ...). The holder's identity is the ProjectLock's throughout,
		// and the lower token is the one it was granted: the key's token never went down.
		tok := r.Status.Locks[0].FencingToken
		if stage < stageAll && !shared && tok < want && tok > 0 {
			want = tok
		}
		if tok != want || r.Status.FencingToken < tok {
			t.Fatalf("%s: %s holds with token %d (request %d), the ProjectLock says %d", where, r.Name, tok, r.Status.FencingToken, want)
		}
	}
	if lock == nil {
		return
	}
	tok := lock.Status.FencingToken
	var prevID locksv1.HolderID
	prevLocked, prevTok := false, int64(0)
	if prev != nil {
		prevTok = prev.Status.FencingToken
		if h := prev.Status.Holder; h != nil {
			prevID, prevLocked = h.ID(), true
		}
		if hs := prev.Status.SharedHolders; len(hs) > 0 {
			prevID, prevLocked = hs[0].ID(), true
		}
		// A re-created ProjectLock shows no token until its first grant.
		if tok != 0 && tok < prevTok {
			t.Fatalf("%s: token went down from %d to %d", where, prevTok, tok)
		}
	}
	if locked && lock.Status.Holder != nil && (!prevLocked || lockID != prevID) && tok <= *highest {
		t.Fatalf("%s: key passed from %#v to %#v with token %d, not above %d", where, prevID, lockID, tok, *highest)
	}
	if tok > *highest {
		*highest = tok
	}
	if stage >= stageLock && d.Lock != nil && (d.HasHolder != locked || d.Holder != lockID && lock.Status.Holder != nil) {
		t.Fatalf("%s: Decision.Holder %#v (%v), the ProjectLock written says %#v (%v)", where, d.Holder, d.HasHolder, lockID, locked)
	}
}

// grantTokens checks TM with shared holders: when a request first shows holding the key, its
// token is above every token any request of another identity showed holding it before — a
// writer after readers, readers after a writer, and a reader after another reader alike.
// Requests granted by one ProjectLock write share its token.
type grantTokens struct {
	byID  map[locksv1.HolderID]int64 // the highest token each identity showed holding
	holds map[types.UID]bool         // requests seen holding at the last check
	// counted is every token a counted request (a counting lock) was first seen holding with,
	// and its identity: no request of another identity holds with it, before or after.
	counted map[int64]locksv1.HolderID
	// firsts is every token a request was first seen holding with, and its identity.
	firsts map[int64][]locksv1.HolderID
}

func (g *grantTokens) check(t testing.TB, where string, w *world) {
	t.Helper()
	if g.byID == nil {
		g.byID, g.holds = map[locksv1.HolderID]int64{}, map[types.UID]bool{}
		g.counted, g.firsts = map[int64]locksv1.HolderID{}, map[int64][]locksv1.HolderID{}
	}
	now := map[types.UID]bool{}
	before := maps.Clone(g.byID) // requests granted by one write share its token
	for _, uid := range w.order {
		r := w.reqs[uid]
		if r == nil || r.Status.Phase.IsFinal() || len(r.Status.Locks) == 0 || !r.Status.Locks[0].Held {
			continue
		}
		now[uid] = true
		tok, id := r.Status.Locks[0].FencingToken, r.Spec.Holder.ID()
		if !g.holds[uid] {
			for other, top := range before {
				if other != id && tok <= top {
					t.Fatalf("%s: %s (%v) holds with token %d, not above %d that %v showed before", where, r.Name, id, tok, top, other)
				}
			}
			// A counted grant's token is its own: no other identity's grant shows it.
			if c, ok := g.counted[tok]; ok && c != id {
				t.Fatalf("%s: %s (%v) holds with token %d, the token of %v's counted grant", where, r.Name, id, tok, c)
			}
			if r.Spec.Locks[0].MaxHolders > 0 {
				for _, other := range g.firsts[tok] {
					if other != id {
						t.Fatalf("%s: counted %s (%v) holds with token %d, which %v held with too", where, r.Name, id, tok, other)
					}
				}
				g.counted[tok] = id
			}
			g.firsts[tok] = append(g.firsts[tok], id)
		}
		g.byID[id] = max(g.byID[id], tok)
	}
	g.holds = now
}

// checkBounds: the requests that hold the key, and those the ProjectLock lists, number at most
// the lowest maxHolders among them (a counting lock), and the ProjectLock says that bound.
func checkBounds(t testing.TB, where string, w *world) {
	t.Helper()
	low := func(rs []*locksv1.LockRequest) int32 {
		b := int32(0)
		for _, r := range rs {
			if m := r.Spec.Locks[0].MaxHolders; m > 0 && (b == 0 || m < b) {
				b = m
			}
		}
		return b
	}
	var holding []*locksv1.LockRequest
	for _, uid := range w.order {
		if r := w.reqs[uid]; r != nil && !r.Status.Phase.IsFinal() && len(r.Status.Locks) > 0 && r.Status.Locks[0].Held {
			holding = append(holding, r)
		}
	}
	if b := low(holding); b > 0 && int32(len(holding)) > b {
		t.Fatalf("%s: %d requests hold the key, one of them with maxHolders %d: %v", where, len(holding), b, names(holding))
	}
	l := w.locks[name1]
	if l == nil {
		return
	}
	var listed []*locksv1.LockRequest
	for _, h := range l.Status.HolderRequests() {
		if r := w.reqs[types.UID(h.UID)]; r != nil {
			listed = append(listed, r)
		}
	}
	if b := low(listed); b > 0 && l.Status.HolderCount > b {
		t.Fatalf("%s: the ProjectLock lists %d holders, one of them with maxHolders %d", where, l.Status.HolderCount, b)
	}
	if l.Status.MaxHolders > 0 && l.Status.HolderCount > l.Status.MaxHolders {
		t.Fatalf("%s: the ProjectLock lists %d holders, over its maxHolders %d", where, l.Status.HolderCount, l.Status.MaxHolders)
	}
}

// TestDecideRandomizedCounting is TestDecideRandomizedShared with half of the shared requests
// counted (maxHolders 1 to 3, so requests on the key disagree): at most the lowest bound among
// the holders hold, every counted grant's token is its own and above every token before it,
// the plan decides again at once for the waiters a counted grant left (Decision.More), and the
// fixed point holds.
func TestDecideRandomizedCounting(t *testing.T) {
	total := map[string]int{}
	for seed := uint64(1); seed <= 12; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			for k, n := range simulateModes(t, seed, 300, modes{shared: true, counted: true}) {
				total[k] += n
			}
		})
	}
	for _, want := range []string{locksv1.ReasonGranted, "shared together", "counted full", "more"} {
		if total[want] == 0 {
			t.Errorf("no %s in any run: %v", want, total)
		}
	}
	t.Logf("outcomes: %v", total)
}

// TestDecideRandomizedShared is TestDecideRandomized with a third of the requests Shared: the
// invariants (no exclusive holder beside a holder of another identity; tokens never go down, and
// every grant's is above the tokens granted before it) and the fixed point hold.
//
// Seeds 284 and 304 are kept: a writer with waitTimeout 0s ahead of readers held them back in
// the decision that failed it, so deciding again granted them (not a fixed point; mutant
// shared-try-once-writer-holds-back). Seeds 1-600 pass.
func TestDecideRandomizedShared(t *testing.T) {
	total := map[string]int{}
	for _, seed := range []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 284, 304} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			for k, n := range simulateModes(t, seed, 300, modes{shared: true}) {
				total[k] += n
			}
		})
	}
	for _, want := range []string{locksv1.ReasonGranted, "shared together", "writer preference"} {
		if total[want] == 0 {
			t.Errorf("no %s in any run: %v", want, total)
		}
	}
	t.Logf("outcomes: %v", total)
}

func TestDecideRandomized(t *testing.T) {
	total := map[string]int{}
	for seed := uint64(1); seed <= 10; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			for k, n := range simulate(t, seed, 300) {
				total[k] += n
			}
		})
	}
	// The walk must have gone where the invariant is at risk, or it proves nothing.
	for _, want := range []string{
		locksv1.ReasonGranted, locksv1.ReasonReleased, locksv1.ReasonExpired, locksv1.ReasonForceUnlocked,
		locksv1.ReasonHolderLost, locksv1.ReasonTimeout, locksv1.ReasonBusy, locksv1.ReasonCommandLocked,
		locksv1.ReasonQueueFull, locksv1.ReasonInvalid, locksv1.ReasonRenewed, "deep queue",
	} {
		if total[want] == 0 {
			t.Errorf("no %s in any run: %v", want, total)
		}
	}
	t.Logf("outcomes: %v", total)
}

func FuzzDecide(f *testing.F) {
	for _, seed := range []uint64{1, 2, 3, 42, 1 << 40} {
		f.Add(seed, uint16(200))
	}
	f.Fuzz(func(t *testing.T, seed uint64, rounds uint16) {
		simulate(t, seed, int(rounds%1000))
	})
}
