package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	"github.com/turnstile-dev/turnstile/internal/workload"
)

// GatedConfig sizes the "gated" phase (BENCH_PHASES=gated).
type GatedConfig struct {
	// Samples: pairs of one gated and one ungated Pod, created together.
	Samples int `json:"samples"`
}

// GatedResult is the gated phase: what gating a Pod on its lock (docs/gated-workloads.md) costs
// it, with the real kube-scheduler binding Pods to one Node, against an ungated Pod created at
// the same moment in the same run. Every time is when the harness's watch saw the change.
type GatedResult struct {
	// GrantToBound: the Pod's LockRequest seen Granted → the Pod seen bound to the Node (the
	// manager writes the token and removes the gate, the scheduler binds).
	GrantToBound Latency `json:"grantToBound"`
	// GatedCreateToBound: a gated Pod on a free key, created → seen bound (its request made,
	// granted, the gate removed, the Pod bound).
	GatedCreateToBound Latency `json:"gatedCreateToBound"`
	// UngatedCreateToBound is the baseline: an ungated Pod, created → seen bound.
	UngatedCreateToBound Latency `json:"ungatedCreateToBound"`
}

// gatedNode is the one Node the scheduler binds the phase's Pods to; no kubelet runs on it.
const gatedNode = "bench-node-1"

// gatedPhase measures gated Pods against ungated ones, pair by pair, with the real
// kube-scheduler ($KUBEBUILDER_ASSETS/kube-scheduler, `make k8s-bins`). The admission policies
// are not installed here: the harness creates each gated Pod as the mutating policy would
// leave it (label, scheduling gate), and the manager takes its lock.
func (b *bench) gatedPhase(ctx context.Context) (GatedResult, error) {
	var res GatedResult
	bin := filepath.Join(b.cfg.Assets, "kube-scheduler")
	if _, err := os.Stat(bin); err != nil {
		return res, fmt.Errorf("kube-scheduler: %w (run `make k8s-bins`)", err)
	}
	ns, err := b.namespace(ctx, "gated")
	if err != nil {
		return res, err
	}
	if err := b.readyNode(ctx); err != nil {
		return res, err
	}
	sched, err := framework.StartProcessLogFile(bin, b.kubeconfig, filepath.Join(b.cfg.OutDir, "kube-scheduler.log"),
		"--kubeconfig="+b.kubeconfig, "--leader-elect=false", "--secure-port=0")
	if err != nil {
		return res, err
	}
	defer func() { _ = sched.Stop(10 * time.Second) }()
	seen, err := watchGated(ctx, b.env.Client, ns)
	if err != nil {
		return res, err
	}
	defer seen.stop()

	b.step("gated: waiting for the scheduler to bind a first Pod")
	if _, err := b.createPod(ctx, seen, ns, b.name("warmup"), ""); err != nil {
		return res, err
	}
	var grant, gated, plain []time.Duration
	b.step(fmt.Sprintf("gated: %d pairs of a gated and an ungated Pod, created together, until both are bound", b.cfg.Gated.Samples))
	for i := range b.cfg.Gated.Samples {
		g, p, err := b.gatedPair(ctx, seen, ns, i)
		if err != nil {
			return res, err
		}
		grant, gated, plain = append(grant, g[0]), append(gated, g[1]), append(plain, p)
	}
	res.GrantToBound, res.GatedCreateToBound, res.UngatedCreateToBound = summarize(grant), summarize(gated), summarize(plain)
	return res, nil
}

