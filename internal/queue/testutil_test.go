package queue

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
	"github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

// The fixed clock of every test: t0 is a whole second, now is t0 plus a fraction so that the
// tests see what Decide truncates (seconds for metav1.Time, microseconds for MicroTime).
var (
	t0  = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now = t0.Add(400*time.Millisecond + 1500*time.Nanosecond)
)

// Two keys whose canonical order is tgt1 before tgt2.
var (
	tgt1  = locksv1.LockTarget{Repo: "acme/infra", Path: "a-net", Workspace: "default"}
	tgt2  = locksv1.LockTarget{Repo: "acme/infra", Path: "b-app", Workspace: "default"}
	key1  = lockkey.String(tgt1)
	key2  = lockkey.String(tgt2)
	name1 = lockkey.Name(tgt1)
	name2 = lockkey.Name(tgt2)
)

const testNamespace = "team-a"

// testConfig is the policy of most tests. Aging is off so RequeueAfter speaks of TTLs and wait
// timeouts only; the aging tests switch it on.
func testConfig() Config {
	return Config{DefaultTTL: 30 * time.Minute, MaxTTL: 2 * time.Hour, HeadSize: 20}
}

// makeReq is a Normal-priority request on tgt1 by owner name without a pull, created a minute
// before t0, never seen by the controller. A status-shaping call that gives no queuedAt (Held,
// Waiting) queues it an hour before t0, and its arrival revision follows its queuedAt.
func makeReq(name string) *wrappers.LockRequestWrapper {
	return wrappers.MakeLockRequest(name, testNamespace).
		UID("uid-"+name).
		Generation(1).
		ResourceVersion(requestRV).
		Creation(t0.Add(-time.Minute)).
		Targets(tgt1).
		Owner(name, 0).
		Priority(locksv1.PriorityNormal).
		SeenDefaults(t0.Add(-time.Hour), arrivalRevision)
}

// arrivalRevision is the arrival revision of a request queued at q in these tests: it grows with
// q, and stays below the resourceVersions of requests not queued yet (requestRV).
func arrivalRevision(q time.Time) int64 { return q.Sub(t0.Add(-100 * time.Hour)).Microseconds() }

// requestRV is the resourceVersion of a test request until the test says otherwise: above every
// arrivalRevision, as a request seen later has a later revision.
const requestRV = "1000000000000"

func cond(typ string, status metav1.ConditionStatus, reason, msg string, gen int64, at time.Time) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen,
		LastTransitionTime: metav1.NewTime(at.Truncate(time.Second))}
}

// lockWrapper builds a ProjectLock.
type lockWrapper struct {
	pl      locksv1.ProjectLock
	holders []*locksv1.LockRequest
	since   time.Time
}

func makeLock(t locksv1.LockTarget) *lockWrapper {
	w := &lockWrapper{}
	w.pl.Name = lockkey.Name(t)
	w.pl.Namespace = testNamespace
	w.pl.Generation = 1
	w.pl.Spec.LockTarget = lockkey.Normalize(t)
	return w
}

func (w *lockWrapper) token(n int64) *lockWrapper { w.pl.Status.FencingToken = n; return w }

// rv sets the resourceVersion: the revision of the ProjectLock's last write.
func (w *lockWrapper) rv(v string) *lockWrapper { w.pl.ResourceVersion = v; return w }

// holder lists reqs (one identity) as the holder since `since`; expiresAt is the latest of the
// requests' status.expiresAt.
func (w *lockWrapper) holder(since time.Time, reqs ...*locksv1.LockRequest) *lockWrapper {
	w.holders, w.since = reqs, since
	return w
}

