// Package dashboard tests `kubectl turnstile dashboard` in a real browser: headless Chromium
// (Debian's chromium package), driven from Go with chromedp, showing the real plugin binary's
// page, fed by a real kube-apiserver and etcd (envtest) and the real manager binary. Requests
// are created, queued, released and force-unlocked while the page is open, and every step is
// asserted on the page's DOM without a reload; a user bound only to the shipped requester role
// sees RBAC's answers on the page as they are.
//
// Run it with `make test` (it skips, saying so, where Chromium is missing; CI installs it with
// `make chromium` and fails instead of skipping), or alone with `make test-browser`, or:
//
//	make build && KUBEBUILDER_ASSETS=$PWD/bin/k8s/1.37.2-linux-amd64 go test -count=1 -v ./test/dashboard/
//
// Screenshots of every step go to bin/dashboard/screenshots, or to $TURNSTILE_SCREENSHOTS
// (`make dashboard-screenshots` writes the ones checked in under docs/dashboard). The suite
// prints how many DOM assertions passed and the write→page delay it measured.
package dashboard

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

const (
	// settle is how long the page may take to show a change. The dashboard shows a change in
	// tens of milliseconds; this only absorbs a loaded 2-core machine. Timing is measured and
	// printed by TestWriteToPageDelay, never asserted.
	settle = 15 * time.Second
	// requester is the user bound only to the shipped turnstile-requester role, in one namespace.
	requester = "alice"
)

var (
	once     sync.Once
	suite    *harness
	skipWhy  string
	setupErr error
	// domAssertions counts the DOM assertions that passed, printed at the end.
	domAssertions atomic.Int64
	// cleanups run after every test, in reverse order.
	cleanups []func()
	// unclean is set by a cleanup that found a process that did not exit cleanly: it fails the
	// run after the tests.
	unclean bool
)

func TestMain(m *testing.M) {
	code := m.Run()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	if n := domAssertions.Load(); n > 0 {
		fmt.Printf("dashboard browser tests: %d DOM assertions passed\n", n)
	}
	if unclean && code == 0 {
		fmt.Println("FAIL: a dashboard or the manager did not exit cleanly on SIGTERM (above)")
		code = 1
	}
	os.Exit(code)
}

// harness is what every test shares: the control plane, the manager, the two dashboards (an
// admin's and the requester's) and one browser.
type harness struct {
	root       string
	env        *framework.Env
	admin      client.Client
	alice      client.Client
	aliceNS    string
	adminURL   string
	aliceURL   string
	browser    context.Context
	screenshot string

	manager      *framework.Process
	managerLog   *os.File
	startManager func() error
	// dashboards are the dashboard processes, for their CPU time.
	dashboards map[string]*framework.Process
}

// setup starts everything once; a test that runs first pays for it.
func setup(t *testing.T) *harness {
	t.Helper()
	once.Do(func() { suite, skipWhy, setupErr = start() })
	if skipWhy != "" {
		t.Skip(skipWhy)
	}
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	return suite
}

// chromiumPath finds Debian's chromium on PATH, or $TURNSTILE_CHROMIUM; "" when it is missing.
func chromiumPath() string {
	if p := os.Getenv("TURNSTILE_CHROMIUM"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return ""
		}
		return p
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	return ""
}

