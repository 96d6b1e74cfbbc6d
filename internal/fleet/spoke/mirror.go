package spoke

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/fleet/delay"
)

// Mirrors (docs/fleet.md, "Mirrors in a spoke"): the agent copies the hub's ProjectLocks (of
// every namespace the spoke has: every namespace of a spoke is a fleet namespace) and its
// CommandLocks into the spoke, read-only copies marked fleet.turnstile.dev/mirror=hub, so that
// kubectl get locks, projectlocks and commandlocks and kubectl turnstile why in the spoke show
// the hub's truth. Nothing in a spoke decides on them (controller.SetupSpoke runs no lock and no
// CommandLock controller). The copy goes one way only, hub to spoke: nothing a spoke user writes
// to a mirror reaches the hub, and the agent puts a mirror back when a spoke user edits or
// deletes it (its spec is immutable anyway: the CRD's key rule). While the hub cannot be
// reached the hub cache keeps the last objects it saw, so the mirrors stay as last seen; each
// CommandLock mirror says when (AnnotationHubSeenAt).

const (
	// LabelMirror marks a spoke object that mirrors the hub's (value MirrorHub).
	LabelMirror = locksv1.LabelMirror
	// MirrorHub is LabelMirror's value.
	MirrorHub = locksv1.MirrorHub
	// AnnotationHubSeenAt is, on a CommandLock mirror, the last time the agent read the hub's
	// CommandLocks (RFC 3339): the freeze is as the hub said then.
	AnnotationHubSeenAt = locksv1.AnnotationHubSeenAt
	// ReasonNotMirrored is the Warning event on a spoke's own CommandLock that has the name of
	// one of the hub's, which is then not mirrored.
	ReasonNotMirrored = "NotMirrored"
	// AnnotationHubResourceVersion is the hub object's resourceVersion the mirror copies.
	AnnotationHubResourceVersion = locksv1.AnnotationHubResourceVersion

	// MirrorRefresh is how often the agent reads the hub's CommandLocks past its cache, which
	// confirms the mirrors and dates them.
	MirrorRefresh = 30 * time.Second
	// seenStep is how old a mirror's AnnotationHubSeenAt may grow before the agent rewrites
	// it: one write per CommandLock per step while the hub answers.
	seenStep = time.Minute
	// mirrorDelay is how long after a change of the hub's ProjectLock its mirror is written.
	// A hand-off changes a key's ProjectLock just before the new holder's request, and each
	// change costs the spoke two writes (the mirror's annotations, then its status): written at
	// once, they sit in the spoke's API server ahead of the grant's copy into the waiter's
	// request, which a workload waits on. Later, the hub's changes within it come to one
	// mirror write, and the grant's copy goes first. The mirror is for people (get locks, why),
	// who do not see a quarter of a second; a spoke user's edit of a mirror is put back at once.
	mirrorDelay = 250 * time.Millisecond
)

// +kubebuilder:rbac:groups=locks.turnstile.dev,resources=projectlocks;commandlocks,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=locks.turnstile.dev,resources=projectlocks/status;commandlocks/status,verbs=get;update;patch

// IsMirror reports whether o is a mirror of a hub object.
func IsMirror(o metav1.Object) bool { return o.GetLabels()[LabelMirror] == MirrorHub }

// MirrorProjectLock is the spoke mirror of the hub's ProjectLock: its key, labels and status;
// no finalizers (nothing in the spoke would remove them) and none of the hub's annotations.
func MirrorProjectLock(hub *locksv1.ProjectLock) *locksv1.ProjectLock {
	m := &locksv1.ProjectLock{ObjectMeta: mirrorMeta(hub)}
	m.Spec = *hub.Spec.DeepCopy()
	m.Status = *hub.Status.DeepCopy()
	return m
}

// MirrorCommandLock is the spoke mirror of the hub's CommandLock, as the hub said it at seen:
// its freeze, windows and cluster scope and the status the hub's reconciler judged. Not its
// write freeze (spec.admission, status.admission): that freezes writes to the hub's API server,
// and a mirror must not make the spoke's admission policy enforce it in the spoke.
//
// cluster is the spoke's (AnnotationMirrorCluster), for `why`.
func MirrorCommandLock(hub *locksv1.CommandLock, cluster string, seen time.Time) *locksv1.CommandLock {
	m := &locksv1.CommandLock{ObjectMeta: mirrorMeta(hub)}
	m.Spec = *hub.Spec.DeepCopy()
	m.Status = *hub.Status.DeepCopy()
	// guard:fleet-mirror-no-write-freeze
	m.Spec.Admission, m.Status.Admission = nil, nil
	m.Annotations[locksv1.AnnotationMirrorCluster] = cluster
	if !seen.IsZero() {
		m.Annotations[AnnotationHubSeenAt] = seen.UTC().Format(time.RFC3339)
	}
	return m
}

