package cache

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/whoami"
)

// createdBy is the creator stamp the admission policies write and the holder Lease check
// reads: the trim keeps it.
const createdBy = whoami.AnnotationCreatedBy

// scaleRequest is a request as a pipeline applies it: kubectl's last-applied annotation, the
// admission policy's creator stamp, managedFields, labels and an owner.
func scaleRequest(i int, phase locksv1.LockRequestPhase) *locksv1.LockRequest {
	lr := &locksv1.LockRequest{}
	lr.Namespace, lr.Name, lr.UID = "team", fmt.Sprintf("r%d", i), types.UID(fmt.Sprintf("uid-%d", i))
	lr.ResourceVersion = fmt.Sprint(100 + i)
	lr.CreationTimestamp = metav1.NewTime(time.Unix(1000+int64(i), 0))
	lr.Spec.Locks = []locksv1.LockTarget{{Repo: "org/infra", Path: "prod", Workspace: "default"}}
	lr.Spec.Holder = locksv1.Holder{Owner: fmt.Sprintf("owner%d", i), Pull: int64(i)}
	lr.Spec.Command = "apply"
	lr.Labels = map[string]string{"locks.turnstile.dev/pull": fmt.Sprint(i)}
	lr.Annotations = map[string]string{
		corev1.LastAppliedConfigAnnotation: `{"apiVersion":"locks.turnstile.dev/v1alpha1","kind":"LockRequest"}`,
		createdBy:                          "system:serviceaccount:ci:atlantis",
		"example.com/note":                 "a user's note",
	}
	lr.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "p", UID: "pod-uid"}}
	lr.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply,
		FieldsV1: metav1.NewFieldsV1(`{"f:spec":{}}`)}}
	lr.Status.Phase = phase
	if phase != "" {
		lr.Status.QueuedAt = &metav1.MicroTime{Time: lr.CreationTimestamp.Time}
		lr.Status.Conditions = []metav1.Condition{{Type: locksv1.ConditionGranted, Status: metav1.ConditionFalse,
			Reason: "Queued", Message: "waiting", LastTransitionTime: lr.CreationTimestamp}}
	}
	return lr
}

// TestTrimLockRequest: the cache keeps every field a decision reads and drops the rest.
func TestTrimLockRequest(t *testing.T) {
	orig := scaleRequest(1, locksv1.PhasePending)
	out, err := trimLockRequest(orig.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*locksv1.LockRequest)
	if got.ManagedFields != nil {
		t.Error("managedFields kept")
	}
	if _, ok := got.Annotations[corev1.LastAppliedConfigAnnotation]; ok {
		t.Error("kubectl's last-applied-configuration kept: a whole copy of the object")
	}
	if _, ok := got.Annotations["example.com/note"]; ok {
		t.Error("an annotation nothing reads kept")
	}
	if got.Annotations[createdBy] != orig.Annotations[createdBy] {
		t.Errorf("the creator stamp the holder Lease check reads is %q, want %q", got.Annotations[createdBy], orig.Annotations[createdBy])
	}
	keep := scaleRequest(2, locksv1.PhasePending)
	keep.Annotations[locksv1.AnnotationOnPartition] = locksv1.OnPartitionKeepRunning
	if out, _ := trimLockRequest(keep); !locksv1.KeepsRunning(out.(*locksv1.LockRequest).Annotations) {
		t.Error("a fleet spoke's partition opt-out dropped: its agent reads it")
	}
	stopped := scaleRequest(2, locksv1.PhaseGranted)
	stopped.Annotations[locksv1.AnnotationSpokeStopped] = "7"
	stopped.Annotations[locksv1.AnnotationConfirmsStops] = "true"
	if out, _ := trimLockRequest(stopped); out.(*locksv1.LockRequest).Annotations[locksv1.AnnotationSpokeStopped] != "7" ||
		out.(*locksv1.LockRequest).Annotations[locksv1.AnnotationConfirmsStops] != "true" {
		t.Error("a fleet spoke's confirmation that it stopped a grant, or that it says its stops, dropped: the hub's decisions read them")
	}
	if got.Labels != nil {
		t.Error("labels kept: the manager selects no LockRequest by label")
	}
	if !reflect.DeepEqual(got.Spec, orig.Spec) || !reflect.DeepEqual(got.Status, orig.Status) ||
		!reflect.DeepEqual(got.OwnerReferences, orig.OwnerReferences) {
		t.Error("spec, status or ownerReferences changed")
	}
	plain := &locksv1.LockRequest{}
	plain.Annotations = map[string]string{"other/a": "1"}
	if out, _ := trimLockRequest(plain); out.(*locksv1.LockRequest).Annotations != nil {
		t.Error("a request with no annotation the manager reads keeps an annotation map")
	}
	pl := &locksv1.ProjectLock{}
	pl.Annotations = map[string]string{corev1.LastAppliedConfigAnnotation: "{}"}
	pl.ManagedFields = orig.ManagedFields
	if out, _ := trimTransform()(pl); out.(*locksv1.ProjectLock).ManagedFields != nil || len(out.(*locksv1.ProjectLock).Annotations) != 1 {
		t.Error("a ProjectLock (updated whole by the controller) must lose its managedFields and nothing else")
	}
}

