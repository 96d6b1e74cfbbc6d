package dashboard

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
	"github.com/turnstile-dev/turnstile/internal/testing/wrappers"
	"github.com/turnstile-dev/turnstile/internal/workload"
)

const repo = "acme/infra"

// keyID is the page's id of a key: namespace/ProjectLock name.
func keyID(ns, path string) string {
	return ns + "/" + lockkey.Name(locksv1.LockTarget{Repo: repo, Path: path, Workspace: "default"})
}

func keyName(path string) string { return repo + "/" + path + "/default" }

// request creates a LockRequest with c and returns it.
func request(t *testing.T, c client.Client, w *wrappers.LockRequestWrapper) *locksv1.LockRequest {
	t.Helper()
	lr := w.Obj()
	if err := c.Create(context.Background(), lr); err != nil {
		t.Fatalf("create lockrequest %s: %v", lr.Name, err)
	}
	return lr
}

// waitPhase waits until the API server says the request is in phase.
func waitPhase(t *testing.T, c client.Client, ns, name string, phase locksv1.LockRequestPhase) *locksv1.LockRequest {
	t.Helper()
	var lr locksv1.LockRequest
	gomega.NewWithT(t).Eventually(func(g gomega.Gomega) {
		g.Expect(c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &lr)).To(gomega.Succeed())
		g.Expect(lr.Status.Phase).To(gomega.Equal(phase))
	}).WithTimeout(settle).WithPolling(20*time.Millisecond).Should(gomega.Succeed(), "lockrequest %s/%s never reached %s", ns, name, phase)
	return &lr
}

