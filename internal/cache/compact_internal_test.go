package cache

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	fcache "k8s.io/client-go/tools/cache/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/randfill"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// packableRequest is a request as the API server returns it, waiting (or, with phase Granted,
// holding): every field compactRequest packs, none it keeps as it came.
func packableRequest(t *testing.T, i int, phase locksv1.LockRequestPhase) *locksv1.LockRequest {
	t.Helper()
	lr := scaleRequest(i, "")
	lr.APIVersion, lr.Kind = locksv1.GroupVersion.String(), "LockRequest"
	lr.UID = types.UID(fmt.Sprintf("2b7c1f3e-1111-4c2d-9a8b-%012d", i))
	lr.Generation = 1
	lr.Labels, lr.OwnerReferences, lr.ManagedFields = nil, nil, nil
	lr.Annotations = map[string]string{createdBy: "system:serviceaccount:ci:atlantis"}
	lr.Spec.TTL = &metav1.Duration{Duration: time.Hour}
	lr.Spec.Holder.URL = "https://github.com/org/infra/pull/7"
	at := metav1.NewTime(time.Unix(5000, 0))
	st := &lr.Status
	st.Phase, st.ObservedGeneration, st.ArrivalRevision = phase, 1, int64(100+i)
	st.QueuedAt = &metav1.MicroTime{Time: time.Unix(5000, 123456000)}
	st.Locks = []locksv1.LockStatus{{Key: "org/infra/prod/default", Name: "org-infra-prod-default-1234"}}
	msg := fmt.Sprintf("locked by pull #7 (alice); position %d of 9", i)
	st.BlockedBy, st.QueuePosition = "locked by pull #7 (alice)", int32(i)
	granted := metav1.ConditionFalse
	if phase == locksv1.PhaseGranted {
		st.BlockedBy, st.QueuePosition, msg, granted = "", 0, "granted", metav1.ConditionTrue
		st.FencingToken, st.Locks[0].Held, st.Locks[0].FencingToken = 42, true, 42
		st.GrantedAt, st.ExpiresAt = &at, &metav1.Time{Time: at.Add(time.Hour)}
	}
	for _, c := range []struct {
		typ string
		st  metav1.ConditionStatus
		msg string
	}{{locksv1.ConditionGranted, granted, msg}, {locksv1.ConditionReady, granted, msg},
		{locksv1.ConditionReconciling, metav1.ConditionTrue, msg}, {locksv1.ConditionStalled, metav1.ConditionFalse, "waiting"}} {
		st.Conditions = append(st.Conditions, metav1.Condition{Type: c.typ, Status: c.st, Reason: locksv1.ReasonQueued,
			Message: c.msg, ObservedGeneration: 1, LastTransitionTime: at})
	}
	return roundTrip(t, lr) // as JSON decodes it: times in time.Local
}

// compactRoundTrip compacts a copy of lr, expands it and fails unless it is lr again.
func compactRoundTrip(t *testing.T, what string, lr *locksv1.LockRequest) *compactRequest {
	t.Helper()
	c := compactLockRequest(lr.DeepCopy())
	if got := c.expand(); !reflect.DeepEqual(got, lr) {
		t.Fatalf("%s: expanded differs from the request (-want +got):\n%s", what, cmp.Diff(lr, got))
	}
	// What the store and its key functions read through metav1.Object, without expanding.
	var o metav1.Object = c
	got := []any{o.GetName(), o.GetNamespace(), o.GetUID(), o.GetResourceVersion(), o.GetGeneration(), o.GetCreationTimestamp(),
		o.GetGenerateName(), o.GetSelfLink(), o.GetDeletionTimestamp(), o.GetDeletionGracePeriodSeconds(), o.GetLabels(),
		o.GetAnnotations(), o.GetOwnerReferences(), o.GetFinalizers(), o.GetManagedFields()}
	want := []any{lr.GetName(), lr.GetNamespace(), lr.GetUID(), lr.GetResourceVersion(), lr.GetGeneration(), lr.GetCreationTimestamp(),
		lr.GetGenerateName(), lr.GetSelfLink(), lr.GetDeletionTimestamp(), lr.GetDeletionGracePeriodSeconds(), lr.GetLabels(),
		lr.GetAnnotations(), lr.GetOwnerReferences(), lr.GetFinalizers(), lr.GetManagedFields()}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: metav1.Object differs (-want +got):\n%s", what, cmp.Diff(want, got))
	}
	return c
}

