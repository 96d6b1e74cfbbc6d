package lag

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/queue"
)

// Invariants checks states of the store, read live, against Turnstile's promises. It remembers
// the fencing tokens it has seen, so token order is checked across the states it is shown.
type Invariants struct {
	c client.Reader
	// Structural also checks the protocol's own invariant, which the promises rest on: a
	// request that holds a key is listed by that key's ProjectLock.
	Structural bool
	// NoOps, when set, also reports every update made through a View of this history that the
	// API server answered as a no-op (History.NoOps): the protocol makes none, since such a
	// write fences nothing.
	NoOps *History
	// Flags are the managers' freeze flags. Under --disable-global-apply-lock no CommandLock
	// holds apply back, so "all" does not speak for apply -- if its Drained condition says so
	// (queue.Governs).
	Flags queue.FreezeFlags

	tokens map[string]tenure // namespace/projectlock name -> the last holder seen
	// sharedSeen are the shared holdings seen: key + NUL + request UID.
	sharedSeen map[string]bool
	state      map[string]*locksv1.LockRequest // Replay's requests, by name
}

// tenure is what was seen of one key's current holder identity.
type tenure struct {
	identity locksv1.HolderID
	request  string
	start    int64 // the lowest per-key token the identity was seen with on the key
	ceiling  int64 // the highest token, per key or request-level, it was seen with
	before   int64 // the highest token any earlier holder of the key was seen with
	// exclusive is the highest token, per key or request-level, an exclusive holder of the key
	// was seen with; shared the highest per-key token a shared holder was seen with; counted
	// the highest per-key token a counted one (a counting lock) was seen with.
	exclusive, shared, counted int64
	// exclusiveID is the identity of the exclusive holder seen last: a shared request of its
	// own identity joins its holding re-entrant, with its token.
	exclusiveID locksv1.HolderID
}

// NewInvariants checks states read through c (a live client).
func NewInvariants(c client.Reader) *Invariants {
	return &Invariants{c: c, tokens: map[string]tenure{}}
}

// Check reads namespace ns (every namespace if "") and returns every broken promise:
//   - mutual exclusion: no key is held by two holder identities at once, by the requests' own
//     statuses (phase Granted, or a held flag);
//   - fencing: a key's token, as a reader of any of its holders sees it (the per-key token in
//     status.locks[], and the request-level status.fencingToken), never goes down, and a new
//     holder identity's tokens are above every token a previous holder of the key showed;
//   - Drained: a CommandLock in force that says Drained has no granted request of its command
//     (for "all": of any command, but apply when Flags and its Drained message exempt it);
//   - counting: no key is held by more requests than the lowest maxHolders among them, and a
//     counted holder's per-key token is its own: above every token a holder of the key showed
//     before it, and every later holder's is above it;
//   - with Structural, every request that holds a key is listed by the key's ProjectLock;
//   - with NoOps, no manager's update came back as a no-op.
func (inv *Invariants) Check(ctx context.Context, ns string) ([]string, error) {
	s, err := ReadState(ctx, inv.c, ns)
	if err != nil {
		return nil, err
	}
	out := inv.CheckState(s)
	if inv.NoOps != nil {
		for _, n := range inv.NoOps.NoOps(ns) {
			out = append(out, n.String())
		}
	}
	return out, nil
}

// State is the store as one check reads it.
type State struct {
	Requests     locksv1.LockRequestList
	ProjectLocks locksv1.ProjectLockList
	CommandLocks locksv1.CommandLockList
}