func releaseByAPI(t *testing.T, c client.Client, ns, name string) {
	t.Helper()
	lr := &locksv1.LockRequest{}
	lr.Namespace, lr.Name = ns, name
	if err := c.Patch(context.Background(), lr, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"release":true}}`))); err != nil {
		t.Fatal(err)
	}
}

// waiter is how T.waiters reads one queue row.
type waiter struct {
	Pos      string `json:"pos"`
	Request  string `json:"request"`
	Who      string `json:"who"`
	Priority string `json:"priority"`
	Aged     string `json:"aged"`
	Since    bool   `json:"since"`
	Reason   string `json:"reason"`
	Message  string `json:"message"`
	Actions  string `json:"actions"`
	// Workload is the gated Pod or Job the row names (null when none).
	Workload *string `json:"workload"`
}

// queued is a row of TestLiveQueue's queue behind pull #100 (alice).
func queued(pos int, request, who string, prio locksv1.Priority, of int) waiter {
	msg := fmt.Sprintf("locked by pull #100 (alice); position %d of %d", pos, of)
	return waiter{Pos: strconv.Itoa(pos), Request: request, Who: who, Priority: string(prio), Aged: string(prio), Since: true,
		Reason: locksv1.ReasonQueued, Message: locksv1.ReasonQueued + " " + msg}
}

// adminPage starts the harness, makes a namespace from prefix and opens the admin's page on it.
func adminPage(t *testing.T, prefix string) (*harness, string, *page) {
	t.Helper()
	h := setup(t)
	ns := h.namespace(t, prefix)
	return h, ns, h.open(t, h.adminURL, ns)
}

// TestLiveQueue: a key's holder and queue follow creates, a release and a hand-off, without a
// reload.
func TestLiveQueue(t *testing.T) {
	h, ns, p := adminPage(t, "dash-queue")
	id := keyID(ns, "modules/vpc")
	at := func(what string) string { return fmt.Sprintf("T.%s(%s)", what, jsString(id)) }

	p.expect("an empty namespace says so", `T.text(document.getElementById('no-keys'))`, "No lock key here yet.")
	p.expect("the admin's identity is shown", `T.text(document.getElementById('me'))`, "Acting as turnstile-admin")

	mk := func(name, owner string, pull int64, prio locksv1.Priority) *wrappers.LockRequestWrapper {
		w := wrappers.MakeLockRequest(name, ns).Lock(repo, "modules/vpc", "default").Owner(owner, pull).Command("plan")
		if prio != "" {
			w = w.Priority(prio)
		}
		return w
	}
	request(t, h.admin, mk("pr-100", "alice", 100, "").TTL(30*time.Minute))
	p.expect("the holder appears with the key", at("key")+`.holder`, "pull #100 (alice)")
	p.expect("its command is shown", at("key")+`.command`, "plan")
	p.expect("nobody waits yet", at("key")+`.queue`, "nobody waiting")
	p.expect("the expiry counts down", at("key")+`.expires.match(/^(29m|30m) \d\ds$/) !== null`, true)
	first := waitPhase(t, h.admin, ns, "pr-100", locksv1.PhaseGranted)
	p.expect("the fencing token is the key's", at("key")+`.token`, strconv.FormatInt(first.Status.FencingToken, 10))

	request(t, h.admin, mk("pr-101", "bob", 101, locksv1.PriorityNormal))
	p.expect("the first waiter queues", at("waiters"), []waiter{queued(1, "pr-101", "pull #101 (bob)", locksv1.PriorityNormal, 1)})
	request(t, h.admin, mk("pr-102", "carol", 102, locksv1.PriorityHigh))
	request(t, h.admin, mk("pr-103", "dave", 103, locksv1.PriorityLow))
	request(t, h.admin, mk("pr-104", "erin", 104, locksv1.PriorityNormal))
	request(t, h.admin, mk("pr-105", "frank", 105, locksv1.PriorityCritical))
	p.expect("the queue is in grant order: priority, then arrival", at("waiters"), []waiter{
		queued(1, "pr-105", "pull #105 (frank)", locksv1.PriorityCritical, 5),
		queued(2, "pr-102", "pull #102 (carol)", locksv1.PriorityHigh, 5),
		queued(3, "pr-101", "pull #101 (bob)", locksv1.PriorityNormal, 5),
		queued(4, "pr-104", "pull #104 (erin)", locksv1.PriorityNormal, 5),
		queued(5, "pr-103", "pull #103 (dave)", locksv1.PriorityLow, 5),
	})
	p.expect("the queue count", at("key")+`.queue`, "5 waiting")
	p.shot("busy-key")

	releaseByAPI(t, h.admin, ns, "pr-101")
	p.expect("a released waiter leaves and the others move up", at("waiters")+`.map((w) => w.pos + ' ' + w.request)`,
		[]string{"1 pr-105", "2 pr-102", "3 pr-104", "4 pr-103"})

	if err := h.admin.Delete(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	p.expect("the holder's deletion hands the key to the head of the queue", at("key")+`.holder`, "pull #105 (frank)")
	next := waitPhase(t, h.admin, ns, "pr-105", locksv1.PhaseGranted)
	p.expect("with a new fencing token", at("key")+`.token`, strconv.FormatInt(next.Status.FencingToken, 10))
	if next.Status.FencingToken <= first.Status.FencingToken {
		t.Errorf("fencing token went from %d to %d", first.Status.FencingToken, next.Status.FencingToken)
	}
	p.expect("the queue moved up", at("waiters")+`.map((w) => w.pos + ' ' + w.request)`, []string{"1 pr-102", "2 pr-104", "3 pr-103"})
	p.shot("hand-off")

	// A click whose press and release straddle an update of its key lands: the page keeps the
	// nodes an update does not change, as a person clicking on a busy key expects.
	forceUnlock := fmt.Sprintf(`tbody.key[data-id=%s] button[data-action="force-unlock"]`, jsString(id))
	x, y := p.center(forceUnlock)
	p.mouse(input.DispatchMouseEventTypeMousePressed, x, y)
	releaseByAPI(t, h.admin, ns, "pr-103")
	p.expect("the key changes between the press and the release", at("waiters")+`.map((w) => w.pos + ' ' + w.request)`, []string{"1 pr-102", "2 pr-104"})
	p.mouse(input.DispatchMouseEventTypeMouseReleased, x, y)
	p.expect("the click opens the force-unlock confirmation", `document.getElementById('confirm').open`, true)
	p.click("#confirm-cancel")
	p.expect("Cancel closes it", `document.getElementById('confirm').open`, false)

	// Collapse and expand the queue with the keyboard.
	toggle := fmt.Sprintf(`tbody.key[data-id=%s] button[data-action="toggle"]`, jsString(id))
	if err := chromedpFocusEnter(p, toggle); err != nil {
		t.Fatal(err)
	}
	p.expect("Enter on the queue button hides the queue", fmt.Sprintf(`T.body(%s).querySelector('tr.queue-row').hidden`, jsString(id)), true)
	p.expect("and says so to assistive technology", fmt.Sprintf(`document.querySelector(%s).getAttribute('aria-expanded')`, jsString(toggle)), "false")
	if err := chromedpFocusEnter(p, toggle); err != nil {
		t.Fatal(err)
	}
	p.expect("Enter again shows it", fmt.Sprintf(`T.body(%s).querySelector('tr.queue-row').hidden`, jsString(id)), false)
	p.notReloaded()
}

// TestRequesterSeesRBAC: a user bound only to the shipped requester role in one namespace sees
// what RBAC refuses her, releases her own request from the page, and her force-unlock is
// refused with the API server's Forbidden message, shown as is; then an admin force-unlocks
// from the page.
func TestRequesterSeesRBAC(t *testing.T) {
	h := setup(t)
	ns := h.aliceNS
	id := keyID(ns, "live/db")
	at := func(what string) string { return fmt.Sprintf("T.%s(%s)", what, jsString(id)) }
	mk := func(name, owner string, pull int64) *wrappers.LockRequestWrapper {
		return wrappers.MakeLockRequest(name, ns).Lock(repo, "live/db", "default").Owner(owner, pull)
	}
	request(t, h.admin, mk("carol-7", "carol", 7))
	holder := waitPhase(t, h.admin, ns, "carol-7", locksv1.PhaseGranted)
	request(t, h.alice, mk("alice-8", requester, 8))
	request(t, h.admin, mk("dave-9", "dave", 9))
	waitPhase(t, h.admin, ns, "dave-9", locksv1.PhasePending)

	p := h.open(t, h.aliceURL, "")
	p.expect("the page acts as the requester", `T.text(document.getElementById('me'))`, "Acting as alice")
	p.expect("it says she may not list namespaces, with RBAC's words",
		`T.text(document.getElementById('ns-problem')).includes('You may not list namespaces (cluster-wide). The API server said: namespaces is forbidden: User "alice" cannot list resource "namespaces"')`, true)
	p.expect("her namespace is still offered and selected", `document.getElementById('ns').value`, ns)
	p.expect("the freezes and events she may not read are named, with RBAC's words", `T.problems().map((p) => p.split(':')[0] + ': ' + /cannot list resource "(\w+)"/.exec(p)[1])`,
		[]string{"commandlocks: commandlocks", "events: events"})
	p.expect("she sees the key she may read", at("key")+`.holder`, "pull #7 (carol)")
	p.expect("she may release her own request, not another's", at("waiters")+`.map((w) => w.request + ': ' + w.actions)`,
		[]string{"alice-8: Release", "dave-9: "})

	// Keyboard: the force-unlock button opens the dialog, Escape cancels it and gives focus back.
	forceUnlock := fmt.Sprintf(`tbody.key[data-id=%s] button[data-action="force-unlock"]`, jsString(id))
	if err := chromedpFocusEnter(p, forceUnlock); err != nil {
		t.Fatal(err)
	}
	p.expect("Enter opens the confirmation", `document.getElementById('confirm').open`, true)
	p.expect("focus starts on Cancel", `document.activeElement.id`, "confirm-cancel")
	if err := chromedpKey(p, "\x1b"); err != nil {
		t.Fatal(err)
	}
	p.expect("Escape closes it", `document.getElementById('confirm').open`, false)
	p.expect("and focus returns to the button", `document.activeElement.dataset.action`, "force-unlock")

	p.click(`tbody.key[data-id="` + id + `"] tr.waiter[data-request="alice-8"] button[data-action="release"]`)
	p.confirm("Release alice-8?", "Sets spec.release on lockrequest "+ns+"/alice-8", "It leaves the queue of "+keyName("live/db")+" (position 1)")
	p.expect("the page says it was released", `T.text(document.getElementById('done'))`, "lockrequest "+ns+"/alice-8 released")
	p.expect("her request left the queue", at("waiters")+`.map((w) => w.pos + ' ' + w.request)`, []string{"1 dave-9"})
	waitPhase(t, h.admin, ns, "alice-8", locksv1.PhaseReleased)

	p.click(forceUnlock)
	p.confirm("Force-unlock "+keyName("live/db")+"?",
		"Deletes ProjectLock "+id,
		"pull #7 (carol) loses the lock (fencing token "+strconv.FormatInt(holder.Status.FencingToken, 10)+"): carol-7 become Released with reason ForceUnlocked",
		"pull #9 (dave) (dave-9) is next in the queue.")
	p.expect("the API server's Forbidden answer is shown as it is", `T.text(document.getElementById('alert'))`,
		`The API server refused (Forbidden, 403): projectlocks.locks.turnstile.dev "`+id[len(ns)+1:]+`" is forbidden: User "alice" cannot delete resource "projectlocks" in API group "locks.turnstile.dev" in the namespace "`+ns+`"`)
	p.shot("requester-forbidden")
	var pl locksv1.ProjectLock
	if err := h.admin.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: id[len(ns)+1:]}, &pl); err != nil || pl.Status.Holder == nil || pl.Status.Holder.Owner != "carol" {
		t.Fatalf("the refused force-unlock changed the lock: %v %+v", err, pl.Status.Holder)
	}
	p.notReloaded()

	// The admin's page, same namespace: the force-unlock goes through.
	a := h.open(t, h.adminURL, ns)
	a.expect("the admin sees the same key", at("key")+`.holder`, "pull #7 (carol)")
	a.click(forceUnlock)
	a.confirm("Force-unlock "+keyName("live/db")+"?", "Deletes ProjectLock "+id, "pull #7 (carol) loses the lock")
	a.expect("the page says what it did", `T.text(document.getElementById('done'))`, "projectlock "+id+" deleted: its holder is being released")
	a.expect("the next waiter holds the key", at("key")+`.holder`, "pull #9 (dave)")
	a.expect("the force-unlock is in the recent events", `T.events().some((e) => e[0] === 'ForceUnlocked' && e[1] === 'lockrequest/carol-7')`, true)
	p.expect("the requester's page follows too", at("key")+`.holder`, "pull #9 (dave)")
	waitPhase(t, h.admin, ns, "carol-7", locksv1.PhaseReleased)
	a.shot("force-unlocked")
	a.notReloaded()
}

// TestFreezeDraining: an admin freezes apply from the page while an apply holds a lock; the page
// shows the freeze draining, a frozen waiter, then Drained, and thaws it.
func TestFreezeDraining(t *testing.T) {
	h, ns, p := adminPage(t, "dash-freeze")
	request(t, h.admin, wrappers.MakeLockRequest("apply-300", ns).Lock(repo, "prod/network", "default").Owner("alice", 300).Command("apply"))
	waitPhase(t, h.admin, ns, "apply-300", locksv1.PhaseGranted)
	p.expect("no freeze yet", `T.text(document.getElementById('no-freezes'))`, "No command is frozen.")

	t.Cleanup(func() { _ = h.admin.Delete(context.Background(), &locksv1.CommandLock{ObjectMeta: objMeta("apply")}) })
	p.click(`details.freeze-form > summary`)
	p.typeInto("#freeze-command", "apply")
	p.typeInto("#freeze-reason", "maintenance window")
	p.typeInto("#freeze-until", "2h")
	p.click(`#freeze-form button[type="submit"]`)
	p.confirm("Freeze apply cluster-wide?", `Creates or updates CommandLock apply with locked: true, reason "maintenance window", until 2h.`,
		"Every request for apply, in every namespace, waits (CommandLocked)")
	p.expect("the freeze is listed, draining its holder", `T.freeze('apply')`, map[string]any{
		"reason": "maintenance window", "until": "1h 59m", "holders": "1", "waiting": "0", "drained": "Draining: 1 holder left",
	})

	request(t, h.admin, wrappers.MakeLockRequest("apply-301", ns).Lock(repo, "prod/dns", "default").Owner("bob", 301).Command("apply"))
	frozen := keyID(ns, "prod/dns")
	p.expect("a new apply waits, saying why", fmt.Sprintf(`T.waiters(%s).map((w) => w.request + ': ' + w.message)`, jsString(frozen)),
		[]string{"apply-301: CommandLocked Apply commands are locked globally: maintenance window; position 1 of 1"})
	p.expect("the freeze counts it", `T.freeze('apply').waiting`, "1")
	p.shot("freeze-draining")

	releaseByAPI(t, h.admin, ns, "apply-300")
	p.expect("once the holder is gone the freeze is Drained", `T.freeze('apply').drained`, "Drained")
	p.click(`tr.freeze[data-command="apply"] button[data-action="thaw"]`)
	p.confirm("Thaw apply?", "Sets locked: false on CommandLock apply.", "Requests for apply may be granted again: 1 waiting now")
	p.expect("the freeze is gone", `T.freeze('apply')`, nil)
	p.expect("the frozen apply is granted", fmt.Sprintf(`T.key(%s).holder`, jsString(frozen)), "pull #301 (bob)")
	p.notReloaded()
}