func (w *lockWrapper) Obj() *locksv1.ProjectLock {
	pl := w.pl.DeepCopy()
	st := &pl.Status
	st.ObservedGeneration = pl.Generation
	if len(w.holders) == 0 {
		st.Conditions = []metav1.Condition{cond(locksv1.ConditionLocked, metav1.ConditionFalse, locksv1.ReasonFree, "not locked", pl.Generation, t0.Add(-time.Hour))}
		return pl
	}
	first := w.holders[0].Spec.Holder
	h := &locksv1.LockHolder{Owner: first.Owner, Pull: first.Pull, Session: first.Session, URL: first.URL, Since: metav1.NewTime(w.since.Truncate(time.Second))}
	sorted := append([]*locksv1.LockRequest{}, w.holders...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for _, r := range sorted {
		h.Requests = append(h.Requests, locksv1.HolderRequest{Name: r.Name, UID: string(r.UID)})
		if e := r.Status.ExpiresAt; e != nil && (h.ExpiresAt == nil || e.After(h.ExpiresAt.Time)) {
			h.ExpiresAt = e.DeepCopy()
		}
	}
	st.Holder = h
	st.Mode, st.HolderCount = locksv1.ModeExclusive, int32(len(w.holders))
	st.Conditions = []metav1.Condition{cond(locksv1.ConditionLocked, metav1.ConditionTrue, locksv1.ReasonHeld,
		"locked by "+locksv1.Holder{Owner: h.Owner, Pull: h.Pull}.Describe(), pl.Generation, h.Since.Time)}
	return pl
}

func reqs(ws ...*wrappers.LockRequestWrapper) []*locksv1.LockRequest {
	out := make([]*locksv1.LockRequest, len(ws))
	for i, w := range ws {
		out[i] = w.Obj()
	}
	return out
}

// reqView is what a test asserts about one request update.
type reqView struct {
	Phase    locksv1.LockRequestPhase
	Reason   string // of the Granted condition
	Message  string // of the Granted condition
	Position int32
	Token    int64
	Held     string // status.locks[].held in spec order: "1" held, "0" not
	True     string // the conditions that are True, e.g. "Granted,Ready"
	Event    string // the event's reason, "" when none
}

// True-condition sets of each state, for reqView.True.
const (
	trueGranted = "Granted,Ready"
	truePending = "Reconciling"
	trueFailed  = "Stalled"
	// A finished request reads right to kstatus: a voluntary release Current (Ready), an
	// involuntary end (Expired, ForceUnlocked, HolderLost) Failed (Stalled).
	trueReleased = "Ready"
	trueEnded    = "Stalled"
)

func viewOf(u Update) reqView {
	st := u.Status
	v := reqView{Phase: st.Phase, Position: st.QueuePosition, Token: st.FencingToken}
	if c := findCond(st.Conditions, locksv1.ConditionGranted); c != nil {
		v.Reason, v.Message = c.Reason, c.Message
	}
	var held strings.Builder
	for _, l := range st.Locks {
		if l.Held {
			held.WriteByte('1')
		} else {
			held.WriteByte('0')
		}
	}
	v.Held = held.String()
	var trues []string
	for _, typ := range []string{locksv1.ConditionGranted, locksv1.ConditionReady, locksv1.ConditionReconciling, locksv1.ConditionStalled} {
		if c := findCond(st.Conditions, typ); c != nil && c.Status == metav1.ConditionTrue {
			trues = append(trues, typ)
		}
	}
	v.True = strings.Join(trues, ",")
	if u.Event != nil {
		v.Event = u.Event.Reason
	}
	return v
}

func views(us []Update) map[string]reqView {
	if len(us) == 0 {
		return nil
	}
	out := map[string]reqView{}
	for _, u := range us {
		out[u.Request.Name] = viewOf(u)
	}
	return out
}

// lockView is what a test asserts about the ProjectLock status a decision writes.
type lockView struct {
	Holder   string   // Holder.Describe, "" when free
	Requests []string // holder request names
	Token    int64
	Queue    []string // "name:Priority"
	Length   int32
	Expires  time.Time
}

func lockViewOf(st *locksv1.ProjectLockStatus) *lockView {
	if st == nil {
		return nil
	}
	v := &lockView{Token: st.FencingToken, Length: st.QueueLength}
	if h := st.Holder; h != nil {
		v.Holder = locksv1.Holder{Owner: h.Owner, Pull: h.Pull}.Describe()
		for _, r := range h.Requests {
			v.Requests = append(v.Requests, r.Name)
		}
		if h.ExpiresAt != nil {
			v.Expires = h.ExpiresAt.UTC()
		}
	}
	for _, q := range st.Queue {
		v.Queue = append(v.Queue, q.Request+":"+string(q.Priority))
	}
	return v
}

func names(rs []*locksv1.LockRequest) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Name)
	}
	return out
}

// world is a tiny API server for one or more keys: it stores requests and ProjectLocks and
// applies a Decision the way the controller writes it, round-tripping every status through JSON
// so that times come back at the precision the API server keeps.
type world struct {
	t     testing.TB
	locks map[string]*locksv1.ProjectLock
	reqs  map[types.UID]*locksv1.LockRequest
	order []types.UID // creation order
	rv    int
	// freezes and lost are handed to every decision.
	freezes Freezes
	lost    map[types.UID]string
	// gone are the tokens deleted requests showed last, as the controller's delete events give
	// them; forgetGone leaves them out, as after a restart.
	gone map[types.UID]int64
}

func newWorld(t testing.TB) *world {
	return &world{t: t, locks: map[string]*locksv1.ProjectLock{}, reqs: map[types.UID]*locksv1.LockRequest{}}
}

