package watchjson

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

func decodeAll(t *testing.T, stream string) ([]watch.EventType, []runtime.Object, error) {
	t.Helper()
	d := newDecoder[locksv1.LockRequest](io.NopCloser(strings.NewReader(stream)), locksv1.GroupVersion.WithKind("LockRequest"))
	var types []watch.EventType
	var objs []runtime.Object
	for {
		typ, obj, err := d.Decode()
		if err != nil {
			return types, objs, err
		}
		types = append(types, typ)
		objs = append(objs, obj)
	}
}

const head = `{"apiVersion":"locks.turnstile.dev/v1alpha1","kind":"LockRequest","metadata":{"name":"`

// TestDecoderStream: lines are events (blank lines between them are not), an event longer
// than the reader's buffer is read whole, the kind is checked and cleared, an ERROR event
// carries its Status.
func TestDecoderStream(t *testing.T) {
	long := strings.Repeat("x", 200<<10)
	stream := `{"type":"ADDED","object":` + head + `a","namespace":"team","ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":"p","uid":"u"}]}}}` + "\n" +
		"\n  \n" +
		`{"type":"MODIFIED","object":` + head + `b","namespace":"team","annotations":{"note":"` + long + `"}}}}` + "\n" +
		`{"type":"BOOKMARK","object":` + head[:len(head)-len(`"name":"`)] + `"resourceVersion":"42","annotations":{"k8s.io/initial-events-end":"true"}}}}` + "\n" +
		`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (42)","reason":"Expired","code":410}}` + "\n"
	types, objs, err := decodeAll(t, stream)
	if !errors.Is(err, io.EOF) {
		t.Fatalf("stream end: %v, want io.EOF", err)
	}
	if diff := cmp.Diff([]watch.EventType{watch.Added, watch.Modified, watch.Bookmark, watch.Error}, types); diff != "" {
		t.Fatalf("types (-want +got):\n%s", diff)
	}
	a := objs[0].(*locksv1.LockRequest)
	if a.Name != "a" || a.Namespace != "team" || len(a.OwnerReferences) != 1 || a.OwnerReferences[0].Kind != "Pod" {
		t.Errorf("first object %+v", a.ObjectMeta)
	}
	if a.Kind != "" || a.APIVersion != "" {
		t.Errorf("kind %q, apiVersion %q kept: client-go's decoder clears them", a.Kind, a.APIVersion)
	}
	if b := objs[1].(*locksv1.LockRequest); b.Annotations["note"] != long {
		t.Errorf("the long event's annotation is %d bytes, want %d", len(b.Annotations["note"]), len(long))
	}
	if bm := objs[2].(*locksv1.LockRequest); bm.ResourceVersion != "42" || bm.Annotations[metav1.InitialEventsAnnotationKey] != "true" {
		t.Errorf("bookmark %+v", bm.ObjectMeta)
	}
	st, ok := objs[3].(*metav1.Status)
	if !ok || st.Code != 410 || st.Reason != metav1.StatusReasonExpired {
		t.Errorf("ERROR event object %#v, want the 410 Status", objs[3])
	}
	if ok && st.TypeMeta != (metav1.TypeMeta{}) {
		t.Errorf("the Status keeps its kind %+v: client-go's decoder clears it", st.TypeMeta)
	}
}

// TestDecoderLastLine: a last event without its newline is an event, as client-go's framer
// (which reads JSON values, not lines) hands it out; a last line cut within an event is the
// stream ending within it.
func TestDecoderLastLine(t *testing.T) {
	types, objs, err := decodeAll(t, `{"type":"ADDED","object":`+head+`a"}}}`+"\n"+`{"type":"DELETED","object":`+head+`a"}}}`)
	if !errors.Is(err, io.EOF) || len(types) != 2 || types[1] != watch.Deleted || objs[1].(*locksv1.LockRequest).Name != "a" {
		t.Errorf("decoded %v, then %v: want ADDED and DELETED, then io.EOF", types, err)
	}
	types, _, err = decodeAll(t, `{"type":"ADDED","object":`+head+`a"}}}`+"\n"+`{"type":"DELETED","obj`)
	if !errors.Is(err, io.ErrUnexpectedEOF) || len(types) != 1 {
		t.Errorf("decoded %v, then %v: want ADDED, then io.ErrUnexpectedEOF", types, err)
	}
}

// TestDecoderRefuses: what client-go's decoder refuses is refused.
func TestDecoderRefuses(t *testing.T) {
	for name, stream := range map[string]string{
		"another kind":                     `{"type":"ADDED","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}}` + "\n",
		"no kind":                          `{"type":"ADDED","object":{"metadata":{"name":"a"}}}` + "\n",
		"an unknown type":                  `{"type":"RENAMED","object":` + head + `a"}}}` + "\n",
		"no object":                        `{"type":"ADDED"}` + "\n",
		"not JSON":                         `{"type":"ADDED","object":` + "\n",
		"cut off at the end":               `{"type":"ADDED","object":` + head + `a"}}`,
		"a field of the wrong type":        `{"type":"ADDED","object":` + head + `a","generation":"one"}}}` + "\n",
		"an ERROR event without an object": `{"type":"ERROR","object":null}` + "\n",
		"a line longer than 16 MiB":        `{"type":"ADDED","object":` + head + strings.Repeat("a", maxLine) + `"}}}` + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			types, _, err := decodeAll(t, stream)
			if len(types) != 0 || err == nil || errors.Is(err, io.EOF) {
				t.Errorf("decoded %v, err %v: want a decoding error", types, err)
			}
		})
	}
}

// TestWatchRetriesRefusedConnections: a watch whose connection is closed before the server
// answers is tried again, as client-go's Request.Watch tries it, and then ends at once (the
// reflector starts again); a later answer is the watch.
func TestWatchRetriesRefusedConnections(t *testing.T) {
	var requests, closeFirst atomic.Int32
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) <= closeFirst.Load() {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintln(w, `{"type":"ADDED","object":`+head+`a","namespace":"team"}}}`)
	}))
	defer server.Close()
	scheme := runtime.NewScheme()
	if err := locksv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	// A new connection each time: Go's transport itself tries a request again once when a
	// connection it reused is closed, which would count twice here.
	hc := server.Client()
	hc.Transport.(*http.Transport).DisableKeepAlives = true
	w, err := New[locksv1.LockRequest](&rest.Config{Host: server.URL}, hc, scheme, locksv1.GroupVersion.WithKind("LockRequest"), "lockrequests")
	if err != nil {
		t.Fatal(err)
	}
	w.retries, w.retryWait = 3, time.Millisecond

	closeFirst.Store(2)
	wi, err := w.Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ev := <-wi.ResultChan(); ev.Type != watch.Added || requests.Load() != 3 {
		t.Errorf("after two closed connections: %s after %d requests, want ADDED after 3", ev.Type, requests.Load())
	}
	wi.Stop()

	requests.Store(0)
	closeFirst.Store(100)
	if wi, err = w.Watch(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, open := <-wi.ResultChan(); open || requests.Load() != 4 {
		t.Errorf("every connection closed: a watch that is open %t after %d requests, want one ended after 4", open, requests.Load())
	}
}
