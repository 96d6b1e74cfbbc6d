// Package client is Turnstile's Go client for runners: acquire a lock (create a LockRequest and
// wait for its grant on a watch), renew it, release it, and learn why it was not granted.
//
//	tc := client.New(k8s, "team-a")
//	lock, err := tc.Acquire(ctx, client.Request{
//		Locks:  []locksv1.LockTarget{{Repo: "acme/infra", Path: "modules/vpc", Workspace: "default"}},
//		Holder: locksv1.Holder{Owner: "alice", Pull: 100},
//	})
//	if err != nil { ... }            // errors.Is(err, client.ErrBusy), client.ErrTimeout, ...
//	defer lock.Release(context.WithoutCancel(ctx))
//	run(lock.FencingToken)           // pass the token to whatever the lock protects
//
// The lock is a LockRequest object, so everything the client does can also be done, and seen,
// with kubectl.
package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/whoami"
)

// Errors a request can end with, matched with errors.Is. The concrete error is a *NotGrantedError
// or *LostError carrying the controller's message.
var (
	// ErrBusy: the lock was held and the request asked not to wait (Forrst LOCK_ACQUISITION_FAILED).
	ErrBusy = errors.New("lock busy")
	// ErrTimeout: waitTimeout elapsed before the grant (Forrst LOCK_TIMEOUT).
	ErrTimeout = errors.New("timed out waiting for the lock")
	// ErrCommandLocked: the request's command is frozen by a CommandLock and it asked not to wait.
	ErrCommandLocked = errors.New("command locked")
	// ErrDeadlock: the request was the victim of a deadlock cycle.
	ErrDeadlock = errors.New("deadlock")
	// ErrQueueFull: the key's queue was at the operator's cap.
	ErrQueueFull = errors.New("queue full")
	// ErrInvalid: the operator cannot honor the request as written (e.g. ttl over its maximum).
	ErrInvalid = errors.New("invalid request")
	// ErrLost: a granted lock ended without the holder releasing it: it expired, an admin
	// force-unlocked it, or the holder's Lease lapsed. Whatever the lock protected must stop.
	ErrLost = errors.New("lock lost")
	// ErrReleased: the request was released (by spec.release or by someone else) before it was
	// granted.
	ErrReleased = errors.New("released before it was granted")
)

var reasonErrors = map[string]error{
	locksv1.ReasonBusy:          ErrBusy,
	locksv1.ReasonTimeout:       ErrTimeout,
	locksv1.ReasonCommandLocked: ErrCommandLocked,
	locksv1.ReasonDeadlock:      ErrDeadlock,
	locksv1.ReasonQueueFull:     ErrQueueFull,
	locksv1.ReasonInvalid:       ErrInvalid,
	locksv1.ReasonExpired:       ErrLost,
	locksv1.ReasonForceUnlocked: ErrLost,
	locksv1.ReasonHolderLost:    ErrLost,
	locksv1.ReasonReleased:      ErrReleased,
}

// NotGrantedError is a request that ended without a grant, or a grant that ended without a
// release: the phase, reason and message the controller wrote.
type NotGrantedError struct {
	Request types.NamespacedName
	Phase   locksv1.LockRequestPhase
	Reason  string
	Message string
}

func (e *NotGrantedError) Error() string {
	return fmt.Sprintf("lockrequest %s: %s (%s): %s", e.Request, e.Phase, e.Reason, e.Message)
}

// Is matches the sentinel error of the reason.
func (e *NotGrantedError) Is(target error) bool {
	err, ok := reasonErrors[e.Reason]
	return ok && err == target
}

