package gitops_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// readmeArgoBlock is docs/gitops.md's sh block that installs the health checks in argocd-cm.
var readmeArgoBlock = regexp.MustCompile("(?s)```sh[^\n]*\n([^`]*argocd-health\\.yaml[^`]*)```")

var _ = Describe("docs/gitops.md's argocd-cm install block", func() {
	It("stores each health.lua in argocd-cm under Argo CD's key, keeps the other keys, and the stored scripts run", func() {
		root, err := framework.RepoRoot()
		Expect(err).NotTo(HaveOccurred())
		readme, err := os.ReadFile(filepath.Join(root, "docs", "gitops.md"))
		Expect(err).NotTo(HaveOccurred())
		m := readmeArgoBlock.FindSubmatch(readme)
		Expect(m).NotTo(BeNil(), "the argocd-cm block is not in docs/gitops.md")

		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "argocd"}}
		create(ns)
		DeferCleanup(func() { _ = k8s.Delete(ctx, ns) })
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "argocd", Name: "argocd-cm"},
			Data: map[string]string{"url": "https://argocd.example.com"}}
		create(cm)

		// Run it in a copy of the checkout's resource_customizations, so its output file stays
		// out of the repository.
		dir := GinkgoT().TempDir()
		Expect(os.CopyFS(filepath.Join(dir, "resource_customizations"), os.DirFS(filepath.Join(root, "resource_customizations")))).To(Succeed())
		kubeconfig := filepath.Join(dir, "kubeconfig")
		Expect(env.WriteKubeconfig(kubeconfig)).To(Succeed())
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", string(m[1]))
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "PATH="+filepath.Dir(env.Kubectl())+":"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "%s", out)

		var got corev1.ConfigMap
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cm), &got)).To(Succeed())
		Expect(got.Data).To(HaveKeyWithValue("url", "https://argocd.example.com"))
		Expect(got.Data).To(HaveLen(4))
		for kind, sample := range map[string]string{"LockRequest": "granted", "CommandLock": "draining", "ProjectLock": "held"} {
			dir := filepath.Join(root, "resource_customizations", locksv1.GroupVersion.Group, kind)
			script, err := os.ReadFile(filepath.Join(dir, "health.lua"))
			Expect(err).NotTo(HaveOccurred())
			stored := got.Data["resource.customizations.health."+locksv1.GroupVersion.Group+"_"+kind]
			Expect(stored).To(Equal(string(script)), kind)

			raw, err := os.ReadFile(filepath.Join(dir, "testdata", sample+".yaml"))
			Expect(err).NotTo(HaveOccurred())
			js, err := yaml.YAMLToJSON(raw)
			Expect(err).NotTo(HaveOccurred())
			obj := map[string]any{}
			Expect(utiljson.Unmarshal(js, &obj)).To(Succeed())
			hs, err := runArgoHealth(stored, obj)
			Expect(err).NotTo(HaveOccurred(), kind)
			Expect(hs.Status).To(Equal(map[string]string{"LockRequest": "Healthy", "CommandLock": "Progressing", "ProjectLock": "Healthy"}[kind]), kind)
		}
	})
})