// gatedPair creates an ungated and a gated Pod (which goes first alternates), waits until both
// are bound and deletes them. It returns the gated Pod's grant → bound and create → bound, and
// the ungated Pod's create → bound.
func (b *bench) gatedPair(ctx context.Context, seen *sightings, ns string, i int) ([2]time.Duration, time.Duration, error) {
	gated, plain := b.name("gated"), b.name("plain")
	type made struct {
		name, key string
		at        time.Time
	}
	pair := []made{{name: plain}, {name: gated, key: fmt.Sprintf("bench/gated:sample-%d", i)}}
	if i%2 == 1 {
		pair[0], pair[1] = pair[1], pair[0]
	}
	for j := range pair {
		at, err := b.createPodAsync(ctx, ns, pair[j].name, pair[j].key)
		if err != nil {
			return [2]time.Duration{}, 0, err
		}
		pair[j].at = at
	}
	created := map[string]time.Time{pair[0].name: pair[0].at, pair[1].name: pair[1].at}
	gBound, err := seen.wait(ctx, "pod/"+gated+" bound", seen.bound, gated)
	if err != nil {
		return [2]time.Duration{}, 0, err
	}
	pBound, err := seen.wait(ctx, "pod/"+plain+" bound", seen.bound, plain)
	if err != nil {
		return [2]time.Duration{}, 0, err
	}
	granted, err := seen.wait(ctx, "its request granted", seen.granted, workload.RequestName("pod", gated))
	if err != nil {
		return [2]time.Duration{}, 0, err
	}
	// The two watches are two streams: the request's Granted event can reach the harness after
	// the Pod's bound event. The grant came before the Pod was let go (its token annotation, in
	// the write that removes the gate), which the Pod's own stream shows before it is bound.
	if letGo, err := seen.wait(ctx, "pod/"+gated+" let go", seen.letGo, gated); err != nil {
		return [2]time.Duration{}, 0, err
	} else if letGo.Before(granted) {
		granted = letGo
	}
	for _, name := range []string{gated, plain} {
		// No kubelet stops the bound Pods: delete them at once. The gated Pod's request goes
		// with it (the manager deletes it), releasing its key.
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if err := b.c.Delete(ctx, p, client.GracePeriodSeconds(0)); err != nil {
			return [2]time.Duration{}, 0, fmt.Errorf("delete pod %s: %w", name, err)
		}
	}
	return [2]time.Duration{gBound.Sub(granted), gBound.Sub(created[gated])}, pBound.Sub(created[plain]), nil
}

// createPod creates a Pod (gated on lock key when it is not empty) and waits until it is bound.
func (b *bench) createPod(ctx context.Context, seen *sightings, ns, name, key string) (time.Duration, error) {
	at, err := b.createPodAsync(ctx, ns, name, key)
	if err != nil {
		return 0, err
	}
	bound, err := seen.wait(ctx, "pod/"+name+" bound", seen.bound, name)
	return bound.Sub(at), err
}

// createPodAsync creates the Pod and returns when the create was sent.
func (b *bench) createPodAsync(ctx context.Context, ns, name, key string) (time.Time, error) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers:                    []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"true"}}},
		},
	}
	if key != "" {
		p.Labels = map[string]string{workload.LabelGated: "true"}
		p.Annotations = map[string]string{workload.AnnotationLock: key}
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: workload.SchedulingGate}}
	}
	at := time.Now()
	if err := b.c.Create(ctx, p); err != nil {
		return at, fmt.Errorf("create pod %s: %w", name, err)
	}
	return at, nil
}