// Request describes the locks to acquire.
type Request struct {
	// Name of the LockRequest; empty generates one from GenerateName (default "lock-").
	Name         string
	GenerateName string
	// Labels are added to the request's; LabelRepo, LabelPull and LabelOwner are always the
	// spec's (LabelsFor), whatever Labels says.
	Labels map[string]string
	Locks  []locksv1.LockTarget
	// Holder says who asks. An empty Owner is the caller's user name as the API server knows it
	// (WhoAmI), which is what the admission policies require unless the caller is a delegate.
	Holder   locksv1.Holder
	Command  string
	Priority locksv1.Priority
	// Reason is told to everyone waiting while the request holds its locks (spec.reason).
	Reason string
	// TTL is the grant's lifetime; zero takes the operator's default.
	TTL time.Duration
	// WaitTimeout bounds the wait on the server side; nil waits until the context ends. Use
	// TryAcquire for "fail at once if busy".
	WaitTimeout *time.Duration
	// BypassFreeze, when set, is the reason for an emergency grant past every freeze
	// (spec.bypassFreeze), and for a break glass past a write freeze: it needs the bypassfreeze
	// permission on lockrequests in the namespace.
	BypassFreeze string
}

// Client acquires locks in one namespace.
type Client struct {
	c         ctrlclient.WithWatch
	namespace string
	// self is the caller's user name, asked once.
	self *whoami.Cache
}

// New returns a client for namespace. c must read from the API server (client.NewWithWatch),
// not a cache.
func New(c ctrlclient.WithWatch, namespace string) *Client {
	return &Client{c: c, namespace: namespace, self: &whoami.Cache{}}
}

// Namespace is where the client's LockRequests live.
func (c *Client) Namespace() string { return c.namespace }

// LockFor wraps an existing LockRequest, found by name say, so it can be released, deleted,
// renewed or watched. Its FencingToken and times are the request's status as given.
func (c *Client) LockFor(lr *locksv1.LockRequest) *Lock {
	l := &Lock{Name: lr.Name, Namespace: lr.Namespace, UID: lr.UID, FencingToken: lr.Status.FencingToken, c: c}
	if lr.Status.GrantedAt != nil {
		l.GrantedAt = lr.Status.GrantedAt.Time
	}
	if lr.Status.ExpiresAt != nil {
		l.ExpiresAt = lr.Status.ExpiresAt.Time
	}
	return l
}

// Lock is a granted LockRequest.
type Lock struct {
	Name, Namespace string
	UID             types.UID
	// FencingToken strictly increases per key with every new holder: pass it to what the lock
	// protects, so a stale holder's late write can be refused.
	FencingToken int64
	GrantedAt    time.Time
	ExpiresAt    time.Time
	c            *Client
}

// Key is the LockRequest's namespace/name.
func (l *Lock) Key() types.NamespacedName {
	return types.NamespacedName{Namespace: l.Namespace, Name: l.Name}
}

// WhoAmI is the caller's user name as the API server authenticates it (a SelfSubjectReview,
// what `kubectl auth whoami` asks): "alice", or "system:serviceaccount:ci:deployer" for a
// ServiceAccount. The admission policies (config/admission) compare spec.holder.owner with it.
func WhoAmI(ctx context.Context, c ctrlclient.Client) (string, error) {
	return whoami.Ask(ctx, c)
}

// AnnotationCreatedBy records who created a request: the client writes the caller's user
// name, as the admission policies do where they fill it in; where they do not (no
// MutatingAdmissionPolicy served), they require it (docs/install.md).
const AnnotationCreatedBy = whoami.AnnotationCreatedBy