func (w *world) add(lr *locksv1.LockRequest) {
	w.rv++
	lr = lr.DeepCopy()
	lr.ResourceVersion = fmt.Sprint(w.rv)
	w.reqs[lr.UID] = lr
	w.order = append(w.order, lr.UID)
}

// del deletes a request; the controller saw its delete event, with its last token.
func (w *world) del(uid types.UID) {
	if r := w.reqs[uid]; r != nil {
		if w.gone == nil {
			w.gone = map[types.UID]int64{}
		}
		w.gone[uid] = r.Status.FencingToken
	}
	delete(w.reqs, uid)
}

// forgetGone drops what the delete events said, as a restarted controller knows nothing of them.
func (w *world) forgetGone() { w.gone = nil }

func (w *world) get(name string) *locksv1.LockRequest {
	for _, r := range w.reqs {
		if r.Name == name {
			return r
		}
	}
	return nil
}

// input is what the controller would read for the key named name.
func (w *world) input(name string, at time.Time, cfg Config) Input {
	in := Input{Now: at, Name: name, Config: cfg, Freezes: w.freezes, LostHolders: w.lost, GoneTokens: w.gone}
	if l := w.locks[name]; l != nil {
		in.Lock = l.DeepCopy()
	}
	for _, uid := range w.order {
		if r := w.reqs[uid]; r != nil {
			in.Requests = append(in.Requests, r.DeepCopy())
		}
	}
	return in
}

func roundTrip[T any](t testing.TB, v T) T {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	var out T
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	return out
}

// Apply stages: a crash may stop the controller after any of them.
const (
	stageFinish = iota + 1
	stageLock
	stageGrant
	stageAll
)

// apply writes d for the key named name up to and including stage, as the controller does:
// finished and demoted requests, then the ProjectLock (every write of it takes a new
// resourceVersion, the revision tokens come from), then the holders, then the waiters. Writes
// to a request that is gone are dropped (the API server would answer NotFound).
func (w *world) apply(name string, in Input, d Decision, stage int) {
	w.t.Helper()
	checkPlan(w.t, in, d)
	for _, wr := range d.Writes {
		if crashedBefore(wr, stage) {
			return
		}
		switch wr.Kind {
		case WriteCreate:
			w.create(name, in)
		case WriteReleaseFinalizer:
			delete(w.locks, name)
		case WriteLockStatus:
			w.locks[name].Status = roundTrip(w.t, *wr.Lock)
			w.rv++
			w.locks[name].ResourceVersion = fmt.Sprint(w.rv)
		case WriteCheckFreezes:
			// The world's freezes are the decision's: nothing froze since.
		default:
			r := w.reqs[wr.Update.Request.UID]
			if r == nil {
				continue
			}
			r.Status = roundTrip(w.t, wr.Update.Status)
			w.rv++
			r.ResourceVersion = fmt.Sprint(w.rv)
		}
	}
}

// crashedBefore says whether a crash at stage stops the plan before write wr: stageFinish after
// the leavers (before the create or the ProjectLock), stageLock after the ProjectLock,
// stageGrant after the grants.
func crashedBefore(wr Write, stage int) bool {
	switch {
	case stage < stageLock:
		return wr.Step >= StepLock || wr.Kind == WriteCreate
	case stage < stageGrant:
		return wr.Step >= StepFreezeCheck
	case stage < stageAll:
		return wr.Step >= StepWaiters
	}
	return false
}

// checkPlan checks that d's writes are the decision's, each once, in protocol order, each
// preconditioned on the resourceVersion read, and that nothing follows a plan that decides again
// but its own writes.
func checkPlan(t testing.TB, in Input, d Decision) {
	t.Helper()
	var want []Update
	for _, us := range [][]Update{d.Finish, d.Demote, d.Grant, d.Waiting} {
		want = append(want, us...)
	}
	var got []Update
	last := Step(0)
	for _, wr := range d.Writes {
		if wr.Step < last {
			t.Fatalf("plan out of protocol order: %s after step %s\n%s", wr.Step, last, describeDecision(d))
		}
		last = wr.Step
		if wr.Update != nil {
			got = append(got, *wr.Update)
			if wr.RV != wr.Update.Request.ResourceVersion {
				t.Fatalf("write of %s preconditioned on rv %q, read at %q", wr.Object, wr.RV, wr.Update.Request.ResourceVersion)
			}
		}
		if (wr.Kind == WriteLockStatus || wr.Kind == WriteReleaseFinalizer) && wr.RV != in.Lock.ResourceVersion {
			t.Fatalf("%s preconditioned on rv %q, read at %q", wr.Kind, wr.RV, in.Lock.ResourceVersion)
		}
		if wr.Kind == WriteGrant && wr.Update.Acquires && wr.Update.Request.Spec.Command != "" &&
			!slices.ContainsFunc(d.Writes, func(c Write) bool { return c.Kind == WriteCheckFreezes }) {
			t.Fatalf("a commanded request is written as holding without a freeze check:\n%s", describeDecision(d))
		}
	}
	if len(got) != len(want) {
		t.Fatalf("plan writes %d request statuses, the decision has %d:\n%s", len(got), len(want), describeDecision(d))
	}
	if (d.Lock != nil) != slices.ContainsFunc(d.Writes, func(c Write) bool { return c.Kind == WriteLockStatus }) ||
		d.CreateLock != slices.ContainsFunc(d.Writes, func(c Write) bool { return c.Kind == WriteCreate }) {
		t.Fatalf("plan and decision disagree on the ProjectLock:\n%s", describeDecision(d))
	}
}