func mirrorMeta(hub metav1.Object) metav1.ObjectMeta {
	labels := maps.Clone(hub.GetLabels())
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelMirror] = MirrorHub
	return metav1.ObjectMeta{
		Name: hub.GetName(), Namespace: hub.GetNamespace(), Labels: labels,
		Annotations: map[string]string{AnnotationHubResourceVersion: hub.GetResourceVersion()},
	}
}

// HubSeenAt is when the hub's CommandLocks were last read for the mirror m (zero: unknown).
func HubSeenAt(m metav1.Object) time.Time {
	t, err := time.Parse(time.RFC3339, m.GetAnnotations()[AnnotationHubSeenAt])
	if err != nil {
		return time.Time{}
	}
	return t
}

// mirrors keeps the spoke's mirrors: a controller per kind, keyed by the object's name, woken
// by the hub's object (its watch in the hub cache) and by the spoke's (a user's edit is put
// back), and a refresher that reads the hub's CommandLocks past the cache.
type mirrors struct {
	a *Agent
	// seen is the last time the hub's CommandLocks were read live; zero before the first read.
	mu   sync.Mutex
	seen time.Time
	// labels are the spoke's cluster labels as the hub last gave them (its Spoke's spec.labels,
	// as JSON), which the CommandLock mirrors carry for the spoke's judgement of a cluster
	// selector; "" while unknown.
	labels string
}

// setupMirrors adds the mirror controllers and the refresher to mgr, the spoke's manager.
func (a *Agent) setupMirrors(mgr ctrl.Manager) error {
	m := &mirrors{a: a}
	same := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}}}
	})
	// The mirrors wait for the hub cache as long as the hub takes to answer (an agent started
	// while it is cut off): a controller that gave up waiting would stop the manager, and with
	// it the agent, which must stop the spoke's holders meanwhile (startup.go).
	wait := controller.Options{CacheSyncTimeout: hubSyncTimeout}
	err := builder.ControllerManagedBy(mgr).
		Named("fleet-mirror-projectlocks").
		WithOptions(wait).
		For(&locksv1.ProjectLock{}).
		WatchesRawSource(source.Kind(a.hubs, client.Object(&locksv1.ProjectLock{}), delay.Enqueue(mirrorDelay, delay.Self))).
		WatchesMetadata(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(m.hubLocksIn)).
		Complete(reconcile.Func(m.reconcileProjectLock))
	if err != nil {
		return err
	}
	err = builder.ControllerManagedBy(mgr).
		Named("fleet-mirror-commandlocks").
		WithOptions(wait).
		For(&locksv1.CommandLock{}).
		WatchesRawSource(source.Kind(a.hubs, client.Object(&locksv1.CommandLock{}), same)).
		Complete(reconcile.Func(m.reconcileCommandLock))
	if err != nil {
		return err
	}
	return mgr.Add(manager.RunnableFunc(m.refresh))
}

// hubLocksIn maps a spoke namespace to the hub's ProjectLocks in it: a namespace made in the
// spoke after the hub's keys gets their mirrors then.
func (m *mirrors) hubLocksIn(ctx context.Context, ns client.Object) []reconcile.Request {
	if !m.a.hubSynced.Load() {
		return nil // the hub cache's first list brings every hub ProjectLock
	}
	var list locksv1.ProjectLockList
	if err := m.a.hubs.List(ctx, &list, client.InNamespace(ns.GetName())); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return out
}

// reconcileProjectLock makes the spoke's object of this name the mirror of the hub's
// ProjectLock, or deletes the mirror when the hub has none. A ProjectLock of a namespace the
// spoke does not have is not mirrored (the agent makes no namespaces).
func (m *mirrors) reconcileProjectLock(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var hub locksv1.ProjectLock
	err := m.a.hubs.Get(ctx, req.NamespacedName, &hub)
	switch {
	case apierrors.IsNotFound(err):
		return reconcile.Result{}, m.deleteMirror(ctx, &locksv1.ProjectLock{}, req.NamespacedName)
	case err != nil:
		return reconcile.Result{}, err
	}
	want := MirrorProjectLock(&hub)
	var cur locksv1.ProjectLock
	err = m.a.spoke.Get(ctx, req.NamespacedName, &cur)
	if apierrors.IsNotFound(err) {
		status := want.Status.DeepCopy()
		return reconcile.Result{}, m.create(ctx, want, func() { want.Status = *status })
	} else if err != nil {
		return reconcile.Result{}, err
	}
	if !equality.Semantic.DeepEqual(cur.Spec, want.Spec) {
		// Another key under this name (the key is immutable): a spoke user's ProjectLock made
		// before the mirror. Replace it.
		return reconcile.Result{}, m.deleteMirror(ctx, &cur, req.NamespacedName)
	}
	return reconcile.Result{}, m.update(ctx, &cur, want.ObjectMeta, func() bool {
		same := equality.Semantic.DeepEqual(cur.Status, want.Status)
		want.Status.DeepCopyInto(&cur.Status)
		return !same
	})
}