// TestCompactPacks: a waiting and a holding request as the API server returns them are packed
// whole (nothing kept as it came) and expand to themselves.
func TestCompactPacks(t *testing.T) {
	for _, phase := range []locksv1.LockRequestPhase{locksv1.PhasePending, locksv1.PhaseGranted} {
		c := compactRoundTrip(t, string(phase), packableRequest(t, 3, phase))
		if c.meta != nil || c.spec != nil || c.status != nil {
			t.Errorf("%s: kept as it came: meta %t, spec %t, status %t", phase, c.meta != nil, c.spec != nil, c.status != nil)
		}
	}
}

// TestCompactEveryField: every field of the API type — found by reflection, so a field added
// later is too — set alone on a packable request, survives compaction: packed, or kept as it
// came when the packing cannot hold it.
func TestCompactEveryField(t *testing.T) {
	for _, phase := range []locksv1.LockRequestPhase{locksv1.PhasePending, locksv1.PhaseGranted} {
		base := packableRequest(t, 3, phase)
		var paths []string
		walkFields(reflect.ValueOf(base).Elem(), "", func(path string, _ reflect.Value) { paths = append(paths, path) })
		if len(paths) < 55 {
			t.Fatalf("only %d fields found: %v", len(paths), paths)
		}
		for i, path := range paths {
			for seed := range int64(4) {
				lr := base.DeepCopy()
				k := 0
				walkFields(reflect.ValueOf(lr).Elem(), "", func(_ string, v reflect.Value) {
					if k == i {
						setOther(t, v, seed)
					}
					k++
				})
				compactRoundTrip(t, fmt.Sprintf("%s %s (seed %d)", phase, path, seed), lr)
				if path != ".ObjectMeta.ManagedFields" { // random fieldsV1 are not JSON
					compactRoundTrip(t, fmt.Sprintf("%s %s (seed %d, as JSON decodes it)", phase, path, seed), roundTrip(t, lr))
				}
			}
		}
	}
}

// walkFields visits the leaf fields of v (structs are walked into, but times; a slice of
// structs is visited whole and its first element walked into).
func walkFields(v reflect.Value, path string, visit func(string, reflect.Value)) {
	switch {
	case v.Kind() == reflect.Struct && !isTime(v.Type()):
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() {
				walkFields(v.Field(i), path+"."+f.Name, visit)
			}
		}
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Struct:
		visit(path, v)
		if v.Len() > 0 {
			walkFields(v.Index(0), path+"[0]", visit)
		}
	default:
		visit(path, v)
	}
}

func isTime(t reflect.Type) bool {
	return t == reflect.TypeFor[metav1.Time]() || t == reflect.TypeFor[metav1.MicroTime]() || t == reflect.TypeFor[time.Time]()
}

// setOther sets v to a random value other than its own.
func setOther(t *testing.T, v reflect.Value, seed int64) {
	t.Helper()
	was := v.Interface() // a pointer's target is not filled in place: v is zeroed first
	for try := range int64(20) {
		f := randfill.NewWithSeed(seed*100+try).NilChance(0.2).NumElements(1, 3)
		if v.Kind() == reflect.Pointer { // *metav1.Time fills itself only when not nil
			v.Set(reflect.New(v.Type().Elem()))
			f.Fill(v.Interface())
		} else {
			v.Set(reflect.Zero(v.Type()))
			f.Fill(v.Addr().Interface())
		}
		if !reflect.DeepEqual(v.Interface(), was) {
			return
		}
	}
	t.Fatalf("could not change a %s", v.Type())
}