// Create creates the LockRequest for r and returns it, without waiting.
func (c *Client) Create(ctx context.Context, r Request) (*locksv1.LockRequest, error) {
	lr := &locksv1.LockRequest{}
	lr.Namespace = c.namespace
	lr.Name = r.Name
	lr.GenerateName = r.GenerateName
	if lr.Name == "" && lr.GenerateName == "" {
		lr.GenerateName = "lock-"
	}
	lr.Spec.Locks = r.Locks
	lr.Spec.Holder = r.Holder
	self, err := c.self.Name(ctx, c.c)
	if err != nil {
		return nil, fmt.Errorf("default the owner to your identity: %w", err)
	}
	if lr.Spec.Holder.Owner == "" {
		lr.Spec.Holder.Owner = self
	}
	// guard:client-records-creator
	lr.Annotations = map[string]string{AnnotationCreatedBy: self}
	lr.Spec.Command = r.Command
	lr.Spec.Priority = r.Priority
	lr.Spec.Reason = r.Reason
	lr.Labels = map[string]string{}
	maps.Copy(lr.Labels, r.Labels)
	maps.Copy(lr.Labels, LabelsFor(&lr.Spec))
	if r.TTL > 0 {
		lr.Spec.TTL = &metav1.Duration{Duration: r.TTL}
	}
	if r.WaitTimeout != nil {
		lr.Spec.WaitTimeout = &metav1.Duration{Duration: *r.WaitTimeout}
	}
	if r.BypassFreeze != "" {
		lr.Spec.BypassFreeze = &locksv1.FreezeBypass{Reason: r.BypassFreeze}
	}
	if err := c.c.Create(ctx, lr); err != nil {
		return nil, fmt.Errorf("create lockrequest: %w", err)
	}
	return lr, nil
}

// Acquire creates a LockRequest and waits for its grant. If ctx ends first, or the request ends
// without a grant, the request is deleted (so it does not stay queued) and the error says why.
func (c *Client) Acquire(ctx context.Context, r Request) (*Lock, error) {
	lr, err := c.Create(ctx, r)
	if err != nil {
		return nil, err
	}
	return c.Await(ctx, lr)
}

// Await waits for the grant of a request this caller created (Create), and deletes the request
// if ctx ends first or it ends without a grant, as Acquire does.
func (c *Client) Await(ctx context.Context, lr *locksv1.LockRequest, opts ...WaitOption) (*Lock, error) {
	lock, err := c.Wait(ctx, lr.Name, opts...)
	if err != nil {
		// Leave nothing queued behind: a caller that gave up must not be granted later.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if derr := c.c.Delete(dctx, lr, ctrlclient.Preconditions{UID: &lr.UID}); derr != nil && !apierrors.IsNotFound(derr) {
			err = errors.Join(err, fmt.Errorf("delete abandoned lockrequest %s: %w", lr.Name, derr))
		}
		return nil, err
	}
	return lock, nil
}

// TryAcquire is Acquire with waitTimeout 0s: granted at once, or ErrBusy / ErrCommandLocked.
func (c *Client) TryAcquire(ctx context.Context, r Request) (*Lock, error) {
	zero := time.Duration(0)
	r.WaitTimeout = &zero
	return c.Acquire(ctx, r)
}

// WaitOption changes how Wait and Await wait.
type WaitOption func(*waitOptions)

type waitOptions struct {
	onChange func(*locksv1.LockRequest)
}

// OnChange has Wait call seen with the request as first read and after every change the watch
// delivers, until it is decided: a caller reports progress (its queue position, who holds the
// lock) from the same watch, with no polling of its own.
func OnChange(seen func(*locksv1.LockRequest)) WaitOption {
	return func(o *waitOptions) { o.onChange = seen }
}

// Wait watches the named LockRequest until it is granted or ends. It does not delete anything.
func (c *Client) Wait(ctx context.Context, name string, opts ...WaitOption) (*Lock, error) {
	var o waitOptions
	for _, opt := range opts {
		opt(&o)
	}
	key := types.NamespacedName{Namespace: c.namespace, Name: name}
	var lock *Lock
	decided := func(lr *locksv1.LockRequest) (bool, error) {
		if o.onChange != nil {
			o.onChange(lr)
		}
		l, done, err := c.outcome(lr)
		lock = l
		return done, err
	}
	err := c.until(ctx, name, func(lr *locksv1.LockRequest, listed bool) (bool, error) {
		switch {
		case lr == nil && listed:
			return false, fmt.Errorf("get lockrequest %s: %w", key, apierrors.NewNotFound(locksv1.GroupVersion.WithResource("lockrequests").GroupResource(), name))
		case lr == nil:
			return true, &NotGrantedError{Request: key, Phase: locksv1.PhaseReleased, Reason: locksv1.ReasonReleased,
				Message: "the LockRequest was deleted while waiting"}
		}
		return decided(lr)
	})
	if err != nil {
		return nil, err
	}
	return lock, nil
}

