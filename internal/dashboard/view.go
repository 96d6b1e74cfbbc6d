package dashboard

import (
	"cmp"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
	"github.com/turnstile-dev/turnstile/internal/queue"
)

// maxEvents is how many recent events the page shows, newest first.
const maxEvents = 50

// shownEventReasons are the events the page lists: what an on-call engineer is paged about.
var shownEventReasons = map[string]bool{
	locksv1.ReasonDeadlock:      true,
	locksv1.ReasonExpired:       true,
	locksv1.ReasonForceUnlocked: true,
	locksv1.ReasonHolderLost:    true,
}

// Input is what the page is built from: the objects one scope's watches hold.
type Input struct {
	// Now is the server's clock, for aging the priorities of waiters the controller has not
	// placed yet.
	Now time.Time
	// AgingStep is the manager's --aging-step.
	AgingStep    time.Duration
	ProjectLocks []*locksv1.ProjectLock
	Requests     []*locksv1.LockRequest
	CommandLocks []*locksv1.CommandLock
	Events       []*corev1.Event
}

// View is the whole page's data. Every string in it is shown with textContent, never parsed as
// HTML; URLs are only set when they are http or https.
type View struct {
	Keys    []Key    `json:"keys"`
	Freezes []Freeze `json:"freezes"`
	Events  []Event  `json:"events"`
}

// Key is one lock key: its holder and its queue.
type Key struct {
	// ID identifies the row across updates: namespace/ProjectLock name.
	ID        string `json:"id"`
	Namespace string `json:"namespace"`
	// Name is the ProjectLock's name; UID is empty when no ProjectLock exists yet (requests
	// name the key but the controller has not created it).
	Name string `json:"name"`
	UID  string `json:"uid,omitempty"`
	Key  string `json:"key"`
	// Deleting is set while a force-unlock is in progress (the ProjectLock has a
	// deletionTimestamp and the controller is releasing its holder).
	Deleting *time.Time `json:"deleting,omitempty"`
	Holder   *Holder    `json:"holder,omitempty"`
	// Mode is how the key is held, Exclusive or Shared; empty when free.
	Mode string `json:"mode,omitempty"`
	// Shared are the key's shared holders, in grant order, each with its own token (Holder is
	// nil then).
	Shared []*Holder `json:"shared,omitempty"`
	// Token is the fencing token of the latest grant, as a decimal string: tokens may be larger
	// than a JavaScript number holds exactly.
	Token       string   `json:"token,omitempty"`
	QueueLength int      `json:"queueLength"`
	Queue       []Waiter `json:"queue"`
}

// Holder is who holds a key.
type Holder struct {
	Who      string          `json:"who"`
	Owner    string          `json:"owner"`
	Pull     int64           `json:"pull,omitempty"`
	URL      string          `json:"url,omitempty"`
	Requests []HolderRequest `json:"requests"`
	// Cluster is the fleet cluster the holder runs in (spec.holder.cluster of a spoke's request
	// on the hub); empty in one cluster. The Fleet tab's link to a spoke's requests filters on it.
	Cluster string `json:"cluster,omitempty"`
	// Workload is the gated Pod or Job that holds the key through its request ("pod/migrate-db",
	// docs/gated-workloads.md); empty for other holders.
	Workload string     `json:"workload,omitempty"`
	Command  string     `json:"command,omitempty"`
	Since    time.Time  `json:"since"`
	Expires  *time.Time `json:"expires,omitempty"`
	// Reason says why the grant is ending, when it is: "Releasing" (spec.release is set),
	// "Deleting" (the holding request is being deleted).
	Reason string `json:"reason,omitempty"`
	// Token is a shared holder's own fencing token, as a decimal string.
	Token string `json:"token,omitempty"`
}

// HolderRequest is one request through which the holder holds a key.
type HolderRequest struct {
	Name string `json:"name"`
	UID  string `json:"uid"`
}