// TestCompactRoundTrip: requests filled at random (every field, nil or not, at random) expand
// to themselves, as filled and as JSON decodes them.
func TestCompactRoundTrip(t *testing.T) {
	packed := 0
	for seed := range int64(400) {
		lr := &locksv1.LockRequest{}
		randfill.NewWithSeed(seed).NilChance(0.5).NumElements(0, 2).Fill(lr)
		compactRoundTrip(t, fmt.Sprintf("seed %d", seed), lr)
		lr.ManagedFields = nil // random fieldsV1 are not JSON
		data, err := json.Marshal(lr)
		if err != nil {
			t.Fatal(err)
		}
		var decoded locksv1.LockRequest
		if err := json.Unmarshal(data, &decoded); err != nil {
			t.Fatal(err)
		}
		if c := compactRoundTrip(t, fmt.Sprintf("seed %d, as JSON decodes it", seed), &decoded); c.status == nil {
			packed++
		}
	}
	if packed == 0 {
		t.Error("no random status was packed: the test does not reach the packing")
	}
}

// TestCompactExpandsIndependently: what expand returns is the caller's to change; the compact
// request (and the next expansion) stays as it was.
func TestCompactExpandsIndependently(t *testing.T) {
	want := packableRequest(t, 3, locksv1.PhaseGranted)
	c := compactLockRequest(want.DeepCopy())
	got := c.expand()
	got.Spec.Locks[0].Repo = "changed"
	got.Spec.TTL.Duration = time.Minute
	got.Annotations[createdBy] = "changed"
	got.Status.Locks[0].FencingToken = 7
	got.Status.Conditions[0].Message = "changed"
	got.Status.QueuedAt.Time = time.Unix(1, 0)
	got.Status.GrantedAt.Time = time.Unix(1, 0)
	if again := c.expand(); !reflect.DeepEqual(again, want) {
		t.Fatalf("a change to an expansion reached the compact request:\n%s", cmp.Diff(want, again))
	}
}

// recordingHandler records what an informer hands its handler.
type recordingHandler struct {
	mu   sync.Mutex
	seen []any
}

func (h *recordingHandler) add(objs ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen = append(h.seen, objs...)
}
func (h *recordingHandler) OnAdd(obj any, _ bool) { h.add(obj) }
func (h *recordingHandler) OnUpdate(old, obj any) { h.add(old, obj) }
func (h *recordingHandler) OnDelete(obj any)      { h.add(obj) }

