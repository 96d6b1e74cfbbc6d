package sharding

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/turnstile-dev/turnstile/internal/whoami"
)

const (
	// LabelRole marks Turnstile's Leases by what they are for (as pkg/workdir's do).
	LabelRole = "locks.turnstile.dev/role"
	// RoleMember is LabelRole's value on membership Leases
	// (kubectl get leases -l locks.turnstile.dev/role=member).
	RoleMember = "member"
	// leasePrefix starts every membership Lease's name; the rest is the member's identity.
	leasePrefix = "turnstile-member-"
	// gcAfter is how long a member's Lease must have been lapsed before a live member deletes
	// it: every pod of a Deployment has a new name, so dead members' Leases would pile up.
	gcAfter = time.Minute
)

// Config sizes a Membership.
type Config struct {
	// Identity names this replica; unique per process (a restarted replica is a new member).
	Identity string
	// Namespace holds the membership Leases.
	Namespace string
	// Renew is how often this replica rewrites its Lease.
	Renew time.Duration
	// Lapse is how long a member's Lease may go unchanged before the others stop counting it.
	Lapse time.Duration
	// Backup is the delay before a replica decides a key it does not own.
	Backup time.Duration
}

// Validate says what is wrong with c, as a flag user would put it.
func (c Config) Validate() error {
	switch {
	case c.Identity == "" || c.Namespace == "":
		return fmt.Errorf("membership needs an identity and a namespace")
	case c.Renew <= 0 || c.Lapse <= c.Renew:
		return fmt.Errorf("membership needs 0 < renew interval (%s) < lapse (%s)", c.Renew, c.Lapse)
	case c.Backup < 0:
		return fmt.Errorf("backup delay (%s) must not be negative", c.Backup)
	}
	return nil
}

// Membership keeps this replica's Lease renewed, watches the others' and routes keys: it is
// the Router of the active-active mode and a manager Runnable.
type Membership struct {
	cfg       Config
	client    client.Client
	informers cache.Informers
	clock     clock.WithTicker
	// self is this replica's user name, recorded as its Lease's creator.
	self whoami.Cache

	// writeMu orders this replica's own Lease writes: no renewal after Leave's delete.
	writeMu  sync.Mutex
	mu       sync.Mutex
	seen     map[string]observation // by Lease name
	lease    *coordinationv1.Lease  // as last written by this replica
	live     atomic.Pointer[[]string]
	leaving  atomic.Bool
	onChange []func(live []string)
}

// observation is when a member's Lease was last seen to change, by this replica's clock: lapse
// is judged on the local clock, never by comparing another replica's clock with ours.
type observation struct {
	identity        string
	resourceVersion string
	changed         time.Time
}

// New builds the membership of cfg.Identity. c writes this replica's Lease; informers (the
// manager's cache) watch everyone's.
func New(cfg Config, c client.Client, informers cache.Informers, clk clock.WithTicker) *Membership {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Membership{cfg: cfg, client: c, informers: informers, clock: clk, seen: map[string]observation{}}
}

// OnChange adds a func told the sorted live members whenever they change.
func (m *Membership) OnChange(f func(live []string)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.onChange = append(m.onChange, f)
}

// Subscribe adds a func called whenever ownership may have changed: the
// routed work queues use it to decide at once the keys this replica has just come to own.
func (m *Membership) Subscribe(f func()) { m.OnChange(func([]string) { f() }) }

// Delay is 0 for a key this replica owns, or for every key while no member is known. A backup
// waits the backup delay times its rank for the key (rendezvous order): when the owner dies,
// the first backup acts after one delay and the next finds it done, instead of all of them
// racing for the same ProjectLock write at once. A replica that is not a member yet (it just
// started, or cannot renew its Lease) comes after every member.
func (m *Membership) Delay(key string) time.Duration {
	live := m.Live()
	if len(live) == 0 {
		return 0
	}
	return time.Duration(Rank(live, m.cfg.Identity, key)) * m.cfg.Backup
}

// Live is the sorted identities of the live members as this replica sees them.
func (m *Membership) Live() []string {
	if p := m.live.Load(); p != nil {
		return *p
	}
	return nil
}

// NeedLeaderElection is false: every replica is a member.
func (m *Membership) NeedLeaderElection() bool { return false }

// Start renews this replica's Lease until ctx ends, then deletes it (unless Leave did).
func (m *Membership) Start(ctx context.Context) error {
	inf, err := m.informers.GetInformer(ctx, &coordinationv1.Lease{})
	if err != nil {
		return fmt.Errorf("membership: lease informer: %w", err)
	}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { m.observe(o, false) },
		UpdateFunc: func(_, o any) { m.observe(o, false) },
		DeleteFunc: func(o any) { m.observe(o, true) },
	})
	if err != nil {
		return fmt.Errorf("membership: watch leases: %w", err)
	}
	defer func() { _ = inf.RemoveEventHandler(reg) }()

	renew := m.clock.NewTicker(m.cfg.Renew)
	defer renew.Stop()
	// Lapses are found by the clock, not by an event: look a few times per renewal.
	check := m.clock.NewTicker(m.cfg.Renew / 4)
	defer check.Stop()
	m.renew(ctx)
	for {
		select {
		case <-ctx.Done():
			leaveCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			return m.Leave(leaveCtx)
		case <-renew.C():
			m.renew(ctx)
			m.collect(ctx)
		case <-check.C():
			m.recompute()
		}
	}
}