func start() (*harness, string, error) {
	chromium := chromiumPath()
	if chromium == "" {
		msg := "chromium not found: the dashboard's browser tests need Debian's chromium package " +
			"(`make chromium` installs it; `make test-browser` and CI do that first)"
		if os.Getenv("CI") != "" || os.Getenv("TURNSTILE_REQUIRE_BROWSER") != "" {
			return nil, "", errors.New(msg + "; CI must run them, so this fails instead of skipping")
		}
		return nil, "SKIP: " + msg, nil
	}
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return nil, "", errors.New("KUBEBUILDER_ASSETS is not set: run through `make test` (it builds kube-apiserver, etcd and kubectl)")
	}
	root, err := framework.RepoRoot()
	if err != nil {
		return nil, "", err
	}
	h := &harness{root: root, aliceNS: "dash-alice"}
	managerBin := orEnv("TURNSTILE_MANAGER", filepath.Join(root, "bin", "manager"))
	pluginBin := orEnv("TURNSTILE_PLUGIN", filepath.Join(root, "bin", "kubectl-turnstile"))
	for _, b := range []string{managerBin, pluginBin} {
		if _, err := os.Stat(b); err != nil {
			return nil, "", fmt.Errorf("%s not found: run `make build` first: %w", b, err)
		}
	}
	h.screenshot = orEnv("TURNSTILE_SCREENSHOTS", filepath.Join(root, "bin", "dashboard", "screenshots"))
	if err := os.MkdirAll(h.screenshot, 0o755); err != nil {
		return nil, "", err
	}
	dir, err := os.MkdirTemp("", "turnstile-dashboard-")
	if err != nil {
		return nil, "", err
	}
	cleanups = append(cleanups, func() { _ = os.RemoveAll(dir) })

	h.env, err = framework.Start("")
	if err != nil {
		return nil, "", err
	}
	cleanups = append(cleanups, func() { _ = h.env.Stop() })
	h.admin = h.env.Client
	adminKubeconfig := filepath.Join(dir, "admin.kubeconfig")
	if err := h.env.WriteKubeconfig(adminKubeconfig); err != nil {
		return nil, "", err
	}
	ctx := context.Background()

	// The shipped roles, and the requester bound to turnstile-requester in one namespace only.
	for _, f := range []string{"lock_viewer_role.yaml", "lock_requester_role.yaml", "lock_admin_role.yaml"} {
		var role rbacv1.ClusterRole
		data, err := os.ReadFile(filepath.Join(root, "config", "rbac", f))
		if err != nil {
			return nil, "", err
		}
		if err := yaml.UnmarshalStrict(data, &role); err != nil {
			return nil, "", fmt.Errorf("%s: %w", f, err)
		}
		if err := h.admin.Create(ctx, &role); err != nil {
			return nil, "", fmt.Errorf("create %s: %w", f, err)
		}
	}
	if err := h.admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: h.aliceNS}}); err != nil {
		return nil, "", err
	}
	if err := h.admin.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "alice-requester", Namespace: h.aliceNS},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "turnstile-requester"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: requester}},
	}); err != nil {
		return nil, "", err
	}
	// alice's kubeconfig impersonates her with the admin's credentials: the API server
	// authorizes every call as alice.
	aliceKubeconfig := filepath.Join(dir, "alice.kubeconfig")
	cfg, err := clientcmd.LoadFromFile(adminKubeconfig)
	if err != nil {
		return nil, "", err
	}
	for _, ai := range cfg.AuthInfos {
		ai.Impersonate = requester
	}
	if err := clientcmd.WriteToFile(*cfg, aliceKubeconfig); err != nil {
		return nil, "", err
	}
	aliceCfg := rest.CopyConfig(h.env.Config)
	aliceCfg.Impersonate = rest.ImpersonationConfig{UserName: requester}
	if h.alice, err = client.New(aliceCfg, client.Options{Scheme: framework.Scheme}); err != nil {
		return nil, "", err
	}

	// The manager's log stays in bin/dashboard for a failure to be read.
	if err := os.MkdirAll(filepath.Join(root, "bin", "dashboard"), 0o755); err != nil {
		return nil, "", err
	}
	h.managerLog, err = os.Create(filepath.Join(root, "bin", "dashboard", "manager.log"))
	if err != nil {
		return nil, "", err
	}
	h.startManager = func() error {
		h.manager, err = framework.StartProcess(managerBin, adminKubeconfig, h.managerLog, "--metrics-bind-address=0", "--health-probe-bind-address=0")
		return err
	}
	if err := h.startManager(); err != nil {
		return nil, "", err
	}
	cleanups = append(cleanups, func() {
		if err := h.manager.Stop(15 * time.Second); err != nil {
			fmt.Printf("manager: %v (its log: %s)\n", err, h.managerLog.Name())
			unclean = true
		}
	})

	h.dashboards = map[string]*framework.Process{}
	if h.adminURL, h.dashboards["admin"], err = startDashboard(pluginBin, adminKubeconfig, "default"); err != nil {
		return nil, "", err
	}
	if h.aliceURL, h.dashboards[requester], err = startDashboard(pluginBin, aliceKubeconfig, h.aliceNS); err != nil {
		return nil, "", err
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.NoSandbox, // root in CI
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.UserDataDir(filepath.Join(dir, "chromium")),
		chromedp.WindowSize(1200, 800),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	browser, cancelBrowser := chromedp.NewContext(alloc)
	cleanups = append(cleanups, cancelAlloc, cancelBrowser)
	// Start the browser now, so a test's first step does not pay for it.
	if err := chromedp.Do(browser, chromedp.Navigate("about:blank")); err != nil {
		return nil, "", fmt.Errorf("start chromium %s: %w", chromium, err)
	}
	h.browser = browser
	return h, "", nil
}

