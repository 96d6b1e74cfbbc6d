package lag

import (
	"context"
	"errors"
	"fmt"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/controller"
)

// View is one manager's cache: per kind, the state after a prefix of the History. It is a
// client.Client whose reads come from that state and whose writes go to the API server.
type View struct {
	client.Client
	h *History

	mu      sync.Mutex
	pos     Mark
	state   [numKinds]map[client.ObjectKey]client.Object
	crashIn int // writes left before a crash; -1: no crash coming
	writes  int // writes let through so far
	hooks   map[int]func()
}

var _ client.Client = (*View)(nil)

// NewView is a cache that has seen nothing yet: every kind at the start of its history.
func NewView(h *History, writer client.Client) *View {
	v := &View{Client: writer, h: h, crashIn: -1}
	for _, k := range Kinds {
		v.state[k] = map[client.ObjectKey]client.Object{}
	}
	return v
}

// Pos is how far the view has read each kind's history.
func (v *View) Pos() Mark {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.pos
}

// AdvanceTo moves kind k forward to position n of its history (never back; n past the end
// means the end).
func (v *View) AdvanceTo(k Kind, n int) {
	end := v.h.Len(k)
	v.mu.Lock()
	defer v.mu.Unlock()
	if n > end {
		n = end
	}
	if n <= v.pos[k] {
		return
	}
	for _, ev := range v.h.events(k, v.pos[k], n) {
		key := client.ObjectKeyFromObject(ev.Object)
		if ev.Type == watch.Deleted {
			delete(v.state[k], key)
			continue
		}
		v.state[k][key] = ev.Object
	}
	v.pos[k] = n
}

// Advance moves kind k forward by n events.
func (v *View) Advance(k Kind, n int) { v.AdvanceTo(k, v.Pos()[k]+n) }

// AdvanceToMark moves every kind forward to m.
func (v *View) AdvanceToMark(m Mark) {
	for _, k := range Kinds {
		v.AdvanceTo(k, m[k])
	}
}

// CatchUp moves every kind to the end of its history.
func (v *View) CatchUp() { v.AdvanceToMark(v.h.Mark()) }

// CatchUpBut moves every kind to the end of its history except k, which goes only to position
// n: a cache that lags in one kind, the attack's usual shape.
func (v *View) CatchUpBut(k Kind, n int) {
	m := v.h.Mark()
	m[k] = n
	v.AdvanceToMark(m)
}

// Behind is how many events of kind k the view has not seen yet.
func (v *View) Behind(k Kind) int { return v.h.Len(k) - v.Pos()[k] }

// Get reads one object from the view's state.
func (v *View) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	k, ok := kindOf(obj)
	if !ok {
		return fmt.Errorf("lag.View serves LockRequests, ProjectLocks, CommandLocks and Leases, not %T", obj)
	}
	v.mu.Lock()
	stored, found := v.state[k][key]
	v.mu.Unlock()
	if !found {
		return apierrors.NewNotFound(groupResource(k), key.Name)
	}
	return copyInto(stored, obj)
}

// List lists the view's objects of the list's kind, honouring InNamespace and the field
// indexes the reconcilers use (controller.Indexes).
func (v *View) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	k, ok := kindOf(list)
	if !ok {
		return fmt.Errorf("lag.View serves LockRequests, ProjectLocks, CommandLocks and Leases, not %T", list)
	}
	o := (&client.ListOptions{}).ApplyOptions(opts)
	var match []fields.Requirement
	if o.FieldSelector != nil {
		match = o.FieldSelector.Requirements()
	}
	v.mu.Lock()
	var items []runtime.Object
	for _, key := range keysOf(v.state[k]) {
		stored := v.state[k][key]
		if o.Namespace != "" && stored.GetNamespace() != o.Namespace {
			continue
		}
		if o.LabelSelector != nil && !o.LabelSelector.Matches(labelSet(stored.GetLabels())) {
			continue
		}
		if !matchesFields(stored, match) {
			continue
		}
		items = append(items, stored.DeepCopyObject())
	}
	v.mu.Unlock()
	return meta.SetList(list, items)
}

type labelSet map[string]string

func (l labelSet) Has(k string) bool   { _, ok := l[k]; return ok }
func (l labelSet) Get(k string) string { return l[k] }
func (l labelSet) Lookup(k string) (string, bool) {
	v, ok := l[k]
	return v, ok
}

func matchesFields(o client.Object, reqs []fields.Requirement) bool {
	for _, r := range reqs {
		lr, ok := o.(*locksv1.LockRequest)
		if !ok {
			return false
		}
		var values []string
		found := false
		for _, ix := range controller.Indexes {
			if ix.Field == r.Field {
				values, found = ix.Values(lr), true
			}
		}
		if !found {
			return false
		}
		hit := false
		for _, val := range values {
			hit = hit || val == r.Value
		}
		if hit == (r.Operator == "!=") {
			return false
		}
	}
	return true
}