// Waiter is one request in a key's queue.
type Waiter struct {
	// Position is the 1-based place in the queue; 0 for a request the controller has not
	// placed yet (it appears at the end).
	Position int    `json:"position"`
	Request  string `json:"request"`
	UID      string `json:"uid,omitempty"`
	Who      string `json:"who"`
	Owner    string `json:"owner"`
	Pull     int64  `json:"pull,omitempty"`
	URL      string `json:"url,omitempty"`
	// Cluster is the fleet cluster the waiter runs in, as Holder's.
	Cluster string `json:"cluster,omitempty"`
	// Workload is the gated Pod or Job that waits through this request ("job/apply-vpc").
	Workload string     `json:"workload,omitempty"`
	Command  string     `json:"command,omitempty"`
	Priority string     `json:"priority"`
	Aged     string     `json:"aged"`
	Since    *time.Time `json:"since,omitempty"`
	// Reason and Message are the request's Granted condition: why it waits ("Queued",
	// "CommandLocked") and what it was told.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// Freeze is a CommandLock that is locked.
type Freeze struct {
	Command string     `json:"command"`
	UID     string     `json:"uid"`
	Reason  string     `json:"reason,omitempty"`
	Until   *time.Time `json:"until,omitempty"`
	// InForce is false once until has passed (the controller thaws it).
	InForce bool  `json:"inForce"`
	Active  int32 `json:"active"`
	Blocked int32 `json:"blocked"`
	// Drained is "True" once no granted holder of the command is left, "False" while some
	// still run, "" before the controller has said.
	Drained string `json:"drained"`
	// Message is the Locked condition's message, e.g. the --disable-global-apply-lock override.
	Message string `json:"message,omitempty"`
}

// Event is one recent deadlock, expiry, force-unlock or lost holder.
type Event struct {
	UID       string    `json:"uid"`
	Time      time.Time `json:"time"`
	Reason    string    `json:"reason"`
	Namespace string    `json:"namespace"`
	Object    string    `json:"object"`
	Message   string    `json:"message"`
	Count     int32     `json:"count,omitempty"`
}

// Build turns the watched objects into the page's rows. It is pure: the same input gives the
// same view.
func Build(in Input) View {
	v := View{Keys: buildKeys(in), Freezes: buildFreezes(in), Events: buildEvents(in.Events)}
	return v
}

// waitingRef is a live request that waits for one of its keys.
type waitingRef struct {
	req *locksv1.LockRequest
	ref lockkey.Ref
}

// nsName names a namespaced object.
type nsName struct{ ns, name string }

func buildKeys(in Input) []Key {
	byName := map[nsName]*locksv1.LockRequest{}
	waiting := map[nsName][]waitingRef{} // ProjectLock -> requests waiting for it
	keyOf := map[nsName]string{}
	for _, r := range in.Requests {
		byName[nsName{r.Namespace, r.Name}] = r
		if r.DeletionTimestamp != nil || r.Status.Phase.IsFinal() || r.Spec.Release {
			continue
		}
		for _, ref := range lockkey.Refs(r.Spec.Locks) {
			if queue.HoldsKey(r, ref) {
				continue
			}
			k := nsName{r.Namespace, ref.Name}
			waiting[k] = append(waiting[k], waitingRef{r, ref})
			keyOf[k] = ref.Key
		}
	}

	keys := make([]Key, 0, len(in.ProjectLocks)+len(waiting))
	seen := map[nsName]bool{}
	for _, pl := range in.ProjectLocks {
		k := nsName{pl.Namespace, pl.Name}
		seen[k] = true
		row := Key{
			ID: pl.Namespace + "/" + pl.Name, Namespace: pl.Namespace, Name: pl.Name, UID: string(pl.UID),
			Key: lockkey.String(pl.Spec.LockTarget),
		}
		if pl.DeletionTimestamp != nil {
			t := pl.DeletionTimestamp.Time
			row.Deleting = &t
		}
		if pl.Status.FencingToken != 0 {
			row.Token = strconv.FormatInt(pl.Status.FencingToken, 10)
		}
		if h := pl.Status.Holder; h != nil {
			row.Holder = holderRow(h, pl.Namespace, byName)
		}
		row.Mode = string(pl.Status.Mode)
		for _, sh := range pl.Status.SharedHolders {
			h := holderRow(&locksv1.LockHolder{Owner: sh.Owner, Pull: sh.Pull, Session: sh.Session, Cluster: sh.Cluster, URL: sh.URL, Requests: []locksv1.HolderRequest{sh.Request},
				Since: sh.GrantedAt, ExpiresAt: sh.ExpiresAt}, pl.Namespace, byName)
			h.Token = strconv.FormatInt(sh.FencingToken, 10)
			row.Shared = append(row.Shared, h)
		}
		row.Queue = queueRows(pl, waiting[k], byName, in.Now, in.AgingStep)
		row.QueueLength = max(int(pl.Status.QueueLength), len(row.Queue))
		keys = append(keys, row)
	}
	// Keys that requests wait for but that have no ProjectLock yet: just asked for, or
	// force-unlocked and not yet re-created.
	for k, ws := range waiting {
		if seen[k] {
			continue
		}
		row := Key{ID: k.ns + "/" + k.name, Namespace: k.ns, Name: k.name, Key: keyOf[k]}
		row.Queue = queueRows(nil, ws, byName, in.Now, in.AgingStep)
		row.QueueLength = len(row.Queue)
		keys = append(keys, row)
	}
	slices.SortFunc(keys, func(a, b Key) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Key, b.Key), strings.Compare(a.Name, b.Name))
	})
	return keys
}

