package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// The raw baseline writes BenchRequests: the LockRequest CRD under another group and kind, so
// the objects have the same schema, validation rules and size, live on the same API server,
// and the manager (which does not watch them) can run meanwhile. That lets the baseline be
// measured in alternation with the grant throughput, under the same load from the rest of
// the machine.
var benchGVK = schema.GroupVersionKind{Group: "bench.turnstile.dev", Version: "v1alpha1", Kind: "BenchRequest"}

func (b *bench) installBenchCRD() error {
	root, err := framework.RepoRoot()
	if err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(root, "config", "crd", "bases", "locks.turnstile.dev_lockrequests.yaml"))
	if err != nil {
		return err
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(data, &crd); err != nil {
		return fmt.Errorf("parse the LockRequest CRD: %w", err)
	}
	crd.Name = "benchrequests." + benchGVK.Group
	crd.Spec.Group = benchGVK.Group
	crd.Spec.Names = apiextensionsv1.CustomResourceDefinitionNames{
		Plural: "benchrequests", Singular: "benchrequest", Kind: benchGVK.Kind, ListKind: benchGVK.Kind + "List",
	}
	if _, err := envtest.InstallCRDs(b.env.Config, envtest.CRDInstallOptions{CRDs: []*apiextensionsv1.CustomResourceDefinition{&crd}}); err != nil {
		return fmt.Errorf("install the BenchRequest CRD: %w", err)
	}
	return nil
}

// RawResult is the API server's own speed on a LockRequest-sized custom resource.
type RawResult struct {
	// ObjectBytes is the JSON size of the object written (compare Acquire.ObjectBytes, a real
	// granted LockRequest).
	ObjectBytes int `json:"objectBytes"`
	// SequentialOpsPerSec and ParallelOpsPerSec count GET+UpdateStatus pairs, by one client and
	// by Workers clients each on its own object. ParallelOpsPerSec is the median of
	// ParallelRounds, each run just before a grant throughput round.
	SequentialOpsPerSec float64   `json:"sequentialOpsPerSec"`
	ParallelOpsPerSec   float64   `json:"parallelOpsPerSec"`
	ParallelRounds      []float64 `json:"parallelRounds"`
	Workers             int       `json:"workers"`
	// Probe is UpdateStatus issued → its event seen on a watch.
	Probe Latency `json:"watchProbe"`
}

// rawObjects is the baseline's objects: "seq", "probe" and one per worker.
type rawObjects struct {
	b  *bench
	ns string
	// spec is the typed twin of every object, to compute a granted-sized status from.
	spec map[string]*locksv1.LockRequest
}

func (b *bench) rawSetup(ctx context.Context) (*rawObjects, error) {
	if err := b.installBenchCRD(); err != nil {
		return nil, err
	}
	ns, err := b.namespace(ctx, "raw")
	if err != nil {
		return nil, err
	}
	r := &rawObjects{b: b, ns: ns, spec: map[string]*locksv1.LockRequest{}}
	names := []string{"seq", "probe"}
	for i := range b.cfg.Workers {
		names = append(names, fmt.Sprintf("par-%d", i))
	}
	for i, name := range names {
		lr := request(ns, name, "bench/raw", name, "raw", int64(i+1))
		lr.Generation = 1
		r.spec[name] = lr
		u, err := framework.Unstructured(lr, benchGVK)
		if err != nil {
			return nil, err
		}
		if err := b.c.Create(ctx, u); err != nil {
			return nil, fmt.Errorf("create benchrequest: %w", err)
		}
		if err := r.setStatus(ctx, u, 1); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// setStatus writes a granted-sized status (fencing token i) onto u with UpdateStatus.
func (r *rawObjects) setStatus(ctx context.Context, u *unstructured.Unstructured, token int64) error {
	st := grantedStatus(r.spec[u.GetName()], token)
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
	if err != nil {
		return err
	}
	u.Object["status"] = m
	return r.b.c.Status().Update(ctx, u)
}

// op is one GET+UpdateStatus.
func (r *rawObjects) op(ctx context.Context, name string, token int64) error {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(benchGVK)
	if err := r.b.c.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: name}, u); err != nil {
		return err
	}
	return r.setStatus(ctx, u, token)
}