// TestDeadlock: two identities each hold what the other asks for; the page shows the victim
// leave the queue and the deadlock in the recent events.
func TestDeadlock(t *testing.T) {
	h, ns, p := adminPage(t, "dash-deadlock")
	mk := func(name, owner string, pull int64, path string) {
		request(t, h.admin, wrappers.MakeLockRequest(name, ns).Lock(repo, path, "default").Owner(owner, pull))
	}
	mk("alice-1-vpc", "alice", 1, "modules/vpc")
	mk("bob-2-dns", "bob", 2, "modules/dns")
	waitPhase(t, h.admin, ns, "alice-1-vpc", locksv1.PhaseGranted)
	waitPhase(t, h.admin, ns, "bob-2-dns", locksv1.PhaseGranted)
	mk("alice-1-dns", "alice", 1, "modules/dns")
	waitPhase(t, h.admin, ns, "alice-1-dns", locksv1.PhasePending)
	p.expect("alice#1 waits for bob#2", fmt.Sprintf(`T.waiters(%s).map((w) => w.request)`, jsString(keyID(ns, "modules/dns"))), []string{"alice-1-dns"})
	mk("bob-2-vpc", "bob", 2, "modules/vpc")
	waitPhase(t, h.admin, ns, "bob-2-vpc", locksv1.PhaseFailed)
	p.expect("the deadlock is in the recent events, naming the cycle",
		`T.events().filter((e) => e[0] === 'Deadlock').map((e) => e[1]).sort()`, []string{"lockrequest/alice-1-dns", "lockrequest/bob-2-vpc"})
	p.expect("the victim's message names the whole cycle",
		`T.events().some((e) => e[1] === 'lockrequest/bob-2-vpc' && e[2].includes('alice#1 waits for bob#2 on acme/infra/modules/dns/default'))`, true)
	p.expect("the victim left the queue", fmt.Sprintf(`T.waiters(%s)`, jsString(keyID(ns, "modules/vpc"))), []waiter{})
	p.shot("deadlock")
	p.notReloaded()
}

