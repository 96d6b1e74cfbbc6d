package dashboard

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/fleet/hub"
	"github.com/turnstile-dev/turnstile/internal/fleet/spoke"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	"github.com/turnstile-dev/turnstile/internal/testing/wrappers"
	"github.com/turnstile-dev/turnstile/internal/whoami"
	"github.com/turnstile-dev/turnstile/pkg/workdir"
)

// fleetHelpers read the Fleet tab as a person reads it.
const fleetHelpers = `
T.spokes = () => [...document.querySelectorAll('#fleet tr.spoke')].map((r) => {
  const c = (s) => T.text(r.querySelector(s));
  return {name: r.dataset.name, labels: c('.labels'), agent: c('.agent'), connection: c('.connection'), since: c('.since'), heartbeat: c('.heartbeat'), skew: c('.skew'),
    holders: c('.holders'), waiters: c('.waiters'), ready: c('.ready > span'), reason: c('.ready .reason'), unreachable: r.classList.contains('unreachable'),
    actions: [...r.querySelectorAll('td.actions button')].map((b) => T.text(b))};
});
T.spoke = (name) => T.spokes().find((s) => s.name === name) || null;
T.tab = () => document.querySelector('[role="tab"][aria-selected="true"]').id;
T.shownKeys = () => [...document.querySelectorAll('tbody.key')].filter((b) => !b.hidden).map((b) => b.dataset.id);
`

// spokeRow is how T.spokes reads one row of the Fleet tab.
type spokeRow struct {
	Name        string   `json:"name"`
	Labels      *string  `json:"labels"`
	Agent       *string  `json:"agent"`
	Connection  string   `json:"connection"`
	Since       string   `json:"since"`
	Heartbeat   string   `json:"heartbeat"`
	Skew        string   `json:"skew"`
	Holders     string   `json:"holders"`
	Waiters     string   `json:"waiters"`
	Ready       string   `json:"ready"`
	Reason      *string  `json:"reason"`
	Unreachable bool     `json:"unreachable"`
	Actions     []string `json:"actions"`
}

// heartbeats renews cluster's heartbeat Lease on the hub as its agent does (turnstile-fleet/
// spoke-<cluster>, created by the spoke's ServiceAccount, with the skew it measured), every
// second for leaseFor, until stop is called: then the Lease lapses, as when the spoke is cut off.
func heartbeats(t *testing.T, c client.Client, cluster string, leaseFor time.Duration) (stop func()) {
	t.Helper()
	renew := func() error {
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: hub.Namespace, Name: spoke.LeaseName(cluster)}}
		_, err := controllerutil.CreateOrUpdate(context.Background(), c, lease, func() error {
			lease.Labels = map[string]string{workdir.LabelRole: spoke.RoleSpoke, spoke.LabelCluster: cluster}
			lease.Annotations = map[string]string{
				whoami.AnnotationCreatedBy:   "system:serviceaccount:" + hub.Namespace + ":" + spoke.LeaseName(cluster),
				spoke.AnnotationClockSkew:    "0.042",
				spoke.AnnotationAgentVersion: "v0.4.1",
			}
			lease.Spec.HolderIdentity = ptr.To(spoke.LeaseName(cluster))
			lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
			lease.Spec.LeaseDurationSeconds = ptr.To(int32(leaseFor / time.Second))
			return nil
		})
		return err
	}
	if err := renew(); err != nil {
		t.Fatalf("renew the heartbeat Lease of %s: %v", cluster, err)
	}
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if err := renew(); err != nil {
					t.Errorf("renew the heartbeat Lease of %s: %v", cluster, err)
				}
			}
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { close(done); <-stopped }) }
	t.Cleanup(stop)
	return stop
}