// until follows the LockRequest name as `kubectl wait` does: a reflector on that one object
// lists, watches, and lists again whenever the watch closes or its resourceVersion is too old
// (410 Gone). decide sees the object as first listed (listed true), then after every change
// (nil once deleted, or when a later list no longer has it); it ends the wait by returning true
// or an error. A wait that ctx ends returns ctx's error, wrapped.
//
// The reflector retries a failed list or watch after waitBackoff (100 ms doubling to 1 s), not
// client-go's informer default (800 ms doubling to 30 s, with as much again of jitter): after an
// API server restart a waiting runner saw its grant up to seconds after it was written. A watch
// answered 410 Gone relists at once (Relisting).
func (c *Client) until(ctx context.Context, name string, decide func(lr *locksv1.LockRequest, listed bool) (bool, error)) error {
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			var list locksv1.LockRequestList
			err := c.c.List(ctx, &list, ctrlclient.InNamespace(c.namespace), &ctrlclient.ListOptions{Raw: &o})
			return &list, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return c.c.Watch(ctx, &locksv1.LockRequestList{}, ctrlclient.InNamespace(c.namespace), &ctrlclient.ListOptions{Raw: &o})
		},
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st := &followed{name: name, decide: decide, stop: cancel}
	backoff := waitBackoff
	r := cache.NewReflectorWithOptions(Relisting(lw, &locksv1.LockRequest{}), &locksv1.LockRequest{}, st, cache.ReflectorOptions{Backoff: &backoff})
	r.RunWithContext(rctx)
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case st.err != nil:
		return st.err
	case st.done:
		return nil
	}
	return fmt.Errorf("waiting for lockrequest %s/%s: %w", c.namespace, name, ctx.Err())
}

// waitBackoff is how a waiting client's reflector retries a failed list or watch.
var waitBackoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.5, Cap: time.Second, Steps: math.MaxInt32}

// followed is the reflector's store for one followed object: it keeps nothing, and hands each
// state of the object to decide until decide ends the wait.
type followed struct {
	name   string
	decide func(lr *locksv1.LockRequest, listed bool) (bool, error)
	stop   context.CancelFunc
	mu     sync.Mutex
	listed bool // the first list was seen
	done   bool
	err    error
}

func (f *followed) see(lr *locksv1.LockRequest, listed bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done || f.err != nil {
		return nil
	}
	done, err := f.decide(lr, listed)
	f.done, f.err = done, err
	if done || err != nil {
		f.stop()
	}
	return nil
}

func (f *followed) Add(obj any) error {
	if lr, ok := obj.(*locksv1.LockRequest); ok && lr.Name == f.name {
		return f.see(lr, false)
	}
	return nil
}

func (f *followed) Update(obj any) error { return f.Add(obj) }

func (f *followed) Delete(obj any) error {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if lr, ok := obj.(*locksv1.LockRequest); ok && lr.Name == f.name {
		return f.see(nil, false)
	}
	return nil
}

// Replace is a list: the object as it is now, or its absence. The first list is "listed"; a
// later one (after a watch ended) that lacks the object means it was deleted meanwhile.
func (f *followed) Replace(items []any, _ string) error {
	f.mu.Lock()
	first := !f.listed
	f.listed = true
	f.mu.Unlock()
	for _, it := range items {
		if lr, ok := it.(*locksv1.LockRequest); ok && lr.Name == f.name {
			return f.see(lr, first)
		}
	}
	return f.see(nil, first)
}

