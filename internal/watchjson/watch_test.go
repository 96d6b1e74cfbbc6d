package watchjson_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	"github.com/turnstile-dev/turnstile/internal/watchjson"
)

var env *framework.Env

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	var err error
	if env, err = framework.Start(""); err != nil {
		fmt.Fprintf(os.Stderr, "start control plane: %v\n", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	return m.Run()
}

var gvk = locksv1.GroupVersion.WithKind("LockRequest")

// clientGoWatch is the watch controller-runtime's cache starts for a typed informer: its REST
// client for the kind, client-go's Request.Watch and its decoder.
func clientGoWatch(t *testing.T, httpClient *http.Client) func(context.Context, metav1.ListOptions) (watch.Interface, error) {
	t.Helper()
	c, err := apiutil.RESTClientForGVK(gvk, false, false, env.Config, serializer.NewCodecFactory(framework.Scheme), httpClient)
	if err != nil {
		t.Fatal(err)
	}
	params := runtime.NewParameterCodec(framework.Scheme)
	return func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		opts.Watch = true
		return c.Get().Resource("lockrequests").VersionedParams(&opts, params).Watch(ctx)
	}
}

// seen is an event as a reflector reads it.
type seen struct {
	Type   watch.EventType
	Object runtime.Object
}

// untilBookmark reads events of w up to and with the bookmark that ends a watch list's
// initial events.
func untilBookmark(t *testing.T, w watch.Interface) []seen {
	t.Helper()
	var out []seen
	for {
		ev := take(t, w, 1)[0]
		out = append(out, ev)
		if bm, ok := ev.Object.(*locksv1.LockRequest); ev.Type == watch.Bookmark && ok && bm.Annotations[metav1.InitialEventsAnnotationKey] == "true" {
			return out
		}
		if len(out) > 1000 {
			t.Fatal("no end of the initial events in 1,000 events")
		}
	}
}

// lockScheme is the scheme the manager gives watchjson (internal/cache: LockRequests'
// group only), which decodes the Status of a refused watch.
func lockScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := locksv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// take reads n events of w, or fails after a while.
func take(t *testing.T, w watch.Interface, n int) []seen {
	t.Helper()
	var out []seen
	timeout := time.After(30 * time.Second)
	for len(out) < n {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch ended after %d of %d events", len(out), n)
			}
			out = append(out, seen{ev.Type, ev.Object})
		case <-timeout:
			t.Fatalf("%d of %d events in 30 s", len(out), n)
		}
	}
	return out
}