// TestFleet: on a hub, the Fleet tab lists each spoke as the hub's manager keeps its Spoke
// (members from the members ConfigMap, the connection from the heartbeat Lease), follows a spoke
// that goes unreachable without a reload, and leads from a spoke to the keys its requests hold
// or wait for; a user who may not list Spokes is told so; without members there is no tab.
func TestFleet(t *testing.T) {
	h := setup(t)
	ctx := context.Background()
	ns := h.namespace(t, "dash-fleet")
	p := h.open(t, h.adminURL, ns)
	p.run(fleetHelpers)
	p.expect("a cluster without a fleet offers no Fleet tab", `document.getElementById('tabs').hidden`, true)

	// The hub's admin declares two members: the hub's manager (the real one) makes their Spokes.
	if err := h.admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: hub.Namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	members := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: hub.Namespace, Name: hub.MembersConfigMap},
		Data: map[string]string{"eu-west-1": `{"labels":{"region":"eu"}}`, "us-east-1": ""}}
	if err := h.admin.Create(ctx, members); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.IgnoreNotFound(h.admin.Delete(ctx, members)) })

	p.expect("the Fleet tab appears with the hub's members", `document.getElementById('tabs').hidden`, false)
	p.expect("it counts them", `T.text(document.getElementById('tab-fleet'))`, "Fleet (2)")
	p.expect("the Locks tab stays selected", `T.tab()`, "tab-locks")
	p.click("#tab-fleet")
	p.expect("the Fleet tab opens", `[T.tab(), document.getElementById('fleet-panel').hidden, document.getElementById('locks-panel').hidden]`,
		[]any{"tab-fleet", false, true})
	never := func(name string, labels *string) spokeRow {
		return spokeRow{Name: name, Labels: labels, Connection: "Never", Since: "—", Heartbeat: "—", Skew: "—", Holders: "0", Waiters: "0",
			Ready: "Not ready", Reason: ptr.To(locksv1.ReasonSpokeNeverConnected), Actions: []string{}}
	}
	p.expect("both members, never connected, each with why it is not Ready", `T.spokes()`,
		[]spokeRow{never("eu-west-1", ptr.To("region=eu")), never("us-east-1", nil)})

	// eu-west-1's agent renews its heartbeat Lease.
	stop := heartbeats(t, h.admin, "eu-west-1", 3*time.Second)
	p.expect("eu-west-1 turns Connected, Ready, with the skew its agent measured and its version", `(({connection, skew, agent, ready, reason, unreachable}) => ({connection, skew, agent, ready, reason, unreachable}))(T.spoke('eu-west-1'))`,
		map[string]any{"connection": "Connected", "skew": "42 ms", "agent": "agent v0.4.1", "ready": "Ready", "reason": nil, "unreachable": false})
	p.expect("its heartbeat is seconds old", `/^\d+s ago$/.test(T.spoke('eu-west-1').heartbeat)`, true)
	p.expect("the summary counts it", `T.text(document.getElementById('fleet-summary'))`,
		"(2 spokes: 1 connected, 0 unreachable, 1 never connected; 0 holding, 0 waiting)")

	// A request of eu-west-1 holds a key on the hub, one of us-east-1 waits for it; a request
	// of the hub's own holds another key.
	request(t, h.admin, wrappers.MakeLockRequest("eu-apply", ns).Lock(repo, "fleet/dns", "default").Owner("ci", 0).Cluster("eu-west-1"))
	waitPhase(t, h.admin, ns, "eu-apply", locksv1.PhaseGranted)
	request(t, h.admin, wrappers.MakeLockRequest("us-apply", ns).Lock(repo, "fleet/dns", "default").Owner("ci", 0).Cluster("us-east-1"))
	request(t, h.admin, wrappers.MakeLockRequest("local", ns).Lock(repo, "fleet/local", "default").Owner("ci", 0))
	waitPhase(t, h.admin, ns, "local", locksv1.PhaseGranted)
	p.expect("eu-west-1 holds one, us-east-1 waits for one", `['eu-west-1', 'us-east-1'].map((n) => [T.spoke(n).holders, T.spoke(n).waiters, T.spoke(n).actions])`,
		[]any{[]any{"1", "0", []string{"Show its requests"}}, []any{"0", "1", []string{"Show its requests"}}})

	// From eu-west-1's row to its requests: the Locks tab, in all namespaces, filtered on it.
	p.click(`#fleet tr.spoke[data-name="eu-west-1"] button[data-action="spoke-requests"]`)
	p.expect("the Locks tab opens, filtered on the cluster, in all namespaces", `[T.tab(), document.getElementById('filter').value, document.getElementById('ns').value]`,
		[]string{"tab-locks", "cluster:eu-west-1", "*"})
	p.expect("only the key its request holds is shown", `T.shownKeys()`, []string{keyID(ns, "fleet/dns")})
	p.expect("its holder is named with its cluster", fmt.Sprintf(`T.key(%s).holder`, jsString(keyID(ns, "fleet/dns"))), "ci in eu-west-1")
	if err := p.onNode(chromedp.Focus(chromedp.CSS("#filter"), chromedp.NodeVisible)); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{kb.End, " local"} {
		if err := chromedpKey(p, k); err != nil {
			t.Fatal(err)
		}
	}
	p.expect("another word narrows it further", `T.shownKeys()`, []string{})
	for range len(" local") {
		if err := chromedpKey(p, kb.Backspace); err != nil {
			t.Fatal(err)
		}
	}
	p.expect("and taken back, the cluster's key is shown again", `T.shownKeys()`, []string{keyID(ns, "fleet/dns")})

	// Keyboard: the arrow keys move between the tabs.
	if err := p.onNode(chromedp.Focus(chromedp.CSS("#tab-locks"), chromedp.NodeVisible)); err != nil {
		t.Fatal(err)
	}
	if err := chromedpKey(p, kb.ArrowRight); err != nil {
		t.Fatal(err)
	}
	p.expect("ArrowRight selects the Fleet tab and focuses it", `[T.tab(), document.activeElement.id]`, []string{"tab-fleet", "tab-fleet"})

	// eu-west-1 is cut off: its heartbeat Lease lapses, and the hub's manager says so.
	stop()
	p.expect("eu-west-1 turns Unreachable on the page, marked", `(({connection, ready, reason, unreachable, holders}) => ({connection, ready, reason, unreachable, holders}))(T.spoke('eu-west-1'))`,
		map[string]any{"connection": "Unreachable", "ready": "Not ready", "reason": locksv1.ReasonSpokeUnreachable, "unreachable": true, "holders": "1"})
	p.expect("the tab itself says so, seen from any tab", `T.text(document.getElementById('fleet-alarm'))`, "1 unreachable")
	p.expect("with the hub's message", `T.text(document.querySelector('#fleet tr.spoke[data-name="eu-west-1"] .ready .message')).startsWith('no hub Lease of spoke eu-west-1 is live')`, true)
	p.shot("fleet-unreachable")
	if err := chromedp.Do(p.ctx, chromedp.EmulateViewport(420, 900)); err != nil {
		t.Fatal(err)
	}
	p.expect("in a narrow window each spoke is a card, needing no sideways scrolling", `[getComputedStyle(document.querySelector('#fleet tr.spoke')).display, document.documentElement.scrollWidth <= window.innerWidth]`,
		[]any{"block", true})
	p.expect("every cell says what it is", `getComputedStyle(document.querySelector('#fleet tr.spoke td.heartbeat'), '::before').content`, `"Last heartbeat: "`)
	p.shot("fleet-narrow")
	if err := chromedp.Do(p.ctx, chromedp.EmulateViewport(1200, 760)); err != nil {
		t.Fatal(err)
	}
	p.notReloaded()

	// A page opened on the Fleet tab (its URL keeps the tab) starts from the whole tab as it is.
	q := h.open(t, h.adminURL+"&tab=fleet", ns)
	q.run(fleetHelpers)
	q.expect("a page opened with tab=fleet shows the Fleet tab, as it is now", `[T.tab(), T.spoke('eu-west-1').connection, T.spoke('us-east-1').connection]`,
		[]string{"tab-fleet", "Unreachable", "Never"})

	// A user who may not list Spokes (alice: no turnstile-freeze-viewer here) is told so.
	a := h.open(t, h.aliceURL, "")
	a.expect("alice's page offers the Fleet tab", `document.getElementById('tabs').hidden`, false)
	a.click("#tab-fleet")
	a.expect("it says she may not list Spokes, with RBAC's words", `T.text(document.getElementById('fleet-problem'))`,
		`You may not list spokes (cluster-wide). The API server said: spokes.locks.turnstile.dev is forbidden: User "alice" cannot list resource "spokes" in API group "locks.turnstile.dev" at the cluster scope`)
	a.expect("and shows no spokes", `document.getElementById('fleet').hidden`, true)

	// A user with no other right than the shipped turnstile-freeze-viewer ClusterRole (which a
	// real install binds to every authenticated user) sees the fleet.
	b := h.open(t, dashboardAs(t, h, "bob", "turnstile-freeze-viewer"), "")
	b.run(fleetHelpers)
	b.click("#tab-fleet")
	b.expect("bob, bound only to turnstile-freeze-viewer, sees both spokes and no problem", `[T.spokes().map((s) => s.name + ' ' + s.connection), document.getElementById('fleet-problem').hidden]`,
		[]any{[]string{"eu-west-1 Unreachable", "us-east-1 Never"}, true})

	// The members removed: the Spokes go, and so does the tab.
	if err := h.admin.Delete(ctx, members); err != nil {
		t.Fatal(err)
	}
	p.expect("without members the Fleet tab goes, and the page shows the locks", `[document.getElementById('tabs').hidden, document.getElementById('locks-panel').hidden, T.tab()]`,
		[]any{true, false, "tab-locks"})
	p.notReloaded()
}