// TestGatedWorkloads: a key held by a gated Pod and waited for by a gated Job names both, as
// kubectl names them. The manager takes their locks (docs/gated-workloads.md); the admission
// policies are not installed here, so the test gives each workload the label, gate or suspend
// that the mutating policy would. Nothing runs them: no scheduler, no Job controller.
func TestGatedWorkloads(t *testing.T) {
	h, ns, p := adminPage(t, "dash-gated")
	id := keyID(ns, "db")
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{workload.LabelGated: "true"},
			Annotations: map[string]string{workload.AnnotationLock: repo + ":db"}}
	}
	spec := corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}
	pod := &corev1.Pod{ObjectMeta: meta("migrate-db"), Spec: *spec.DeepCopy()}
	pod.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: workload.SchedulingGate}}
	if err := h.admin.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, h.admin, ns, "pod-migrate-db", locksv1.PhaseGranted)
	job := &batchv1.Job{ObjectMeta: meta("apply-db"), Spec: batchv1.JobSpec{Suspend: ptr.To(true),
		Template: corev1.PodTemplateSpec{Spec: *spec.DeepCopy()}}}
	if err := h.admin.Create(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, h.admin, ns, "job-apply-db", locksv1.PhasePending)
	p.expect("the holder's row names its Pod", fmt.Sprintf(`T.key(%s).workload`, jsString(id)), "pod/migrate-db")
	p.expect("the waiter's row names its Job", fmt.Sprintf(`T.waiters(%s).map((w) => w.request + ' ' + w.workload)`, jsString(id)),
		[]string{"job-apply-db job/apply-db"})
	p.shot("gated-workloads")
	p.notReloaded()
}

