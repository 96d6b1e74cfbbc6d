package workdir

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnstile-dev/turnstile/internal/whoami"
)

const (
	// DefaultLeaseDuration is how long a replica's Lease stays valid without renewal: long enough
	// to ride out an API server hiccup, short enough that a dead replica's LockRequests are freed
	// quickly. It matches client-go's leader-election default.
	DefaultLeaseDuration = 15 * time.Second
	// leaseNamePrefix + the host name is the default Lease name.
	leaseNamePrefix = "turnstile-workdir-"
	// maxWriteAttempts bounds the re-Get-and-retry loop on conflicts within one renewal.
	maxWriteAttempts = 3
	// shutdownTimeout bounds giving the Lease up: the process is exiting and must not hang on
	// an unreachable API server; if deletion fails the Lease simply lapses.
	shutdownTimeout = 5 * time.Second
)

// HeartbeatOption configures a Heartbeat.
type HeartbeatOption interface {
	applyToHeartbeat(c *heartbeatConfig)
}

type heartbeatOptionFunc func(c *heartbeatConfig)

func (f heartbeatOptionFunc) applyToHeartbeat(c *heartbeatConfig) { f(c) }

type heartbeatConfig struct {
	clock     clock.Clock
	namespace string
	name      string
	identity  string
	duration  time.Duration
	onLost    func(error)
	hostname  func() (string, error)
}

// WithNamespace sets the Lease's namespace. Required: LockRequests can only name a Lease in
// their own namespace, so it is the namespace the runner's LockRequests live in.
func WithNamespace(namespace string) HeartbeatOption {
	return heartbeatOptionFunc(func(c *heartbeatConfig) { c.namespace = namespace })
}

// WithLeaseName sets the Lease's name; the default is "turnstile-workdir-<hostname>".
func WithLeaseName(name string) HeartbeatOption {
	return heartbeatOptionFunc(func(c *heartbeatConfig) { c.name = name })
}

// WithIdentity sets spec.holderIdentity. The default is "<hostname>_<random>", new for every
// process: a replica that restarts under the same host name then cannot silently continue its
// predecessor's Lease, which would keep the predecessor's LockRequests held although the
// commands behind them died with it. It waits for the old Lease to lapse instead.
func WithIdentity(identity string) HeartbeatOption {
	return heartbeatOptionFunc(func(c *heartbeatConfig) { c.identity = identity })
}

// WithLeaseDuration sets spec.leaseDurationSeconds (whole seconds, at least 3; default 15s).
// The Lease is renewed every third of it.
func WithLeaseDuration(d time.Duration) HeartbeatOption {
	return heartbeatOptionFunc(func(c *heartbeatConfig) { c.duration = d })
}

// WithOnLost sets a callback for the moment the replica must assume its Lease expired: renewals
// kept failing past renewTime + duration. It runs on the heartbeat's goroutine, once per loss,
// and should only signal (e.g. cancel the commands holding guards): until it returns, no
// renewal is attempted.
func WithOnLost(f func(error)) HeartbeatOption {
	return heartbeatOptionFunc(func(c *heartbeatConfig) { c.onLost = f })
}

// Heartbeat keeps one replica's Lease renewed and lists its guards on it.
type Heartbeat struct {
	store    leaseStore
	guards   *Guards
	clock    clock.Clock
	key      types.NamespacedName
	identity string
	duration time.Duration
	// period between renewals, and retry after a failed one: a failure is retried sooner so that
	// a transient error gets several more chances before the Lease expires.
	period, retry time.Duration
	onLost        func(error)

	running atomic.Bool
	// cached is the Lease as last read or written, so a renewal is a single Update carrying its
	// resourceVersion; nil forces a Get. Only Run's goroutine touches it.
	cached *coordinationv1.Lease

	mu sync.Mutex
	// lastRenew is the renewTime of the last successful renewal; zero before the first.
	lastRenew time.Time
	// lastErr is the error of the last renewal attempt, nil once one succeeds.
	lastErr error
	healthy bool
}

