package cache

import (
	"reflect"
	"time"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/packed"
)

// compactRequest is how the manager's cache stores a LockRequest: the same object in less than
// half the bytes. A decoded LockRequest is a 600-byte struct (ObjectMeta alone is 232, mostly
// empty strings) with four conditions of 96 bytes, a target of 80 and a lock status of 48 beside
// it; a cluster of 100,000 waiting requests holds all of them. compactRequest keeps a waiting or
// held request's fields packed: its one target shared with every request of the key (a unique
// handle), its uid and resourceVersion as numbers, its creation time as seconds, its conditions
// as codes with what they say once. What it cannot pack exactly it keeps as it came (meta, spec,
// status), so every object is stored: expand gives back an object equal to the one compacted
// (DeepEqual, times to their location), fresh for the caller to change. TestCompactEveryField
// sets every field of the API type (found by reflection: a field added later too) and
// TestCompactRoundTrip fills them at random; both check that.
type compactRequest struct {
	name       string
	namespace  string
	rv         uint64
	uid        [16]byte
	generation int64
	created    int64 // seconds (metav1.Time), in time.Local
	annotation unique.Handle[[2]string]
	// meta, when not nil, is the whole ObjectMeta: one the fields above cannot hold exactly.
	meta *metav1.ObjectMeta
	kind unique.Handle[metav1.TypeMeta]
	// extra is what some requests have and most do not (nil: none of it).
	extra *compactExtra

	target   unique.Handle[locksv1.LockTarget]
	owner    string
	url      string
	pull     int64
	command  string
	priority locksv1.Priority
	ttl      *metav1.Duration
	wait     *metav1.Duration
	// spec, when not nil, is the whole spec: more or fewer targets than one, or a freeze bypass.
	spec *locksv1.LockRequestSpec

	phase locksv1.LockRequestPhase
	// lock is the one lock status (hasLock); its strings are the shared ones (trimLockRequest).
	// Inline, not a unique handle: a holder's token makes its lock status its own, and the
	// unique map's entries cost more than the 48 bytes.
	lock          locksv1.LockStatus
	hasLock       bool
	release       bool // spec.release, beside hasLock: 416 bytes, not 448
	queuePosition int32
	blockedBy     string
	fencingToken  int64
	arrival       int64
	fences        int64
	observed      int64
	queuedAt      *metav1.MicroTime
	grantedAt     *metav1.Time
	renewedAt     *metav1.Time
	expiresAt     *metav1.Time
	finishedAt    *metav1.Time
	conds         packedConditions
	// status, when not nil, is the whole status: more locks than one, or a condition the codes
	// cannot hold.
	status *locksv1.LockRequestStatus
}

// compactExtra is what a request made for a workload, by the Go client or by `kubectl
// turnstile run` has beyond a pipeline's: the workload it is for, the prefix its name was
// generated from, its holder's Lease and session, the fleet member it runs in, a reason.
type compactExtra struct {
	owners         []metav1.OwnerReference
	generateName   string
	lease, session string
	cluster        string
	reason         string
}

// more is c's extra, made when it has none.
func (c *compactRequest) more() *compactExtra {
	if c.extra == nil {
		c.extra = &compactExtra{}
	}
	return c.extra
}

// packedConditions are up to maxPacked conditions of known types and statuses: a type and
// status code each, and what they say (reason, message, time, generation) once for the
// conditions that say the same — a waiter's Granted, Ready and Reconciling say the same thing.
type packedConditions struct {
	n      uint8
	heads  [maxPacked]conditionHead
	bodies []conditionBody
}

const maxPacked = 4

type conditionHead struct{ typ, status, body uint8 }

// conditionBody is what a condition says, in 56 bytes: a metav1.Condition is 96.
type conditionBody struct {
	loc             uint8
	nsec            int32
	sec             int64
	observed        int64
	reason, message string
}

var (
	conditionTypes  = []string{"", locksv1.ConditionGranted, locksv1.ConditionReady, locksv1.ConditionReconciling, locksv1.ConditionStalled}
	conditionStatus = []metav1.ConditionStatus{"", metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown}
)

