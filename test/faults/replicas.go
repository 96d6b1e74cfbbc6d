package faults

import (
	"bytes"
	"context"
	"io"
	"math/rand"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	utilclock "k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/turnstile-dev/turnstile/internal/cache"
	"github.com/turnstile-dev/turnstile/internal/controller"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/sharding"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	turnstile "github.com/turnstile-dev/turnstile/pkg/client"
)

// replica is one manager replica, in this process or the real binary.
type replica interface {
	stop() error
}

// skewClock is the real clock moved by an offset that the test can change while it runs: a
// replica's clock that runs ahead or behind, and jumps.
type skewClock struct {
	utilclock.RealClock
	offset atomic.Int64
}

func (c *skewClock) Now() time.Time                  { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *skewClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c *skewClock) set(d time.Duration)             { c.offset.Store(int64(d)) }

// throttle answers a share of a manager's requests with 429 Too Many Requests and Retry-After
// while it is on, without passing them to the API server: what API Priority and Fairness
// answers a flow over its share (body and headers as APF writes them).
type throttle struct {
	on       atomic.Bool
	share    float64
	mu       sync.Mutex
	rng      *rand.Rand
	rejected atomic.Int64
}

func (t *throttle) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if t.on.Load() {
			t.mu.Lock()
			hit := t.rng.Float64() < t.share
			t.mu.Unlock()
			if hit {
				t.rejected.Add(1)
				body := `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Too many requests, please try again later.","reason":"TooManyRequests","details":{"retryAfterSeconds":1},"code":429}`
				return &http.Response{
					StatusCode: http.StatusTooManyRequests, Status: "429 Too Many Requests", Proto: "HTTP/2.0", ProtoMajor: 2,
					Header: http.Header{"Retry-After": {"1"}, "Content-Type": {"application/json"},
						"X-Kubernetes-Pf-Flowschema-Uid": {"faults"}, "X-Kubernetes-Pf-Prioritylevel-Uid": {"faults"}},
					Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: req,
				}, nil
			}
		}
		return rt.RoundTrip(req)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// goneWatcher counts the watch streams the API server ended with 410 Gone (an ERROR event
// with code 410, "too old resource version"): the relists a compaction forced.
type goneWatcher struct{ gone atomic.Int64 }

func (g *goneWatcher) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err != nil || resp == nil {
			return resp, err
		}
		if resp.StatusCode == http.StatusGone {
			g.gone.Add(1)
		} else if req.URL.Query().Get("watch") == "true" {
			resp.Body = &goneScanner{ReadCloser: resp.Body, g: g}
		}
		return resp, nil
	})
}

// goneScanner passes a watch stream through and counts a 410 error event in it.
type goneScanner struct {
	io.ReadCloser
	g    *goneWatcher
	tail []byte
	seen bool
}

func (s *goneScanner) Read(p []byte) (int, error) {
	n, err := s.ReadCloser.Read(p)
	if !s.seen && n > 0 {
		buf := slices.Concat(s.tail, p[:n])
		if bytes.Contains(buf, []byte(`"type":"ERROR"`)) && bytes.Contains(buf, []byte(`"code":410`)) {
			s.seen = true
			s.g.gone.Add(1)
		}
		s.tail = append(s.tail[:0], buf[max(0, len(buf)-256):]...)
	}
	return n, err
}

// inProcess is a manager replica running in this process on its own rest.Config.
type inProcess struct{ *framework.Manager }

func (r inProcess) stop() error { return r.Stop() }

type replicaOptions struct {
	cfg          *rest.Config
	clock        utilclock.WithTicker
	activeActive bool
	namespace    string // of the membership Leases
	identity     string
}

// startInProcess runs the controllers as cmd/manager does (BoundRetryAfter, active-active
// membership when asked), on opts.cfg, until stop.
func startInProcess(o replicaOptions) (*inProcess, error) {
	cfg := rest.CopyConfig(o.cfg)
	cfg.QPS, cfg.Burst = 200, 400
	turnstile.BoundRetryAfter(cfg, time.Second)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 framework.Scheme,
		Cache:                  cache.Options(),
		NewCache:               cache.New,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return nil, err
	}
	setup := controller.SetupOptions{Queue: defaultQueue(), Workers: 8, Retention: time.Hour, PositionRefreshRate: 20,
		DeadlockScan: 30 * time.Second, Clock: o.clock}
	ctx, cancel := context.WithCancel(context.Background())
	if o.activeActive {
		members := sharding.New(sharding.Config{Identity: o.identity, Namespace: o.namespace,
			Renew: time.Second, Lapse: 3 * time.Second, Backup: 300 * time.Millisecond}, mgr.GetClient(), mgr.GetCache(), o.clock)
		if err := mgr.Add(members); err != nil {
			cancel()
			return nil, err
		}
		setup.Router = members
	}
	if err := controller.Setup(ctx, mgr, setup); err != nil {
		cancel()
		return nil, err
	}
	m, err := framework.Run(ctx, cancel, mgr)
	if err != nil {
		return nil, err
	}
	return &inProcess{m}, nil
}

// binary is the real manager binary on its own proxy, which the test can SIGSTOP.
type binary struct {
	p   *framework.Process
	log *framework.SyncBuffer
}

func startBinary(bin, dir, name string, cfg *rest.Config, activeActive bool, namespace string) (*binary, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	path := filepath.Join(dir, name+".kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return nil, err
	}
	args := []string{"--metrics-bind-address=0", "--health-probe-bind-address=0", "--kube-api-qps=200", "--kube-api-burst=400"}
	if activeActive {
		args = append(args, "--active-active", "--membership-namespace="+namespace, "--membership-id="+name)
	}
	buf := &framework.SyncBuffer{}
	p, err := framework.StartProcess(bin, path, buf, args...)
	if err != nil {
		return nil, err
	}
	return &binary{p: p, log: buf}, nil
}

func (b *binary) signal(s syscall.Signal) error { return syscall.Kill(b.p.Pid(), s) }

func (b *binary) stop() error {
	_ = b.signal(syscall.SIGCONT)
	_ = b.p.Kill()
	return nil
}

func defaultQueue() queue.Config { return queue.DefaultConfig() }
