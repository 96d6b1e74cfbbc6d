package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// FreezeConfig sizes the "freeze" phase (BENCH_PHASES=freeze).
type FreezeConfig struct {
	// Samples are the writes timed per configuration and round: creates, updates and deletes
	// of ConfigMaps in turn, one at a time.
	Samples int `json:"samples"`
	// Rounds: each round measures every configuration in turn, the baseline first.
	Rounds int `json:"rounds"`
	// Locks are the numbers of enforced CommandLocks measured (0: the policies, no CommandLock).
	Locks []int `json:"locks"`
}

// FreezeResult is the freeze phase: what the write-freeze policies
// (config/admission/freeze.yaml, docs/freeze-admission.md) add to every write they match, with
// 0, 10 and 100 enforced CommandLocks, beside the same writes with no policy installed, all
// in one run on one API server. The writes are in scope of every CommandLock (their namespace,
// their kinds, everyone's writes) and none freezes them: a weekend freeze during the week, the
// cost a platform pays on every write it does not refuse. One CommandLock of each count is in
// force on another namespace: the probe that shows the API server has loaded them all.
type FreezeResult struct {
	Samples int `json:"samples"`
	Rounds  int `json:"rounds"`
	// NoPolicy is the baseline: no freeze policy installed.
	NoPolicy FreezeWrites `json:"noPolicy"`
	// ByLocks are the same writes with the policies installed, per number of CommandLocks.
	ByLocks []FreezeWrites `json:"byLocks"`
}

// FreezeWrites are the latencies of one configuration's writes, over every round.
type FreezeWrites struct {
	Locks  int     `json:"locks"`
	All    Latency `json:"all"`
	Create Latency `json:"create"`
	Update Latency `json:"update"`
	Delete Latency `json:"delete"`
}

// freezeLabel selects the measured namespace (and probeLabel the probe's) in every CommandLock
// the phase creates.
const (
	freezeLabel = "bench.turnstile.dev/freeze"
	probeLabel  = "bench.turnstile.dev/freeze-probe"
)

// freezePhase measures FreezeResult on the running manager (it judges the CommandLocks' windows
// into status.admission, as it does in a cluster).
func (b *bench) freezePhase(ctx context.Context) (FreezeResult, error) {
	fc := b.cfg.Freeze
	res := FreezeResult{Samples: fc.Samples, Rounds: fc.Rounds}
	policies, err := freezePolicies()
	if err != nil {
		return res, err
	}
	writes, err := b.labelledNamespace(ctx, "freeze", freezeLabel)
	if err != nil {
		return res, err
	}
	probeNS, err := b.labelledNamespace(ctx, "freeze-probe", probeLabel)
	if err != nil {
		return res, err
	}
	f := &freezeRun{b: b, policies: policies, writes: writes, probeNS: probeNS}
	samples := map[int]*freezeSamples{-1: {}}
	for _, n := range fc.Locks {
		samples[n] = &freezeSamples{}
	}
	for round := range fc.Rounds {
		b.step(fmt.Sprintf("freeze, round %d of %d: %d writes with no policy installed", round+1, fc.Rounds, fc.Samples))
		if err := f.uninstall(ctx); err != nil {
			return res, err
		}
		if err := f.measure(ctx, samples[-1]); err != nil {
			return res, err
		}
		if err := f.install(ctx); err != nil {
			return res, err
		}
		for _, n := range fc.Locks {
			b.step(fmt.Sprintf("freeze, round %d of %d: %d writes with the policies and %d enforced CommandLocks", round+1, fc.Rounds, fc.Samples, n))
			if err := f.setLocks(ctx, n); err != nil {
				return res, err
			}
			if err := f.measure(ctx, samples[n]); err != nil {
				return res, err
			}
		}
	}
	if err := f.uninstall(ctx); err != nil {
		return res, err
	}
	res.NoPolicy = samples[-1].summarize(-1)
	for _, n := range fc.Locks {
		res.ByLocks = append(res.ByLocks, samples[n].summarize(n))
	}
	return res, nil
}

// labelledNamespace creates a namespace for the phase with label=yes.
func (b *bench) labelledNamespace(ctx context.Context, prefix, label string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-" + prefix + "-", Labels: map[string]string{label: "yes"}}}
	if err := b.c.Create(ctx, ns); err != nil {
		return "", fmt.Errorf("create namespace: %w", err)
	}
	b.namespaces = append(b.namespaces, ns.Name)
	return ns.Name, nil
}

// freezePolicies are the objects of config/admission/freeze.yaml, policies first.
func freezePolicies() ([]*unstructured.Unstructured, error) {
	root, err := framework.RepoRoot()
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(root, "config", "admission", "freeze.yaml"))
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, doc := range strings.Split(string(data), "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			return nil, fmt.Errorf("config/admission/freeze.yaml: %w", err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
	if len(out) != 4 {
		return nil, fmt.Errorf("config/admission/freeze.yaml: %d objects, want two policies and their bindings", len(out))
	}
	return out, nil
}