func orEnv(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

var servingLine = regexp.MustCompile(`Serving the Turnstile dashboard at (http://\S+)`)

// startDashboard runs `kubectl-turnstile dashboard` as a person would, with a kubeconfig, and
// returns the URL it prints. It is stopped with SIGTERM at the end and must exit cleanly.
func startDashboard(plugin, kubeconfig, ns string) (string, *framework.Process, error) {
	out := &lineWatcher{found: make(chan string, 1), re: servingLine}
	p, err := framework.StartProcess(plugin, kubeconfig, out, "dashboard", "-n", ns)
	if err != nil {
		return "", nil, err
	}
	cleanups = append(cleanups, func() {
		if err := p.Stop(10 * time.Second); err != nil {
			fmt.Printf("dashboard (%s) did not stop cleanly: %v\n%s", kubeconfig, err, out.String())
			unclean = true
		}
	})
	select {
	case u := <-out.found:
		return u, p, nil
	case <-p.Done():
		return "", nil, fmt.Errorf("the dashboard exited: %w\n%s", p.Err(), out.String())
	case <-time.After(30 * time.Second):
		return "", nil, fmt.Errorf("the dashboard printed no URL within 30s:\n%s", out.String())
	}
}

// lineWatcher keeps a process's output and reports the first match of re.
type lineWatcher struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	re    *regexp.Regexp
	found chan string
	sent  bool
}

func (w *lineWatcher) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(b)
	if !w.sent {
		sc := bufio.NewScanner(bytes.NewReader(w.buf.Bytes()))
		for sc.Scan() {
			if m := w.re.FindStringSubmatch(sc.Text()); m != nil {
				w.found <- m[1]
				w.sent = true
				break
			}
		}
	}
	return len(b), nil
}

func (w *lineWatcher) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

var _ io.Writer = (*lineWatcher)(nil)