// run does GET+UpdateStatus for dur with workers clients, each on its own object, and returns
// the pairs per second.
func (r *rawObjects) run(ctx context.Context, workers int, dur time.Duration) (float64, error) {
	name := func(w int) string { return fmt.Sprintf("par-%d", w) }
	if workers == 1 {
		name = func(int) string { return "seq" }
	}
	var mu sync.Mutex
	total := 0
	start := time.Now()
	deadline := start.Add(dur)
	err := parallel(ctx, workers, workers, func(ctx context.Context, w int) error {
		n := 0
		defer func() {
			mu.Lock()
			total += n
			mu.Unlock()
		}()
		for time.Now().Before(deadline) {
			if err := r.op(ctx, name(w), int64(n+2)); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return perSecond(total, time.Since(start)), err
}

// writes does UpdateStatus only for dur with workers clients, each on its own object read once
// (every write carries the resourceVersion the previous one returned, as the manager's writes
// from its cache do), and returns the writes per second: the API server's write floor.
func (r *rawObjects) writes(ctx context.Context, workers int, dur time.Duration) (float64, error) {
	var mu sync.Mutex
	total := 0
	start := time.Now()
	deadline := start.Add(dur)
	err := parallel(ctx, workers, workers, func(ctx context.Context, w int) error {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(benchGVK)
		if err := r.b.c.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: fmt.Sprintf("par-%d", w)}, u); err != nil {
			return err
		}
		n := 0
		defer func() {
			mu.Lock()
			total += n
			mu.Unlock()
		}()
		for time.Now().Before(deadline) {
			if err := r.setStatus(ctx, u, time.Now().UnixNano()); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return perSecond(total, time.Since(start)), err
}

// probe times UpdateStatus issued → the event seen on a watch, one write at a time. It returns
// the latencies and the object's JSON size.
func (r *rawObjects) probe(ctx context.Context, samples int) (Latency, int, error) {
	wc, err := client.NewWithWatch(r.b.env.Config, client.Options{Scheme: framework.Scheme})
	if err != nil {
		return Latency{}, 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(benchGVK.GroupVersion().WithKind(benchGVK.Kind + "List"))
	w, err := wc.Watch(ctx, list, client.InNamespace(r.ns), client.MatchingFields{"metadata.name": "probe"})
	if err != nil {
		return Latency{}, 0, fmt.Errorf("watch benchrequests: %w", err)
	}
	defer w.Stop()
	type seen struct {
		rv string
		at time.Time
	}
	events := make(chan seen, 16)
	go func() {
		defer close(events)
		for ev := range w.ResultChan() {
			at := time.Now()
			if ev.Type != watch.Modified {
				continue
			}
			if m, ok := ev.Object.(metav1.Object); ok {
				events <- seen{m.GetResourceVersion(), at}
			}
		}
	}()

	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(benchGVK)
	if err := r.b.c.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: "probe"}, u); err != nil {
		return Latency{}, 0, err
	}
	var lat []time.Duration
	for i := range samples {
		t0 := time.Now()
		if err := r.setStatus(ctx, u, int64(i+2)); err != nil {
			return Latency{}, 0, err
		}
		// One write at a time: the next Modified event is this write's.
		select {
		case s, ok := <-events:
			if !ok {
				return Latency{}, 0, fmt.Errorf("the probe's watch closed")
			}
			if s.rv != u.GetResourceVersion() {
				return Latency{}, 0, fmt.Errorf("the probe's watch delivered resourceVersion %s, want %s", s.rv, u.GetResourceVersion())
			}
			lat = append(lat, s.at.Sub(t0))
		case <-time.After(waitLimit):
			return Latency{}, 0, fmt.Errorf("the probe's write never came back on the watch")
		}
	}
	data, err := json.Marshal(u)
	return summarize(lat), len(data), err
}

// raw measures the sequential baseline and the probe. The parallel baseline is measured in
// rounds beside the grant throughput (throughputRounds).
func (b *bench) raw(ctx context.Context) (RawResult, *rawObjects, error) {
	res := RawResult{Workers: b.cfg.Workers}
	r, err := b.rawSetup(ctx)
	if err != nil {
		return res, nil, err
	}
	if res.SequentialOpsPerSec, err = r.run(ctx, 1, b.cfg.RawDuration.D()); err != nil {
		return res, nil, err
	}
	if res.Probe, res.ObjectBytes, err = r.probe(ctx, b.cfg.ProbeSamples); err != nil {
		return res, nil, err
	}
	return res, r, nil
}