const (
	locLocal uint8 = 1
	locUTC   uint8 = 2
)

// compactLockRequest returns lr compacted. lr must not change afterwards: the compact object
// shares its strings, pointers and slices it keeps as they came.
func compactLockRequest(lr *locksv1.LockRequest) *compactRequest {
	c := &compactRequest{kind: unique.Make(lr.TypeMeta)}
	c.packMeta(&lr.ObjectMeta)
	c.packSpec(&lr.Spec)
	c.packStatus(&lr.Status)
	return c
}

func (c *compactRequest) packMeta(m *metav1.ObjectMeta) {
	rv, rvOK := packed.RV(m.ResourceVersion)
	uid, uidOK := packed.UID(m.UID)
	created, createdOK := packSeconds(m.CreationTimestamp.Time)
	if !rvOK || !uidOK || !createdOK || m.GetSelfLink() != "" || m.DeletionTimestamp != nil ||
		m.DeletionGracePeriodSeconds != nil || m.Labels != nil || (m.OwnerReferences != nil && len(m.OwnerReferences) == 0) ||
		m.Finalizers != nil || m.ManagedFields != nil || (m.Annotations != nil && len(m.Annotations) != 1) {
		c.meta = copyOf(m) // a copy: a pointer into lr would keep all of it
		return
	}
	c.name, c.namespace, c.rv, c.uid, c.generation, c.created = m.Name, m.Namespace, rv, uid, m.Generation, created
	for k, v := range m.Annotations {
		c.annotation = unique.Make([2]string{k, v})
	}
	if m.OwnerReferences != nil {
		c.more().owners = m.OwnerReferences
	}
	if m.GenerateName != "" {
		c.more().generateName = intern(m.GenerateName)
	}
}

func (c *compactRequest) packSpec(s *locksv1.LockRequestSpec) {
	if len(s.Locks) != 1 || s.BypassFreeze != nil {
		c.spec = copyOf(s)
		return
	}
	c.target = unique.Make(s.Locks[0])
	c.owner, c.url, c.pull, c.command, c.priority = s.Holder.Owner, s.Holder.URL, s.Holder.Pull, s.Command, s.Priority
	c.ttl, c.wait, c.release = s.TTL, s.WaitTimeout, s.Release
	if s.Holder.Lease != "" || s.Holder.Session != "" || s.Holder.Cluster != "" || s.Reason != "" {
		x := c.more()
		x.lease, x.session, x.cluster, x.reason = s.Holder.Lease, s.Holder.Session, s.Holder.Cluster, s.Reason
	}
}

func (c *compactRequest) packStatus(st *locksv1.LockRequestStatus) {
	conds, ok := packConditions(st.Conditions)
	if !ok || (st.Locks != nil && len(st.Locks) != 1) {
		c.status = copyOf(st)
		return
	}
	if len(st.Locks) == 1 {
		c.lock, c.hasLock = st.Locks[0], true
	}
	c.conds = conds
	c.phase, c.queuePosition, c.blockedBy, c.fencingToken = st.Phase, st.QueuePosition, st.BlockedBy, st.FencingToken
	c.arrival, c.fences, c.observed = st.ArrivalRevision, st.Fences, st.ObservedGeneration
	c.queuedAt, c.grantedAt, c.renewedAt, c.expiresAt, c.finishedAt = st.QueuedAt, st.GrantedAt, st.RenewedAt, st.ExpiresAt, st.FinishedAt
}