// readyNode registers the phase's Node, Ready and untainted, as a kubelet and the node
// lifecycle controller would (neither runs here).
func (b *bench) readyNode(ctx context.Context) error {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: gatedNode, Labels: map[string]string{"kubernetes.io/hostname": gatedNode}}}
	if err := b.c.Create(ctx, n); err != nil {
		return fmt.Errorf("create node: %w", err)
	}
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods: resource.MustParse("1000")}
	n.Status = corev1.NodeStatus{Capacity: capacity, Allocatable: capacity, Conditions: []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}}
	if err := b.c.Status().Update(ctx, n); err != nil {
		return fmt.Errorf("node status: %w", err)
	}
	// The API server taints a new Node not-ready; lift it as the node lifecycle controller would.
	deadline := time.Now().Add(waitLimit)
	for {
		err := b.c.Get(ctx, client.ObjectKeyFromObject(n), n)
		if err == nil {
			n.Spec.Taints = nil
			if err = b.c.Update(ctx, n); err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("untaint node: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sightings records when the harness's watches first saw each Pod bound and each LockRequest
// Granted, in one namespace.
type sightings struct {
	mu      sync.Mutex
	bound   map[string]time.Time
	letGo   map[string]time.Time // a gated Pod first seen with its fencing token
	granted map[string]time.Time
	changed chan struct{} // closed and replaced on every new sighting
	cancel  context.CancelFunc
	done    sync.WaitGroup
}

func watchGated(ctx context.Context, c client.WithWatch, ns string) (*sightings, error) {
	wctx, cancel := context.WithCancel(ctx)
	s := &sightings{bound: map[string]time.Time{}, letGo: map[string]time.Time{}, granted: map[string]time.Time{}, changed: make(chan struct{}), cancel: cancel}
	pods, err := c.Watch(wctx, &corev1.PodList{}, client.InNamespace(ns))
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watch pods: %w", err)
	}
	lrs, err := c.Watch(wctx, &locksv1.LockRequestList{}, client.InNamespace(ns))
	if err != nil {
		pods.Stop()
		cancel()
		return nil, fmt.Errorf("watch lockrequests: %w", err)
	}
	for _, w := range []watch.Interface{pods, lrs} {
		s.done.Add(1)
		go func() {
			defer s.done.Done()
			defer w.Stop()
			for {
				select {
				case <-wctx.Done():
					return
				case ev, ok := <-w.ResultChan():
					if !ok {
						return
					}
					s.see(ev.Object, time.Now())
				}
			}
		}()
	}
	return s, nil
}

func (s *sightings) see(obj any, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch o := obj.(type) {
	case *corev1.Pod:
		_, had := s.letGo[o.Name]
		if !had && o.Annotations[workload.AnnotationFencingToken] != "" {
			s.letGo[o.Name] = at
		}
		if _, ok := s.bound[o.Name]; !ok && o.Spec.NodeName != "" {
			s.bound[o.Name] = at
		} else if had || o.Annotations[workload.AnnotationFencingToken] == "" {
			return
		}
	case *locksv1.LockRequest:
		if _, ok := s.granted[o.Name]; !ok && o.Status.Phase == locksv1.PhaseGranted {
			s.granted[o.Name] = at
		} else {
			return
		}
	default:
		return
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// wait returns when name was first seen in m (s.bound or s.granted).
func (s *sightings) wait(ctx context.Context, what string, m map[string]time.Time, name string) (time.Time, error) {
	timeout := time.After(waitLimit)
	for {
		s.mu.Lock()
		at, ok := m[name]
		changed := s.changed
		s.mu.Unlock()
		if ok {
			return at, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-timeout:
			return time.Time{}, errors.New("gated: never saw " + what + " within " + waitLimit.String() + " (see kube-scheduler.log and manager.log)")
		}
	}
}

func (s *sightings) stop() {
	s.cancel()
	s.done.Wait()
}

// gated runs the gated phase with the steady-state manager (started if no phase before did).
func (b *bench) gated(ctx context.Context, res *Result) error {
	if b.mgr == nil {
		b.step("starting the manager")
		if err := b.startManager(ctx, true); err != nil {
			return err
		}
	}
	g, err := b.gatedPhase(ctx)
	if err != nil {
		return fmt.Errorf("gated: %w", err)
	}
	res.Gated = &g
	return nil
}

// gatedRows are the gated phase's rows of WriteTable.
func (r *Result) gatedRows() [][2]string {
	g := r.Gated
	if g == nil {
		return nil
	}
	lat := func(l Latency) string { return fmt.Sprintf("%s / %s ms", num(l.P50), num(l.P99)) }
	return [][2]string{
		{fmt.Sprintf("Gated Pod (real kube-scheduler, one Node): its lock Granted → Pod bound, p50 / p99 of %d", g.GrantToBound.N), lat(g.GrantToBound)},
		{"Gated Pod on a free key: create → bound, p50 / p99", lat(g.GatedCreateToBound)},
		{"Baseline, ungated Pod created beside it: create → bound, p50 / p99", lat(g.UngatedCreateToBound)},
	}
}