// create creates the ProjectLock of the key named name, for the requests in `in`, with the
// finalizer the controller puts on it.
func (w *world) create(name string, in Input) {
	pl := createdLockFor(name, in)
	w.rv++
	pl.ResourceVersion = fmt.Sprint(w.rv)
	w.locks[name] = pl
}

// createdLockFor is the ProjectLock the controller creates for key name of the requests in
// `in` (createdLockOf their target), with an empty status; the caller gives it its
// resourceVersion.
func createdLockFor(name string, in Input) *locksv1.ProjectLock {
	var target locksv1.LockTarget
	for _, r := range in.Requests {
		for _, ref := range lockkey.Refs(r.Spec.Locks) {
			if ref.Name == name {
				target = ref.Target
			}
		}
	}
	pl := createdLockOf(target)
	pl.Status = locksv1.ProjectLockStatus{}
	return pl
}

// forceUnlock is an admin's `kubectl delete projectlock`: the finalizer keeps it, deleting.
func (w *world) forceUnlock(name string) {
	pl := w.locks[name]
	if pl == nil {
		return
	}
	ts := metav1.NewTime(t0)
	pl.DeletionTimestamp = &ts
	w.rv++
	pl.ResourceVersion = fmt.Sprint(w.rv)
}

// decide runs Decide for one key and applies the whole decision. A decision to create the
// ProjectLock is followed, as in the controller, by a decision on the created object; the
// second is returned, marked CreateLock.
func (w *world) decide(name string, at time.Time, cfg Config) Decision {
	w.t.Helper()
	d := w.decideOnce(name, at, cfg)
	if d.CreateLock {
		d = w.decideOnce(name, at, cfg)
		if d.CreateLock {
			w.t.Fatalf("Decide asked to create %s twice", name)
		}
		d.CreateLock = true
	}
	if d.Again {
		if d = w.decideOnce(name, at, cfg); d.Again {
			w.t.Fatalf("Decide asked to decide %s again twice", name)
		}
	}
	// A counted grant has the write to itself: the controller decides again at once, for each
	// waiter left for the next decision (at most MaxSharedHolders of them).
	for n := 0; d.More; n++ {
		if n > locksv1.MaxSharedHolders {
			w.t.Fatalf("Decide asked to decide %s again %d times", name, n)
		}
		d = w.decideOnce(name, at, cfg)
	}
	return d
}

func (w *world) decideOnce(name string, at time.Time, cfg Config) Decision {
	w.t.Helper()
	in := w.input(name, at, cfg)
	before := w.input(name, at, cfg)
	d := Decide(in)
	// The controller hands Decide the informer cache's own objects: it must only read them.
	if !equality.Semantic.DeepEqual(before.Lock, in.Lock) || !equality.Semantic.DeepEqual(before.Requests, in.Requests) {
		w.t.Fatalf("Decide modified its input for %s", name)
	}
	w.apply(name, in, d, stageAll)
	return d
}

// empty reports whether a decision writes nothing.
func empty(d Decision) bool {
	return len(d.Finish) == 0 && len(d.Demote) == 0 && len(d.Grant) == 0 && len(d.Waiting) == 0 && d.Lock == nil &&
		!d.CreateLock && !d.ReleaseFinalizer && !d.Again && !d.More
}

func describeDecision(d Decision) string {
	var b strings.Builder
	for _, s := range []struct {
		what string
		us   []Update
	}{{"finish", d.Finish}, {"demote", d.Demote}, {"grant", d.Grant}, {"waiting", d.Waiting}} {
		for _, u := range s.us {
			fmt.Fprintf(&b, "%s %s: %+v\n", s.what, u.Request.Name, viewOf(u))
		}
	}
	if d.Lock != nil {
		fmt.Fprintf(&b, "lock (create=%v): %+v\n", d.CreateLock, *lockViewOf(d.Lock))
	}
	return b.String()
}