// packConditions packs conds when there are at most maxPacked, each of a known type and status
// with a time the codes hold exactly; a nil list packs as itself, an empty one does not.
func packConditions(conds []metav1.Condition) (packedConditions, bool) {
	var out packedConditions
	if conds == nil {
		return out, true
	}
	if len(conds) == 0 || len(conds) > maxPacked {
		return out, false
	}
	out.n = uint8(len(conds))
	var bodies [maxPacked]conditionBody
	k := 0
	for i := range conds {
		in := &conds[i]
		h := &out.heads[i]
		h.typ, h.status = index(conditionTypes, in.Type), index(conditionStatus, in.Status)
		sec, nsec, loc, ok := packTime(in.LastTransitionTime.Time)
		// guard:compact-condition-codes
		if h.typ == 0 || h.status == 0 || !ok {
			return out, false
		}
		body := conditionBody{loc: loc, nsec: nsec, sec: sec, observed: in.ObservedGeneration, reason: in.Reason, message: in.Message}
		h.body = uint8(k)
		for j, b := range bodies[:k] {
			// guard:compact-condition-bodies
			if b == body {
				h.body = uint8(j)
				break
			}
		}
		if int(h.body) == k {
			bodies[k] = body
			k++
		}
	}
	out.bodies = append([]conditionBody(nil), bodies[:k]...) // no room to spare
	return out, true
}

func index[T comparable](table []T, v T) uint8 {
	for i := 1; i < len(table); i++ {
		if table[i] == v {
			return uint8(i)
		}
	}
	return 0
}

// packTime returns t as seconds, nanoseconds and location when time.Unix gives t back exactly
// (no monotonic reading; time.Local or UTC).
func packTime(t time.Time) (sec int64, nsec int32, loc uint8, ok bool) {
	sec, nsec, loc = t.Unix(), int32(t.Nanosecond()), locLocal
	if t.Location() == time.UTC {
		loc = locUTC
	}
	// guard:compact-time-exact
	return sec, nsec, loc, identical(unpackTime(sec, nsec, loc), t)
}

// identical: a and b are the same time.Time, location and monotonic reading too (what
// reflect.DeepEqual compares, where Equal compares instants only).
func identical(a, b time.Time) bool {
	return reflect.DeepEqual(a, b)
}

func unpackTime(sec int64, nsec int32, loc uint8) time.Time {
	t := time.Unix(sec, int64(nsec))
	if loc == locUTC {
		return t.UTC()
	}
	return t
}

// packSeconds is packTime for a metav1.Time as JSON gives it: whole seconds, in time.Local.
func packSeconds(t time.Time) (int64, bool) {
	s := t.Unix()
	// guard:compact-created-exact
	return s, identical(time.Unix(s, 0), t)
}

// expand returns the LockRequest c was compacted from: a new object, nothing shared with c
// that the caller could change.
func (c *compactRequest) expand() *locksv1.LockRequest {
	out := &locksv1.LockRequest{TypeMeta: c.kind.Value()}
	c.expandMeta(&out.ObjectMeta)
	c.expandSpec(&out.Spec)
	c.expandStatus(&out.Status)
	return out
}

func (c *compactRequest) expandMeta(m *metav1.ObjectMeta) {
	if c.meta != nil {
		c.meta.DeepCopyInto(m)
		return
	}
	m.Name, m.Namespace, m.Generation = c.name, c.namespace, c.generation
	m.ResourceVersion, m.UID = packed.RVString(c.rv), packed.UIDString(c.uid)
	m.CreationTimestamp = metav1.NewTime(time.Unix(c.created, 0))
	m.Annotations = c.annotations()
	m.OwnerReferences = c.owners()
	if c.extra != nil {
		m.GenerateName = c.extra.generateName
	}
}

func (c *compactRequest) annotations() map[string]string {
	if c.annotation == (unique.Handle[[2]string]{}) {
		return nil
	}
	a := c.annotation.Value()
	return map[string]string{a[0]: a[1]}
}

// owners is a copy of c's owner references (packed, or nil).
func (c *compactRequest) owners() []metav1.OwnerReference {
	if c.extra == nil || c.extra.owners == nil {
		return nil
	}
	out := make([]metav1.OwnerReference, len(c.extra.owners))
	for i := range c.extra.owners {
		c.extra.owners[i].DeepCopyInto(&out[i])
	}
	return out
}

