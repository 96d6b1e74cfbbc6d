package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// cluster is a real etcd and kube-apiserver whose processes the test can stop and start again:
// their data and certificate directories are the test's, so a restart keeps the objects, the
// port and the CA (envtest removes directories it made itself).
type cluster struct {
	env    *envtest.Environment
	cfg    *rest.Config // admin, straight to the API server
	client client.WithWatch
	// apiAddr is the API server's host:port, the upstream of every proxy.
	apiAddr string
}

// startCluster starts etcd and kube-apiserver under dir with the CRDs installed. watchCache
// false turns the API server's watch cache off, so a watch from a compacted revision is
// answered by etcd: 410 Gone.
func startCluster(dir string, watchCache bool, args ...[2]string) (*cluster, error) {
	root, err := framework.RepoRoot()
	if err != nil {
		return nil, err
	}
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		return nil, errors.New("KUBEBUILDER_ASSETS is not set: run through make (it builds kube-apiserver, etcd and kubectl into bin/k8s)")
	}
	for _, d := range []string{"etcd", "apiserver"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
		Scheme:                framework.Scheme,
	}
	env.ControlPlane.Etcd = &envtest.Etcd{DataDir: filepath.Join(dir, "etcd")}
	env.ControlPlane.APIServer = &envtest.APIServer{CertDir: filepath.Join(dir, "apiserver")}
	if !watchCache {
		env.ControlPlane.APIServer.Configure().Set("watch-cache", "false")
	}
	for _, a := range args {
		env.ControlPlane.APIServer.Configure().Set(a[0], a[1])
	}
	if err := framework.ConfigureAPIServer(env.ControlPlane.APIServer); err != nil {
		return nil, err
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	cfg.QPS, cfg.Burst = -1, 0
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: framework.Scheme})
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &cluster{env: env, cfg: cfg, client: c, apiAddr: u.Host}, nil
}

func (c *cluster) stop() error { return c.env.Stop() }

// stopAPIServer stops kube-apiserver (SIGTERM); startAPIServer starts it again on the same
// port, etcd and certificates and returns once its /healthz answers ok.
// kube-apiserver shuts down gracefully, draining requests; one that has not exited within
// apiStopGrace is SIGKILLed, and stopAPIServer says which it was.
func (c *cluster) stopAPIServer() (string, error) {
	c.env.ControlPlane.APIServer.StopTimeout = apiStopGrace
	start := time.Now()
	err := c.env.ControlPlane.APIServer.Stop()
	if err != nil && strings.Contains(err.Error(), "timeout waiting for process") {
		return fmt.Sprintf("SIGTERM, SIGKILLed after %s", apiStopGrace), nil
	}
	return fmt.Sprintf("SIGTERM, exited in %s", time.Since(start).Round(time.Millisecond)), err
}

const apiStopGrace = 5 * time.Second

func (c *cluster) startAPIServer() error { return c.env.ControlPlane.APIServer.Start() }

// stopEtcd stops etcd under the running API server; startEtcd starts it again on the same data
// and client URL and returns once its /health answers.
func (c *cluster) stopEtcd() error  { return c.env.ControlPlane.Etcd.Stop() }
func (c *cluster) startEtcd() error { return c.env.ControlPlane.Etcd.Start() }

// compactEtcd compacts etcd's history up to its current revision through etcd's own HTTP
// gateway (what `etcdctl compaction --physical` does), and returns that revision: every watch
// that resumes from an earlier resourceVersion is then answered 410 Gone, when the API server
// has no watch cache to serve it from.
func (c *cluster) compactEtcd(ctx context.Context) (int64, error) {
	base := c.env.ControlPlane.Etcd.URL.String()
	var rng struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	if err := etcdCall(ctx, base+"/v3/kv/range", map[string]any{"key": "AA==", "limit": 1}, &rng); err != nil {
		return 0, err
	}
	rev, err := strconv.ParseInt(rng.Header.Revision, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("etcd revision %q: %w", rng.Header.Revision, err)
	}
	if err := etcdCall(ctx, base+"/v3/kv/compaction", map[string]any{"revision": strconv.FormatInt(rev, 10), "physical": true}, nil); err != nil {
		return 0, err
	}
	return rev, nil
}

func etcdCall(ctx context.Context, u string, body, out any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("etcd %s: %w", u, err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd %s: %s: %s", u, resp.Status, buf.String())
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(buf.Bytes(), out)
}

// managerUser is a user of the cluster outside system:masters (whose requests API Priority and
// Fairness exempts), bound to cluster-admin: the identity a throttled manager runs as.
func (c *cluster) managerUser(ctx context.Context, name string) (*rest.Config, error) {
	user, err := c.env.ControlPlane.AddUser(envtest.User{Name: name}, c.cfg)
	if err != nil {
		return nil, err
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}},
	}
	if err := c.client.Create(ctx, crb); err != nil {
		return nil, err
	}
	return user.Config(), nil
}

// readyAfter polls the API server's /readyz (straight to it, every 10 ms) until it answers ok
// and returns when, on clk; after limit it gives up and says what /readyz answered last.
func (c *cluster) readyAfter(ctx context.Context, clk clock, limit time.Duration) (time.Duration, error) {
	hc, err := rest.HTTPClientFor(c.cfg)
	if err != nil {
		return clk.now(), err
	}
	u, err := url.Parse(c.cfg.Host)
	if err != nil {
		return clk.now(), err
	}
	u.Path, u.RawQuery = "/readyz", "verbose"
	end := clk.now() + limit
	last := "no answer"
	for clk.now() < end {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		req, err := http.NewRequestWithContext(rctx, http.MethodGet, u.String(), nil)
		if err != nil {
			cancel()
			return clk.now(), err
		}
		resp, err := hc.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				cancel()
				return clk.now(), nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, body)
		} else {
			last = err.Error()
		}
		cancel()
		time.Sleep(10 * time.Millisecond)
	}
	return clk.now(), fmt.Errorf("/readyz not ok within %s: %s", limit, last)
}