// Leave deletes this replica's Lease and freezes its own view: the survivors own its keys as
// soon as they see the deletion, while it goes on deciding the keys it owned until it stops,
// so a rolling upgrade never leaves a key without someone acting on it at once.
func (m *Membership) Leave(ctx context.Context) error {
	m.writeMu.Lock()
	defer m.writeMu.Unlock()
	if m.leaving.Swap(true) {
		return nil
	}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: m.cfg.Namespace, Name: LeaseName(m.cfg.Identity)}}
	if err := m.client.Delete(ctx, l); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("membership: delete lease %s: %w", l.Name, err)
	}
	log.FromContext(ctx).Info("left the membership", "identity", m.cfg.Identity)
	return nil
}

// LeaseName is the membership Lease of identity.
func LeaseName(identity string) string { return leasePrefix + identity }

// renew writes this replica's Lease: create it, or move its renewTime on.
func (m *Membership) renew(ctx context.Context) {
	m.writeMu.Lock()
	defer m.writeMu.Unlock()
	if m.leaving.Load() {
		return
	}
	now := metav1.NewMicroTime(m.clock.Now())
	if m.lease == nil {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
			Namespace: m.cfg.Namespace, Name: LeaseName(m.cfg.Identity),
			Labels: map[string]string{LabelRole: RoleMember},
		}}
		l.Spec.HolderIdentity = &m.cfg.Identity
		secs := int32(math.Ceil(m.cfg.Lapse.Seconds()))
		l.Spec.LeaseDurationSeconds = &secs
		l.Spec.AcquireTime, l.Spec.RenewTime = &now, &now
		// Its creator recorded as the mutating admission policy would: where it does not run,
		// the validating policies require it of a labelled Lease (config/admission/filled.yaml).
		err := m.self.Stamp(ctx, m.client, l)
		if err == nil {
			err = m.client.Create(ctx, l)
		}
		if apierrors.IsAlreadyExists(err) {
			// A Lease of ours survived, from this same process: take it over.
			if err = m.client.Get(ctx, client.ObjectKeyFromObject(l), l); err == nil {
				l.Spec.RenewTime = &now
				err = m.client.Update(ctx, l)
			}
		}
		if err != nil {
			log.FromContext(ctx).Error(err, "membership: create lease")
			return
		}
		m.lease = l
		return
	}
	l := m.lease.DeepCopy()
	l.Spec.RenewTime = &now
	switch err := m.client.Update(ctx, l); {
	case err == nil:
		m.lease = l
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		// Deleted by a member that thought us dead, or rewritten: start again next time.
		m.lease = nil
	default:
		log.FromContext(ctx).Error(err, "membership: renew lease")
	}
}

// observe records a change of a membership Lease in our namespace.
func (m *Membership) observe(o any, deleted bool) {
	if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o, deleted = t.Obj, true
	}
	l, ok := o.(*coordinationv1.Lease)
	// A Lease labelled member in a namespace a team may write to is no member: only the
	// manager's namespace holds members (docs/threat-model.md).
	// guard:membership-own-namespace
	if !ok || l.Namespace != m.cfg.Namespace || l.Labels[LabelRole] != RoleMember {
		return
	}
	now := m.clock.Now()
	m.mu.Lock()
	if deleted {
		delete(m.seen, l.Name)
	} else if prev, ok := m.seen[l.Name]; !ok || prev.resourceVersion != l.ResourceVersion {
		m.seen[l.Name] = observe(l, ok, now)
	}
	m.mu.Unlock()
	m.recompute()
}

// observe is the observation of l at now. A Lease seen for the first time (this replica just
// started) counts from its own renewTime when that is in the past, so the Lease of a member
// that died long ago does not count as live for a whole lapse; a later change counts from now.
func observe(l *coordinationv1.Lease, seenBefore bool, now time.Time) observation {
	id := l.Name[min(len(l.Name), len(leasePrefix)):]
	if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
		id = *l.Spec.HolderIdentity
	}
	at := now
	if !seenBefore && l.Spec.RenewTime != nil && l.Spec.RenewTime.Time.Before(now) {
		at = l.Spec.RenewTime.Time
	}
	return observation{identity: id, resourceVersion: l.ResourceVersion, changed: at}
}

// liveMembers is the sorted identities whose Lease changed less than lapse before now.
func liveMembers(seen map[string]observation, now time.Time, lapse time.Duration) []string {
	var out []string
	for _, o := range seen {
		if now.Sub(o.changed) < lapse {
			out = append(out, o.identity)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// recompute publishes the live members. A leaving replica keeps the view it had.
func (m *Membership) recompute() {
	if m.leaving.Load() {
		return
	}
	m.mu.Lock()
	live := liveMembers(m.seen, m.clock.Now(), m.cfg.Lapse)
	changed := !slices.Equal(live, m.Live())
	if changed {
		m.live.Store(&live)
	}
	tell := slices.Clone(m.onChange)
	m.mu.Unlock()
	if changed {
		for _, f := range tell {
			f(live)
		}
	}
}

// collect deletes the Leases of members lapsed for gcAfter. Only the owner of a Lease's name
// deletes it, with its resourceVersion as precondition, so a member that comes back and renews
// keeps its Lease.
func (m *Membership) collect(ctx context.Context) {
	if len(m.Live()) == 0 {
		return // no member owns anything: nobody collects
	}
	now := m.clock.Now()
	m.mu.Lock()
	var dead []*coordinationv1.Lease
	for name, o := range m.seen {
		if now.Sub(o.changed) >= gcAfter && Judge(m, name).Owner {
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: m.cfg.Namespace, Name: name}}
			l.ResourceVersion = o.resourceVersion
			dead = append(dead, l)
		}
	}
	m.mu.Unlock()
	for _, l := range dead {
		rv := l.ResourceVersion
		err := m.client.Delete(ctx, l, client.Preconditions{ResourceVersion: &rv})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			log.FromContext(ctx).Error(err, "membership: delete lapsed lease", "lease", l.Name)
		}
	}
}