// TestTrimTwiceWritesNothing: an object trimmed once is trimmed again without a write, while
// other goroutines read it (an object the store holds met by the transform again). Under -race
// (make test), a write here is a data race; without it the second trim must at least leave the
// object as it was.
func TestTrimTwiceWritesNothing(t *testing.T) {
	lr := scaleRequest(1, locksv1.PhasePending)
	lr.Status.Conditions = append(lr.Status.Conditions, lr.Status.Conditions[0])
	lr.Status.Conditions[1].Type = locksv1.ConditionReady
	if _, err := trimLockRequest(lr); err != nil {
		t.Fatal(err)
	}
	trimmedAgainWritesNothing(t, lr, trimLockRequest)
}

// trimmedAgainWritesNothing trims obj, trimmed once, again and again while another goroutine
// copies it (an object the store holds, read meanwhile): under -race a write is a data race;
// without it, obj must at least stay as it was.
func trimmedAgainWritesNothing[T interface{ DeepCopy() T }](t *testing.T, obj T, trim func(any) (any, error)) {
	t.Helper()
	before := obj.DeepCopy()
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 200 {
			_ = obj.DeepCopy()
		}
	})
	wg.Go(func() {
		for range 200 {
			_, _ = trim(obj)
		}
	})
	wg.Wait()
	if !reflect.DeepEqual(obj, before) {
		t.Errorf("a second trim changed the %T", obj)
	}
}

// decisionView is what a decision writes and when it decides again, with requests by name:
// trimmed and untrimmed requests are different objects.
type decisionView struct {
	CreateLock, Again, RefreshDeferred, ReleaseFinalizer bool
	Lock                                                 *locksv1.ProjectLockStatus
	Updates                                              []string
	Writes                                               []string
	RequeueAfter                                         time.Duration
}

func viewOf(d queue.Decision) decisionView {
	v := decisionView{CreateLock: d.CreateLock, Again: d.Again, RefreshDeferred: d.RefreshDeferred,
		ReleaseFinalizer: d.ReleaseFinalizer, Lock: d.Lock, RequeueAfter: d.RequeueAfter}
	for kind, us := range map[string][]queue.Update{"finish": d.Finish, "demote": d.Demote, "grant": d.Grant, "waiting": d.Waiting} {
		for _, u := range us {
			v.Updates = append(v.Updates, fmt.Sprintf("%s %s refresh=%t acquires=%t %+v %+v", kind, u.Request.Name, u.Refresh, u.Acquires, u.Status, u.Event))
		}
	}
	sort.Strings(v.Updates)
	for _, w := range d.Writes {
		v.Writes = append(v.Writes, fmt.Sprintf("%v %v %s %s", w.Kind, w.Step, w.Object, w.RV))
	}
	return v
}

