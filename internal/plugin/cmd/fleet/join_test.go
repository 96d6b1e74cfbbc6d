package fleet

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/onsi/gomega"
	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/fleet/members"
	"github.com/turnstile-dev/turnstile/internal/fleet/spoke"
	"github.com/turnstile-dev/turnstile/internal/plugin/cmd/util"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// TestNamesAreTheAgents: the names join writes are the ones the agent and the hub's policies use.
func TestNamesAreTheAgents(t *testing.T) {
	if serviceAccount("eu-west-1") != spoke.LeaseName("eu-west-1") || labelCluster != spoke.LabelCluster ||
		defaultHubLease != spoke.DefaultLeaseDuration || members.Namespace != spoke.FleetNamespace {
		t.Error("join's names differ from internal/fleet/spoke's")
	}
}

func TestParseLabels(t *testing.T) {
	cases := map[string]struct {
		in         []string
		wantSet    map[string]string
		wantRemove []string
		wantErr    string
	}{
		"none":           {wantSet: map[string]string{}},
		"set and remove": {in: []string{"region=eu", "tier=", "example.com/zone=a", "old-"}, wantSet: map[string]string{"region": "eu", "tier": "", "example.com/zone": "a"}, wantRemove: []string{"old"}},
		"no value":       {in: []string{"region"}, wantErr: "want key=value"},
		"bad key":        {in: []string{"Bad Key=x"}, wantErr: "key"},
		"bad value":      {in: []string{"region=eu west"}, wantErr: "value"},
		"value ending -": {in: []string{"region=eu-"}, wantErr: "value"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			set, remove, err := ParseLabels(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantSet, set); diff != "" {
				t.Errorf("set (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantRemove, remove); diff != "" {
				t.Errorf("remove (-want +got):\n%s", diff)
			}
		})
	}
}

// plugin runs `kubectl turnstile` (this package's commands, under a root with the plugin's
// connection flags) against kubeconfig.
func plugin(ctx context.Context, kubeconfig string, args ...string) (stdout, stderr string, err error) {
	g := util.NewGlobals()
	var out, errOut bytes.Buffer
	g.Warn = &errOut
	root := &cobra.Command{Use: "kubectl-turnstile", SilenceUsage: true, SilenceErrors: true}
	g.Flags.AddFlags(root.PersistentFlags())
	root.AddCommand(NewCmdFleet(g))
	root.SetArgs(append([]string{"--kubeconfig", kubeconfig, "fleet"}, args...))
	root.SetOut(&out)
	root.SetErr(&errOut)
	err = root.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

// asSpoke is a client of the hub from the kubeconfig join wrote, as the spoke's agent builds it.
func asSpoke(t *testing.T, kubeconfig []byte) client.Client {
	t.Helper()
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: framework.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// spokeWrites makes, as the spoke's agent does, its hub Lease and a hub request of cluster in
// ns through c: the Lease first, then the request that names it.
func spokeWrites(ctx context.Context, c client.Client, cluster, name string) error {
	const ns = joinNS
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: spoke.LeaseName(cluster),
		Labels: map[string]string{"locks.turnstile.dev/role": spoke.RoleSpoke, spoke.LabelCluster: cluster}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(spoke.LeaseName(cluster)), LeaseDurationSeconds: ptr.To[int32](40),
			RenewTime: &metav1.MicroTime{Time: metav1.Now().Time}}}
	if err := c.Create(ctx, lease); apierrors.IsAlreadyExists(err) {
		var old coordinationv1.Lease
		if err := c.Get(ctx, client.ObjectKeyFromObject(lease), &old); err != nil {
			return err
		}
		old.Spec.RenewTime = lease.Spec.RenewTime
		if err := c.Update(ctx, &old); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	inSpoke := &locksv1.LockRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: "0b5e7a3e-0000-4000-8000-000000000001", Generation: 1},
		Spec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{{Repo: "acme/infra", Path: "net"}}, Holder: locksv1.Holder{Owner: "alice"}}}
	return c.Create(ctx, spoke.HubRequest(cluster, inSpoke))
}

