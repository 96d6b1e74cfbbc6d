package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// server is a ListerWatcher with a scripted API server behind it: lists answer its current
// objects; each watch answers the next of watches (an error, or events to send then close).
type server struct {
	objects []*locksv1.LockRequest
	rv      string
	listErr error
	watches []any
	listed  []string // each list's resourceVersion/match
}

func lr(name, rv string) *locksv1.LockRequest {
	o := &locksv1.LockRequest{}
	o.Namespace, o.Name, o.ResourceVersion, o.UID = "ns", name, rv, types.UID(name)
	return o
}

func withUID(o *locksv1.LockRequest, uid string) *locksv1.LockRequest {
	o.UID = types.UID(uid)
	return o
}

func (s *server) List(o metav1.ListOptions) (runtime.Object, error) {
	s.listed = append(s.listed, o.ResourceVersion+"/"+string(o.ResourceVersionMatch))
	if s.listErr != nil {
		return nil, s.listErr
	}
	l := &locksv1.LockRequestList{}
	l.ResourceVersion = s.rv
	for _, o := range s.objects {
		l.Items = append(l.Items, *o)
	}
	return l, nil
}

func (s *server) Watch(metav1.ListOptions) (watch.Interface, error) {
	next := s.watches[0]
	s.watches = s.watches[1:]
	if err, ok := next.(error); ok {
		return nil, err
	}
	evs := next.([]watch.Event)
	ch := make(chan watch.Event, len(evs))
	for _, e := range evs {
		ch <- e
	}
	close(ch)
	return watch.NewProxyWatcher(ch), nil
}

// drain is every event of w, as "TYPE name@rv".
func drain(w watch.Interface) []string {
	var out []string
	for ev := range w.ResultChan() {
		if ev.Type == watch.Error {
			out = append(out, fmt.Sprintf("ERROR %v", apierrors.FromObject(ev.Object)))
			continue
		}
		m, _ := meta.Accessor(ev.Object)
		out = append(out, fmt.Sprintf("%s %s@%s", ev.Type, m.GetName(), m.GetResourceVersion()))
	}
	w.Stop()
	return out
}

var gone = apierrors.NewResourceExpired("too old resource version: 10 (12)")

// TestRelisting: a watch answered 410 Gone, by its request or in its stream, becomes the events
// that take the reflector's store (what lists and watches handed it) to the objects as they
// are now, then a bookmark at their resourceVersion, and ends; a watch list's initial events
// are the whole store; when the list fails the 410 is handed on as it came.
func TestRelisting(t *testing.T) {
	modified := func(o *locksv1.LockRequest) watch.Event { return watch.Event{Type: watch.Modified, Object: o} }
	status := func(err error) watch.Event {
		var se *apierrors.StatusError
		errors.As(err, &se)
		return watch.Event{Type: watch.Error, Object: &se.ErrStatus}
	}
	end := lr("", "11")
	end.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
	cases := []relistTest{
		{name: "the watch request answered 410", list: true, watches: []any{gone},
			now:  []*locksv1.LockRequest{lr("a", "5"), lr("b", "1"), lr("c", "6")},
			want: []string{"MODIFIED a@5", "ADDED c@6", "BOOKMARK @12"}, since: "10/NotOlderThan"},
		{name: "410 in the stream, after an event", list: true, watches: []any{[]watch.Event{modified(lr("b", "3")), status(gone)}},
			now:  []*locksv1.LockRequest{lr("a", "1"), lr("b", "3"), lr("c", "7")},
			want: []string{"MODIFIED b@3", "ADDED c@7", "BOOKMARK @12"}, since: "3/NotOlderThan"},
		{name: "an object deleted meanwhile: the 410 as it came (only the reflector's relist says its final state is unknown)",
			list: true, watches: []any{[]watch.Event{modified(lr("b", "3")), status(gone)}},
			now:  []*locksv1.LockRequest{lr("a", "1"), lr("c", "7")},
			want: []string{"MODIFIED b@3", "ERROR too old resource version: 10 (12)"}},
		{name: "the watch request answered 410, an object deleted meanwhile", list: true, watches: []any{gone},
			now:  []*locksv1.LockRequest{lr("a", "5")},
			want: []string{"WATCH ERROR too old resource version: 10 (12)"}},
		{name: "an object deleted and created again under its name: the 410 as it came", list: true, watches: []any{[]watch.Event{status(gone)}},
			now:  []*locksv1.LockRequest{lr("a", "1"), withUID(lr("b", "9"), "b-2")},
			want: []string{"ERROR too old resource version: 10 (12)"}},
		{name: "a watch list's initial events are the store", watches: []any{[]watch.Event{
			{Type: watch.Added, Object: lr("x", "9")}, {Type: watch.Bookmark, Object: end}, status(gone)}},
			now:  []*locksv1.LockRequest{lr("x", "9"), lr("y", "12")},
			want: []string{"ADDED x@9", "BOOKMARK @11", "ADDED y@12", "BOOKMARK @12"}, since: "11/NotOlderThan"},
		{name: "the relist fails: the 410 as it came", list: true, watches: []any{[]watch.Event{status(gone)}},
			listErr: errors.New("connection refused"),
			want:    []string{"ERROR too old resource version: 10 (12)"}},
	}
	// Each case twice: uids as the API server writes them (the relister keeps objects by uid),
	// and uids it cannot pack (kept by key, as they came).
	for _, packedUIDs := range []bool{false, true} {
		for _, tc := range cases {
			name := tc.name + ", uids kept as they came"
			if packedUIDs {
				name = tc.name + ", packed uids"
			}
			t.Run(name, func(t *testing.T) {
				relistCase(t, packedUIDs, tc)
			})
		}
	}
	t.Run("a 410 from a watch list is the reflector's to handle", func(t *testing.T) {
		s := &server{watches: []any{gone}}
		_, err := Relisting(s, &locksv1.LockRequest{}).WatchWithContext(context.Background(), metav1.ListOptions{SendInitialEvents: ptr.To(true)})
		if !apierrors.IsResourceExpired(err) {
			t.Errorf("got %v, want the 410", err)
		}
	})
}