func (f *followed) Resync() error { return nil }

// outcome turns a request's status into a Lock or an error, or says it is still pending.
func (c *Client) outcome(lr *locksv1.LockRequest) (*Lock, bool, error) {
	switch lr.Status.Phase {
	case locksv1.PhaseGranted:
		if lr.Spec.Release {
			break
		}
		return c.LockFor(lr), true, nil
	case locksv1.PhaseReleased, locksv1.PhaseExpired, locksv1.PhaseFailed:
		return nil, true, notGranted(lr)
	}
	return nil, false, nil
}

func notGranted(lr *locksv1.LockRequest) *NotGrantedError {
	e := &NotGrantedError{Request: types.NamespacedName{Namespace: lr.Namespace, Name: lr.Name}, Phase: lr.Status.Phase}
	if c := meta.FindStatusCondition(lr.Status.Conditions, locksv1.ConditionGranted); c != nil {
		e.Reason, e.Message = c.Reason, c.Message
	}
	return e
}

// Release releases the lock with spec.release, keeping the record (phase Released); the next
// waiter is granted. Releasing a lock that already ended returns its NotGrantedError (ErrLost if
// it expired or was taken away), so a caller learns that it did not hold the lock until now.
func (l *Lock) Release(ctx context.Context) error {
	var lr locksv1.LockRequest
	if err := l.c.c.Get(ctx, l.Key(), &lr); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("get lockrequest %s: %w", l.Key(), err)
	}
	if lr.UID != l.UID {
		return nil // ours was deleted; a namesake is not ours to release
	}
	if lr.Status.Phase.IsFinal() {
		if e := notGranted(&lr); e.Reason != locksv1.ReasonReleased {
			return e
		}
		return nil
	}
	patch := []byte(`{"spec":{"release":true}}`)
	if err := l.c.c.Patch(ctx, &lr, ctrlclient.RawPatch(types.MergePatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("release lockrequest %s: %w", l.Key(), err)
	}
	return nil
}

// Delete releases the lock by deleting its LockRequest: no record is kept.
func (l *Lock) Delete(ctx context.Context) error {
	lr := &locksv1.LockRequest{}
	lr.Namespace, lr.Name = l.Namespace, l.Name
	if err := l.c.c.Delete(ctx, lr, ctrlclient.Preconditions{UID: &l.UID}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete lockrequest %s: %w", l.Key(), err)
	}
	return nil
}

// Renew changes the grant's spec.ttl: the controller then runs the new ttl from the moment it
// sees the change (status.renewedAt). Renew waits for that and returns the new expiry. Setting
// the ttl the request already has changes nothing (the spec does not change). A ttl over the
// operator's --max-ttl is refused: the grant keeps its expiry and the error matches ErrInvalid.
// A lock that already ended returns its NotGrantedError (errors.Is(err, ErrLost)).
func (l *Lock) Renew(ctx context.Context, ttl time.Duration) (time.Time, error) {
	var lr locksv1.LockRequest
	if err := l.c.c.Get(ctx, l.Key(), &lr); err != nil {
		return time.Time{}, fmt.Errorf("get lockrequest %s: %w", l.Key(), err)
	}
	if lr.Status.Phase != locksv1.PhaseGranted {
		return time.Time{}, notGranted(&lr)
	}
	patch := fmt.Appendf(nil, `{"spec":{"ttl":%q}}`, ttl.String())
	if err := l.c.c.Patch(ctx, &lr, ctrlclient.RawPatch(types.MergePatchType, patch)); err != nil {
		return time.Time{}, fmt.Errorf("renew lockrequest %s: %w", l.Key(), err)
	}
	// The controller answers a spec change by writing expiresAt (and observedGeneration).
	gen := lr.Generation
	var refused error
	answered := func(cur *locksv1.LockRequest) (bool, error) {
		switch {
		case cur == nil:
			return true, &NotGrantedError{Request: l.Key(), Phase: locksv1.PhaseReleased, Reason: locksv1.ReasonReleased, Message: "the LockRequest was deleted"}
		case cur.Status.Phase.IsFinal():
			return true, notGranted(cur)
		case cur.Status.ObservedGeneration >= gen && cur.Status.ExpiresAt != nil:
			l.ExpiresAt = cur.Status.ExpiresAt.Time
			if c := meta.FindStatusCondition(cur.Status.Conditions, locksv1.ConditionGranted); c != nil && c.Reason == locksv1.ReasonRenewalRefused {
				refused = fmt.Errorf("renew lockrequest %s: %w: %s", l.Key(), ErrInvalid, c.Message)
			}
			return true, nil
		}
		return false, nil
	}
	err := l.c.until(ctx, l.Name, func(cur *locksv1.LockRequest, _ bool) (bool, error) { return answered(cur) })
	if err != nil {
		return time.Time{}, err
	}
	return l.ExpiresAt, refused
}