// TestEscaping: what users write (a freeze's reason, a holder's owner and url) is shown as
// text, never run as markup.
func TestEscaping(t *testing.T) {
	h, ns, p := adminPage(t, "dash-escape")
	owner := `<img src=x onerror="window.__xss=1">`
	url := `https://example.com/pull/1?q="><script>window.__xss=2</script>`
	request(t, h.admin, wrappers.MakeLockRequest("xss", ns).Lock(repo, "xss", "default").Owner(owner, 1).URL(url))
	reason := "</td><img src=x onerror=\"window.__xss=3\">\n\nevent: view\ndata: {}"
	cl := &locksv1.CommandLock{ObjectMeta: objMeta("xss"), Spec: locksv1.CommandLockSpec{Locked: true, Reason: reason}}
	if err := h.admin.Create(context.Background(), cl); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.admin.Delete(context.Background(), cl) })
	id := jsString(keyID(ns, "xss"))
	p.expect("the owner is text", fmt.Sprintf(`T.key(%s).holder`, id), "pull #1 ("+owner+")")
	p.expect("the url is the link's address, intact", fmt.Sprintf(`T.body(%s).querySelector('a.who').href`, id),
		`https://example.com/pull/1?q=%22%3E%3Cscript%3Ewindow.__xss=2%3C/script%3E`)
	p.expect("the link does not send the page's URL (and its token) on", fmt.Sprintf(`T.body(%s).querySelector('a.who').rel`, id), "noopener noreferrer nofollow")
	p.expect("the reason is text, newlines and all", `document.querySelector('tr.freeze[data-command="xss"] td.reason').firstChild.textContent`, reason)
	p.expect("no markup from a user made an element", `document.querySelectorAll('main img, main script').length`, 0)
	p.expect("and nothing ran", `typeof window.__xss`, "undefined")
	p.notReloaded()
}