// NewHeartbeat returns the heartbeat of guards, writing Leases through c.
//
// c should read from the API server, not from a cache: a cache-backed client (a manager's
// default client) would start a cluster-wide Lease informer and need list/watch on Leases just
// for this. Use client.New, or exclude Leases from the manager's cache (client.CacheOptions
// DisableFor). The replica needs get, create, update and delete on leases.coordination.k8s.io in
// the namespace.
func NewHeartbeat(c client.Client, guards *Guards, opts ...HeartbeatOption) (*Heartbeat, error) {
	return newHeartbeat(clientStore{c: c, self: &whoami.Cache{}}, guards, opts...)
}

func newHeartbeat(store leaseStore, guards *Guards, opts ...HeartbeatOption) (*Heartbeat, error) {
	cfg := heartbeatConfig{clock: clock.RealClock{}, duration: DefaultLeaseDuration, hostname: os.Hostname}
	for _, o := range opts {
		o.applyToHeartbeat(&cfg)
	}
	if guards == nil {
		return nil, errors.New("workdir heartbeat: guards are required")
	}
	if cfg.namespace == "" {
		return nil, errors.New("workdir heartbeat: namespace is required (WithNamespace)")
	}
	if cfg.duration < 3*time.Second || cfg.duration%time.Second != 0 {
		return nil, fmt.Errorf("workdir heartbeat: lease duration must be whole seconds and at least 3s, got %s", cfg.duration)
	}
	if cfg.name == "" || cfg.identity == "" {
		host, err := cfg.hostname()
		if err != nil {
			return nil, fmt.Errorf("workdir heartbeat: default lease name and identity need the host name (or set WithLeaseName and WithIdentity): %w", err)
		}
		if cfg.name == "" {
			if cfg.name = leaseNameFor(host); cfg.name == "" {
				return nil, fmt.Errorf("workdir heartbeat: host name %q gives no valid lease name; set WithLeaseName", host)
			}
		}
		if cfg.identity == "" {
			cfg.identity = host + "_" + randomSuffix()
		}
	}
	if errs := validation.IsDNS1123Subdomain(cfg.name); len(errs) > 0 {
		return nil, fmt.Errorf("workdir heartbeat: lease name %q: %s", cfg.name, strings.Join(errs, "; "))
	}
	period := cfg.duration / 3
	return &Heartbeat{
		store:    store,
		guards:   guards,
		clock:    cfg.clock,
		key:      types.NamespacedName{Namespace: cfg.namespace, Name: cfg.name},
		identity: cfg.identity,
		duration: cfg.duration,
		period:   period,
		retry:    period / 2,
		onLost:   cfg.onLost,
	}, nil
}

// Lease is the Lease this heartbeat renews: what a runner puts in a LockRequest's
// spec.holder.lease so the request is released if this replica dies.
func (h *Heartbeat) Lease() types.NamespacedName { return h.key }

// Identity is the Lease's spec.holderIdentity.
func (h *Heartbeat) Identity() string { return h.identity }

// Healthy reports whether the Lease is known to be valid: renewed at least once and not lost
// since. A transient renewal failure does not make it unhealthy while the Lease still runs.
func (h *Heartbeat) Healthy() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.healthy
}

// LastRenew is the renewTime of the last successful renewal (zero before the first) and the
// error of the latest attempt since (nil when it succeeded): a holder that must stop its work
// before the Lease can lapse counts from the first, and says why with the second.
func (h *Heartbeat) LastRenew() (time.Time, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lastRenew, h.lastErr
}

// Run creates and renews the Lease until ctx is done, then deletes it (the replica gives its
// guards up, so no LockRequest waits for the Lease to lapse) and makes Guards refuse new locks
// with ErrLeaseLost. Renewal failures do not end Run; they are retried, and reported through
// WithOnLost and Healthy once the Lease must be assumed expired. Run returns nil after a clean
// shutdown, or the error of giving the Lease up.
func (h *Heartbeat) Run(ctx context.Context) error {
	if !h.running.CompareAndSwap(false, true) {
		return fmt.Errorf("workdir heartbeat %s: already running", h.key)
	}
	defer h.running.Store(false)
	for ctx.Err() == nil {
		wait := h.step(ctx)
		t := h.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C():
		}
	}
	return h.giveUp(ctx)
}