// WaitLost blocks while the lock stays granted. It returns the NotGrantedError that ended the
// grant (errors.Is(err, ErrLost) when it expired, was force-unlocked or its holder Lease lapsed;
// reason Released when it was released), or ctx's error. A runner uses it to stop work the
// moment its lock is gone.
func (l *Lock) WaitLost(ctx context.Context) error {
	key := l.Key()
	ended := func(lr *locksv1.LockRequest) (bool, error) {
		switch {
		case lr == nil:
			return true, &NotGrantedError{Request: key, Phase: locksv1.PhaseReleased, Reason: locksv1.ReasonReleased, Message: "the LockRequest was deleted"}
		case lr.UID != l.UID:
			return true, &NotGrantedError{Request: key, Phase: locksv1.PhaseReleased, Reason: locksv1.ReasonReleased, Message: "the LockRequest was deleted and re-created"}
		case lr.Status.Phase != locksv1.PhaseGranted:
			return true, notGranted(lr)
		}
		return false, nil
	}
	return l.c.until(ctx, l.Name, func(lr *locksv1.LockRequest, _ bool) (bool, error) { return ended(lr) })
}

// ReleaseByPull releases every LockRequest in the client's namespace that is not finished, whose
// holder is pull request pull, and one of whose locks is in repo: Atlantis's "unlock by pull",
// for a pull request that was closed or abandoned. It selects by the spec, not by the labels,
// so requests written by hand without labels are released too. It returns the requests it
// released, by name; errors of single releases are joined and the others still go ahead.
func (c *Client) ReleaseByPull(ctx context.Context, repo string, pull int64) ([]locksv1.LockRequest, error) {
	if repo == "" || pull <= 0 {
		return nil, fmt.Errorf("release by pull: want a repository and a pull number above 0, got %q and %d", repo, pull)
	}
	var list locksv1.LockRequestList
	if err := c.c.List(ctx, &list, ctrlclient.InNamespace(c.namespace)); err != nil {
		return nil, fmt.Errorf("list lockrequests in %s: %w", c.namespace, err)
	}
	var released []locksv1.LockRequest
	var errs []error
	for i := range list.Items {
		lr := &list.Items[i]
		if lr.Status.Phase.IsFinal() || lr.Spec.Release || lr.Spec.Holder.Pull != pull || !slices.ContainsFunc(lr.Spec.Locks, func(t locksv1.LockTarget) bool { return t.Repo == repo }) {
			continue
		}
		err := c.LockFor(lr).Release(ctx)
		var ng *NotGrantedError
		switch {
		case errors.As(err, &ng):
			continue // it ended on its own meanwhile: nothing left to release
		case err != nil:
			errs = append(errs, err)
			continue
		}
		released = append(released, *lr)
	}
	sort.Slice(released, func(i, j int) bool { return released[i].Name < released[j].Name })
	return released, errors.Join(errs...)
}
