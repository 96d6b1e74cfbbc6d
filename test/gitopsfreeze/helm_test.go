package gitopsfreeze_test

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/release"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// shopChart is a chart of a ConfigMap and a Deployment of .Values.image.
func shopChart() *chart.Chart {
	return &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "shop", Version: "0.1.0", AppVersion: "1.0"},
		Values:   map[string]any{"image": "nginx:1.27"},
		Templates: []*chart.File{{Name: "templates/web.yaml", Data: []byte(`apiVersion: v1
kind: ConfigMap
metadata: {name: web-config}
data: {image: {{ .Values.image | quote }}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: {{ .Values.image | quote }}}]
`)}},
	}
}

// helmConfig is Helm's SDK configured as helm-controller runs it: its ServiceAccount's token,
// releases stored as Secrets in the release's namespace.
func helmConfig(ns string) *action.Configuration {
	GinkgoHelper()
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig, flags.Namespace = ptr.To(helmController), ptr.To(ns)
	cfg := new(action.Configuration)
	Expect(cfg.Init(flags, ns, "secret", func(format string, v ...any) { GinkgoWriter.Printf("helm: "+format+"\n", v...) })).To(Succeed())
	return cfg
}

func upgrade(cfg *action.Configuration, ns, image string) (*release.Release, error) {
	u := action.NewUpgrade(cfg)
	u.Namespace = ns
	return u.Run("shop", shopChart(), map[string]any{"image": image})
}

// history is the release's revisions and their status, oldest first.
func history(cfg *action.Configuration) []string {
	GinkgoHelper()
	h, err := action.NewHistory(cfg).Run("shop")
	Expect(err).NotTo(HaveOccurred())
	var out []string
	for _, r := range h {
		out = append(out, fmt.Sprintf("%d %s", r.Version, r.Info.Status))
	}
	return out
}

var _ = Describe("Helm's SDK (helm.sh/helm/v3 action.Upgrade) as helm-controller's ServiceAccount", func() {
	It("an upgrade is refused during the weekend freeze with the freeze's message, the release stays as it was, and it upgrades after the thaw", func() {
		label := "env-" + randSuffix()
		ns := prodNamespace(label)
		cfg := helmConfig(ns)

		By("installed before the freeze")
		install := action.NewInstall(cfg)
		install.ReleaseName, install.Namespace = "shop", ns
		rel, err := install.Run(shopChart(), nil)
		Expect(err).NotTo(HaveOccurred())
		Expect(rel.Info.Status).To(Equal(release.StatusDeployed))

		By("frozen, every kind: the upgrade is refused at its first write, the release's new revision")
		cl := weekendFreeze("weekend-helm-"+randSuffix(), label)
		awaitFrozen(clientFor(helmController), cl, configMapProbe(ns))
		_, err = upgrade(cfg, ns, "nginx:1.28")
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(Equal(`create: failed to create: secrets "sh.helm.release.v1.shop.v2" is forbidden: ` +
			refusal(cl, "create", "secrets", "sh.helm.release.v1.shop.v2", ns, "helm-controller")))
		Expect(history(cfg)).To(Equal([]string{"1 deployed"}), "the release is as it was")

		By("thawed: the upgrade succeeds")
		thaw(cl)
		Eventually(func() error {
			_, err := upgrade(cfg, ns, "nginx:1.28")
			return err
		}).WithTimeout(settle).WithPolling(poll).Should(Succeed())
		Expect(history(cfg)).To(Equal([]string{"1 superseded", "2 deployed"}))

		By("frozen, Deployments only: the release's records pass, the Deployment's patch is refused and the revision fails")
		deployments := weekendFreeze("weekend-helm-deployments-"+randSuffix(), label, locksv1.AdmissionResources{APIGroups: []string{"apps"}, Kinds: []string{"Deployment"}})
		awaitFrozen(clientFor(helmController), deployments, func() client.Object {
			d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "probe-"}}
			d.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "probe"}}
			d.Spec.Template.Labels = map[string]string{"app": "probe"}
			d.Spec.Template.Spec.Containers = []corev1.Container{{Name: "c", Image: "nginx"}}
			return d
		})
		_, err = upgrade(cfg, ns, "nginx:1.29")
		Expect(err).To(HaveOccurred())
		GinkgoWriter.Printf("helm's error for a refused Deployment: %s\n", err)
		Expect(err.Error()).To(Equal(`cannot patch "web" with kind Deployment: deployments.apps "web" is forbidden: ` +
			refusal(deployments, "update", "deployments.apps", "web", ns, "helm-controller")))
		Expect(history(cfg)).To(Equal([]string{"1 superseded", "2 deployed", "3 failed"}))

		By("thawed: the next upgrade succeeds")
		thaw(deployments)
		Eventually(func() error {
			_, err := upgrade(cfg, ns, "nginx:1.29")
			return err
		}).WithTimeout(settle).WithPolling(poll).Should(Succeed())
		var dep appsv1.Deployment
		Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &dep)).To(Succeed())
		Expect(dep.Spec.Template.Spec.Containers[0].Image).To(Equal("nginx:1.29"))
	})
})