// reconcileCommandLock makes the spoke's CommandLock of this name the mirror of the hub's, or
// deletes the mirror when the hub has none.
func (m *mirrors) reconcileCommandLock(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var hub locksv1.CommandLock
	err := m.a.hubs.Get(ctx, req.NamespacedName, &hub)
	switch {
	case apierrors.IsNotFound(err):
		return reconcile.Result{}, m.deleteMirror(ctx, &locksv1.CommandLock{}, req.NamespacedName)
	case err != nil:
		return reconcile.Result{}, err
	}
	var cur locksv1.CommandLock
	err = m.a.spoke.Get(ctx, req.NamespacedName, &cur)
	if err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	// The spoke's own CommandLock under this name (a spoke admin's, made before any mirror: it
	// was never a mirror) is left alone: it may freeze writes to the spoke (spec.admission),
	// which the spoke's policy enforces from it, and the agent writes the spoke only as the
	// hub's mirror. A mirror a spoke user changed, its label stripped, still carries the hub's
	// resourceVersion and is put back.
	// guard:fleet-mirror-spares-spoke-own
	if err == nil && !IsMirror(&cur) && cur.Annotations[AnnotationHubResourceVersion] == "" {
		msg := fmt.Sprintf("the hub's CommandLock %s is not mirrored into this spoke: the spoke has a CommandLock of its own under that name, which the agent leaves as it is; "+
			"rename the spoke's (delete it and create it under another name) to see the hub's here", hub.Name)
		log.FromContext(ctx).Info("not mirrored: the spoke has its own CommandLock of this name", "name", hub.Name)
		m.a.recorder.Eventf(&cur, nil, corev1.EventTypeWarning, ReasonNotMirrored, "Mirror", "%s", msg)
		return reconcile.Result{}, nil
	}
	// The mirror keeps the date it has unless the hub was read since: an edit put back while
	// the hub is away is still the freeze as last seen then.
	seen := m.seenAt()
	if old := HubSeenAt(&cur); seen.IsZero() || (!old.IsZero() && seen.Sub(old) < seenStep && cur.Annotations[AnnotationHubResourceVersion] == hub.ResourceVersion) {
		seen = old
	}
	want := MirrorCommandLock(&hub, m.a.opts.Cluster, seen)
	// The spoke's cluster labels, for a cluster selector: as the hub last gave them, or as the
	// mirror already carries them (an agent restarted while cut off keeps the last seen).
	if l := m.clusterLabels(); l != "" {
		want.Annotations[locksv1.AnnotationMirrorClusterLabels] = l
	} else if l, ok := cur.Annotations[locksv1.AnnotationMirrorClusterLabels]; ok {
		want.Annotations[locksv1.AnnotationMirrorClusterLabels] = l
	}
	// The hub's judgement while it holds, the spoke's own by its clock once it ran out.
	now := m.a.opts.Clock.Now()
	var again time.Time
	want.Status, again = MirrorStatus(&hub, m.a.opts.Cluster, HubSeenAt(want), now)
	res := reconcile.Result{}
	if !again.IsZero() {
		res.RequeueAfter = max(again.Sub(now), 0) + 10*time.Millisecond
	}
	if apierrors.IsNotFound(err) {
		status := want.Status.DeepCopy()
		return res, m.create(ctx, want, func() { want.Status = *status })
	}
	specChanged := !equality.Semantic.DeepEqual(cur.Spec, want.Spec)
	want.Spec.DeepCopyInto(&cur.Spec)
	return res, m.update(ctx, &cur, want.ObjectMeta, func() bool {
		same := equality.Semantic.DeepEqual(cur.Status, want.Status)
		want.Status.DeepCopyInto(&cur.Status)
		return !same
	}, specChanged)
}

func (m *mirrors) clusterLabels() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.labels
}

// readClusterLabels reads the spoke's cluster labels from its Spoke on the hub (every
// authenticated user may read Spokes: config/rbac's turnstile-freeze-viewer). A hub without
// one for this cluster (not a member yet, or a hub without the fleet view) leaves them unknown;
// a hub that does not answer leaves them as last read.
func (m *mirrors) readClusterLabels(ctx context.Context) {
	var s locksv1.Spoke
	err := m.a.hub.Get(ctx, types.NamespacedName{Name: m.a.opts.Cluster}, &s)
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || meta.IsNoMatchError(err):
		m.setClusterLabels("")
		return
	case err != nil:
		return
	}
	labels := s.Spec.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	b, err := json.Marshal(labels)
	if err != nil {
		return
	}
	m.setClusterLabels(string(b))
}