func holderRow(h *locksv1.LockHolder, ns string, byName map[nsName]*locksv1.LockRequest) *Holder {
	out := &Holder{
		Who: locksv1.Holder{Owner: h.Owner, Pull: h.Pull, Cluster: h.Cluster}.Describe(), Owner: h.Owner, Pull: h.Pull, URL: SafeURL(h.URL),
		Since: h.Since.Time, Requests: make([]HolderRequest, 0, len(h.Requests)), Cluster: h.Cluster,
	}
	if h.ExpiresAt != nil {
		t := h.ExpiresAt.Time
		out.Expires = &t
	}
	for _, hr := range h.Requests {
		out.Requests = append(out.Requests, HolderRequest{Name: hr.Name, UID: hr.UID})
		r := byName[nsName{ns, hr.Name}]
		if r == nil || string(r.UID) != hr.UID {
			continue
		}
		if out.Command == "" {
			out.Command = r.Spec.Command
		}
		if out.Workload == "" {
			out.Workload = workloadOf(r)
		}
		switch {
		case r.DeletionTimestamp != nil:
			out.Reason = "Deleting"
		case r.Spec.Release && out.Reason == "":
			out.Reason = "Releasing"
		}
	}
	return out
}

// queueRows lists a key's waiters in grant order: first the head the controller wrote into the
// ProjectLock (its word on order and aged priority), then waiters it has not listed there yet
// (beyond the head, or just created), by their own reported position, then arrival.
func queueRows(pl *locksv1.ProjectLock, ws []waitingRef, byName map[nsName]*locksv1.LockRequest, now time.Time, step time.Duration) []Waiter {
	rows := []Waiter{}
	listed := map[string]bool{}
	if pl != nil {
		for _, e := range pl.Status.Queue {
			r := byName[nsName{pl.Namespace, e.Request}]
			if r != nil && (r.DeletionTimestamp != nil || r.Status.Phase.IsFinal() || r.Spec.Release || !waitsFor(ws, r)) {
				continue // the ProjectLock's head is older than what the request says now
			}
			listed[e.Request] = true
			w := Waiter{Request: e.Request, Who: locksv1.Holder{Owner: e.Owner, Pull: e.Pull, Cluster: e.Cluster}.Describe(), Owner: e.Owner, Pull: e.Pull,
				Cluster: e.Cluster, Priority: string(locksv1.PriorityNormal), Aged: string(e.Priority)}
			if r != nil {
				fillWaiter(&w, r)
			}
			w.Position = len(rows) + 1
			rows = append(rows, w)
		}
	}
	var rest []waitingRef
	for _, wr := range ws {
		if !listed[wr.req.Name] {
			rest = append(rest, wr)
		}
	}
	slices.SortStableFunc(rest, func(a, b waitingRef) int {
		pa, pb := reportedPosition(a), reportedPosition(b)
		if pa != pb {
			if pa == 0 {
				return 1
			}
			if pb == 0 {
				return -1
			}
			return cmp.Compare(pa, pb)
		}
		return cmp.Or(compareTime(queuedAt(a.req), queuedAt(b.req)),
			a.req.CreationTimestamp.Compare(b.req.CreationTimestamp.Time), strings.Compare(a.req.Name, b.req.Name))
	})
	for _, wr := range rest {
		r := wr.req
		w := Waiter{Request: r.Name, Who: r.Spec.Holder.Describe(), Owner: r.Spec.Holder.Owner, Pull: r.Spec.Holder.Pull, Cluster: r.Spec.Holder.Cluster}
		fillWaiter(&w, r)
		waited := time.Duration(0)
		if w.Since != nil {
			waited = now.Sub(*w.Since)
		}
		w.Aged = string(rankName(queue.AgedPriority(locksv1.Priority(w.Priority), waited, step)))
		if r.Status.Phase != "" {
			w.Position = len(rows) + 1 // placed by the controller, after the head it wrote
		}
		rows = append(rows, w)
	}
	return rows
}

func waitsFor(ws []waitingRef, r *locksv1.LockRequest) bool {
	for _, w := range ws {
		if w.req == r {
			return true
		}
	}
	return false
}

// reportedPosition is the request's own status.queuePosition when it is about this key (the
// first key it does not hold), else 0.
func reportedPosition(w waitingRef) int32 {
	if first, ok := queue.FirstUnheld(w.req); ok && first.Name == w.ref.Name {
		return w.req.Status.QueuePosition
	}
	return 0
}

func queuedAt(r *locksv1.LockRequest) time.Time {
	if r.Status.QueuedAt != nil {
		return r.Status.QueuedAt.Time
	}
	return r.CreationTimestamp.Time
}

func compareTime(a, b time.Time) int { return a.Compare(b) }