// roundTrip is obj as a client reads it back: every string a copy of its own.
func roundTrip[T any](t *testing.T, obj *T) *T {
	t.Helper()
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	out := new(T)
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTrimmedDecidesIdentically: a key's decisions over requests as the cache holds and hands
// them out (trimmed, compacted, expanded) are the decisions over the requests as the API server
// returned them — the same writes, none more — through a queue's life: created, decided,
// written, read back; holders released one after another, positions moving, the last ones
// finished.
func TestTrimmedDecidesIdentically(t *testing.T) {
	target := locksv1.LockTarget{Repo: "org/infra", Path: "prod", Workspace: "default"}
	name := lockkey.Name(target)
	var reqs []*locksv1.LockRequest
	for i := range 6 {
		reqs = append(reqs, scaleRequest(i, ""))
	}
	var lock *locksv1.ProjectLock
	rv := int64(1000)
	nextRV := func() string { rv++; return fmt.Sprint(rv) }
	now := time.Unix(5000, 0)
	apply := func(u queue.Update) {
		for i, r := range reqs {
			if r.Name == u.Request.Name {
				r = r.DeepCopy()
				r.Status = *u.Status.DeepCopy()
				r.ResourceVersion = nextRV()
				reqs[i] = roundTrip(t, r)
			}
		}
	}
	writes := 0
	for round := range 40 {
		in := func(trim bool) queue.Input {
			var rs []*locksv1.LockRequest
			for _, r := range reqs {
				r = roundTrip(t, r)
				if trim { // as the manager's cache holds and hands it out
					out, _ := trimLockRequest(r)
					r = compactLockRequest(out.(*locksv1.LockRequest)).expand()
				}
				rs = append(rs, r)
			}
			var l *locksv1.ProjectLock
			if lock != nil {
				l = roundTrip(t, lock)
			}
			return queue.Input{Now: now, Name: name, Target: target, Lock: l, Requests: rs, Config: queue.DefaultConfig()}
		}
		a, b := queue.Decide(in(false)), queue.Decide(in(true))
		if va, vb := viewOf(a), viewOf(b); !reflect.DeepEqual(va, vb) {
			t.Fatalf("round %d: decisions differ:\n%+v\n%+v", round, va, vb)
		}
		writes += len(a.Writes)
		now = now.Add(time.Second)
		switch {
		case a.CreateLock:
			lock = &locksv1.ProjectLock{}
			lock.Namespace, lock.Name, lock.ResourceVersion, lock.Generation = "team", name, nextRV(), 1
			continue
		case a.Lock != nil:
			lock.Status = *a.Lock.DeepCopy()
			lock.ResourceVersion = nextRV()
		}
		for _, us := range [][]queue.Update{a.Finish, a.Demote, a.Grant, a.Waiting} {
			for _, u := range us {
				apply(u)
			}
		}
		if len(a.Writes) > 0 {
			continue
		}
		// Settled: the holder lets go, or the queue is done.
		released := false
		for i, r := range reqs {
			if r.Status.Phase == locksv1.PhaseGranted && !r.Spec.Release {
				r = r.DeepCopy()
				r.Spec.Release, r.Generation, r.ResourceVersion = true, r.Generation+1, nextRV()
				reqs[i], released = r, true
				break
			}
		}
		if !released {
			break
		}
	}
	final := 0
	for _, r := range reqs {
		if r.Status.Phase.IsFinal() {
			final++
		}
	}
	if final != len(reqs) || writes < 2*len(reqs) {
		t.Fatalf("weak scenario: %d of %d requests finished, %d writes", final, len(reqs), writes)
	}
}

// TestTrimSharesStrings: what a request says twice is stored once, what requests share once
// for all of them, and the values stay as they were.
func TestTrimSharesStrings(t *testing.T) {
	waiter := func(i int) *locksv1.LockRequest {
		lr := scaleRequest(i, locksv1.PhasePending)
		lr.Status.BlockedBy = "locked by pull #7 (alice)"
		msg := fmt.Sprintf("locked by pull #7 (alice); position %d of 9", i)
		lr.Status.Conditions = nil
		for _, c := range []struct {
			typ string
			st  metav1.ConditionStatus
			msg string
		}{{locksv1.ConditionGranted, metav1.ConditionFalse, msg}, {locksv1.ConditionReady, metav1.ConditionFalse, msg},
			{locksv1.ConditionReconciling, metav1.ConditionTrue, msg}, {locksv1.ConditionStalled, metav1.ConditionFalse, "waiting"}} {
			lr.Status.Conditions = append(lr.Status.Conditions, metav1.Condition{Type: c.typ, Status: c.st, Reason: "Queued", Message: c.msg})
		}
		return roundTrip(t, lr)
	}
	a, b := waiter(1), waiter(2)
	want := a.DeepCopy()
	for _, lr := range []*locksv1.LockRequest{a, b} {
		if _, err := trimLockRequest(lr); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(a.Status, want.Status) {
		t.Fatalf("status changed:\n%+v\n%+v", a.Status, want.Status)
	}
	same := func(x, y string) bool { return unsafe.StringData(x) == unsafe.StringData(y) }
	if !same(a.Status.BlockedBy, a.Status.Conditions[0].Message) {
		t.Error("blockedBy is a copy of its own, not the start of the conditions' message")
	}
	if !same(a.Status.Conditions[0].Message, a.Status.Conditions[2].Message) {
		t.Error("the Granted and Reconciling messages are two copies")
	}
	if !same(a.Status.Conditions[3].Message, b.Status.Conditions[3].Message) {
		t.Error("two requests' fixed message \"waiting\" are two copies")
	}
	if same(a.Status.Conditions[0].Message, b.Status.Conditions[0].Message) {
		t.Error("two waiters' position messages share one string")
	}
	failed := roundTrip(t, a)
	failed.Status.BlockedBy = "deadlock: a waits for b"
	failed.Status.Conditions[1].Message = "deadlock: a waits for b"
	if _, err := trimLockRequest(failed); err != nil {
		t.Fatal(err)
	}
	if failed.Status.BlockedBy != "deadlock: a waits for b" || !same(failed.Status.BlockedBy, failed.Status.Conditions[1].Message) {
		t.Errorf("a blockedBy its message repeats whole is %q, a copy of its own", failed.Status.BlockedBy)
	}
}

// scaleLock is a ProjectLock as the lock controller writes it for a key with a holder and
// waiters waiting, read back as a client decodes it (every string its own copy, the queue's
// slice grown by the decoder).
func scaleLock(t *testing.T, key string, waiters int) *locksv1.ProjectLock {
	pl := &locksv1.ProjectLock{}
	pl.APIVersion, pl.Kind = locksv1.GroupVersion.String(), "ProjectLock"
	pl.Namespace, pl.Name, pl.UID, pl.ResourceVersion = "team", key, types.UID("uid-"+key), "42"
	pl.Finalizers = []string{"locks.turnstile.dev/holder"}
	pl.Spec.LockTarget = locksv1.LockTarget{Repo: "org/infra", Path: key, Workspace: "default", Mode: locksv1.ModeExclusive}
	pl.Status.Mode = locksv1.ModeExclusive
	pl.Status.Holder = &locksv1.LockHolder{Owner: "alice", Pull: 7, Requests: []locksv1.HolderRequest{{Name: "r0", UID: "uid-0"}},
		Since: metav1.NewTime(time.Unix(1000, 0))}
	pl.Status.FencingToken = 3
	for i := range waiters {
		pl.Status.Queue = append(pl.Status.Queue, locksv1.QueueEntry{Request: fmt.Sprintf("r%d", i+1), Owner: fmt.Sprintf("owner%d", i+1),
			Pull: int64(i + 1), Priority: locksv1.PriorityNormal})
	}
	pl.Status.QueueLength = int32(waiters)
	pl.Status.Conditions = []metav1.Condition{
		{Type: locksv1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Held", Message: "held by pull #7 (alice)"},
		{Type: locksv1.ConditionReconciling, Status: metav1.ConditionFalse, Reason: "Held", Message: "held by pull #7 (alice)"},
	}
	return roundTrip(t, pl)
}

// TestTrimProjectLock: the cache's ProjectLock is the one the API server returned, field for
// field (the lock controller updates it whole), with the strings locks share shared and the
// queue's slice no longer than the queue.
func TestTrimProjectLock(t *testing.T) {
	a, b := scaleLock(t, "prod", 9), scaleLock(t, "staging", 9)
	if cap(a.Status.Queue) == len(a.Status.Queue) {
		t.Fatalf("the decoder left the queue's slice exact (%d): the test shows nothing", cap(a.Status.Queue))
	}
	want := a.DeepCopy()
	for _, pl := range []*locksv1.ProjectLock{a, b} {
		// Through the cache's transform: ProjectLocks are trimmed there.
		if _, err := trimTransform()(pl); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(a, want) {
		t.Fatalf("the trimmed ProjectLock differs:\n%+v\n%+v", a, want)
	}
	if cap(a.Status.Queue) != len(a.Status.Queue) {
		t.Errorf("the queue holds room for %d entries, has %d", cap(a.Status.Queue), len(a.Status.Queue))
	}
	same := func(x, y string) bool { return unsafe.StringData(x) == unsafe.StringData(y) }
	for what, pair := range map[string][2]string{
		"namespace":        {a.Namespace, b.Namespace},
		"repo":             {a.Spec.Repo, b.Spec.Repo},
		"mode":             {string(a.Status.Mode), string(b.Status.Mode)},
		"finalizer":        {a.Finalizers[0], b.Finalizers[0]},
		"priority":         {string(a.Status.Queue[0].Priority), string(b.Status.Queue[8].Priority)},
		"condition type":   {a.Status.Conditions[0].Type, b.Status.Conditions[0].Type},
		"condition reason": {a.Status.Conditions[1].Reason, b.Status.Conditions[1].Reason},
	} {
		if !same(pair[0], pair[1]) {
			t.Errorf("two locks' %s %q are two copies", what, pair[0])
		}
	}
	if !same(a.Status.Conditions[0].Message, a.Status.Conditions[1].Message) {
		t.Error("one lock's two conditions saying the same thing keep two copies")
	}
	trimmedAgainWritesNothing(t, a, trimProjectLock)
}
