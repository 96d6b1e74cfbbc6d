package framework

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/turnstile-dev/turnstile/internal/compat"
)

// APIServerArgsEnv names extra kube-apiserver flags for every control plane the tests start,
// as an admin of a real cluster sets them: make test-versions runs 1.34 and 1.35 once more with
// "--feature-gates=MutatingAdmissionPolicy=true --runtime-config=admissionregistration.k8s.io/v1beta1=true",
// so that MutatingAdmissionPolicy's v1beta1 is served (docs/install.md).
const APIServerArgsEnv = "TURNSTILE_KUBE_APISERVER_ARGS"

// ConfigureAPIServer adds $TURNSTILE_KUBE_APISERVER_ARGS (--name=value, space separated) to
// s's flags.
func ConfigureAPIServer(s *envtest.APIServer) error {
	return appendFlags(s, APIServerArgsEnv, strings.Fields(os.Getenv(APIServerArgsEnv)))
}

// appendFlags adds flags (--name=value) to s's; source names where they come from.
func appendFlags(s *envtest.APIServer, source string, flags []string) error {
	for _, f := range flags {
		name, value, ok := strings.Cut(strings.TrimPrefix(f, "--"), "=")
		if !ok || !strings.HasPrefix(f, "--") {
			return fmt.Errorf("%s: %q is not --name=value", source, f)
		}
		s.Configure().Append(name, value)
	}
	return nil
}

// AdmissionEnv set to "validating-only" installs config/overlays/validating-only whatever the
// API server serves, as an admin may choose (the chart's admissionPolicies.mutating=off).
const AdmissionEnv = "TURNSTILE_ADMISSION"

// Bundle is the kustomize directory that installs Turnstile on a cluster, as docs/install.md
// tells a user to choose it.
type Bundle struct {
	// Dir is the directory to `kubectl apply --server-side -k`.
	Dir string
	// Mutating is the MutatingAdmissionPolicy version the bundle installs ("v1", "v1beta1"),
	// or "" for none: then the validating policies require what the mutating ones fill in.
	Mutating string
	// Cluster is what the API server serves.
	Cluster compat.Cluster
}

// BundleFor picks the bundle for the API server at cfg: config/default where it serves
// MutatingAdmissionPolicy v1, config/overlays/mutating-v1beta1 where it serves v1beta1, else
// config/overlays/validating-only ($TURNSTILE_ADMISSION=validating-only: always that one).
func BundleFor(cfg *rest.Config) (Bundle, error) {
	root, err := RepoRoot()
	if err != nil {
		return Bundle{}, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return Bundle{}, err
	}
	cluster, err := compat.Discover(dc)
	if err != nil {
		return Bundle{}, err
	}
	b := Bundle{Cluster: cluster, Mutating: cluster.MutatingAdmissionPolicy}
	switch want := os.Getenv(AdmissionEnv); want {
	case "", "auto":
	case "validating-only":
		b.Mutating = ""
	default:
		return Bundle{}, fmt.Errorf("%s=%q: want auto or validating-only", AdmissionEnv, want)
	}
	switch b.Mutating {
	case "v1":
		b.Dir = filepath.Join(root, "config", "default")
	case "v1beta1":
		b.Dir = filepath.Join(root, "config", "overlays", "mutating-v1beta1")
	default:
		b.Dir = filepath.Join(root, "config", "overlays", "validating-only")
	}
	return b, nil
}

// String names the bundle as the docs do.
func (b Bundle) String() string {
	root, _ := RepoRoot()
	rel, err := filepath.Rel(root, b.Dir)
	if err != nil {
		rel = b.Dir
	}
	return fmt.Sprintf("%s on Kubernetes %s", rel, b.Cluster.Version)
}