// TestWatchAsClientGo: the same watches, through client-go's decoder and through this one,
// hand a reflector the same events — a watch list's initial events and its end bookmark, then
// creates, status writes and deletes; and a watch from a resourceVersion the API server no
// longer has fails the same way.
func TestWatchAsClientGo(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	httpClient, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	fast, err := watchjson.New[locksv1.LockRequest](env.Config, httpClient, lockScheme(t), gvk, "lockrequests")
	if err != nil {
		t.Fatal(err)
	}
	slow := clientGoWatch(t, httpClient)
	k := env.Client

	var reqs []*locksv1.LockRequest
	for i := range 6 {
		lr := &locksv1.LockRequest{}
		lr.Namespace, lr.Name = "default", fmt.Sprintf("w%d", i)
		lr.Labels = map[string]string{"pull": fmt.Sprint(i)}
		lr.Annotations = map[string]string{"note": "ünïcödé \"quoted\"\nand a newline"}
		if i == 5 {
			// An event longer than the decoder's 64 KiB buffer.
			lr.Annotations["big"] = strings.Repeat("x", 200<<10)
		}
		lr.Spec.Locks = []locksv1.LockTarget{{Repo: "org/infra", Path: fmt.Sprintf("p%d", i%2), Workspace: "default"}}
		lr.Spec.Holder = locksv1.Holder{Owner: "alice", Pull: int64(i)}
		lr.Spec.Command = "apply"
		if err := k.Create(ctx, lr); err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, lr)
	}
	reqs[0].Status.Phase = locksv1.PhasePending
	reqs[0].Status.Conditions = []metav1.Condition{{Type: locksv1.ConditionGranted, Status: metav1.ConditionFalse, Reason: "Queued", Message: "waiting",
		LastTransitionTime: metav1.NewTime(time.Unix(1700000000, 0))}}
	if err := k.Status().Update(ctx, reqs[0]); err != nil {
		t.Fatal(err)
	}

	// A watch list, as a reflector starts one: every object, then the bookmark that ends the
	// initial events.
	opts := metav1.ListOptions{SendInitialEvents: new(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true}
	watches := map[string]watch.Interface{}
	if !servesWatchList(ctx, t, slow, fast.Watch, opts) {
		// A reflector then lists and watches from the list's resourceVersion: so do both here.
		var list locksv1.LockRequestList
		if err := k.List(ctx, &list); err != nil {
			t.Fatal(err)
		}
		opts = metav1.ListOptions{ResourceVersion: list.ResourceVersion, AllowWatchBookmarks: true}
		for name, start := range map[string]func(context.Context, metav1.ListOptions) (watch.Interface, error){"client-go": slow, "watchjson": fast.Watch} {
			w, err := start(ctx, opts)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			defer w.Stop()
			watches[name] = w
		}
	} else {
		got := map[string][]seen{}
		for name, start := range map[string]func(context.Context, metav1.ListOptions) (watch.Interface, error){"client-go": slow, "watchjson": fast.Watch} {
			w, err := start(ctx, opts)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			defer w.Stop()
			watches[name] = w
			got[name] = untilBookmark(t, w)
		}
		// The bookmark that ends the initial events carries the store's resourceVersion when
		// the watch began: etcd's revision, which any write in the cluster moves (the API
		// server renews its own Lease in kube-system every 10 s), so two watches begun one
		// after the other may each end theirs at another. Each must be at least its newest
		// object's; the rest of the two bookmarks must be alike.
		for name, events := range got {
			bm := events[len(events)-1].Object.(*locksv1.LockRequest)
			end, err := strconv.ParseUint(bm.ResourceVersion, 10, 64)
			if err != nil {
				t.Fatalf("%s: the bookmark's resourceVersion %q: %v", name, bm.ResourceVersion, err)
			}
			for _, ev := range events[:len(events)-1] {
				rv, err := strconv.ParseUint(ev.Object.(*locksv1.LockRequest).ResourceVersion, 10, 64)
				if err != nil || rv > end {
					t.Fatalf("%s: an initial event at resourceVersion %d (%v), after the bookmark's %d", name, rv, err, end)
				}
			}
			bm = bm.DeepCopy()
			bm.ResourceVersion = ""
			events[len(events)-1].Object = bm
		}
		if diff := cmp.Diff(got["client-go"], got["watchjson"]); diff != "" {
			t.Fatalf("initial events (-client-go +watchjson):\n%s", diff)
		}
		if n := len(got["watchjson"]); n < len(reqs)+1 {
			t.Fatalf("%d initial events, want at least the %d requests and the bookmark", n, len(reqs))
		}
	}

	// Then changes: a create, a status write, a delete.
	extra := reqs[1].DeepCopy()
	extra.Name, extra.ResourceVersion, extra.UID = "w-extra", "", ""
	if err := k.Create(ctx, extra); err != nil {
		t.Fatal(err)
	}
	reqs[2].Status.Phase = locksv1.PhaseGranted
	reqs[2].Status.FencingToken = 7
	if err := k.Status().Update(ctx, reqs[2]); err != nil {
		t.Fatal(err)
	}
	if err := k.Delete(ctx, reqs[3]); err != nil {
		t.Fatal(err)
	}
	changes := map[string][]seen{}
	for name, w := range watches {
		changes[name] = withoutBookmarks(t, w, 3)
	}
	if diff := cmp.Diff(changes["client-go"], changes["watchjson"]); diff != "" {
		t.Fatalf("changes (-client-go +watchjson):\n%s", diff)
	}
	if types := []watch.EventType{changes["watchjson"][0].Type, changes["watchjson"][1].Type, changes["watchjson"][2].Type}; !cmp.Equal(types, []watch.EventType{watch.Added, watch.Modified, watch.Deleted}) {
		t.Errorf("change types %v", types)
	}

	// A resourceVersion from before the API server's watch cache began: both refuse it alike,
	// at the start or as an ERROR event.
	old := metav1.ListOptions{ResourceVersion: "1", AllowWatchBookmarks: true}
	outcome := map[string]string{}
	for name, start := range map[string]func(context.Context, metav1.ListOptions) (watch.Interface, error){"client-go": slow, "watchjson": fast.Watch} {
		w, err := start(ctx, old)
		if err != nil {
			outcome[name] = fmt.Sprintf("refused: %s %v", apierrors.ReasonForError(err), apierrors.IsResourceExpired(err) || apierrors.IsGone(err))
			continue
		}
		ev := take(t, w, 1)[0]
		w.Stop()
		st, _ := ev.Object.(*metav1.Status)
		if st == nil {
			outcome[name] = fmt.Sprintf("event %s %T", ev.Type, ev.Object)
			continue
		}
		outcome[name] = fmt.Sprintf("event %s: %s %d", ev.Type, st.Reason, st.Code)
	}
	if outcome["client-go"] != outcome["watchjson"] {
		t.Errorf("a watch from resourceVersion 1: client-go %q, watchjson %q", outcome["client-go"], outcome["watchjson"])
	}
	t.Logf("a watch from resourceVersion 1: %s", outcome["watchjson"])

	// A watch the API server refuses at its start (resourceVersionMatch without a watch list):
	// the same error, decoded from the Status in the answer.
	refused := map[string]error{}
	for name, start := range map[string]func(context.Context, metav1.ListOptions) (watch.Interface, error){"client-go": slow, "watchjson": fast.Watch} {
		w, err := start(ctx, metav1.ListOptions{ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
		if err == nil {
			w.Stop()
			t.Fatalf("%s: a watch with resourceVersionMatch and no watch list was not refused", name)
		}
		refused[name] = err
	}
	a, b := apierrors.APIStatus(nil), apierrors.APIStatus(nil)
	if !errors.As(refused["client-go"], &a) || !errors.As(refused["watchjson"], &b) {
		t.Fatalf("refused watch errors: client-go %T %v, watchjson %T %v; want API statuses", refused["client-go"], refused["client-go"], refused["watchjson"], refused["watchjson"])
	}
	if diff := cmp.Diff(a.Status(), b.Status()); diff != "" {
		t.Errorf("the refused watch's Status (-client-go +watchjson):\n%s", diff)
	}
	t.Logf("a refused watch: %s %d", b.Status().Reason, b.Status().Code)
}

// servesWatchList starts a watch list through client-go and through watchjson and stops both:
// true where the API server serves watch lists; false where it refuses them (Kubernetes 1.33
// ships with its WatchList gate off), after checking that watchjson hands back the same
// refusal, which is what makes a reflector fall back to a list and a watch.
func servesWatchList(ctx context.Context, t *testing.T, slow, fast func(context.Context, metav1.ListOptions) (watch.Interface, error), opts metav1.ListOptions) bool {
	t.Helper()
	ws, errSlow := slow(ctx, opts)
	wf, errFast := fast(ctx, opts)
	for _, w := range []watch.Interface{ws, wf} {
		if w != nil {
			w.Stop()
		}
	}
	if errSlow == nil && errFast == nil {
		return true
	}
	a, b := apierrors.APIStatus(nil), apierrors.APIStatus(nil)
	if !errors.As(errSlow, &a) || !errors.As(errFast, &b) || !apierrors.IsInvalid(errSlow) {
		t.Fatalf("a watch list: client-go %v, watchjson %v; want both to start, or both refused as Invalid", errSlow, errFast)
	}
	if diff := cmp.Diff(a.Status(), b.Status()); diff != "" {
		t.Fatalf("the refused watch list's Status (-client-go +watchjson):\n%s", diff)
	}
	t.Logf("this API server serves no watch list (%s): both refuse it alike; comparing a list and watch instead", b.Status().Message)
	return false
}

// withoutBookmarks reads the next n events of w that are not bookmarks (the API server sends
// those when it likes).
func withoutBookmarks(t *testing.T, w watch.Interface, n int) []seen {
	t.Helper()
	var out []seen
	for len(out) < n {
		ev := take(t, w, 1)[0]
		if ev.Type != watch.Bookmark {
			out = append(out, ev)
		}
	}
	return out
}