// namespace creates a fresh namespace for one test.
func (h *harness) namespace(t *testing.T, name string) string {
	t.Helper()
	if err := h.admin.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

// page is one browser tab showing a dashboard.
type page struct {
	t   *testing.T
	h   *harness
	ctx context.Context
}

// helpers are read-only functions the assertions call in the page. They read the DOM the way a
// person reads the page: the text in the cells.
const helpers = `
window.T = {
  text(e) { return e ? e.textContent.replace(/\s+/g, ' ').trim() : null; },
  body(id) { return document.querySelector('tbody.key[data-id="' + CSS.escape(id) + '"]'); },
  key(id) {
    const b = T.body(id);
    if (!b) return null;
    const r = b.querySelector('tr.key-row');
    const q = (s) => T.text(r.querySelector(s));
    return {holder: q('td.holder .who') || q('td.holder'), workload: q('td.holder .badge.workload'), command: q('td.holder .badge.cmd'), reason: q('td.holder .reason'),
      token: q('td.token'), expires: q('td.expires'), queue: q('td.queue-count'), badge: q('.key-name .badge'),
      actions: [...r.querySelectorAll('td.actions button')].map((x) => T.text(x))};
  },
  waiters(id) {
    const b = T.body(id);
    if (!b) return null;
    return [...b.querySelectorAll('tr.waiter')].map((w) => {
      const c = (s) => T.text(w.querySelector(s));
      return {pos: c('.pos'), request: c('.request'), who: c('.who'), workload: c('.badge.workload'), priority: c('.priority'), aged: c('.aged'),
        since: /ago$/.test(c('.since') || ''), reason: c('.why .badge'), message: c('.why'), actions: c('.actions')};
    });
  },
  freeze(cmd) {
    const r = document.querySelector('tr.freeze[data-command="' + CSS.escape(cmd) + '"]');
    if (!r) return null;
    const c = (s) => T.text(r.querySelector(s));
    return {reason: c('td.reason'), until: c('td.until'), holders: c('td.active'), waiting: c('td.blocked'), drained: c('td.drained')};
  },
  events() { return [...document.querySelectorAll('#events tr.event')].map((r) => [...r.children].slice(1).map((c) => T.text(c))); },
  problems() { return [...document.querySelectorAll('#problems .problem')].map((p) => p.dataset.resource + ': ' + T.text(p)); },
};
window.__marker = 'loaded-once';
`

// open shows url in a new tab of the shared browser, 1200×760, with the given namespace
// selected, and waits until the page is live.
func (h *harness) open(t *testing.T, url, ns string) *page {
	t.Helper()
	ctx, cancel := chromedp.NewContext(h.browser)
	t.Cleanup(cancel)
	p := &page{t: t, h: h, ctx: ctx}
	if ns != "" {
		url += "&ns=" + ns
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1200, 760), chromedp.Navigate(url)); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	p.run(helpers)
	p.expect("the page is live", `document.getElementById('conn').dataset.state`, "live")
	return p
}

// run evaluates js in the page.
func (p *page) run(js string) {
	p.t.Helper()
	if _, err := chromedp.Run(p.ctx, chromedp.Evaluate[any](js)); err != nil {
		p.t.Fatalf("evaluate %s: %v", js, err)
	}
}

// eval returns the JSON of what js evaluates to.
func (p *page) eval(js string) (string, error) {
	return chromedp.Run(p.ctx, chromedp.Evaluate[string]("JSON.stringify("+js+")"))
}

// expect polls js (an expression over the page, T's helpers included) until its value equals
// want, and counts one DOM assertion. The page never reloads: every test also checks that the
// marker set when it opened is still there.
func (p *page) expect(what, js string, want any) {
	p.t.Helper()
	p.expectWithin(settle, what, js, want)
}

// expectWithin is expect with its own timeout, for what waits on the manager at scale.
func (p *page) expectWithin(timeout time.Duration, what, js string, want any) {
	p.t.Helper()
	wantJSON, err := json.Marshal(want)
	if err != nil {
		p.t.Fatal(err)
	}
	var last string
	begin := time.Now()
	deadline := begin.Add(timeout)
	for {
		got, err := p.eval(js)
		if err == nil && jsonEqual(got, string(wantJSON)) {
			domAssertions.Add(1)
			if d := time.Since(begin); d > time.Second {
				p.t.Logf("slow (%s): %s", d, what)
			}
			return
		}
		if err != nil {
			last = "error: " + err.Error()
		} else {
			last = got
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s: the page never showed it within %s\n%s\n(-want +got):\n%s", what, timeout, js, jsonDiff(string(wantJSON), last))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func jsonEqual(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return a == b
	}
	return cmp.Equal(x, y)
}

func jsonDiff(want, got string) string {
	var x, y any
	if json.Unmarshal([]byte(want), &x) != nil || json.Unmarshal([]byte(got), &y) != nil {
		return fmt.Sprintf("want %s\ngot  %s", want, got)
	}
	return cmp.Diff(x, y)
}

// notReloaded asserts that the page is the one opened: every change arrived without a reload.
func (p *page) notReloaded() {
	p.t.Helper()
	p.expect("the page was never reloaded", `window.__marker`, "loaded-once")
}

// click clicks the element sel with the mouse, as a person would.
func (p *page) click(sel string) {
	p.t.Helper()
	if err := p.onNode(chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible)); err != nil {
		p.t.Fatalf("click %s: %v", sel, err)
	}
}