// TestCompactInformer: the LockRequest informer stores compact requests, and everything that
// reads it — the cache reader's gets and lists, index lookups, index functions, event handlers,
// a tombstone's object — sees the trimmed *LockRequest; other informers are as they were.
func TestCompactInformer(t *testing.T) {
	newInformer := withCompaction(toolscache.NewSharedIndexInformer)
	if _, ok := newInformer(fcache.NewFakeControllerSource(), &locksv1.ProjectLock{}, 0, toolscache.Indexers{}).(*compactInformer); ok {
		t.Fatal("a ProjectLock informer compacts")
	}
	src := fcache.NewFakeControllerSource()
	inf := newInformer(src, &locksv1.LockRequest{}, 0, toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
	if err := inf.SetTransform(trimTransform()); err != nil {
		t.Fatal(err)
	}
	var indexed []any
	var mu sync.Mutex
	if err := inf.AddIndexers(toolscache.Indexers{"target": func(obj any) ([]string, error) {
		mu.Lock()
		indexed = append(indexed, obj)
		mu.Unlock()
		return []string{obj.(*locksv1.LockRequest).Spec.Locks[0].Workspace}, nil
	}}); err != nil {
		t.Fatal(err)
	}
	h := &recordingHandler{}
	if _, err := inf.AddEventHandler(h); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	a, b := packableRequest(t, 1, locksv1.PhasePending), packableRequest(t, 2, locksv1.PhaseGranted)
	a.ResourceVersion, b.ResourceVersion = "", ""
	src.Add(a.DeepCopy())
	src.Add(b.DeepCopy())
	go inf.RunWithContext(ctx) // after the adds: the informer lists them
	gomega.NewWithT(t).Eventually(func() int { return len(inf.GetStore().ListKeys()) }).Should(gomega.Equal(2))
	trimmed := func(key string) *locksv1.LockRequest {
		t.Helper()
		for _, o := range src.Items {
			if lr := o.(*locksv1.LockRequest); lr.Namespace+"/"+lr.Name == key {
				out, _ := trimLockRequest(lr.DeepCopy())
				return out.(*locksv1.LockRequest)
			}
		}
		t.Fatalf("%s not in the source", key)
		return nil
	}
	want := map[string]*locksv1.LockRequest{"team/r1": trimmed("team/r1"), "team/r2": trimmed("team/r2")}
	check := func(what string, objs ...any) {
		t.Helper()
		for _, o := range objs {
			if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			lr, ok := o.(*locksv1.LockRequest)
			if !ok {
				t.Fatalf("%s: got a %T", what, o)
			}
			if w := want[lr.Namespace+"/"+lr.Name]; !reflect.DeepEqual(lr, w) {
				t.Fatalf("%s: (-want +got)\n%s", what, cmp.Diff(w, lr))
			}
		}
	}
	for _, o := range inf.GetIndexer().(compactIndexer).Indexer.List() {
		if _, ok := o.(*compactRequest); !ok {
			t.Fatalf("the store holds a %T", o)
		}
	}
	if l := inf.GetIndexer().List(); len(l) != 2 {
		t.Fatalf("List: %d objects", len(l))
	}
	check("List", inf.GetIndexer().List()...)
	check("GetStore().List", inf.GetStore().List()...)
	got, ok, err := inf.GetIndexer().GetByKey("team/r1")
	if err != nil || !ok {
		t.Fatalf("GetByKey: %v %v", ok, err)
	}
	check("GetByKey", got)
	byNS, err := inf.GetIndexer().ByIndex(toolscache.NamespaceIndex, "team")
	if err != nil || len(byNS) != 2 {
		t.Fatalf("ByIndex namespace: %d %v", len(byNS), err)
	}
	check("ByIndex", byNS...)
	byTarget, err := inf.GetIndexer().ByIndex("target", want["team/r2"].Spec.Locks[0].Workspace)
	if err != nil || len(byTarget) != 2 {
		t.Fatalf("ByIndex target: %d %v", len(byTarget), err)
	}
	// A change to what a reader got stays the reader's.
	got.(*locksv1.LockRequest).Status.Conditions[0].Message = "changed"
	again, _, _ := inf.GetIndexer().GetByKey("team/r1")
	check("GetByKey after a reader's change", again)

	b2 := trimmed("team/r2")
	b2.Status.QueuePosition = 9
	src.Modify(b2)
	gone := a.DeepCopy()
	src.Delete(gone)
	gomega.NewWithT(t).Eventually(func() int {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.seen)
	}).Should(gomega.Equal(5)) // two adds, an update (old and new), a delete
	h.mu.Lock()
	defer h.mu.Unlock()
	check("handler: the adds and the update's old object", h.seen[:3]...)
	want["team/r2"] = trimmed("team/r2")
	deleted, _ := trimLockRequest(gone.DeepCopy())
	want["team/r1"] = deleted.(*locksv1.LockRequest)
	check("handler: the update's new object and the delete", h.seen[3:]...)
	if h.seen[3].(*locksv1.LockRequest).Status.QueuePosition != 9 {
		t.Fatal("the update's new object is not the new one")
	}
	mu.Lock()
	for _, o := range indexed {
		if _, ok := o.(*locksv1.LockRequest); !ok {
			t.Fatalf("an index function got a %T", o)
		}
	}
	mu.Unlock()
	// A tombstone's object is expanded too.
	tomb := toolscache.DeletedFinalStateUnknown{Key: "team/r1", Obj: compactLockRequest(want["team/r1"].DeepCopy())}
	h.mu.Unlock()
	expandingHandler{h}.OnDelete(tomb)
	h.mu.Lock()
	check("tombstone", h.seen[len(h.seen)-1])
}