// Start is Run, so a Heartbeat can be added to a controller-runtime manager.
func (h *Heartbeat) Start(ctx context.Context) error { return h.Run(ctx) }

// NeedLeaderElection is false: every replica keeps its own Lease.
func (h *Heartbeat) NeedLeaderElection() bool { return false }

// step makes one renewal attempt, updates the health state, and says when to attempt next.
func (h *Heartbeat) step(ctx context.Context) time.Duration {
	now := h.clock.Now()
	// The timer may wake late (a stalled process) or exactly at the deadline: the Lease may
	// have lapsed before this attempt, whatever it returns.
	h.checkDeadline(now, errors.New("renewal is overdue"))

	timeout := h.period
	h.mu.Lock()
	if h.healthy {
		// Never let one attempt run past expiry: the loss must be noticed on time.
		timeout = min(timeout, h.lastRenew.Add(h.duration).Sub(now))
	}
	fresh := !h.healthy
	h.mu.Unlock()

	rctx, cancel := context.WithTimeout(ctx, timeout)
	err := h.renew(rctx, now, fresh)
	cancel()
	if ctx.Err() != nil {
		return 0
	}
	if err == nil {
		h.mu.Lock()
		h.lastRenew, h.lastErr = now, nil
		wasHealthy := h.healthy
		h.healthy = true
		h.mu.Unlock()
		if !wasHealthy {
			h.guards.clearLost()
		}
		return h.period
	}

	h.mu.Lock()
	h.lastErr = err
	h.mu.Unlock()
	after := h.clock.Now()
	h.checkDeadline(after, err)
	next := h.retry
	h.mu.Lock()
	if h.healthy {
		next = min(next, h.lastRenew.Add(h.duration).Sub(after))
	}
	h.mu.Unlock()
	return next
}

// checkDeadline declares the Lease lost once now has reached lastRenew + duration: from then on
// the operator may release every LockRequest naming it, so this replica may no longer start
// commands that rely on those requests. Before the first renewal there is nothing to lose.
func (h *Heartbeat) checkDeadline(now time.Time, cause error) {
	h.mu.Lock()
	if !h.healthy || now.Before(h.lastRenew.Add(h.duration)) {
		h.mu.Unlock()
		return
	}
	h.healthy = false
	lost := fmt.Errorf("%w: lease %s not renewed since %s: %w", ErrLeaseLost, h.key, formatTime(h.lastRenew), cause)
	h.mu.Unlock()

	h.guards.setLost(lost)
	if h.onLost != nil {
		h.onLost(lost)
	}
}

// renew writes the Lease for now: one Update of the cached copy in the common case, a re-Get on
// conflict, a Create when it does not exist. fresh starts a new incarnation (acquireTime,
// leaseTransitions), so observers can tell a replica that lost and regained its Lease, or a new
// process, from one that kept it.
func (h *Heartbeat) renew(ctx context.Context, now time.Time, fresh bool) error {
	held := h.guards.Held()
	for range maxWriteAttempts {
		lease := h.cached
		if lease == nil {
			got, err := h.store.get(ctx, h.key)
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return fmt.Errorf("renew lease %s: %w", h.key, err)
			default:
				lease = got
			}
		}
		if lease == nil {
			lease = h.newLease(now, held)
			err := h.store.create(ctx, lease)
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			if err != nil {
				return fmt.Errorf("create lease %s: %w", h.key, err)
			}
			h.cached = lease
			return nil
		}
		next, err := h.renewed(lease, now, held, fresh)
		if err != nil {
			h.cached = nil
			return fmt.Errorf("renew lease %s: %w", h.key, err)
		}
		// guard:heartbeat-relabels-lease
		if lease.Labels[LabelRole] == "" {
			// A Lease made without the label (by hand, or by an older heartbeat's predecessor)
			// is not protected by the admission policies, which also forbid adding the label
			// later, and the operator does not grant on it (HolderLeaseUnprotected). It is
			// lapsed or ours (renewed checked): delete it and create it anew, labelled.
			h.cached = nil
			if err := h.store.delete(ctx, lease); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return fmt.Errorf("re-create unlabelled lease %s: %w", h.key, err)
			}
			continue
		}
		err = h.store.update(ctx, next)
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			h.cached = nil
			continue
		}
		if err != nil {
			// The write may have happened anyway; read before writing again.
			h.cached = nil
			return fmt.Errorf("renew lease %s: %w", h.key, err)
		}
		h.cached = next
		return nil
	}
	return fmt.Errorf("renew lease %s: still conflicting after %d attempts", h.key, maxWriteAttempts)
}