func fillWaiter(w *Waiter, r *locksv1.LockRequest) {
	w.UID = string(r.UID)
	w.URL = SafeURL(r.Spec.Holder.URL)
	w.Command = r.Spec.Command
	w.Workload = workloadOf(r)
	w.Priority = string(cmp.Or(r.Spec.Priority, locksv1.PriorityNormal))
	if r.Status.QueuedAt != nil {
		t := r.Status.QueuedAt.Time
		w.Since = &t
	}
	if c := meta.FindStatusCondition(r.Status.Conditions, locksv1.ConditionGranted); c != nil && c.Status != metav1.ConditionTrue {
		w.Reason, w.Message = c.Reason, c.Message
	}
}

// workloadOf names the gated workload a request was made for, as kubectl names it
// ("pod/migrate-db", "job/apply-vpc"): the manager's stamp on the requests it makes for gated
// workloads (the annotation locks.turnstile.dev/workload), which the admission policy
// turnstile-workload-requests lets only the manager's ServiceAccount write. Not the session
// nor an ownerReference: whoever creates a request writes those. "" for any other request.
func workloadOf(r *locksv1.LockRequest) string {
	w := r.Annotations[annotationWorkload]
	if kind, name, ok := strings.Cut(w, "/"); ok && (kind == "pod" || kind == "job") && name != "" {
		return w
	}
	return ""
}

// annotationWorkload is internal/workload's AnnotationWorkload (the plugin does not link the
// manager's controllers).
const annotationWorkload = "locks.turnstile.dev/workload"

// rankName is the priority of a rank, the inverse of Priority.Rank.
func rankName(rank int) locksv1.Priority {
	for _, p := range []locksv1.Priority{locksv1.PriorityLow, locksv1.PriorityNormal, locksv1.PriorityHigh, locksv1.PriorityCritical} {
		if p.Rank() == rank {
			return p
		}
	}
	return locksv1.PriorityNormal
}

func buildFreezes(in Input) []Freeze {
	out := []Freeze{}
	for _, cl := range in.CommandLocks {
		locked := meta.FindStatusCondition(cl.Status.Conditions, locksv1.ConditionLocked)
		if !cl.Spec.Locked && (locked == nil || locked.Status != metav1.ConditionTrue) {
			continue
		}
		f := Freeze{
			Command: cl.Name, UID: string(cl.UID), Reason: cl.Spec.Reason,
			InForce: queue.IsLockInForce(cl, in.Now), Active: cl.Status.ActiveHolders, Blocked: cl.Status.BlockedRequests,
		}
		if cl.Spec.Until != nil {
			t := cl.Spec.Until.Time
			f.Until = &t
		}
		if d := meta.FindStatusCondition(cl.Status.Conditions, locksv1.ConditionDrained); d != nil && d.ObservedGeneration >= cl.Generation {
			f.Drained = string(d.Status)
		}
		// The Locked condition's message matters when it is not the plain freeze message: a
		// manager flag overrides the CommandLock (--disable-apply, --disable-global-apply-lock).
		if locked != nil && locked.ObservedGeneration >= cl.Generation && locked.Message != queue.FreezeMessage(cl.Name, cl.Spec.Reason) {
			f.Message = locked.Message
		}
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b Freeze) int { return strings.Compare(a.Command, b.Command) })
	return out
}

func buildEvents(events []*corev1.Event) []Event {
	out := []Event{}
	for _, e := range events {
		if !shownEventReasons[e.Reason] || !strings.HasPrefix(e.InvolvedObject.APIVersion, locksv1.GroupVersion.Group+"/") {
			continue
		}
		ev := Event{
			UID: string(e.UID), Time: eventTime(e), Reason: e.Reason, Namespace: e.Namespace,
			Object: strings.ToLower(e.InvolvedObject.Kind) + "/" + e.InvolvedObject.Name, Message: e.Message,
		}
		if e.Series != nil && e.Series.Count > 1 {
			ev.Count = e.Series.Count
		} else if e.Count > 1 {
			ev.Count = e.Count
		}
		out = append(out, ev)
	}
	slices.SortStableFunc(out, func(a, b Event) int {
		return cmp.Or(b.Time.Compare(a.Time), strings.Compare(a.UID, b.UID))
	})
	if len(out) > maxEvents {
		out = out[:maxEvents]
	}
	return out
}

// eventTime is when an event last happened, whichever API wrote it: events.k8s.io/v1 sets
// eventTime and series, core/v1 writers lastTimestamp.
func eventTime(e *corev1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.FirstTimestamp.IsZero():
		return e.FirstTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

// SafeURL returns s when it is an absolute http or https URL with a host, and "" otherwise, so
// the page never makes a link of javascript:, data: or a relative URL. Admission already
// refuses such a holder URL; this does not rely on it (an object from before the rule, or a
// cluster without the CRD's validation).
func SafeURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return ""
	}
	return u.String()
}