// TestCompactKeepsWhatItCannotPack: a request the packing cannot hold exactly is stored with
// that part as it came (and expands to itself): times in another location or with a monotonic
// reading, unknown condition types and statuses, uids and resourceVersions not as the API
// server writes them, more or fewer targets and lock statuses than one, metadata beyond one
// annotation.
func TestCompactKeepsWhatItCannotPack(t *testing.T) {
	zone := time.FixedZone("X", 3600)
	cases := []struct {
		name   string
		change func(*locksv1.LockRequest)
		kept   func(*compactRequest) bool
	}{
		{"a condition time in another location", func(lr *locksv1.LockRequest) {
			lr.Status.Conditions[1].LastTransitionTime.Time = lr.Status.Conditions[1].LastTransitionTime.In(zone)
		}, keptStatus},
		{"a condition time with a monotonic reading", func(lr *locksv1.LockRequest) {
			lr.Status.Conditions[0].LastTransitionTime = metav1.Now()
		}, keptStatus},
		{"a condition time in UTC", func(lr *locksv1.LockRequest) {
			lr.Status.Conditions[2].LastTransitionTime.Time = lr.Status.Conditions[2].LastTransitionTime.UTC()
		}, packedStatus},
		{"a condition of an unknown type", func(lr *locksv1.LockRequest) { lr.Status.Conditions[3].Type = "Other" }, keptStatus},
		{"a condition of an unknown status", func(lr *locksv1.LockRequest) { lr.Status.Conditions[3].Status = "Maybe" }, keptStatus},
		{"an empty condition list", func(lr *locksv1.LockRequest) { lr.Status.Conditions = []metav1.Condition{} }, keptStatus},
		{"no conditions", func(lr *locksv1.LockRequest) { lr.Status.Conditions = nil }, packedStatus},
		{"two lock statuses", func(lr *locksv1.LockRequest) {
			lr.Status.Locks = append(lr.Status.Locks, locksv1.LockStatus{Key: "k", Name: "n"})
		}, keptStatus},
		{"an empty lock status list", func(lr *locksv1.LockRequest) { lr.Status.Locks = []locksv1.LockStatus{} }, keptStatus},
		{"two targets", func(lr *locksv1.LockRequest) {
			lr.Spec.Locks = append(lr.Spec.Locks, locksv1.LockTarget{Repo: "other"})
		}, keptSpec},
		{"a holder URL", func(lr *locksv1.LockRequest) { lr.Spec.Holder.URL = "https://x" }, packedStatus},
		{"a holder lease, session and reason", func(lr *locksv1.LockRequest) {
			lr.Spec.Holder.Lease, lr.Spec.Holder.Session, lr.Spec.Reason = "l", "s", "r"
		}, packedStatus},
		{"a holder's cluster alone", func(lr *locksv1.LockRequest) { lr.Spec.Holder.Cluster = "east" }, packedStatus},
		{"an owner reference", func(lr *locksv1.LockRequest) {
			lr.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "p", UID: "u", Controller: ptr.To(true)}}
		}, packedStatus},
		{"a generated name", func(lr *locksv1.LockRequest) { lr.GenerateName = "lock-" }, packedStatus},
		{"an empty owner reference list", func(lr *locksv1.LockRequest) { lr.OwnerReferences = []metav1.OwnerReference{} }, keptMeta},
		{"a freeze bypass", func(lr *locksv1.LockRequest) { lr.Spec.BypassFreeze = &locksv1.FreezeBypass{Reason: "r"} }, keptSpec},
		{"an upper-case uid", func(lr *locksv1.LockRequest) { lr.UID = types.UID(strings.ToUpper(string(lr.UID))) }, keptMeta},
		{"a uid that is no UUID", func(lr *locksv1.LockRequest) { lr.UID = "uid-1" }, keptMeta},
		{"a resourceVersion with a leading zero", func(lr *locksv1.LockRequest) { lr.ResourceVersion = "0101" }, keptMeta},
		{"a resourceVersion that is no number", func(lr *locksv1.LockRequest) { lr.ResourceVersion = "abc" }, keptMeta},
		{"a creation time with nanoseconds", func(lr *locksv1.LockRequest) {
			lr.CreationTimestamp.Time = lr.CreationTimestamp.Add(time.Nanosecond)
		}, keptMeta},
		{"a creation time in UTC", func(lr *locksv1.LockRequest) { lr.CreationTimestamp.Time = lr.CreationTimestamp.UTC() }, keptMeta},
		{"two annotations", func(lr *locksv1.LockRequest) { lr.Annotations["b"] = "c" }, keptMeta},
		{"an empty annotation map", func(lr *locksv1.LockRequest) { lr.Annotations = map[string]string{} }, keptMeta},
		{"no annotations", func(lr *locksv1.LockRequest) { lr.Annotations = nil }, packedMeta},
		{"a finalizer", func(lr *locksv1.LockRequest) { lr.Finalizers = []string{"f"} }, keptMeta},
		{"a deletion", func(lr *locksv1.LockRequest) { lr.DeletionTimestamp = &metav1.Time{Time: time.Unix(9, 0)} }, keptMeta},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lr := packableRequest(t, 3, locksv1.PhasePending)
			tc.change(lr)
			if c := compactRoundTrip(t, tc.name, lr); !tc.kept(c) {
				t.Errorf("stored as %+v", c)
			}
		})
	}
}

