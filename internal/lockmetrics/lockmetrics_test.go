package lockmetrics_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/lockmetrics"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

var k client.Client

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	env, err := framework.Start("")
	if err != nil {
		fmt.Fprintf(os.Stderr, "start control plane: %v\n", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	k = env.Client
	return m.Run()
}

// gather scrapes the collector alone: namespace/projectlock → value.
func gather(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != lockmetrics.HeldSinceName {
			t.Errorf("unexpected metric %s", mf.GetName())
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			got[labels["namespace"]+"/"+labels["projectlock"]] = m.GetGauge().GetValue()
		}
	}
	return got
}

// TestHeldSince: a ProjectLock with a holder is one series whose value is status.holder.since;
// a free one is none, and a hand-off to a new holder moves the value.
func TestHeldSince(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "lockmetrics-"}}
	if err := k.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	held := mustCreateLock(ctx, t, ns.Name, "acme-infra-vpc", "modules/vpc")
	mustCreateLock(ctx, t, ns.Name, "acme-infra-dns", "modules/dns") // stays free
	c := lockmetrics.NewHolderCollector(k)

	if diff := cmp.Diff(map[string]float64{}, gather(t, c)); diff != "" {
		t.Errorf("no holder, no series (-want +got):\n%s", diff)
	}

	since := time.Date(2026, 11, 23, 9, 30, 0, 0, time.UTC)
	setHolder(ctx, t, held, "alice", since)
	want := map[string]float64{ns.Name + "/acme-infra-vpc": float64(since.Unix())}
	if diff := cmp.Diff(want, gather(t, c)); diff != "" {
		t.Errorf("held (-want +got):\n%s", diff)
	}

	later := since.Add(47 * time.Minute)
	setHolder(ctx, t, held, "bob", later)
	want = map[string]float64{ns.Name + "/acme-infra-vpc": float64(later.Unix())}
	if diff := cmp.Diff(want, gather(t, c)); diff != "" {
		t.Errorf("handed off (-want +got):\n%s", diff)
	}
}

func mustCreateLock(ctx context.Context, t *testing.T, ns, name, path string) *locksv1.ProjectLock {
	t.Helper()
	pl := &locksv1.ProjectLock{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	pl.Spec.Repo, pl.Spec.Path, pl.Spec.Workspace = "acme/infra", path, "default"
	if err := k.Create(ctx, pl); err != nil {
		t.Fatalf("create projectlock: %v", err)
	}
	return pl
}

func setHolder(ctx context.Context, t *testing.T, pl *locksv1.ProjectLock, owner string, since time.Time) {
	t.Helper()
	pl.Status.Holder = &locksv1.LockHolder{
		Owner:    owner,
		Requests: []locksv1.HolderRequest{{Name: owner + "-request", UID: "uid-" + owner}},
		Since:    metav1.NewTime(since),
	}
	pl.Status.FencingToken++
	if err := k.Status().Update(ctx, pl); err != nil {
		t.Fatalf("update projectlock status: %v", err)
	}
}