func (c *compactRequest) expandSpec(s *locksv1.LockRequestSpec) {
	if c.spec != nil {
		c.spec.DeepCopyInto(s)
		return
	}
	s.Locks = []locksv1.LockTarget{c.target.Value()}
	s.Holder = locksv1.Holder{Owner: c.owner, URL: c.url, Pull: c.pull}
	s.Command, s.Priority, s.Release = c.command, c.priority, c.release
	if x := c.extra; x != nil {
		s.Holder.Lease, s.Holder.Session, s.Holder.Cluster, s.Reason = x.lease, x.session, x.cluster, x.reason
	}
	// guard:compact-expand-copies
	s.TTL, s.WaitTimeout = copyOf(c.ttl), copyOf(c.wait)
}

func (c *compactRequest) expandStatus(st *locksv1.LockRequestStatus) {
	if c.status != nil {
		c.status.DeepCopyInto(st)
		return
	}
	if c.hasLock {
		st.Locks = []locksv1.LockStatus{c.lock}
	}
	st.Phase, st.QueuePosition, st.BlockedBy, st.FencingToken = c.phase, c.queuePosition, c.blockedBy, c.fencingToken
	st.ArrivalRevision, st.Fences, st.ObservedGeneration = c.arrival, c.fences, c.observed
	st.QueuedAt, st.GrantedAt, st.RenewedAt = copyOf(c.queuedAt), copyOf(c.grantedAt), copyOf(c.renewedAt)
	st.ExpiresAt, st.FinishedAt = copyOf(c.expiresAt), copyOf(c.finishedAt)
	if n := int(c.conds.n); n > 0 {
		st.Conditions = make([]metav1.Condition, n)
		for i, h := range c.conds.heads[:n] {
			b := c.conds.bodies[h.body]
			st.Conditions[i] = metav1.Condition{
				Type: conditionTypes[h.typ], Status: conditionStatus[h.status], ObservedGeneration: b.observed,
				LastTransitionTime: metav1.NewTime(unpackTime(b.sec, b.nsec, b.loc)), Reason: b.reason, Message: b.message,
			}
		}
	}
}