// TestNotAHub: a cluster whose API server serves no Spokes (a Turnstile from before the fleet,
// or one installed without the Spoke CRD) gets the page it always had: no Fleet tab, no
// problem, no error. Its own control plane, with the three other CRDs only.
func TestNotAHub(t *testing.T) {
	h := setup(t)
	// envtest logs through controller-runtime's logger, which nothing here reads: without one it
	// prints a warning with a stack when the process is older than 30s.
	ctrllog.SetLogger(logr.Discard())
	env, err := framework.StartBare("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	var crds []string
	for _, r := range []string{"projectlocks", "lockrequests", "commandlocks"} {
		crds = append(crds, filepath.Join(h.root, "config", "crd", "bases", "locks.turnstile.dev_"+r+".yaml"))
	}
	if _, err := envtest.InstallCRDs(env.Config, envtest.CRDInstallOptions{Paths: crds, ErrorIfPathMissing: true}); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	url, dash, err := startDashboard(orEnv("TURNSTILE_PLUGIN", filepath.Join(h.root, "bin", "kubectl-turnstile")), kubeconfig, "default")
	if err != nil {
		t.Fatal(err)
	}
	// Stopped before its control plane (the cleanups run last first); TestMain's stop of it
	// then finds it gone.
	t.Cleanup(func() {
		if err := dash.Stop(10 * time.Second); err != nil {
			t.Errorf("the dashboard did not stop cleanly: %v", err)
		}
	})

	// What the stream says, as the page reads it: the Fleet tab is not served.
	frames := streamFrames(t, url, "view")
	if got, want := frames["fleet"], `{"served":false,"spokes":[],"summary":{"spokes":0,"connected":0,"unreachable":0,"never":0,"holders":0,"waiters":0}}`; !jsonEqual(dropNow(t, got), want) {
		t.Errorf("the fleet message:\n%s\nwant (now aside):\n%s", got, want)
	}

	p := h.open(t, url, "default")
	p.expect("no Fleet tab", `[document.getElementById('tabs').hidden, document.getElementById('fleet-panel').hidden]`, []bool{true, true})
	p.expect("and no problem: the page is the one it always was", `T.problems()`, []string{})
	p.expect("the locks are shown", `[document.getElementById('locks-panel').hidden, T.text(document.getElementById('no-keys'))]`, []any{false, "No lock key here yet."})
	p.notReloaded()
}

// streamFrames reads the dashboard's event stream at pageURL until the frame named last and
// returns each frame's data by event name.
func streamFrames(t *testing.T, pageURL, last string) map[string]string {
	t.Helper()
	u, err := neturl.Parse(pageURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/api/stream"
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", u.Path, res.Status)
	}
	out := map[string]string{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 1<<20)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			out[event] = strings.TrimPrefix(line, "data: ")
			if event == last {
				return out
			}
		}
	}
	t.Fatalf("the stream ended before a %s frame (%v); got %v", last, sc.Err(), out)
	return nil
}

