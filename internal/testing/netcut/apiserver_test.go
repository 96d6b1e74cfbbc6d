package netcut

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// TestAPIServer puts the proxy between client-go and a real kube-apiserver (TLS passes through
// it untouched): a watch through it sees events; Cut ends the watch and a write fails fast;
// Pass restores both; Blackhole makes a write time out (nothing answers) rather than fail, and
// holds a watch's events until the network heals.
func TestAPIServer(t *testing.T) {
	ctrllog.SetLogger(logr.Discard())
	env := &envtest.Environment{}
	admin, err := env.Start()
	if err != nil {
		t.Fatalf("start kube-apiserver (KUBEBUILDER_ASSETS=bin/k8s/...): %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	host, err := url.Parse(admin.Host)
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy(t, host.Host)
	through := rest.CopyConfig(admin)
	through.Host = "https://" + p.Addr()
	direct, proxied := kubernetes.NewForConfigOrDie(admin), kubernetes.NewForConfigOrDie(through)
	ctx := t.Context()
	cms := func(cs *kubernetes.Clientset) func(context.Context, string) error {
		return func(ctx context.Context, name string) error {
			_, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			return err
		}
	}
	createDirect, createProxied := cms(direct), cms(proxied)
	watchThrough := func() watch.Interface {
		t.Helper()
		w, err := proxied.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("watch through the proxy: %v", err)
		}
		t.Cleanup(w.Stop)
		return w
	}
	// seen waits for the watch to show the ConfigMap name.
	seen := func(w watch.Interface, name string) {
		t.Helper()
		deadline := time.After(patience)
		for {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					t.Fatalf("the watch ended before %s showed", name)
				}
				if cm, isCM := ev.Object.(*corev1.ConfigMap); isCM && cm.Name == name {
					return
				}
			case <-deadline:
				t.Fatalf("%s did not show in the watch within %s", name, patience)
			}
		}
	}

	w := watchThrough()
	if err := createDirect(ctx, "one"); err != nil {
		t.Fatal(err)
	}
	seen(w, "one")

	// Cut: the watch ends, a write through the proxy fails at once (not at its deadline).
	p.Cut()
	ended := time.After(patience)
	for done := false; !done; {
		select {
		case _, ok := <-w.ResultChan():
			done = !ok
		case <-ended:
			t.Fatalf("the watch did not end within %s of the cut", patience)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, patience)
	err = createProxied(wctx, "refused")
	cancel()
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a write through the cut: %v, want a connection error before its deadline", err)
	}

	// Pass: a new watch and a write go through again.
	p.Pass()
	w = watchThrough()
	if err := createProxied(ctx, "two"); err != nil {
		t.Fatalf("a write after Pass: %v", err)
	}
	seen(w, "two")

	// Blackhole: a write times out, nothing answers; the watch hears nothing until Pass.
	p.Blackhole()
	wctx, cancel = context.WithTimeout(ctx, 2*time.Second)
	err = createProxied(wctx, "unanswered")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a write into the blackhole: %v, want its deadline exceeded", err)
	}
	if err := createDirect(ctx, "three"); err != nil {
		t.Fatal(err)
	}
	select {
	case ev, ok := <-w.ResultChan():
		t.Fatalf("the watch heard %v (open %v) through the blackhole", ev.Type, ok)
	case <-time.After(silence):
	}
	p.Pass()
	seen(w, "three")
}
