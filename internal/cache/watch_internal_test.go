package cache

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/watchjson"
)

// TestNewWatchesOnce: the manager's cache (New with Options) lists LockRequests
// as controller-runtime does and watches them through watchjson, at the API server of its
// config.
func TestNewWatchesOnce(t *testing.T) {
	var ownWatches, theirWatches, lists atomic.Int32
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/apis/locks.turnstile.dev/v1alpha1/lockrequests" {
			http.Error(w, "not here", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") != "true" {
			lists.Add(1)
			fmt.Fprint(w, `{"apiVersion":"locks.turnstile.dev/v1alpha1","kind":"LockRequestList","metadata":{"resourceVersion":"5"},"items":[]}`)
			return
		}
		if !strings.HasSuffix(r.UserAgent(), watchjson.UserAgentSuffix) {
			theirWatches.Add(1)
		} else {
			ownWatches.Add(1)
		}
		// The end of a watch list's initial events (none), then nothing until the client goes.
		fmt.Fprintf(w, `{"type":"BOOKMARK","object":{"apiVersion":"locks.turnstile.dev/v1alpha1","kind":"LockRequest","metadata":{"resourceVersion":"5","annotations":{%q:"true"}}}}`+"\n", metav1.InitialEventsAnnotationKey)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer server.Close()

	c, err := New(&rest.Config{Host: server.URL}, offlineCacheOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inf, err := c.GetInformer(ctx, &locksv1.LockRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := inf.(*compactInformer); !ok {
		t.Errorf("the LockRequest informer is a %T, not compacting", inf)
	}
	go func() { _ = c.Start(ctx) }()
	g := gomega.NewWithT(t)
	g.Eventually(func() bool { return inf.HasSynced() && ownWatches.Load() > 0 }).WithTimeout(10*time.Second).Should(gomega.BeTrue(),
		func() string {
			return fmt.Sprintf("the LockRequest informer synced (%t) and watched through watchjson (%d; %d lists, %d other watches)", inf.HasSynced(), ownWatches.Load(), lists.Load(), theirWatches.Load())
		})
	if theirWatches.Load() != 0 {
		t.Errorf("%d LockRequest watches through client-go's decoder; want none", theirWatches.Load())
	}
}

// offlineCacheOptions are Options with a scheme and a REST mapper of Turnstile's kinds, so
// a cache is made without asking an API server for its discovery.
func offlineCacheOptions(t *testing.T) ctrlcache.Options {
	t.Helper()
	opts := Options()
	opts.Scheme = runtime.NewScheme()
	if err := locksv1.AddToScheme(opts.Scheme); err != nil {
		t.Fatal(err)
	}
	mapper := meta.NewDefaultRESTMapper(nil)
	for _, kind := range []string{"LockRequest", "ProjectLock"} {
		mapper.Add(locksv1.GroupVersion.WithKind(kind), meta.RESTScopeNamespace)
	}
	opts.Mapper = mapper
	return opts
}

// TestNewRefusesScopedRequests: a cache that would hold only some LockRequests is refused
// (its list would keep to the scope, watchjson's watch would not); scoping another kind is not.
func TestNewRefusesScopedRequests(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	for name, scope := range map[string]func(*ctrlcache.Options){
		"namespaces":       func(o *ctrlcache.Options) { o.DefaultNamespaces = map[string]ctrlcache.Config{"team": {}} },
		"a label selector": func(o *ctrlcache.Options) { o.DefaultLabelSelector = labels.Everything() },
		"a field selector": func(o *ctrlcache.Options) { o.DefaultFieldSelector = fields.Everything() },
		"LockRequests' own namespaces": func(o *ctrlcache.Options) {
			o.ByObject = map[client.Object]ctrlcache.ByObject{&locksv1.LockRequest{}: {Namespaces: map[string]ctrlcache.Config{"team": {}}}}
		},
		"LockRequests' own selector": func(o *ctrlcache.Options) {
			o.ByObject = map[client.Object]ctrlcache.ByObject{&locksv1.LockRequest{}: {Label: labels.Everything()}}
		},
	} {
		opts := Options()
		scope(&opts)
		if _, err := New(cfg, opts); err == nil {
			t.Errorf("a cache scoped by %s was made", name)
		}
	}
	opts := offlineCacheOptions(t)
	opts.ByObject = map[client.Object]ctrlcache.ByObject{&locksv1.ProjectLock{}: {Label: labels.Everything()}}
	if _, err := New(cfg, opts); err != nil {
		t.Errorf("a cache that scopes ProjectLocks only: %v", err)
	}
}

// TestWithOwnWatch: a LockRequest informer lists through its ListerWatcher and
// watches through the given start; every other kind gets its ListerWatcher as it came.
func TestWithOwnWatch(t *testing.T) {
	var started, listed, theirs int
	start := func(context.Context, metav1.ListOptions) (watch.Interface, error) {
		started++
		return watch.NewFake(), nil
	}
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			listed++
			return &locksv1.LockRequestList{}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			theirs++
			return watch.NewFake(), nil
		},
	}
	var got toolscache.ListerWatcher
	capture := func(lw toolscache.ListerWatcher, _ runtime.Object, _ time.Duration, _ toolscache.Indexers) toolscache.SharedIndexInformer {
		got = lw
		return nil
	}
	newInformer := withOwnWatch(start, capture)

	newInformer(lw, &locksv1.ProjectLock{}, 0, nil)
	if got != toolscache.ListerWatcher(lw) {
		t.Errorf("a ProjectLock informer got %T, not its ListerWatcher", got)
	}
	newInformer(lw, &locksv1.LockRequest{}, 0, nil)
	with := got.(toolscache.ListerWatcherWithContext)
	if _, err := with.WatchWithContext(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := with.ListWithContext(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if started != 1 || theirs != 0 || listed != 1 {
		t.Errorf("a LockRequest informer's watches: %d through start, %d through its ListerWatcher; lists %d; want 1, 0, 1", started, theirs, listed)
	}
}