func copyOf[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// The informer's store keys, indexes and (re)lists a compact request as an object: it reads
// its metadata through metav1.Object (meta.Accessor). A compact request is never changed once
// stored; the setters exist for the interface and change only the copy they are called on.

var (
	_ metav1.Object  = &compactRequest{}
	_ runtime.Object = &compactRequest{}
)

// GetObjectKind implements runtime.Object.
func (c *compactRequest) GetObjectKind() schema.ObjectKind {
	tm := c.kind.Value()
	return &tm
}

// DeepCopyObject implements runtime.Object: a compact request is immutable, a copy of the struct
// is a deep copy.
func (c *compactRequest) DeepCopyObject() runtime.Object {
	cp := *c
	return &cp
}

// objectMeta is c's metadata, expanded when it is packed.
func (c *compactRequest) objectMeta() *metav1.ObjectMeta {
	if c.meta != nil {
		return c.meta
	}
	m := &metav1.ObjectMeta{}
	c.expandMeta(m)
	return m
}

// The getters read the packed fields without expanding (the store calls them on every write);
// the fields packing leaves out are empty in a packed request.

func (c *compactRequest) GetNamespace() string {
	if c.meta != nil {
		return c.meta.Namespace
	}
	return c.namespace
}

func (c *compactRequest) GetName() string {
	if c.meta != nil {
		return c.meta.Name
	}
	return c.name
}

func (c *compactRequest) GetResourceVersion() string {
	if c.meta != nil {
		return c.meta.ResourceVersion
	}
	return packed.RVString(c.rv)
}

func (c *compactRequest) GetUID() types.UID {
	if c.meta != nil {
		return c.meta.UID
	}
	return packed.UIDString(c.uid)
}

func (c *compactRequest) GetGeneration() int64 {
	if c.meta != nil {
		return c.meta.Generation
	}
	return c.generation
}

func (c *compactRequest) GetCreationTimestamp() metav1.Time {
	if c.meta != nil {
		return c.meta.CreationTimestamp
	}
	return metav1.NewTime(time.Unix(c.created, 0))
}

func (c *compactRequest) GetAnnotations() map[string]string {
	if c.meta != nil {
		return c.meta.Annotations
	}
	return c.annotations()
}

func (c *compactRequest) GetOwnerReferences() []metav1.OwnerReference {
	if c.meta != nil {
		return c.meta.OwnerReferences
	}
	return c.owners()
}

func (c *compactRequest) GetGenerateName() string {
	if c.meta != nil {
		return c.meta.GenerateName
	}
	if c.extra != nil {
		return c.extra.generateName
	}
	return ""
}

func (c *compactRequest) GetSelfLink() string {
	if c.meta != nil {
		return c.meta.GetSelfLink()
	}
	return ""
}

func (c *compactRequest) GetDeletionTimestamp() *metav1.Time {
	if c.meta != nil {
		return c.meta.DeletionTimestamp
	}
	return nil
}

func (c *compactRequest) GetDeletionGracePeriodSeconds() *int64 {
	if c.meta != nil {
		return c.meta.DeletionGracePeriodSeconds
	}
	return nil
}

func (c *compactRequest) GetLabels() map[string]string {
	if c.meta != nil {
		return c.meta.Labels
	}
	return nil
}

func (c *compactRequest) GetFinalizers() []string {
	if c.meta != nil {
		return c.meta.Finalizers
	}
	return nil
}

func (c *compactRequest) GetManagedFields() []metav1.ManagedFieldsEntry {
	if c.meta != nil {
		return c.meta.ManagedFields
	}
	return nil
}

// set changes one metadata field of c: c keeps its whole metadata from then on.
func (c *compactRequest) set(f func(*metav1.ObjectMeta)) {
	m := c.objectMeta().DeepCopy()
	f(m)
	c.meta = m
}

func (c *compactRequest) SetNamespace(v string) {
	c.set(func(m *metav1.ObjectMeta) { m.Namespace = v })
}
func (c *compactRequest) SetName(v string) { c.set(func(m *metav1.ObjectMeta) { m.Name = v }) }
func (c *compactRequest) SetGenerateName(v string) {
	c.set(func(m *metav1.ObjectMeta) { m.GenerateName = v })
}
func (c *compactRequest) SetUID(v types.UID) { c.set(func(m *metav1.ObjectMeta) { m.UID = v }) }
func (c *compactRequest) SetResourceVersion(v string) {
	c.set(func(m *metav1.ObjectMeta) { m.ResourceVersion = v })
}
func (c *compactRequest) SetGeneration(v int64) {
	c.set(func(m *metav1.ObjectMeta) { m.Generation = v })
}
func (c *compactRequest) SetSelfLink(v string) {
	c.set(func(m *metav1.ObjectMeta) { m.SetSelfLink(v) })
}
func (c *compactRequest) SetCreationTimestamp(v metav1.Time) {
	c.set(func(m *metav1.ObjectMeta) { m.CreationTimestamp = v })
}
func (c *compactRequest) SetDeletionTimestamp(v *metav1.Time) {
	c.set(func(m *metav1.ObjectMeta) { m.DeletionTimestamp = v })
}
func (c *compactRequest) SetDeletionGracePeriodSeconds(v *int64) {
	c.set(func(m *metav1.ObjectMeta) { m.DeletionGracePeriodSeconds = v })
}
func (c *compactRequest) SetLabels(v map[string]string) {
	c.set(func(m *metav1.ObjectMeta) { m.Labels = v })
}
func (c *compactRequest) SetAnnotations(v map[string]string) {
	c.set(func(m *metav1.ObjectMeta) { m.Annotations = v })
}
func (c *compactRequest) SetFinalizers(v []string) {
	c.set(func(m *metav1.ObjectMeta) { m.Finalizers = v })
}
func (c *compactRequest) SetOwnerReferences(v []metav1.OwnerReference) {
	c.set(func(m *metav1.ObjectMeta) { m.OwnerReferences = v })
}
func (c *compactRequest) SetManagedFields(v []metav1.ManagedFieldsEntry) {
	c.set(func(m *metav1.ObjectMeta) { m.ManagedFields = v })
}