// ReadState lists namespace ns's requests and ProjectLocks, and every CommandLock.
func ReadState(ctx context.Context, c client.Reader, ns string) (*State, error) {
	var s State
	if err := c.List(ctx, &s.Requests, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	if err := c.List(ctx, &s.ProjectLocks, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	if err := c.List(ctx, &s.CommandLocks); err != nil {
		return nil, err
	}
	return &s, nil
}

// CheckState is Check on a state already read.
func (inv *Invariants) CheckState(st *State) []string {
	lrs, pls, cls := &st.Requests, &st.ProjectLocks, &st.CommandLocks
	reqs := make([]*locksv1.LockRequest, len(lrs.Items))
	for i := range lrs.Items {
		reqs[i] = &lrs.Items[i]
	}
	out, holders := inv.checkRequests(reqs)
	listed := map[string]map[string]bool{}
	for i := range pls.Items {
		pl := &pls.Items[i]
		set := map[string]bool{}
		for _, r := range pl.Status.HolderRequests() {
			set[r.UID] = true
		}
		listed[pl.Namespace+"/"+pl.Name] = set
	}

	if inv.Structural {
		for _, key := range sortedKeys(holders) {
			for _, h := range holders[key] {
				if !listed[key][string(h.lr.UID)] {
					out = append(out, fmt.Sprintf("structure: %s holds %s but the ProjectLock does not list it (exists: %v)", h.lr.Name, key, listed[key] != nil))
				}
			}
		}
	}

	for i := range cls.Items {
		cl := &cls.Items[i]
		if !cl.Spec.Locked || cl.Status.ObservedGeneration != cl.Generation ||
			!meta.IsStatusConditionTrue(cl.Status.Conditions, locksv1.ConditionLocked) ||
			!meta.IsStatusConditionTrue(cl.Status.Conditions, locksv1.ConditionDrained) {
			continue
		}
		drained := meta.FindStatusCondition(cl.Status.Conditions, locksv1.ConditionDrained)
		for j := range lrs.Items {
			lr := &lrs.Items[j]
			exempt := !queue.Governs(cl.Name, lr.Spec.Command, inv.Flags) && strings.Contains(drained.Message, "except "+lr.Spec.Command)
			if lr.Status.Phase == locksv1.PhaseGranted && lr.Spec.Command != "" &&
				(cl.Name == locksv1.CommandAll || lr.Spec.Command == cl.Name) && !exempt {
				out = append(out, fmt.Sprintf("drained: commandlock/%s says Drained while %s/%s (%s) is Granted", cl.Name, lr.Namespace, lr.Name, lr.Spec.Command))
			}
		}
	}
	return out
}

type holding struct {
	lr    *locksv1.LockRequest
	token int64 // per key, as the request reports it
}

// checkRequests checks one state of the requests: mutual exclusion and token order. It returns
// the broken promises and who holds each key.
func (inv *Invariants) checkRequests(reqs []*locksv1.LockRequest) ([]string, map[string][]holding) {
	var out []string
	holders := map[string][]holding{}
	for _, lr := range reqs {
		for _, l := range queue.HeldLocks(lr) {
			key := lr.Namespace + "/" + l.Name
			holders[key] = append(holders[key], holding{lr, keyToken(lr, l)})
		}
	}
	for _, key := range sortedKeys(holders) {
		hs := holders[key]
		ids := map[locksv1.HolderID][]string{}
		exclusive := false
		for _, h := range hs {
			id := h.lr.Spec.Holder.ID()
			ids[id] = append(ids[id], h.lr.Name)
			exclusive = exclusive || !queue.SharedOn(h.lr, keyName(key))
		}
		// A counting lock: at most the lowest maxHolders among the holders hold.
		bound := int32(0)
		for _, h := range hs {
			if b := queue.MaxHoldersOn(h.lr, keyName(key)); b > 0 && (bound == 0 || b < bound) {
				bound = b
			}
		}
		if bound > 0 && len(hs) > int(bound) {
			out = append(out, fmt.Sprintf("counting: %s is held by %d requests, one of them with maxHolders %d", key, len(hs), bound))
		}
		// No exclusive holder beside a holder of another identity; shared holders hold together.
		if len(ids) > 1 && exclusive {
			var parts []string
			for id, names := range ids {
				parts = append(parts, fmt.Sprintf("%s via %v", id, names))
			}
			sort.Strings(parts)
			out = append(out, fmt.Sprintf("mutual exclusion: %s is held by %d identities: %s", key, len(ids), strings.Join(parts, "; ")))
		}
		// One state says nothing of the order its holders came in: they are observed in token
		// order (an exclusive holder before a shared one of the same token), so a reader granted
		// before another is not judged as if it came after it. The order in time is Replay's,
		// which sees every event.
		// guard:lag-holders-in-token-order
		sort.SliceStable(hs, func(i, j int) bool {
			if hs[i].token != hs[j].token {
				return hs[i].token < hs[j].token
			}
			return !queue.SharedOn(hs[i].lr, keyName(key)) && queue.SharedOn(hs[j].lr, keyName(key))
		})
		for _, h := range hs {
			out = append(out, inv.observeToken(key, h.lr, h.token, exclusiveHolding(key, hs, h.lr))...)
		}
	}
	return out, holders
}

// Replay checks every state the requests of namespace ns went through in events (a stretch of
// the LockRequest history, in the store's order): mutual exclusion and token order after each
// event. Successive calls continue where the last one ended.
func (inv *Invariants) Replay(ns string, events []Event) []string {
	if inv.state == nil {
		inv.state = map[string]*locksv1.LockRequest{}
	}
	var out []string
	for _, ev := range events {
		lr, ok := ev.Object.(*locksv1.LockRequest)
		if !ok || lr.Namespace != ns {
			continue
		}
		if ev.Type == watch.Deleted {
			delete(inv.state, lr.Name)
			continue
		}
		inv.state[lr.Name] = lr
		reqs := make([]*locksv1.LockRequest, 0, len(inv.state))
		for _, r := range inv.state {
			reqs = append(reqs, r)
		}
		sort.Slice(reqs, func(i, j int) bool { return reqs[i].Name < reqs[j].Name })
		v, _ := inv.checkRequests(reqs)
		for _, s := range v {
			out = append(out, fmt.Sprintf("after %s of %s (rv %s): %s", ev.Type, lr.Name, lr.ResourceVersion, s))
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// keyToken is the token a request reports for one of its keys: the per-key token, or the
// request's token where a request written before per-key tokens has none.
func keyToken(lr *locksv1.LockRequest, l locksv1.LockStatus) int64 {
	if t := perKeyToken(l); t != 0 {
		return t
	}
	return lr.Status.FencingToken
}

// observeToken checks one holder of key against what was seen of the key before. A reader may
// pass the holder's per-key token or its request-level token to the system it fences: a new
// holder identity's tokens must be above every token an earlier holder showed, and within one
// identity's tenure the per-key token may rise (a re-issued grant) but never fall.
func (inv *Invariants) observeToken(key string, lr *locksv1.LockRequest, keyTok int64, reentrant bool) []string {
	var out []string
	id := lr.Spec.Holder.ID()
	reqTok := lr.Status.FencingToken
	if reqTok < keyTok {
		out = append(out, fmt.Sprintf("fencing: %s reports token %d for the request, below its token %d for %s", lr.Name, reqTok, keyTok, key))
	}
	t, seen := inv.tokens[key]
	if queue.SharedOn(lr, keyName(key)) {
		return append(out, inv.observeShared(key, lr, keyTok, t, reentrant)...)
	}
	switch {
	case !seen || t.identity != id:
		before := max(t.before, t.ceiling)
		if seen && keyTok <= before {
			out = append(out, fmt.Sprintf("fencing: %s (%s) holds %s with token %d, not above %d that %s (%s) or an earlier holder showed",
				lr.Name, id, key, keyTok, before, t.request, t.identity))
		}
		t = tenure{identity: id, request: lr.Name, start: keyTok, before: before}
	case keyTok < t.start:
		out = append(out, fmt.Sprintf("fencing: %s holds %s with token %d, below %d its identity %s held it with before", lr.Name, key, keyTok, t.start, id))
	}
	t.request = lr.Name
	t.ceiling = max(t.ceiling, keyTok, reqTok)
	t.exclusive = max(t.exclusive, keyTok, reqTok)
	t.exclusiveID = id
	inv.tokens[key] = t
	return out
}

// observeShared checks a shared holder of key. Shared holders of many identities hold together,
// each with its own token: one seen holding for the first time must show a token above every
// token, per key or request-level, an exclusive holder of the key showed before it (readers
// after a writer), and not below the per-key token of a shared holder seen before it (shared
// grants of one write share a token) — unless it joined, re-entrant, the holding of an
// exclusive holder of its own identity that holds the key in the same state (reentrant): it
// then shares that holding's per-key token, which is not below the identity's tenure start
// (as observeToken judges one identity's requests). A request-level token of the exclusive
// holder is its highest over all its keys, and says nothing of this key's holding: seed 3 of
// the shared simulation joined r0026 to r0020's holding at its token 1284 while r0020 showed
// 1290 for another key. The next exclusive holder is then a new tenure, above every token seen
// (a writer after readers of another identity: observeToken).
func (inv *Invariants) observeShared(key string, lr *locksv1.LockRequest, keyTok int64, t tenure, reentrant bool) []string {
	var out []string
	if inv.sharedSeen == nil {
		inv.sharedSeen = map[string]bool{}
	}
	seenKey := key + "\x00" + string(lr.UID)
	id := lr.Spec.Holder.ID()
	counted := queue.MaxHoldersOn(lr, keyName(key)) > 0
	switch {
	case inv.sharedSeen[seenKey]:
	// Re-entrant: beside its identity's exclusive holder in this state, or — when no other
	// identity held the key since that holder (t.identity and t.exclusiveID are still its) —
	// first seen after it left (CheckState reads the store now and then, and can miss the state
	// that showed them together).
	case (reentrant || t.exclusiveID == id) && t.identity == id:
		if keyTok < t.start {
			out = append(out, fmt.Sprintf("fencing: %s joins its identity's holding of %s shared with token %d, below %d its identity %s held it with before", lr.Name, key, keyTok, t.start, id))
		}
	default:
		if keyTok <= t.exclusive {
			out = append(out, fmt.Sprintf("fencing: %s holds %s shared with token %d, not above %d that an exclusive holder showed before", lr.Name, key, keyTok, t.exclusive))
		}
		if keyTok < t.shared {
			out = append(out, fmt.Sprintf("fencing: %s holds %s shared with token %d, below %d that a shared holder showed before", lr.Name, key, keyTok, t.shared))
		}
		// A counted grant's token is its own (one ProjectLock write each): above every shared
		// holder's before it, and every shared holder's after it above it.
		if keyTok <= t.counted {
			out = append(out, fmt.Sprintf("fencing: %s holds %s shared with token %d, not above %d that a counted holder showed before", lr.Name, key, keyTok, t.counted))
		}
		if counted && keyTok == t.shared {
			out = append(out, fmt.Sprintf("fencing: counted %s holds %s with token %d, which a shared holder showed before", lr.Name, key, keyTok))
		}
		if counted {
			t.counted = max(t.counted, keyTok)
		}
	}
	inv.sharedSeen[seenKey] = true
	// The next holder of another identity is a new tenure (observeToken checks it above every
	// token seen); one of this identity re-enters: an exclusive request of a reader's own
	// identity joins it, the whole holding then taking one new token.
	t.identity, t.request = id, lr.Name
	t.shared = max(t.shared, keyTok)
	t.ceiling = max(t.ceiling, keyTok, lr.Status.FencingToken)
	inv.tokens[key] = t
	return out
}

// exclusiveHolding reports whether a request of lr's identity holds key in Exclusive mode among
// hs (the key's holders in one state): a shared request of that identity then holds the key
// re-entrant, in that holding.
func exclusiveHolding(key string, hs []holding, lr *locksv1.LockRequest) bool {
	for _, h := range hs {
		if h.lr.Spec.Holder.ID() == lr.Spec.Holder.ID() && !queue.SharedOn(h.lr, keyName(key)) {
			return true
		}
	}
	return false
}

// keyName is the ProjectLock name of a "namespace/name" key.
func keyName(key string) string { return key[strings.LastIndexByte(key, '/')+1:] }

// perKeyToken is the token status.locks[] reports for one key.
func perKeyToken(l locksv1.LockStatus) int64 { return l.FencingToken }