func (m *mirrors) setClusterLabels(l string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.labels = l
}

// create makes the mirror want, then writes its status (the API server drops a status given
// at creation): setStatus puts it back into want, which the create answered with the object as
// created. The status is written on the created object's resourceVersion, not on a read of the
// spoke's cache, which has not seen the object yet.
func (m *mirrors) create(ctx context.Context, want client.Object, setStatus func()) error {
	if err := m.a.spoke.Create(ctx, want); err != nil {
		if apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err) {
			// AlreadyExists: the cache is behind (the next event brings it); NotFound: the
			// namespace is not in the spoke, nothing to mirror into.
			return nil
		}
		return fmt.Errorf("create mirror %s: %w", client.ObjectKeyFromObject(want), err)
	}
	setStatus()
	if err := m.a.spoke.Status().Update(ctx, want); ignoreRace(err) != nil {
		return fmt.Errorf("write mirror status %s: %w", client.ObjectKeyFromObject(want), err)
	}
	return nil
}

// ignoreRace is err unless the object was changed or deleted since the agent's cache read it
// (409, 404): the newer object's watch event brings the mirror back here, read again.
func ignoreRace(err error) error {
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// update writes cur's metadata (labels and annotations as meta says, the spoke's own finalizers
// gone) when they differ, or spec when specChanged, then its status when setStatus says it
// changed.
func (m *mirrors) update(ctx context.Context, cur client.Object, meta metav1.ObjectMeta, setStatus func() bool, specChanged ...bool) error {
	changed := len(specChanged) > 0 && specChanged[0]
	// guard:fleet-mirror-put-back
	if !maps.Equal(cur.GetLabels(), meta.Labels) || !maps.Equal(cur.GetAnnotations(), meta.Annotations) || len(cur.GetFinalizers()) > 0 {
		cur.SetLabels(meta.Labels)
		cur.SetAnnotations(meta.Annotations)
		cur.SetFinalizers(nil)
		changed = true
	}
	if changed {
		if err := m.a.spoke.Update(ctx, cur); err != nil {
			return ignoreRace(err)
		}
	}
	if setStatus() {
		return ignoreRace(m.a.spoke.Status().Update(ctx, cur))
	}
	return nil
}

// deleteMirror deletes the spoke's object key when it is a mirror, or when o (already read)
// is one to replace; a spoke object that is no mirror and names no hub object is left alone.
func (m *mirrors) deleteMirror(ctx context.Context, o client.Object, key types.NamespacedName) error {
	if o.GetName() == "" {
		if err := m.a.spoke.Get(ctx, key, o); err != nil {
			return client.IgnoreNotFound(err)
		}
		// guard:fleet-mirror-delete-only-mirrors
		if !IsMirror(o) {
			return nil
		}
	}
	log.FromContext(ctx).V(1).Info("deleting mirror", "key", key.String())
	pre := client.Preconditions{UID: new(o.GetUID())}
	return ignoreRace(m.a.spoke.Delete(ctx, o, pre))
}

func (m *mirrors) seenAt() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.seen
}

// refresh reads the hub's CommandLocks past the cache every MirrorRefresh: each answered read
// dates the mirrors (AnnotationHubSeenAt, rewritten once a seenStep) and puts them in line
// with the hub even if a watch event was missed.
func (m *mirrors) refresh(ctx context.Context) error {
	t := m.a.opts.Clock.NewTicker(MirrorRefresh)
	defer t.Stop()
	for {
		m.refreshOnce(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

func (m *mirrors) refreshOnce(ctx context.Context) {
	var hub locksv1.CommandLockList
	if err := m.a.hub.List(ctx, &hub); err != nil {
		log.FromContext(ctx).V(1).Info("the hub's CommandLocks cannot be read: the mirrors stay as last seen", "error", err.Error())
		return
	}
	m.mu.Lock()
	m.seen = m.a.opts.Clock.Now()
	m.mu.Unlock()
	m.readClusterLabels(ctx)
	names := map[string]bool{}
	for i := range hub.Items {
		names[hub.Items[i].Name] = true
		if _, err := m.reconcileCommandLock(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Name: hub.Items[i].Name}}); err != nil {
			log.FromContext(ctx).Info("mirror commandlock", "name", hub.Items[i].Name, "error", err.Error())
		}
	}
	var mine locksv1.CommandLockList
	if err := m.a.spoke.List(ctx, &mine, client.MatchingLabels{LabelMirror: MirrorHub}); err != nil {
		return
	}
	for i := range mine.Items {
		if !names[mine.Items[i].Name] {
			_ = m.deleteMirror(ctx, &mine.Items[i], types.NamespacedName{Name: mine.Items[i].Name})
		}
	}
}
