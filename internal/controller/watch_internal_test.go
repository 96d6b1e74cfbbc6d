package controller

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// TestCacheOptionsWatchOnce: the manager's cache watches LockRequests through watchjson, at the
// API server of its config, and lists them (and watches everything else) as controller-runtime
// does. That watch is every LockRequest, unfiltered, which is what controller-runtime's would
// be only for a cache without namespaces or selectors: CacheOptions sets none.
func TestCacheOptionsWatchOnce(t *testing.T) {
	var ownWatches atomic.Int32
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/apis/locks.turnstile.dev/v1alpha1/lockrequests" || r.URL.Query().Get("watch") != "true" {
			http.Error(w, "not here", http.StatusNotFound)
			return
		}
		ownWatches.Add(1)
		w.Header().Set("Content-Type", "application/json")
		// The end of a watch list's initial events (none), then nothing until the client goes.
		fmt.Fprintf(w, `{"type":"BOOKMARK","object":{"apiVersion":"locks.turnstile.dev/v1alpha1","kind":"LockRequest","metadata":{"resourceVersion":"5","annotations":{%q:"true"}}}}`+"\n", metav1.InitialEventsAnnotationKey)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer server.Close()

	opts := CacheOptions(&rest.Config{Host: server.URL})
	if opts.DefaultNamespaces != nil || opts.DefaultLabelSelector != nil || opts.DefaultFieldSelector != nil || opts.ByObject != nil {
		t.Fatal("the cache's options filter what it watches: the LockRequest watch of watchjson does not")
	}
	var theirWatches atomic.Int32
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return &locksv1.LockRequestList{ListMeta: metav1.ListMeta{ResourceVersion: "5"}}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			theirWatches.Add(1)
			return watch.NewFake(), nil
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inf := opts.NewInformer(lw, &locksv1.LockRequest{}, 0, toolscache.Indexers{})
	go inf.RunWithContext(ctx)
	g := gomega.NewWithT(t)
	g.Eventually(func() bool { return inf.HasSynced() && ownWatches.Load() > 0 }).WithTimeout(10*time.Second).Should(gomega.BeTrue(),
		"the LockRequest informer synced and watched at the config's API server")
	if ownWatches.Load() == 0 || theirWatches.Load() != 0 {
		t.Errorf("LockRequest watches: %d through watchjson at the config's API server, %d through controller-runtime's; want 1 and 0", ownWatches.Load(), theirWatches.Load())
	}

}

// TestWatchLockRequestsWith: a LockRequest informer lists through its ListerWatcher and
// watches through the given start; every other kind gets its ListerWatcher as it came.
func TestWatchLockRequestsWith(t *testing.T) {
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
	newInformer := WatchLockRequestsWith(start, capture)

	newInformer(lw, &locksv1.ProjectLock{}, 0, nil)
	if got != toolscache.ListerWatcher(lw) {
		t.Errorf("a ProjectLock informer got %T, not its ListerWatcher", got)
	}
	newInformer(lw, &locksv1.LockRequest{}, 0, nil)
	with := got.(toolscache.ListerWatcherWithContext)
	if _, err := with.WatchWithContext(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := got.Watch(metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := with.ListWithContext(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := got.List(metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if started != 2 || theirs != 0 || listed != 2 {
		t.Errorf("a LockRequest informer's watches: %d through start, %d through its ListerWatcher; lists %d; want 2, 0, 2", started, theirs, listed)
	}
}