func copyInto(stored, obj client.Object) error {
	switch out := obj.(type) {
	case *locksv1.LockRequest:
		*out = *stored.(*locksv1.LockRequest).DeepCopy()
	case *locksv1.ProjectLock:
		*out = *stored.(*locksv1.ProjectLock).DeepCopy()
	case *locksv1.CommandLock:
		*out = *stored.(*locksv1.CommandLock).DeepCopy()
	case *coordinationv1.Lease:
		*out = *stored.(*coordinationv1.Lease).DeepCopy()
	default:
		return fmt.Errorf("cannot copy into %T", obj)
	}
	return nil
}

func groupResource(k Kind) schema.GroupResource {
	switch k {
	case LockRequests:
		return locksv1.GroupVersion.WithResource("lockrequests").GroupResource()
	case ProjectLocks:
		return locksv1.GroupVersion.WithResource("projectlocks").GroupResource()
	case CommandLocks:
		return locksv1.GroupVersion.WithResource("commandlocks").GroupResource()
	default:
		return coordinationv1.SchemeGroupVersion.WithResource("leases").GroupResource()
	}
}

// ErrCrashed is what every write returns once the view's process has "died" (CrashAfter).
var ErrCrashed = errors.New("lag: the manager crashed before this write")

// CrashAfter lets n more writes through and fails every later one with ErrCrashed, until
// Revive: the reconcile under way stops between two of its writes, as a process killed there
// would. The writes before the crash are in the store; the ones after never happen.
func (v *View) CrashAfter(n int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.crashIn = n
}

// Revive lets writes through again (the manager restarted).
func (v *View) Revive() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.crashIn = -1
}

// BeforeWrite runs f just before the view's n-th write from now (1 is the next): the test can
// act between two writes of one decision, as another process would.
func (v *View) BeforeWrite(n int, f func()) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.hooks == nil {
		v.hooks = map[int]func(){}
	}
	v.hooks[v.writes+n] = f
}

// CancelHooks drops the BeforeWrite hooks that have not run: the decision they were meant for
// made fewer writes.
func (v *View) CancelHooks() {
	v.mu.Lock()
	defer v.mu.Unlock()
	clear(v.hooks)
}

// write reports whether one more write may go through, after running its hook.
func (v *View) write() error {
	v.mu.Lock()
	if v.crashIn == 0 {
		v.mu.Unlock()
		return ErrCrashed
	}
	if v.crashIn > 0 {
		v.crashIn--
	}
	v.writes++
	hook := v.hooks[v.writes]
	delete(v.hooks, v.writes)
	v.mu.Unlock()
	if hook != nil {
		hook()
	}
	return nil
}

// Create creates obj, unless the manager has crashed.
func (v *View) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if err := v.write(); err != nil {
		return err
	}
	return v.Client.Create(ctx, obj, opts...)
}

// Update updates obj, unless the manager has crashed. An update the API server answers with
// the resourceVersion it was sent with changed nothing: it is recorded (History.NoOps).
func (v *View) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	if err := v.write(); err != nil {
		return err
	}
	rv := obj.GetResourceVersion()
	err := v.Client.Update(ctx, obj, opts...)
	v.noop(err, obj, rv, false)
	return err
}

// noop records a successful update of obj that came back at rv, the resourceVersion it was
// sent with.
func (v *View) noop(err error, obj client.Object, rv string, status bool) {
	if err != nil || rv == "" || obj.GetResourceVersion() != rv {
		return
	}
	if obj.GetDeletionTimestamp() != nil && len(obj.GetFinalizers()) == 0 {
		// The update removed the last finalizer of an object being deleted: the API server
		// deleted it, and answers with the object as it was. Nothing can be written to it now.
		return
	}
	k, _ := kindOf(obj)
	v.h.recordNoOp(NoOp{Kind: k, Key: client.ObjectKeyFromObject(obj), RV: rv, Status: status})
}

// Delete deletes obj, unless the manager has crashed.
func (v *View) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	if err := v.write(); err != nil {
		return err
	}
	return v.Client.Delete(ctx, obj, opts...)
}

// Patch patches obj, unless the manager has crashed.
func (v *View) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if err := v.write(); err != nil {
		return err
	}
	return v.Client.Patch(ctx, obj, patch, opts...)
}

// Status writes status subresources, unless the manager has crashed.
func (v *View) Status() client.SubResourceWriter { return statusWriter{v.Client.Status(), v} }

type statusWriter struct {
	client.SubResourceWriter
	v *View
}

func (s statusWriter) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	if err := s.v.write(); err != nil {
		return err
	}
	rv := obj.GetResourceVersion()
	err := s.SubResourceWriter.Update(ctx, obj, opts...)
	s.v.noop(err, obj, rv, true)
	return err
}

func (s statusWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	if err := s.v.write(); err != nil {
		return err
	}
	return s.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}
