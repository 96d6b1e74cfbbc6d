package cache

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/queue"
)

// overlayTTL bounds how long a written object is remembered; a cache lags by milliseconds.
const overlayTTL = 30 * time.Second

// Overlay remembers the objects a reconciler has just written. A read through a cache that
// shows an older version of the object — resourceVersions of one resource are comparable and
// grow with every write (KEP-5504) — uses the written object instead, however many writes the
// cache is behind: the controller then never decides on a state it has itself superseded, and
// never pays a 409 for it. A cache that shows the write, or a newer one by someone else, is used
// as it is and the memory dropped. Writes still carry their resourceVersion, so a wrong overlay
// could only cost a conflict, never a double grant (docs/protocol.md).
type Overlay struct {
	mu       sync.Mutex
	requests map[types.UID]written[*compactRequest]
	locks    map[types.NamespacedName]written[*locksv1.ProjectLock]
	deleted  map[types.UID]deletion
	swept    time.Time
}

type written[T any] struct {
	obj T                    // the object as the API server returned it
	by  types.NamespacedName // the key whose reconcile wrote it
	at  time.Time
}

// deletion is what the watch said of a deleted request.
type deletion struct {
	at time.Time
	// token is the request-level token of its last state, when that state is known (not a
	// tombstone of a missed deletion): the key's next holder gets a higher one.
	token int64
	known bool
}

// NewOverlay returns an overlay that remembers nothing yet: one for each reconciler, whose
// writes it serves back to that reconciler alone.
func NewOverlay() *Overlay {
	return &Overlay{
		requests: map[types.UID]written[*compactRequest]{},
		locks:    map[types.NamespacedName]written[*locksv1.ProjectLock]{},
		deleted:  map[types.UID]deletion{},
	}
}

// WroteRequest records a LockRequest status write by key's reconcile.
func (o *Overlay) WroteRequest(obj *locksv1.LockRequest, key types.NamespacedName, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	// Trimmed and compacted as the cache keeps what it holds: the overlay stands in for the
	// cache, and holds every request written in the last overlayTTL (at 100,000 fresh requests,
	// 12 MiB as trimmed objects).
	trimmed, _ := trimLockRequest(obj.DeepCopy())
	o.requests[obj.UID] = written[*compactRequest]{compactLockRequest(trimmed.(*locksv1.LockRequest)), key, now}
	o.sweep(now)
}

// WroteProjectLock records a ProjectLock write.
func (o *Overlay) WroteProjectLock(obj *locksv1.ProjectLock, now time.Time) {
	key := types.NamespacedName{Namespace: obj.Namespace, Name: obj.Name}
	o.mu.Lock()
	defer o.mu.Unlock()
	// Trimmed as the cache trims what it holds.
	cp, _ := trimProjectLock(obj.DeepCopy())
	o.locks[key] = written[*locksv1.ProjectLock]{cp.(*locksv1.ProjectLock), key, now}
	o.sweep(now)
}

// older reports whether the cached version precedes the written one; newer, whether it follows
// it (the cache moved past the write: the memory has served its purpose).
func older(cached, wrote string) bool {
	c, w := queue.Revision(cached), queue.Revision(wrote)
	// guard:overlay-exact-version
	return c != 0 && w != 0 && c < w
}

func newer(cached, wrote string) bool { return !older(cached, wrote) && cached != wrote }

// EchoesRequest reports whether a watched LockRequest is exactly the version key's reconcile
// wrote last: that key decided on it already, so the event has nothing new for it (a decision
// fed its own writes decides nothing; queue.TestDecideWritesOnlyChanges). Other keys the
// request names still need it. The memory stays: a reconcile of the key that listed the cache
// just before this version reached it still needs the overlay, or it would write over a
// version it has itself superseded (a 409). Reads drop it once the cache moves on.
func (o *Overlay) EchoesRequest(obj *locksv1.LockRequest, key types.NamespacedName) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	w, ok := o.requests[obj.UID]
	return ok && w.obj.GetResourceVersion() == obj.ResourceVersion && w.by == key
}

// EchoesProjectLock is EchoesRequest for a ProjectLock, which only its own key writes.
func (o *Overlay) EchoesProjectLock(obj *locksv1.ProjectLock) bool {
	key := types.NamespacedName{Namespace: obj.Namespace, Name: obj.Name}
	o.mu.Lock()
	defer o.mu.Unlock()
	w, ok := o.locks[key]
	return ok && w.obj.ResourceVersion == obj.ResourceVersion && w.obj.UID == obj.UID
}

// ForgetRequest drops what is remembered of a request whose write failed.
func (o *Overlay) ForgetRequest(uid types.UID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.requests, uid)
}

// ForgetProjectLock drops what is remembered of a ProjectLock whose write failed.
func (o *Overlay) ForgetProjectLock(key types.NamespacedName) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.locks, key)
}

// Request returns the freshest known version of a cached request.
func (o *Overlay) Request(cached *locksv1.LockRequest) *locksv1.LockRequest {
	o.mu.Lock()
	defer o.mu.Unlock()
	w, ok := o.requests[cached.UID]
	switch {
	case !ok:
		return cached
	case older(cached.ResourceVersion, w.obj.GetResourceVersion()):
		return w.obj.expand()
	case newer(cached.ResourceVersion, w.obj.GetResourceVersion()):
		delete(o.requests, cached.UID)
	}
	return cached
}

// ProjectLock returns the freshest known version of a cached ProjectLock.
func (o *Overlay) ProjectLock(cached *locksv1.ProjectLock) *locksv1.ProjectLock {
	key := types.NamespacedName{Namespace: cached.Namespace, Name: cached.Name}
	o.mu.Lock()
	defer o.mu.Unlock()
	w, ok := o.locks[key]
	switch {
	case !ok:
		return cached
	case cached.UID != w.obj.UID || newer(cached.ResourceVersion, w.obj.ResourceVersion):
		delete(o.locks, key)
	case older(cached.ResourceVersion, w.obj.ResourceVersion):
		return w.obj.DeepCopy()
	}
	return cached
}

// SawDeleted records a request the watch reported deleted: UIDs are never reused, so it is
// known gone without asking the API server again. last is its final state, nil when the watch
// missed the deletion and only has an older one.
func (o *Overlay) SawDeleted(uid types.UID, last *locksv1.LockRequest, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	d := deletion{at: now}
	if last != nil {
		d.token, d.known = last.Status.FencingToken, true
	}
	o.deleted[uid] = d
	delete(o.requests, uid)
	o.sweep(now)
}

// Deleted says whether the watch reported the request deleted, and its last token if known.
func (o *Overlay) Deleted(uid types.UID) (deleted bool, token int64, known bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	d, ok := o.deleted[uid]
	return ok, d.token, d.known
}

// sweep drops old memories, at most once a second. Called with mu held.
func (o *Overlay) sweep(now time.Time) {
	if now.Sub(o.swept) < time.Second {
		return
	}
	o.swept = now
	for k, w := range o.requests {
		if now.Sub(w.at) > overlayTTL {
			delete(o.requests, k)
		}
	}
	for k, w := range o.locks {
		if now.Sub(w.at) > overlayTTL {
			delete(o.locks, k)
		}
	}
	for k, d := range o.deleted {
		if now.Sub(d.at) > overlayTTL {
			delete(o.deleted, k)
		}
	}
}