// freezeRun is the phase's state: the policies (installed or not) and the CommandLocks.
type freezeRun struct {
	b               *bench
	policies        []*unstructured.Unstructured
	writes, probeNS string
	installed       bool
	windows         int  // window freezes of the measured namespace in place
	probing         bool // the probe CommandLock is in place
	written         int
}

type freezeSamples struct{ create, update, del []time.Duration }

func (s *freezeSamples) summarize(locks int) FreezeWrites {
	all := append(append(append([]time.Duration(nil), s.create...), s.update...), s.del...)
	return FreezeWrites{Locks: locks, All: summarize(all), Create: summarize(s.create), Update: summarize(s.update), Delete: summarize(s.del)}
}

// lockLabel marks the phase's CommandLocks.
const lockLabel = "bench.turnstile.dev/freeze-lock"

// probeLock is the CommandLock in force on the probe namespace only.
const probeLock = "bench-freeze-probe"

// probe creates a ConfigMap in the probe namespace: nil when admitted, the refusal otherwise.
func (f *freezeRun) probe(ctx context.Context) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.probeNS, GenerateName: "probe-"}}
	if err := f.b.c.Create(ctx, cm); err != nil {
		return err
	}
	return f.b.c.Delete(ctx, cm)
}

// await polls the probe until it is refused by the freeze (frozen) or admitted.
func (f *freezeRun) await(ctx context.Context, frozen bool, what string) error {
	deadline := time.Now().Add(waitLimit)
	for {
		err := f.probe(ctx)
		switch {
		case frozen && err != nil && strings.Contains(err.Error(), "writes are frozen by commandlock "+probeLock):
			return nil
		case !frozen && err == nil:
			return nil
		case err != nil && !apierrors.IsForbidden(err):
			return fmt.Errorf("probe: %w", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not seen within %s (last probe: %w)", what, waitLimit, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// addProbe creates the probe CommandLock and, with the policies installed, waits until the API
// server refuses the probe: its params have seen every CommandLock created before it.
func (f *freezeRun) addProbe(ctx context.Context) error {
	cl := &locksv1.CommandLock{
		ObjectMeta: metav1.ObjectMeta{Name: probeLock, Labels: map[string]string{lockLabel: "yes"}},
		Spec: locksv1.CommandLockSpec{Locked: true, Reason: "the bench's probe", Admission: &locksv1.AdmissionFreeze{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{probeLabel: "yes"}},
		}},
	}
	if err := f.b.c.Create(ctx, cl); err != nil {
		return fmt.Errorf("create the probe commandlock: %w", err)
	}
	f.probing = true
	if !f.installed {
		return nil
	}
	return f.await(ctx, true, "the probe commandlock in force")
}

// removeProbe deletes the probe CommandLock and, with the policies installed, waits until the
// API server admits the probe again.
func (f *freezeRun) removeProbe(ctx context.Context) error {
	if !f.probing {
		return nil
	}
	if err := f.b.c.Delete(ctx, &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: probeLock}}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete the probe commandlock: %w", err)
	}
	f.probing = false
	if !f.installed {
		return nil
	}
	return f.await(ctx, false, "the probe commandlock gone")
}

// install creates the policies and their bindings and waits until the API server enforces them
// (they load asynchronously): the probe CommandLock refuses the probe, then, gone, no longer.
func (f *freezeRun) install(ctx context.Context) error {
	for _, p := range f.policies {
		if err := f.b.c.Create(ctx, p.DeepCopy()); err != nil {
			return fmt.Errorf("install %s %s: %w", p.GetKind(), p.GetName(), err)
		}
	}
	f.installed = true
	if err := f.addProbe(ctx); err != nil {
		return err
	}
	return f.removeProbe(ctx)
}

// uninstall deletes the policies and their bindings and the phase's CommandLocks, and waits
// until the API server no longer enforces the policies: the probe CommandLock no longer refuses.
func (f *freezeRun) uninstall(ctx context.Context) error {
	if f.installed {
		if !f.probing {
			if err := f.addProbe(ctx); err != nil {
				return err
			}
		}
		for i := len(f.policies) - 1; i >= 0; i-- {
			if err := f.b.c.Delete(ctx, f.policies[i].DeepCopy()); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete %s %s: %w", f.policies[i].GetKind(), f.policies[i].GetName(), err)
			}
		}
		if err := f.await(ctx, false, "the freeze policies gone"); err != nil {
			return err
		}
		f.installed = false
	}
	if err := f.b.c.DeleteAllOf(ctx, &locksv1.CommandLock{}, client.MatchingLabels{lockLabel: "yes"}); err != nil {
		return fmt.Errorf("delete the phase's commandlocks: %w", err)
	}
	f.windows, f.probing = 0, false
	return nil
}

