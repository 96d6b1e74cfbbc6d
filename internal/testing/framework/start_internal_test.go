package framework

import (
	"net/url"
	"os"
	"testing"

	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// TestStartTakesFreshPorts gives a control plane the port of a running one, as envtest's
// free-port pick can when two start at once: its kube-apiserver cannot bind and the running one
// answers envtest's readiness poll. start must neither fail the suite nor hand out an Env that
// talks to the running one: it tries again on fresh ports.
func TestStartTakesFreshPorts(t *testing.T) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Skip("KUBEBUILDER_ASSETS is not set: make test sets it")
	}
	first, err := StartBare(assets)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = first.Stop() })
	u, err := url.Parse(first.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	attempts := 0
	second, err := start(assets, func() (*envtest.Environment, error) {
		attempts++
		s := &envtest.APIServer{}
		if attempts == 1 {
			s.Address, s.Port = u.Hostname(), u.Port()
		}
		return &envtest.Environment{ControlPlane: envtest.ControlPlane{APIServer: s}}, nil
	})
	if err != nil {
		t.Fatalf("start after a taken port: %v", err)
	}
	t.Cleanup(func() { _ = second.Stop() })
	if attempts != 2 {
		t.Errorf("start took %d attempts, want 2 (the taken port, then fresh ones)", attempts)
	}
	if second.Config.Host == first.Config.Host {
		t.Fatalf("the second control plane is at the first's address %s", first.Config.Host)
	}
	// Its own config (which trusts only its own CA) reaches it.
	dc, err := discovery.NewDiscoveryClientForConfig(second.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dc.ServerVersion(); err != nil {
		t.Fatalf("the second control plane through its own config: %v", err)
	}
}
