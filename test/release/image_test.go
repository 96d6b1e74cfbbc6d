package release

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	"github.com/turnstile-dev/turnstile/internal/testing/kubelet"
)

// TestImageRunsAsShipped starts the release's image as a kubelet and its runtime would, with no
// binary of bin/: the image for this machine's platform, read from the OCI layout and unpacked
// layer by layer into a root file system, each replica in its own copy of it; the command,
// args, env and user from the packaged chart's rendered Deployment over the image's config
// (entrypoint, env, user); two replicas join, and the manager grants a lock.
func TestImageRunsAsShipped(t *testing.T) {
	needs(t, os.Geteuid() == 0, "starting the image needs root: namespaces, mounts and chroot (CI and the dev container run as root)")
	r := headRelease(t)
	img := openImage(t, r, runtime.GOARCH)
	c := img.config.Config
	t.Logf("image %s, linux/%s: user %s, entrypoint %q, unpacked into %s", img.indexDigest, runtime.GOARCH, c.User, c.Entrypoint, img.root)
	const namespace = "turnstile-system"
	replicas := kubelet.Run(t, kubelet.Deployment{
		Render: func(capabilities []string) []framework.Manifest {
			objs, err := framework.ParseManifests(run(t, root, nil, helm(t), append([]string{"template", "turnstile", r.Chart(), "-n", namespace}, capabilities...)...))
			if err != nil {
				t.Fatal(err)
			}
			return objs
		},
		Namespace: namespace, Kubectl: kubectl(t),
		Image:  kubelet.Image{Root: img.root, User: c.User, Env: c.Env, Entrypoint: c.Entrypoint, Cmd: c.Cmd},
		Sample: filepath.Join(root, "config", "samples", "locks_v1alpha1_lockrequest.yaml"),
	})
	for _, rep := range replicas {
		if !strings.Contains(rep.Log(), `"version":"`+r.Version+`"`) {
			t.Errorf("pod %s did not log the release's version %s at start", rep.Name, r.Version)
		}
	}
}
