package install

import (
	"os"
	"path/filepath"
	"runtime"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	"github.com/turnstile-dev/turnstile/internal/testing/oci"
	"github.com/turnstile-dev/turnstile/internal/testing/releasebuild"
)

// The release's own install paths, as its users take them: the packaged chart installed with
// helm install, and install.yaml applied with kubectl, each running the manager from the
// release's image (its layers unpacked, not bin/manager). The release is the working tree's,
// built by make release (internal/testing/releasebuild, shared with test/release).

var _ = Describe("Installed from a release's packaged chart (helm install)", Ordered, func() {
	var r releasebuild.Release
	var manager string
	// The image is unpacked before the specs: a TempDir made in one spec goes with it, and
	// every spec of the container runs this manager.
	BeforeAll(func() { r = release(); manager = releaseManager(r) })
	describeInstall(installPath{
		manifests: func(b framework.Bundle) string {
			return run(helmBin, append([]string{"template", "turnstile", r.Chart(), "--namespace", "turnstile-system"}, capabilities(b)...)...)
		},
		dryRunOnly:      func(framework.Bundle) []string { return nil },
		createNamespace: true,
		install: func(c *cluster) {
			kubeconfig := framework.AdminKubeconfig(c.env)
			run(helmBin, "install", "turnstile", r.Chart(), "--namespace", "turnstile-system", "--kubeconfig", kubeconfig)
			Expect(run(helmBin, "status", "turnstile", "--namespace", "turnstile-system", "--kubeconfig", kubeconfig)).
				To(ContainSubstring("STATUS: deployed"))
		},
		manager: func() string { return manager },
	})
})

var _ = Describe("Installed from a release's install bundle (kubectl apply --server-side)", Ordered, func() {
	var r releasebuild.Release
	var manager string
	// The image is unpacked before the specs: a TempDir made in one spec goes with it, and
	// every spec of the container runs this manager.
	BeforeAll(func() { r = release(); manager = releaseManager(r) })
	describeInstall(installPath{
		manifests:  func(b framework.Bundle) string { return readFile(r.BundleFor(b)) },
		dryRunOnly: func(framework.Bundle) []string { return nil },
		manager:    func() string { return manager },
	})
})

// release is the working tree's release, built once for the packages that use it.
func release() releasebuild.Release {
	GinkgoHelper()
	r, err := releasebuild.Head()
	Expect(err).NotTo(HaveOccurred(), "make release of the working tree")
	AddReportEntry("release", r.Dir)
	return r
}

// releaseManager is the manager of the release's image for this machine: the image index read
// from the OCI layout, the platform's layers unpacked into a TempDir that lasts as long as the
// node that calls it (call it in BeforeAll).
func releaseManager(r releasebuild.Release) string {
	GinkgoHelper()
	l, err := oci.Open(r.ImageLayout())
	Expect(err).NotTo(HaveOccurred())
	_, idx, err := l.ImageIndex(r.Version)
	Expect(err).NotTo(HaveOccurred())
	_, m, cfg, err := l.Image(idx, "linux", runtime.GOARCH)
	Expect(err).NotTo(HaveOccurred())
	root := filepath.Join(GinkgoT().TempDir(), "rootfs")
	Expect(l.Unpack(m, cfg, root)).To(Succeed())
	Expect(cfg.Config.Entrypoint).To(Equal([]string{"/manager"}))
	return filepath.Join(root, "manager")
}

func readFile(path string) string {
	GinkgoHelper()
	data, err := os.ReadFile(path)
	Expect(err).NotTo(HaveOccurred())
	return string(data)
}
