package cache

import (
	"context"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/watchjson"
)

// watchFunc starts a watch.
type watchFunc func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)

// lockRequestWatch is a watch of every LockRequest through internal/watchjson, which reads each
// event once where client-go's decoder reads it about seven times (on a cold start at 100,000
// requests, half the manager's CPU), at the API server of cfg through httpClient (the
// manager's; one of its own when nil).
func lockRequestWatch(cfg *rest.Config, httpClient *http.Client) (watchFunc, error) {
	scheme := runtime.NewScheme()
	if err := locksv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if httpClient == nil {
		var err error
		if httpClient, err = rest.HTTPClientFor(cfg); err != nil {
			return nil, err
		}
	}
	w, err := watchjson.New[locksv1.LockRequest](cfg, httpClient, scheme, locksv1.GroupVersion.WithKind("LockRequest"), "lockrequests")
	if err != nil {
		return nil, err
	}
	return w.Watch, nil
}

// withOwnWatch makes newInformer's LockRequest informers watch through start instead
// of their ListerWatcher's watch; lists, and every other kind, are left as they are. start
// watches every LockRequest, unfiltered: what controller-runtime's watch is for an informer of a
// cache that does not scope LockRequests, which New refuses to make.
func withOwnWatch(start watchFunc, newInformer newInformerFunc) newInformerFunc {
	return func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
		if _, ok := obj.(*locksv1.LockRequest); !ok {
			return newInformer(lw, obj, resync, indexers)
		}
		return newInformer(&ownWatch{inner: toolscache.ToListerWatcherWithContext(lw), start: start}, obj, resync, indexers)
	}
}

// ownWatch is a ListerWatcher that lists through inner and watches through start.
type ownWatch struct {
	inner toolscache.ListerWatcherWithContext
	start watchFunc
}

func (o *ownWatch) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	return o.inner.ListWithContext(ctx, opts)
}

func (o *ownWatch) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	// guard:cache-watches-once
	return o.start(ctx, opts)
}

// List and Watch are the ListerWatcher without a context, which client-go still asks for.
func (o *ownWatch) List(opts metav1.ListOptions) (runtime.Object, error) {
	return o.ListWithContext(context.Background(), opts)
}

func (o *ownWatch) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return o.WatchWithContext(context.Background(), opts)
}