func keptStatus(c *compactRequest) bool   { return c.status != nil && c.spec == nil && c.meta == nil }
func packedStatus(c *compactRequest) bool { return c.status == nil && c.spec == nil && c.meta == nil }
func keptSpec(c *compactRequest) bool     { return c.spec != nil && c.status == nil && c.meta == nil }
func keptMeta(c *compactRequest) bool     { return c.meta != nil && c.spec == nil && c.status == nil }
func packedMeta(c *compactRequest) bool   { return packedStatus(c) }

// TestCompactGroupsFollowChanges: a deep queue's key-index lookup hands out kept expansions —
// the same ones while nothing changes, a new one for a request that changed, and none kept for
// a request the store no longer holds; other lookups keep none.
func TestCompactGroupsFollowChanges(t *testing.T) {
	g := gomega.NewWithT(t)
	inf := withCompaction(toolscache.NewSharedIndexInformer)(fcache.NewFakeControllerSource(), &locksv1.LockRequest{}, 0, toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
	if err := inf.AddIndexers(toolscache.Indexers{groupIndex: func(any) ([]string, error) { return []string{"key"}, nil }}); err != nil {
		t.Fatal(err)
	}
	ci := inf.(*compactInformer)
	store := inf.GetIndexer()
	n := groupSize + 36
	for i := range n {
		if err := store.Add(packableRequest(t, i, locksv1.PhasePending)); err != nil {
			t.Fatal(err)
		}
	}
	list := func() map[string]*locksv1.LockRequest {
		objs, err := store.ByIndex(groupIndex, "key")
		if err != nil || len(objs) != n {
			t.Fatalf("ByIndex: %d, %v", len(objs), err)
		}
		out := map[string]*locksv1.LockRequest{}
		for _, o := range objs {
			lr := o.(*locksv1.LockRequest)
			out[lr.Name] = lr
		}
		return out
	}
	if _, err := store.ByIndex(toolscache.NamespaceIndex, "team"); err != nil || ci.groups.size() != 0 {
		t.Fatalf("a namespace lookup kept %d expansions (%v)", ci.groups.size(), err)
	}
	first, again := list(), list()
	for name, lr := range first {
		if again[name] != lr {
			t.Fatalf("%s expanded again though nothing changed", name)
		}
	}
	changed := packableRequest(t, 5, locksv1.PhasePending)
	changed.Status.QueuePosition, changed.ResourceVersion = 99, "777"
	if err := store.Update(changed); err != nil {
		t.Fatal(err)
	}
	after := list()
	if got := after["r5"]; got == first["r5"] || !reflect.DeepEqual(got, changed) {
		t.Fatalf("a changed request is handed out as it was:\n%s", cmp.Diff(changed, got))
	}
	if after["r6"] != first["r6"] {
		t.Fatal("an unchanged request was expanded again")
	}
	for i := range n {
		if err := store.Delete(packableRequest(t, i, locksv1.PhasePending)); err != nil {
			t.Fatal(err)
		}
	}
	// The index functions' memo keeps the last two compact requests it expanded alive.
	g.Eventually(func() int { goruntime.GC(); return ci.groups.size() }).Should(gomega.BeNumerically("<=", len(ci.memo.from)))
}

// TestOptionsCompactRequests: the manager's cache (Options) stores LockRequests
// compacted, and no other kind.
func TestOptionsCompactRequests(t *testing.T) {
	newInformer := Options().NewInformer
	if _, ok := newInformer(fcache.NewFakeControllerSource(), &locksv1.LockRequest{}, 0, toolscache.Indexers{}).(*compactInformer); !ok {
		t.Error("the cache's LockRequest informer does not compact")
	}
	if _, ok := newInformer(fcache.NewFakeControllerSource(), &locksv1.ProjectLock{}, 0, toolscache.Indexers{}).(*compactInformer); ok {
		t.Error("the cache's ProjectLock informer compacts")
	}
}
