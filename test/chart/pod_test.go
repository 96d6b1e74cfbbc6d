package chart

// TestDeploymentRunsAsRendered starts the manager the way a kubelet starts the chart's
// Deployment, and nothing more (internal/testing/kubelet): the container's command and args
// exactly as `helm template` renders them, its env with every valueFrom resolved as the kubelet
// resolves it, the ServiceAccount token, CA and namespace at the path the kubelet mounts them,
// the user and environment of the release's image (hack/release/image.yaml), a read-only root
// holding only the binary (the image holds nothing else the manager uses) with the rendered
// emptyDir volumes, and each replica in its own network, mount and UTS namespaces.
// test/release starts the same Deployment from the release's image itself.

import (
	"debug/elf"
	"os"
	"path/filepath"
	"testing"

	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	"github.com/turnstile-dev/turnstile/internal/testing/kubelet"
)

// staticManager is the manager binary, which must be static like the image's (CGO_ENABLED=0):
// the pod's root holds nothing else.
func staticManager(t *testing.T) string {
	t.Helper()
	bin := tool(t, "TURNSTILE_MANAGER", "bin/manager")
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatalf("%s is dynamically linked; build it as the image does: CGO_ENABLED=0 (make build)", bin)
		}
	}
	return bin
}

func TestDeploymentRunsAsRendered(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making a pod's namespaces and mounts needs root (CI and the dev container run as root)")
	}
	img, err := kubelet.ImageConfig(root)
	if err != nil {
		t.Fatal(err)
	}
	img.Binary = staticManager(t)
	for name, args := range map[string][]string{
		"default values": nil,
		"all on":         {"-f", filepath.Join(root, "test", "chart", "testdata", "all-on.yaml")},
		// One active replica instead: the leader election Lease's namespace comes from the pod.
		"leader election": {"--set", "activeActive.enabled=false", "--set", "leaderElection.enabled=true"},
	} {
		t.Run(name, func(t *testing.T) {
			const namespace = "turnstile-system"
			kubelet.Run(t, kubelet.Deployment{
				// helm install renders with what the cluster serves (discovery); so does this test.
				Render: func(capabilities []string) []framework.Manifest {
					return render(t, "turnstile", namespace, append(capabilities, args...)...)
				},
				Namespace: namespace, Image: img,
				Kubectl: kubectl(t), Sample: filepath.Join(root, "config", "samples", "locks_v1alpha1_lockrequest.yaml"),
			})
		})
	}
}