func (h *Heartbeat) newLease(now time.Time, held []Held) *coordinationv1.Lease {
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   h.key.Namespace,
			Name:        h.key.Name,
			Labels:      map[string]string{LabelRole: RoleWorkdirGuard},
			Annotations: map[string]string{},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(h.identity),
			LeaseDurationSeconds: ptr.To(int32(h.duration / time.Second)),
			AcquireTime:          ptr.To(metav1.NewMicroTime(now)),
			RenewTime:            ptr.To(metav1.NewMicroTime(now)),
			LeaseTransitions:     ptr.To[int32](0),
		},
	}
	setGuardAnnotations(lease.Annotations, held)
	return lease
}

// renewed returns a copy of current renewed by this replica at now, or an error when another
// holder's Lease has not expired yet: two processes configured with one Lease name must not
// take turns overwriting each other's claim.
func (h *Heartbeat) renewed(current *coordinationv1.Lease, now time.Time, held []Held, fresh bool) (*coordinationv1.Lease, error) {
	holder := ptr.Deref(current.Spec.HolderIdentity, "")
	if holder != "" && holder != h.identity && !leaseLapsed(current, now) {
		until := "it is deleted"
		if expiry, _, ok := LeaseExpiry(current); ok {
			until = formatTime(expiry)
		}
		return nil, fmt.Errorf("held by %q until %s; is another process using this lease name?", holder, until)
	}
	lease := current.DeepCopy()
	if holder != h.identity || fresh {
		lease.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(now))
		lease.Spec.LeaseTransitions = ptr.To(ptr.Deref(lease.Spec.LeaseTransitions, 0) + 1)
	}
	lease.Spec.HolderIdentity = ptr.To(h.identity)
	lease.Spec.LeaseDurationSeconds = ptr.To(int32(h.duration / time.Second))
	lease.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now))
	if lease.Labels == nil {
		lease.Labels = map[string]string{}
	}
	lease.Labels[LabelRole] = RoleWorkdirGuard
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	setGuardAnnotations(lease.Annotations, held)
	return lease, nil
}

// giveUp ends the replica's claim: Guards refuse new locks first, so that no command starts
// while the Lease is being deleted, then the Lease is deleted if it is still this replica's.
func (h *Heartbeat) giveUp(ctx context.Context) error {
	h.mu.Lock()
	h.healthy = false
	h.mu.Unlock()
	h.guards.setLost(fmt.Errorf("%w: heartbeat of lease %s stopped", ErrLeaseLost, h.key))

	// ctx is already done; the deletion needs a context of its own.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	lease := h.cached
	h.cached = nil
	for range maxWriteAttempts {
		if lease == nil {
			got, err := h.store.get(dctx, h.key)
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("give up lease %s: %w", h.key, err)
			}
			lease = got
		}
		if ptr.Deref(lease.Spec.HolderIdentity, "") != h.identity {
			return nil
		}
		err := h.store.delete(dctx, lease)
		switch {
		case err == nil || apierrors.IsNotFound(err):
			return nil
		case apierrors.IsConflict(err):
			lease = nil
		default:
			return fmt.Errorf("give up lease %s: %w", h.key, err)
		}
	}
	return fmt.Errorf("give up lease %s: still conflicting after %d attempts", h.key, maxWriteAttempts)
}

// leaseNameFor turns a host name into a DNS-subdomain Lease name, or "" if nothing usable is left.
func leaseNameFor(host string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(host) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	s := strings.Trim(b.String(), "-.")
	if s == "" {
		return ""
	}
	name := leaseNamePrefix + s
	if len(name) > validation.DNS1123SubdomainMaxLength {
		name = strings.TrimRight(name[:validation.DNS1123SubdomainMaxLength], "-.")
	}
	if len(validation.IsDNS1123Subdomain(name)) > 0 {
		return ""
	}
	return name
}

func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}