func objMeta(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name} }

// chromedpFocusEnter focuses sel and presses Enter, as a keyboard user does.
func chromedpFocusEnter(p *page, sel string) error {
	if err := p.onNode(chromedp.Focus(chromedp.CSS(sel), chromedp.NodeVisible)); err != nil {
		return fmt.Errorf("focus %s: %w", sel, err)
	}
	return chromedpKey(p, "\r")
}

// chromedpKey presses a key in the focused element.
func chromedpKey(p *page, key string) error {
	return chromedp.Do(p.ctx, chromedp.KeyEvent(key))
}

// TestActionsOverHTTP drives the running dashboard without the page: what a local process or a
// page on another site can and cannot make it do, and how a stale uid is refused by the API
// server.
func TestActionsOverHTTP(t *testing.T) {
	h := setup(t)
	ns := h.namespace(t, "dash-http")
	u, err := url.Parse(h.adminURL)
	if err != nil {
		t.Fatal(err)
	}
	token := u.Query().Get("token")
	origin := "http://" + u.Host
	lr := request(t, h.admin, wrappers.MakeLockRequest("stale", ns).Lock(repo, "http", "default").Owner("alice", 1))
	body := fmt.Sprintf(`{"namespace":%q,"name":"stale","uid":"not-%s"}`, ns, lr.UID)
	cases := map[string]struct {
		headers  map[string]string
		wantCode int
		wantBody string
	}{
		"no token":            {headers: map[string]string{"Origin": origin}, wantCode: 401, wantBody: "needs the token of its run"},
		"a page elsewhere":    {headers: map[string]string{"X-Turnstile-Token": token, "Origin": "https://evil.example"}, wantCode: 403, wantBody: "Origin does not match"},
		"a foreign Host name": {headers: map[string]string{"X-Turnstile-Token": token, "Origin": origin, "Host": "evil.example"}, wantCode: 421},
		"a request replaced since the page showed it is not released": {headers: map[string]string{"X-Turnstile-Token": token, "Origin": origin},
			wantCode: 422, wantBody: `lockrequest ` + ns + `/stale was replaced by a new one of the same name since the page showed it, so nothing was changed`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			code, got := post(t, origin+"/api/release", body, tc.headers)
			if code != tc.wantCode || !strings.Contains(got, tc.wantBody) {
				t.Errorf("%d %s, want %d with %q", code, got, tc.wantCode, tc.wantBody)
			}
		})
	}
	var now locksv1.LockRequest
	if err := h.admin.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "stale"}, &now); err != nil || now.Spec.Release {
		t.Errorf("a refused action changed the request: %v, release=%v", err, now.Spec.Release)
	}
}

// post sends an action with headers; a "Host" header sets the request's Host.
func post(t *testing.T, target, body string, headers map[string]string) (int, string) {
	t.Helper()
	r, err := http.NewRequest(http.MethodPost, target, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		if k == "Host" {
			r.Host = v
			continue
		}
		r.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}
