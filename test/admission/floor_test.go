package admission

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	"github.com/turnstile-dev/turnstile/internal/version"
)

// levelLabel is the label config/compatibility's floor compares.
const levelLabel = "locks.turnstile.dev/compatibility-level"

var _ = Describe("The compatibility floor", func() {
	level := strconv.Itoa(version.CompatibilityLevel)

	It("refuses kubectl apply of a bundle of a lower level: its CRDs and Deployment stay as they were, with the reason and the way out", func() {
		dir := GinkgoT().TempDir()
		bundle, err := framework.BundleFor(env.Config)
		Expect(err).NotTo(HaveOccurred())
		rendered, err := kubectl("kustomize", bundle.Dir)
		Expect(err).NotTo(HaveOccurred(), rendered)
		// This release's bundle, as a release one level lower would label it.
		older := strings.ReplaceAll(rendered, levelLabel+`: "`+level+`"`, levelLabel+`: "`+strconv.Itoa(version.CompatibilityLevel-1)+`"`)
		Expect(older).NotTo(Equal(rendered))
		Expect(os.WriteFile(filepath.Join(dir, "older.yaml"), []byte(older), 0o644)).To(Succeed())

		out, err := kubectl("apply", "--server-side", "--force-conflicts", "-f", filepath.Join(dir, "older.yaml"))
		Expect(err).To(HaveOccurred(), "kubectl apply of an older bundle:\n%s", out)
		for _, refused := range []string{
			"customresourcedefinitions lockrequests.locks.turnstile.dev",
			"customresourcedefinitions projectlocks.locks.turnstile.dev",
			"deployments turnstile-controller-manager",
			"clusterroles turnstile-manager",
		} {
			Expect(out).To(ContainSubstring("Turnstile refuses this downgrade: "+refused+" was written by a Turnstile release of compatibility level "+level+
				", and this one is level "+strconv.Itoa(version.CompatibilityLevel-1)), "refused: %s", refused)
		}
		Expect(out).To(ContainSubstring(`docs/install.md, "Downgrades"`))
		got, err := kubectl("get", "crd", "lockrequests.locks.turnstile.dev", "-o", `jsonpath={.metadata.labels.locks\.turnstile\.dev/compatibility-level}`)
		Expect(err).NotTo(HaveOccurred(), got)
		Expect(got).To(Equal(level), "the CRD is this release's still")

		By("this release's bundle applies again on top, as docs/install.md says to do after")
		out, err = kubectl("apply", "--server-side", "--force-conflicts", "-k", bundle.Dir)
		Expect(err).NotTo(HaveOccurred(), out)
	})

	It("judges only objects that carry a level: the same or a higher level goes, a lower one or none is refused, an object without one is left alone", func() {
		cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "floor-probe-" + randSuffix(), Labels: map[string]string{levelLabel: level}}}
		Expect(admin.Create(ctx, cr)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(admin.Delete(ctx, cr))).To(Succeed()) })
		relabel := func(v string) error {
			var live rbacv1.ClusterRole
			if err := admin.Get(ctx, client.ObjectKeyFromObject(cr), &live); err != nil {
				return err
			}
			if v == "" {
				delete(live.Labels, levelLabel)
			} else {
				live.Labels[levelLabel] = v
			}
			return admin.Update(ctx, &live)
		}
		Eventually(func() error { return relabel("0") }).WithTimeout(settle).WithPolling(poll).
			Should(MatchError(ContainSubstring("Turnstile refuses this downgrade: clusterroles "+cr.Name)), "a lower level, once the API server enforces the policy")
		Expect(relabel("")).To(MatchError(ContainSubstring("and this one has none")), "the label dropped")
		Expect(relabel(level)).To(Succeed(), "the same level")
		Expect(relabel(strconv.Itoa(version.CompatibilityLevel+1))).To(Succeed(), "a higher level")
		Expect(relabel(level)).To(MatchError(ContainSubstring("was written by a Turnstile release of compatibility level "+strconv.Itoa(version.CompatibilityLevel+1))), "back below the level it reached")
		Expect(admin.Delete(ctx, cr)).To(Succeed(), "deletes are not judged (helm uninstall, kubectl delete)")

		plain := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "floor-plain-" + randSuffix(), Labels: map[string]string{"team": "a"}}}
		Expect(admin.Create(ctx, plain)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(admin.Delete(ctx, plain))).To(Succeed()) })
		plain.Labels[levelLabel] = "1"
		Expect(admin.Update(ctx, plain)).To(Succeed(), "an object with no level gets one (an upgrade from a release before the label)")
	})
})