// asAPIServerUID is a uid as the API server writes it, made from a short test uid.
func asAPIServerUID(uid types.UID) types.UID {
	if uid == "" {
		return ""
	}
	return types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012x", []byte(uid)))
}

// relistTest is a case of TestRelisting: the reflector lists (list) or watch-lists a and b at
// 10, the server then holds now at 12, and its watches answer watches.
type relistTest struct {
	name    string
	list    bool // the reflector listed first (else it watch-listed)
	watches []any
	now     []*locksv1.LockRequest
	listErr error
	want    []string
	since   string // the relist's resourceVersion, at least as fresh as what the reflector saw
}

// relistCase runs tc, with uids as the API server writes them when packedUIDs.
func relistCase(t *testing.T, packedUIDs bool, tc relistTest) {
	objs := []*locksv1.LockRequest{lr("a", "1"), lr("b", "1")}
	if packedUIDs {
		all := append(append([]*locksv1.LockRequest{}, objs...), tc.now...)
		for _, w := range tc.watches {
			evs, _ := w.([]watch.Event)
			for _, ev := range evs {
				if o, ok := ev.Object.(*locksv1.LockRequest); ok {
					all = append(all, o)
				}
			}
		}
		for _, o := range all {
			if !strings.HasPrefix(string(o.UID), "00000000-") {
				o.UID = asAPIServerUID(o.UID)
			}
		}
		if h := handedOf(objs[0]); h.odd != nil {
			t.Fatalf("uid %s is not packed", objs[0].UID)
		}
	}
	s := &server{objects: objs, rv: "10", watches: tc.watches}
	r := Relisting(s, &locksv1.LockRequest{})
	ctx := context.Background()
	opts := metav1.ListOptions{ResourceVersion: "10"}
	if tc.list {
		if _, err := r.ListWithContext(ctx, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
	} else {
		opts = metav1.ListOptions{SendInitialEvents: ptr.To(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}
	}
	s.objects, s.rv, s.listErr = tc.now, "12", tc.listErr
	var got []string
	if w, err := r.WatchWithContext(ctx, opts); err != nil {
		got = []string{"WATCH ERROR " + err.Error()}
	} else {
		got = drain(w)
	}
	if diff := cmp.Diff(tc.want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if relist := s.listed[len(s.listed)-1]; tc.since != "" && relist != tc.since {
		t.Errorf("relisted at %q, want %q", relist, tc.since)
	}
}

// TestHanded: what the relister keeps of an object tells a change of resourceVersion and a
// new uid apart, packed (as the API server writes them) or kept as they came.
func TestHanded(t *testing.T) {
	obj := func(rv, uid string) runtime.Object {
		cm := &corev1.ConfigMap{}
		cm.ResourceVersion, cm.UID = rv, types.UID(uid)
		return cm
	}
	const u1, u2 = "2b7c1f3e-1111-4c2d-9a8b-000000000001", "2b7c1f3e-1111-4c2d-9a8b-000000000002"
	cases := []struct {
		a, b            runtime.Object
		sameRV, sameUID bool
	}{
		{obj("10", u1), obj("10", u1), true, true},
		{obj("10", u1), obj("11", u1), false, true},
		{obj("10", u1), obj("10", u2), true, false},
		{obj("10", "odd"), obj("10", "odd"), true, true},
		{obj("10", "odd"), obj("11", "odd"), false, true},
		{obj("010", u1), obj("10", u1), false, true},
		{obj("10", strings.ToUpper(u1)), obj("10", u1), true, false},
	}
	for i, tc := range cases {
		a, b := handedOf(tc.a), handedOf(tc.b)
		if a.sameRV(b) != tc.sameRV || b.sameRV(a) != tc.sameRV || a.sameUID(b) != tc.sameUID || b.sameUID(a) != tc.sameUID {
			t.Errorf("case %d: sameRV %t sameUID %t, want %t %t", i, a.sameRV(b), a.sameUID(b), tc.sameRV, tc.sameUID)
		}
		if got := a.resourceVersion(); got != tc.a.(*corev1.ConfigMap).ResourceVersion {
			t.Errorf("case %d: resourceVersion %q", i, got)
		}
	}
	if h := handedOf(obj("10", u1)); h.odd != nil {
		t.Error("a resourceVersion and uid as the API server writes them are kept as strings")
	}
}