// center scrolls the element sel into view and returns the middle of its box, in the viewport.
func (p *page) center(sel string) (x, y float64) {
	p.t.Helper()
	got, err := p.eval(fmt.Sprintf(`(() => { const e = document.querySelector(%s); e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()`, jsString(sel)))
	var xy [2]float64
	if err == nil {
		err = json.Unmarshal([]byte(got), &xy)
	}
	if err != nil {
		p.t.Fatalf("the box of %s: %v", sel, err)
	}
	return xy[0], xy[1]
}

// mouse presses or releases the left button at x, y: half a click.
func (p *page) mouse(typ input.DispatchMouseEventType, x, y float64) {
	p.t.Helper()
	if err := chromedp.Do(p.ctx, chromedp.MouseEvent(typ, x, y, chromedp.ButtonType(input.MouseButtonLeft), chromedp.ClickCount(1))); err != nil {
		p.t.Fatalf("mouse %s at %.0f,%.0f: %v", typ, x, y, err)
	}
}

// typeInto types text into the input sel.
func (p *page) typeInto(sel, text string) {
	p.t.Helper()
	if err := p.onNode(chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible), chromedp.SendKeys(chromedp.CSS(sel), text)); err != nil {
		p.t.Fatalf("type into %s: %v", sel, err)
	}
}

// onNode runs actions that find a node and then act on it. An update of a key replaces the rows
// whose identity changed (putKey keeps the others), so the node found can be gone by the time
// the browser is asked for its box: the protocol then answers that it has no node with that id.
// A person's click would land on the new row, so the actions are run again on the new node,
// until settle.
func (p *page) onNode(actions ...chromedp.Action[chromedp.Void]) error {
	deadline := time.Now().Add(settle)
	for {
		err := chromedp.Do(p.ctx, actions...)
		if err == nil || !staleNode(err) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// staleNode reports whether err is the DevTools protocol's answer about a node the page has
// since removed.
func staleNode(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "Could not find node with given id") ||
		strings.Contains(msg, "No node with given id") ||
		strings.Contains(msg, "Node is detached from document")
}

// confirm checks that the confirmation dialog is open and names every change in wantChanges
// (each a substring of one item), then presses its confirm button.
func (p *page) confirm(title string, wantChanges ...string) {
	p.t.Helper()
	p.expect("the confirmation dialog opens", `document.getElementById('confirm').open`, true)
	p.expect("the dialog names the action", `T.text(document.getElementById('confirm-title'))`, title)
	for _, c := range wantChanges {
		p.expect("the dialog names what changes: "+c,
			fmt.Sprintf(`[...document.querySelectorAll('#confirm-changes li')].some((li) => li.textContent.includes(%q))`, c), true)
	}
	p.click("#confirm-ok")
	p.expect("the dialog closes", `document.getElementById('confirm').open`, false)
}

// shot saves a PNG of the viewport as NAME.png.
func (p *page) shot(name string) {
	p.t.Helper()
	// Let the countdowns tick and layout settle, so the picture shows what a person sees.
	time.Sleep(300 * time.Millisecond)
	shot, err := chromedp.Run(p.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		p.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(p.h.screenshot, name+".png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("screenshot %s (%d KiB)", path, len(shot)/1024)
}

// jsString quotes s for JavaScript.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return strings.ReplaceAll(string(b), "\u2028", `\u2028`)
}

// cpuTime is the CPU time (user + system) process pid has used, from /proc.
func cpuTime(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name, which is in parentheses and may hold spaces.
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	var utime, stime int64
	if _, err := fmt.Sscan(f[11], &utime); err != nil {
		return 0, err
	}
	if _, err := fmt.Sscan(f[12], &stime); err != nil {
		return 0, err
	}
	const clockTicks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}