// joinNS is the fleet namespace of TestJoinAndLeave.
const joinNS = "team-join"

// TestJoinAndLeave runs join and leave against a real API server with config/fleet installed,
// and uses what join wrote as the spoke's agent does: its hub Lease and its cluster's request
// are accepted by the hub's policies, another cluster's are refused; after leave, the same
// kubeconfig no longer authenticates.
func TestJoinAndLeave(t *testing.T) {
	const ns, cluster = joinNS, "eu-west-1"
	env, err := framework.Start("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()
	dir := t.TempDir()
	admin := filepath.Join(dir, "hub.kubeconfig")
	if err := env.WriteKubeconfig(admin); err != nil {
		t.Fatal(err)
	}
	kubectl := func(args ...string) {
		t.Helper()
		out, err := exec.Command(env.Kubectl(), append([]string{"--kubeconfig", admin}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	mustFail := func(want string, args ...string) {
		t.Helper()
		_, stderr, err := plugin(ctx, admin, args...)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("fleet %s: err %v (stderr %q), want it to say %q", strings.Join(args, " "), err, stderr, want)
		}
	}

	// Not a hub: what to install.
	mustFail("it has no namespace turnstile-fleet; install the hub's side of a fleet on it: kubectl apply --server-side -k config/fleet", "join", cluster)
	kubectl("create", "namespace", members.Namespace)
	mustFail("it has no configmap turnstile-fleet/turnstile-fleet-members", "join", cluster)
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kubectl("apply", "--server-side", "-k", filepath.Join(root, "config", "fleet"))
	kubectl("create", "namespace", ns)
	kubectl("-n", ns, "create", "rolebinding", "turnstile-fleet-spoke", "--clusterrole=turnstile-fleet-spoke", "--group=system:serviceaccounts:turnstile-fleet")

	// A name refused, and someone without the rights: nothing written.
	mustFail(`cluster name "EU_West" is refused: a lowercase RFC 1123 label`, "join", "EU_West")
	mustFail(`cluster name "`+strings.Repeat("a", 64)+`" is refused`, "join", strings.Repeat("a", 64))
	mustFail("you may not get configmaps turnstile-fleet-members, update configmaps turnstile-fleet-members, get serviceaccounts spoke-eu-west-1, "+
		"create serviceaccounts, create serviceaccounts/token spoke-eu-west-1 in namespace turnstile-fleet on the hub: fleet join needs", "join", cluster, "--as", "bob")
	kubectl("-n", members.Namespace, "create", "role", "members-only", "--verb=get,update", "--resource=configmaps", "--resource-name=turnstile-fleet-members")
	kubectl("-n", members.Namespace, "create", "rolebinding", "bob", "--role=members-only", "--user=bob")
	mustFail("you may not get serviceaccounts spoke-eu-west-1, create serviceaccounts, create serviceaccounts/token spoke-eu-west-1 in namespace turnstile-fleet", "join", cluster, "--as", "bob")
	mustFail("you may not delete serviceaccounts spoke-eu-west-1 in namespace turnstile-fleet on the hub: fleet leave needs", "leave", cluster, "--as", "bob")
	memberData := func() map[string]string {
		t.Helper()
		var cm corev1.ConfigMap
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: members.Namespace, Name: members.ConfigMap}, &cm); err != nil {
			t.Fatal(err)
		}
		return cm.Data
	}
	if got := memberData(); len(got) != 0 {
		t.Fatalf("members after refused joins: %v", got)
	}

	// join: a member with its labels, its ServiceAccount, a kubeconfig written 0600.
	path := filepath.Join(dir, "eu-west-1.kubeconfig")
	stdout, stderr, err := plugin(ctx, admin, "join", cluster, "--label", "region=eu", "--label", "tier=gold", "-o", path)
	if err != nil {
		t.Fatalf("join: %v\n%s", err, stderr)
	}
	if stdout != "" {
		t.Errorf("join -o wrote to stdout: %q", stdout)
	}
	t.Log(stderr)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("the kubeconfig's mode is %v, want 0600", fi.Mode().Perm())
	}
	labels, err := members.Labels(cluster, memberData()[cluster])
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"region": "eu", "tier": "gold"}, labels); diff != "" {
		t.Errorf("the members reader reads (-want +got):\n%s", diff)
	}
	kc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sp := asSpoke(t, kc)

	// The API server loads admission policies a moment after they are applied, as it does for
	// any user: wait until it refuses, in a dry run, what this spoke may not write.
	foreignLease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: spoke.LeaseName("us-east-1"),
		Labels: map[string]string{"locks.turnstile.dev/role": spoke.RoleSpoke, spoke.LabelCluster: "us-east-1"}}}
	foreignRequest := spoke.HubRequest("us-east-1", &locksv1.LockRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "warmup"},
		Spec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{{Repo: "acme/infra", Path: "net"}}, Holder: locksv1.Holder{Owner: "alice"}}})
	g := gomega.NewWithT(t)
	g.Eventually(func() error { return sp.Create(ctx, foreignLease.DeepCopy(), client.DryRunAll) }, 30*time.Second, 200*time.Millisecond).
		Should(gomega.Satisfy(apierrors.IsForbidden), "the hub's policies never refused another cluster's Lease")
	g.Eventually(func() error { return sp.Create(ctx, foreignRequest.DeepCopy(), client.DryRunAll) }, 30*time.Second, 200*time.Millisecond).
		Should(gomega.Satisfy(apierrors.IsForbidden), "the hub's policies never refused another cluster's request")

	// The spoke acts as its agent does: accepted for its own cluster, refused as another.
	if err := spokeWrites(ctx, sp, cluster, "probe"); err != nil {
		t.Fatalf("the spoke's own writes were refused: %v", err)
	}
	err = spokeWrites(ctx, sp, "us-east-1", "probe")
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "spoke eu-west-1 writes only its own hub Lease spoke-eu-west-1") {
		t.Fatalf("as another cluster: %v, want the hub's refusal", err)
	}
	other := spoke.HubRequest("us-east-1", &locksv1.LockRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other"},
		Spec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{{Repo: "acme/infra", Path: "net"}}, Holder: locksv1.Holder{Owner: "alice"}}})
	if err := sp.Create(ctx, other); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "spoke eu-west-1") {
		t.Fatalf("another cluster's request: %v, want the hub's refusal", err)
	}

	// Again: idempotent (no label given changes nothing, the ConfigMap is not written), then
	// labels changed; a new token, the old one still valid.
	var before corev1.ConfigMap
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: members.Namespace, Name: members.ConfigMap}, &before); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err = plugin(ctx, admin, "join", cluster)
	if err != nil {
		t.Fatalf("join again: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "was a member already, labels region=eu,tier=gold: unchanged") || !strings.Contains(stderr, "serviceaccount turnstile-fleet/spoke-eu-west-1 exists: kept") {
		t.Errorf("join again said: %s", stderr)
	}
	var after corev1.ConfigMap
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(&before), &after); err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != before.ResourceVersion {
		t.Error("join with nothing to change wrote the members ConfigMap")
	}
	if err := spokeWrites(ctx, asSpoke(t, []byte(stdout)), cluster, "probe-2"); err != nil {
		t.Fatalf("the kubeconfig join printed on stdout: %v", err)
	}
	if _, stderr, err = plugin(ctx, admin, "join", cluster, "--label", "region-", "--label", "tier=silver"); err != nil {
		t.Fatalf("relabel: %v\n%s", err, stderr)
	}
	if got := memberData()[cluster]; got != `{"labels":{"tier":"silver"}}` {
		t.Errorf("relabelled entry %s", got)
	}

	// A concurrent writer between join's read and its write: join's write is refused (409),
	// it reads again and writes again, and the other writer's member stays.
	testHookBeforeUpdate = func() {
		testHookBeforeUpdate = nil
		kubectl("-n", members.Namespace, "patch", "configmap", members.ConfigMap, "--type=merge", "-p", `{"data":{"us-east-1":"{}"}}`)
	}
	t.Cleanup(func() { testHookBeforeUpdate = nil })
	if _, stderr, err = plugin(ctx, admin, "join", "ap-south-1", "-o", filepath.Join(dir, "ap.kubeconfig")); err != nil {
		t.Fatalf("join beside a concurrent writer: %v\n%s", err, stderr)
	}
	if got := memberData(); got["us-east-1"] != "{}" || got["ap-south-1"] != "{}" || got[cluster] == "" {
		t.Errorf("members after a concurrent write: %v: one writer's member was lost", got)
	}

	// --secret: the manifest the spoke chart mounts (fleet.spoke.hubKubeconfigSecret, key
	// fleet.spoke.hubKubeconfigKey), holding a kubeconfig that works.
	stdout, stderr, err = plugin(ctx, admin, "join", cluster, "--secret", "turnstile-hub", "--duration", "1h")
	if err != nil {
		t.Fatalf("join --secret: %v\n%s", err, stderr)
	}
	var secret corev1.Secret
	if err := yaml.UnmarshalStrict([]byte(stdout), &secret); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if secret.Kind != "Secret" || secret.Namespace != DefaultSecretNamespace || secret.Name != "turnstile-hub" || len(secret.Data) != 1 {
		t.Fatalf("secret %s", stdout)
	}
	if err := spokeWrites(ctx, asSpoke(t, secret.Data[chartValue(t, root, "hubKubeconfigKey")]), cluster, "probe-3"); err != nil {
		t.Fatalf("the Secret's kubeconfig: %v", err)
	}
	if !strings.Contains(stderr, "its token expires at") {
		t.Errorf("join does not say when the token expires: %s", stderr)
	}
	mustFail("--duration 5m0s: the TokenRequest API issues tokens of at least 10m0s", "join", cluster, "--duration", "5m")

	// leave: no member, no ServiceAccount; the same kubeconfig's next write is refused.
	if _, stderr, err = plugin(ctx, admin, "leave", cluster); err != nil {
		t.Fatalf("leave: %v\n%s", err, stderr)
	}
	t.Log(stderr)
	if _, ok := memberData()[cluster]; ok {
		t.Error("leave left the cluster in the members")
	}
	err = env.Client.Get(ctx, client.ObjectKey{Namespace: members.Namespace, Name: spoke.LeaseName(cluster)}, &corev1.ServiceAccount{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("the ServiceAccount after leave: %v", err)
	}
	// The API server caches a token's authentication for 10 s (kube-apiserver's token cache):
	// its next write past that is refused.
	g.Eventually(func() error { return spokeWrites(ctx, sp, cluster, "after-leave") }).WithTimeout(30*time.Second).WithPolling(time.Second).
		Should(gomega.Satisfy(apierrors.IsUnauthorized), "the kubeconfig after leave: want 401 Unauthorized (its ServiceAccount is gone)")
	if _, stderr, err = plugin(ctx, admin, "leave", cluster); err != nil || !strings.Contains(stderr, "was no member of the fleet: unchanged") {
		t.Errorf("leave again: %v\n%s", err, stderr)
	}

	// Joined again: a new ServiceAccount, so the old kubeconfig stays refused.
	if _, stderr, err = plugin(ctx, admin, "join", cluster, "-o", path); err != nil {
		t.Fatalf("join after leave: %v\n%s", err, stderr)
	}
	kc2, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := spokeWrites(ctx, asSpoke(t, kc2), cluster, "rejoined"); err != nil {
		t.Fatalf("joined again: %v", err)
	}
	if err := spokeWrites(ctx, sp, cluster, "old-token"); !apierrors.IsUnauthorized(err) {
		t.Errorf("the first kubeconfig after leave and join: %v, want 401 Unauthorized (its token names the old ServiceAccount's UID)", err)
	}
}

// chartValue is fleet.spoke.<key>'s default in the chart's values.yaml.
func chartValue(t *testing.T, root, key string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "charts", "turnstile", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Fleet struct {
			Spoke map[string]any `json:"spoke"`
		} `json:"fleet"`
	}
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	s, _ := v.Fleet.Spoke[key].(string)
	if s == "" {
		t.Fatalf("values.yaml has no fleet.spoke.%s", key)
	}
	return s
}