// setLocks puts n enforced CommandLocks in place, of which (n > 0) the probe, created last, and
// n-1 weekend-style window freezes of the measured namespace, not in force (their window opens
// two days from now) and judged by the manager. It only adds: the counts measured ascend.
func (f *freezeRun) setLocks(ctx context.Context, n int) error {
	if err := f.removeProbe(ctx); err != nil {
		return err
	}
	if n == 0 {
		if f.windows > 0 {
			return errors.New("the freeze phase's CommandLock counts must ascend")
		}
		return nil
	}
	opens := time.Now().UTC().Add(48 * time.Hour)
	for ; f.windows < n-1; f.windows++ {
		cl := &locksv1.CommandLock{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-freeze-%03d", f.windows), Labels: map[string]string{lockLabel: "yes"}},
			Spec: locksv1.CommandLockSpec{
				Reason: "no production changes at the weekend",
				Windows: []locksv1.FreezeWindow{{Name: "weekend", Action: locksv1.WindowDeny, Duration: metav1.Duration{Duration: 60 * time.Hour},
					Schedule: fmt.Sprintf("%d %d %d %d *", opens.Minute(), opens.Hour(), opens.Day(), int(opens.Month()))}},
				Admission: &locksv1.AdmissionFreeze{
					Resources:         []locksv1.AdmissionResources{{APIGroups: []string{""}, Kinds: []string{"ConfigMap", "Secret"}}, {APIGroups: []string{"apps"}}},
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{freezeLabel: "yes"}},
					Except:            &locksv1.AdmissionSubjects{Groups: []string{"platform:break-glass"}},
				},
			},
		}
		if err := f.b.c.Create(ctx, cl); err != nil {
			return fmt.Errorf("create commandlock %s: %w", cl.Name, err)
		}
	}
	if f.windows > n-1 {
		return errors.New("the freeze phase's CommandLock counts must ascend")
	}
	if err := f.awaitJudged(ctx, f.windows); err != nil {
		return err
	}
	return f.addProbe(ctx)
}

// awaitJudged waits until the manager has written status.admission of the n window freezes.
func (f *freezeRun) awaitJudged(ctx context.Context, n int) error {
	deadline := time.Now().Add(waitLimit)
	for {
		var list locksv1.CommandLockList
		if err := f.b.c.List(ctx, &list, client.MatchingLabels{lockLabel: "yes"}); err != nil {
			return err
		}
		judged := 0
		for _, cl := range list.Items {
			if a := cl.Status.Admission; cl.Name != probeLock && a != nil && a.JudgedAt != nil && len(a.Intervals) > 0 && cl.Status.ObservedGeneration == cl.Generation {
				judged++
			}
		}
		if judged >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the manager judged %d of %d CommandLocks within %s", judged, n, waitLimit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// measure times Samples writes in the measured namespace, one at a time: a create, an update of
// what it created, its delete, in turn. None may be refused.
func (f *freezeRun) measure(ctx context.Context, s *freezeSamples) error {
	var cm *corev1.ConfigMap
	for i := range f.b.cfg.Freeze.Samples {
		var err error
		t0 := time.Now()
		switch i % 3 {
		case 0:
			f.written++
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.writes, Name: fmt.Sprintf("w-%06d", f.written)}, Data: map[string]string{"v": "1"}}
			err = f.b.c.Create(ctx, cm)
			s.create = append(s.create, time.Since(t0))
		case 1:
			cm.Data["v"] = "2"
			err = f.b.c.Update(ctx, cm)
			s.update = append(s.update, time.Since(t0))
		case 2:
			err = f.b.c.Delete(ctx, cm)
			s.del = append(s.del, time.Since(t0))
			cm = nil
		}
		if err != nil {
			return fmt.Errorf("a measured write: %w", err)
		}
	}
	if cm != nil {
		return f.b.c.Delete(ctx, cm)
	}
	return nil
}

// freezeRows are the freeze phase's rows of WriteTable.
func (r *Result) freezeRows() [][2]string {
	fr := r.Freeze
	if fr == nil {
		return nil
	}
	base := fr.NoPolicy.All
	rows := [][2]string{{fmt.Sprintf("Writes (ConfigMap create, update, delete in turn), no freeze policy installed: p50 / p99 of %d", base.N), lat(base)}}
	for _, w := range fr.ByLocks {
		rows = append(rows, [2]string{
			fmt.Sprintf("Writes with the write-freeze policies and %d enforced CommandLocks (in scope, not in force): p50 / p99 (added p50 / p99; ratio to no policy)", w.Locks),
			fmt.Sprintf("%s (%s / %s ms; ×%s / ×%s)", lat(w.All), signed(w.All.P50-base.P50), signed(w.All.P99-base.P99), times(w.All.P50, base.P50), times(w.All.P99, base.P99)),
		})
	}
	return rows
}

// signed is a difference with its sign.
func signed(v float64) string {
	if v < 0 {
		return "-" + num(-v)
	}
	return "+" + num(v)
}

// times is v over the baseline base, to two places.
func times(v, base float64) string { return fmt.Sprintf("%.2f", ratio(v, base)) }