// dropNow is a frame's JSON without its "now".
func dropNow(t *testing.T, data string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(data), &m); err != nil {
		t.Fatalf("%v: %s", err, data)
	}
	delete(m, "now")
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// dashboardAs starts a dashboard as user (impersonated with the admin's credentials), bound
// cluster-wide only to the shipped ClusterRole role (from config/rbac, its first document), and
// returns its URL. It is stopped when the test ends.
func dashboardAs(t *testing.T, h *harness, user, role string) string {
	t.Helper()
	ctx := context.Background()
	file := map[string]string{"turnstile-freeze-viewer": "freeze_viewer_role.yaml"}[role]
	data, err := os.ReadFile(filepath.Join(h.root, "config", "rbac", file))
	if err != nil {
		t.Fatal(err)
	}
	var cr rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict([]byte(strings.SplitN(string(data), "\n---\n", 2)[0]), &cr); err != nil || cr.Name != role {
		t.Fatalf("%s: the ClusterRole %s: %v", file, role, err)
	}
	switch err := h.admin.Create(ctx, &cr); {
	case err == nil:
		t.Cleanup(func() { _ = h.admin.Delete(ctx, &cr) })
	case !apierrors.IsAlreadyExists(err):
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user + "-" + role},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if err := h.admin.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.admin.Delete(ctx, binding) })
	kubeconfig := filepath.Join(t.TempDir(), user+".kubeconfig")
	if err := h.env.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range cfg.AuthInfos {
		ai.Impersonate = user
	}
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	url, dash, err := startDashboard(orEnv("TURNSTILE_PLUGIN", filepath.Join(h.root, "bin", "kubectl-turnstile")), kubeconfig, "default")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dash.Stop(10 * time.Second); err != nil {
			t.Errorf("the dashboard of %s did not stop cleanly: %v", user, err)
		}
	})
	return url
}
