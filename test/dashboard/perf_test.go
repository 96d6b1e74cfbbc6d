package dashboard

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

// changes is how many writes the delay is measured over.
const changes = 100

// probe records, in the page, the wall-clock time at which the DOM first satisfies a condition:
// a MutationObserver checks it on every change, so how often Go asks does not matter.
const probe = `
window.__probe = {fn: null, seen: 0};
new MutationObserver(() => {
  const p = window.__probe;
  if (p.fn && !p.seen && p.fn()) p.seen = Date.now();
}).observe(document.body, {subtree: true, childList: true, characterData: true, attributes: true});
`

// measure arms the probe with cond, runs write, and returns the delay from just before the
// write to the page showing it.
func (p *page) measure(cond string, write func()) time.Duration {
	p.t.Helper()
	p.run(fmt.Sprintf(`window.__probe = {fn: () => { try { return !!(%s); } catch (e) { return false; } }, seen: 0};`, cond))
	start := time.Now()
	write()
	deadline := start.Add(settle)
	for {
		seen, err := chromedp.Run(p.ctx, chromedp.Evaluate[float64](`window.__probe.seen`))
		if err != nil {
			p.t.Fatal(err)
		}
		if seen > 0 {
			return time.Duration((seen - float64(start.UnixNano())/1e6) * float64(time.Millisecond))
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("the page never showed %s", cond)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func percentile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// TestWriteToPageDelay measures how long a write takes to show on the page, over 100 changes
// of each kind, and prints p50 and p99. Nothing is asserted about the timing.
func TestWriteToPageDelay(t *testing.T) {
	h := setup(t)
	ns := h.namespace(t, "dash-latency")
	p := h.open(t, h.adminURL, ns)
	p.run(probe)
	ctx := context.Background()

	// 1. A CommandLock's reason, patched: the dashboard's own path (watch, patch, page).
	cl := &locksv1.CommandLock{ObjectMeta: objMeta("latency"), Spec: locksv1.CommandLockSpec{Locked: true, Reason: "r-0"}}
	if err := h.admin.Create(ctx, cl); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.admin.Delete(context.Background(), cl) })
	p.expect("the freeze is shown", `T.freeze('latency').reason`, "r-0")
	var direct []time.Duration
	for i := 1; i <= changes; i++ {
		reason := fmt.Sprintf("r-%d", i)
		direct = append(direct, p.measure(fmt.Sprintf(`T.freeze('latency').reason === %s`, jsString(reason)), func() {
			patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"reason":%q}}`, reason))
			if err := h.admin.Patch(ctx, cl, patch); err != nil {
				t.Fatal(err)
			}
		}))
	}

	// 2. A LockRequest created on a free key, shown granted: through the manager's grant too.
	var granted []time.Duration
	for i := 1; i <= changes; i++ {
		path := fmt.Sprintf("lat/%03d", i)
		cond := fmt.Sprintf(`(() => { const k = T.key(%s); return k && k.holder === 'pull #%d (lat)' && /^\d+$/.test(k.token); })()`, jsString(keyID(ns, path)), i)
		granted = append(granted, p.measure(cond, func() {
			request(t, h.admin, wrappers.MakeLockRequest(fmt.Sprintf("lat-%03d", i), ns).Lock(repo, path, "default").Owner("lat", int64(i)))
		}))
	}
	p.notReloaded()
	if err := h.admin.DeleteAllOf(ctx, &locksv1.LockRequest{}, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}

	line1 := fmt.Sprintf("dashboard write→page delay over %d changes, CommandLock reason patched → shown: p50 %s, p99 %s",
		changes, ms(percentile(direct, .5)), ms(percentile(direct, .99)))
	line2 := fmt.Sprintf("dashboard write→page delay over %d changes, LockRequest created → shown granted (via the manager): p50 %s, p99 %s",
		changes, ms(percentile(granted, .5)), ms(percentile(granted, .99)))
	t.Log(line1)
	t.Log(line2)
	cleanups = append(cleanups, func() { fmt.Println(line1); fmt.Println(line2) })
}

// TestBusyNamespace: 100 keys, each held with 20 waiters, stay readable: every row is on the
// page, the filter finds one key, and a narrow window shows cards without sideways scrolling.
func TestBusyNamespace(t *testing.T) {
	h := setup(t)
	ns := h.namespace(t, "dash-busy")
	const keys, waiters = 100, 20
	p := h.open(t, h.adminURL, ns)

	// The requests arrive while the manager is stopped, as after an outage: the page shows them
	// unplaced ("new"), then the manager places them all at once when it starts. Created with
	// the manager running, each arrival would cost a queue rewrite, minutes on this machine.
	if err := h.manager.Stop(15 * time.Second); err != nil {
		t.Fatalf("stop the manager: %v", err)
	}
	start := time.Now()
	prios := []locksv1.Priority{locksv1.PriorityNormal, locksv1.PriorityHigh, locksv1.PriorityLow, locksv1.PriorityNormal}
	var jobs []*locksv1.LockRequest
	for k := range keys {
		path := fmt.Sprintf("stacks/s%03d", k)
		jobs = append(jobs, wrappers.MakeLockRequest(fmt.Sprintf("h-%03d", k), ns).Lock(repo, path, "default").Owner("ci", int64(k+1)).Command("apply").Obj())
	}
	for w := range waiters {
		for k := range keys {
			path := fmt.Sprintf("stacks/s%03d", k)
			jobs = append(jobs, wrappers.MakeLockRequest(fmt.Sprintf("w-%03d-%02d", k, w), ns).Lock(repo, path, "default").
				Owner(fmt.Sprintf("dev-%02d", w), int64(1000+w)).Priority(prios[w%len(prios)]).Command("plan").Obj())
		}
	}
	createAll(t, h.admin, jobs)
	created := time.Since(start)
	p.expectWithin(time.Minute, "every request is on the page, not yet placed",
		`[...document.querySelectorAll('#keys tr.waiter td.pos')].filter((c) => c.textContent === 'new').length`, keys*(waiters+1))
	dashCPU, err := cpuTime(h.dashboards["admin"].Pid())
	if err != nil {
		t.Fatal(err)
	}
	if err := h.startManager(); err != nil {
		t.Fatal(err)
	}
	placing := time.Now()

	// The manager places 2,100 requests at the API server's write rate: minutes on a loaded
	// 2-core machine, not the page's doing.
	p.expectWithin(5*time.Minute, "every key is on the page", `document.querySelectorAll('#keys tbody.key').length`, keys)
	p.expectWithin(5*time.Minute, "every waiter is on the page, placed by the controller",
		`[...document.querySelectorAll('#keys tr.waiter td.pos')].filter((c) => /^\d+$/.test(c.textContent)).length`, keys*waiters)
	p.expect("every key is held", `[...document.querySelectorAll('#keys tr.key-row td.holder .who')].length`, keys)
	placed := time.Since(placing)
	after, err := cpuTime(h.dashboards["admin"].Pid())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d requests over %d keys: created in %s; manager started → page shows every one placed in %s (dashboard CPU meanwhile %s)",
		len(jobs), keys, created.Round(time.Millisecond), placed.Round(time.Millisecond), (after - dashCPU).Round(time.Millisecond))
	p.expect("the count is in the heading", `T.text(document.getElementById('keys-count'))`, fmt.Sprintf("(%d)", keys))
	p.shot("busy-namespace")

	p.typeInto("#filter", "s042")
	shown := `[...document.querySelectorAll('#keys tbody.key')].filter((b) => b.getClientRects().length > 0).map((b) => T.text(b.querySelector('.key-text')))`
	p.expect("the filter leaves the one key", shown, []string{keyName("stacks/s042")})
	p.expect("and says how many it shows", `T.text(document.getElementById('keys-count'))`, fmt.Sprintf("(1 of %d shown)", keys))
	if err := chromedp.Do(p.ctx, chromedp.EmulateViewport(420, 900)); err != nil {
		t.Fatal(err)
	}
	p.expect("the filter still holds in a narrow window", shown, []string{keyName("stacks/s042")})
	p.expect("a narrow window turns rows into cards", `getComputedStyle(document.querySelector('#keys tr.key-row')).display`, "block")
	p.expect("and needs no sideways scrolling", `document.documentElement.scrollWidth <= window.innerWidth`, true)
	p.expect("every cell says what it is", `getComputedStyle(document.querySelector('#keys tr.waiter td.priority'), '::before').content`, `"Priority: "`)
	p.shot("narrow-window")
	p.notReloaded()
	// The 2,100 requests stay: this is the last test, and deleting them would only keep the
	// manager busy while everything stops.
}

// createAll creates objects with 8 clients at once.
func createAll(t *testing.T, c client.Client, objs []*locksv1.LockRequest) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(objs))
	next := make(chan *locksv1.LockRequest)
	for range 8 {
		wg.Go(func() {
			for o := range next {
				if err := c.Create(context.Background(), o); err != nil {
					errs <- err
				}
			}
		})
	}
	for _, o := range objs {
		next <- o
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
