package gitopsfreeze_test

import (
	"fmt"

	"github.com/fluxcd/cli-utils/pkg/kstatus/polling"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/ssa"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/yaml"

	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// kustomizeManager is a ResourceManager as kustomize-controller makes one for a Kustomization:
// its ServiceAccount's client, kstatus's poller, and the controller's name as field manager.
func kustomizeManager() *ssa.ResourceManager {
	GinkgoHelper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kustomizeController)
	Expect(err).NotTo(HaveOccurred())
	httpClient, err := rest.HTTPClientFor(cfg)
	Expect(err).NotTo(HaveOccurred())
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	Expect(err).NotTo(HaveOccurred())
	c, err := client.New(cfg, client.Options{Scheme: framework.Scheme, Mapper: mapper})
	Expect(err).NotTo(HaveOccurred())
	poller := polling.NewStatusPoller(c, mapper, polling.Options{})
	return ssa.NewResourceManager(c, poller, ssa.Owner{Field: "kustomize-controller", Group: kustomizev1.GroupVersion.Group})
}

// kustomizeApplyOptions are the options kustomize-controller applies a Kustomization's objects
// with (its reconcile's apply step): skip by label, metadata cleanup of kubectl's managers.
func kustomizeApplyOptions() ssa.ApplyOptions {
	opts := ssa.DefaultApplyOptions()
	group := kustomizev1.GroupVersion.Group
	opts.ExclusionSelector = map[string]string{group + "/reconcile": kustomizev1.DisabledValue, group + "/ssa": kustomizev1.IgnoreValue}
	opts.IfNotPresentSelector = map[string]string{group + "/ssa": kustomizev1.IfNotPresentValue}
	opts.ForceSelector = map[string]string{group + "/force": kustomizev1.EnabledValue}
	opts.Cleanup = ssa.ApplyCleanupOptions{
		Annotations: []string{corev1.LastAppliedConfigAnnotation, group + "/checksum", "fluxcd.io/sync-checksum"},
		Labels:      []string{"fluxcd.io/sync-gc-mark"},
		FieldManagers: []ssa.FieldManager{
			{Name: "kubectl", OperationType: metav1.ManagedFieldsOperationApply},
			{Name: "kubectl", OperationType: metav1.ManagedFieldsOperationUpdate},
			{Name: "before-first-apply", OperationType: metav1.ManagedFieldsOperationUpdate},
			{Name: "kustomize-controller", OperationType: metav1.ManagedFieldsOperationUpdate},
		},
		Exclusions: map[string]string{group + "/ssa": kustomizev1.MergeValue},
	}
	opts.WaitTimeout = settle
	return opts
}

// shop is a Kustomization's build output: a ConfigMap and a Deployment of image.
func shop(ns, image string) []*unstructured.Unstructured {
	GinkgoHelper()
	manifests := fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata: {name: web-config, namespace: %[1]s}
data: {greeting: hello}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: %[1]s}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: %[2]q}]
`, ns, image)
	docs, err := framework.ParseManifests(manifests)
	Expect(err).NotTo(HaveOccurred())
	var out []*unstructured.Unstructured
	for _, d := range docs {
		data, err := yaml.Marshal(d)
		Expect(err).NotTo(HaveOccurred())
		u := &unstructured.Unstructured{}
		Expect(yaml.Unmarshal(data, &u.Object)).To(Succeed())
		out = append(out, u)
	}
	return out
}

var _ = Describe("Flux's server-side apply (github.com/fluxcd/pkg/ssa, as kustomize-controller applies) as kustomize-controller's ServiceAccount", func() {
	It("is refused during the weekend freeze with the freeze's message in the apply error, prunes too, and applies after the thaw", func() {
		label := "env-" + randSuffix()
		ns := prodNamespace(label)
		m := kustomizeManager()
		m.SetOwnerLabels(shop(ns, ""), "shop", fluxSystem)
		opts := kustomizeApplyOptions()
		apply := func(image string) (*ssa.ChangeSet, error) {
			objects := shop(ns, image)
			m.SetOwnerLabels(objects, "shop", fluxSystem)
			return m.ApplyAllStaged(ctx, objects, opts)
		}

		By("before the freeze: the Kustomization applies")
		cs, err := apply("nginx:1.27")
		Expect(err).NotTo(HaveOccurred())
		Expect(cs.String()).To(And(ContainSubstring("ConfigMap/"+ns+"/web-config created"), ContainSubstring("Deployment/"+ns+"/web created")))

		cl := weekendFreeze("weekend-flux-"+randSuffix(), label)
		awaitFrozen(clientFor(kustomizeController), cl, configMapProbe(ns))

		By("frozen: a new revision's apply fails, naming the object and the freeze")
		_, err = apply("nginx:1.28")
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(Equal(fmt.Sprintf(`Deployment/%s/web apply failed: deployments.apps "web" is forbidden: %s`,
			ns, refusal(cl, "update", "deployments.apps", "web", ns, "kustomize-controller"))))
		var dep unstructured.Unstructured
		dep.SetAPIVersion("apps/v1")
		dep.SetKind("Deployment")
		Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &dep)).To(Succeed())
		containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
		Expect(containers[0].(map[string]any)["image"]).To(Equal("nginx:1.27"), "the Deployment is as before the freeze")

		By("frozen: pruning what left the source (garbage collection of a Kustomization) fails too")
		stale := shop(ns, "nginx:1.27")[:1] // the ConfigMap
		m.SetOwnerLabels(stale, "shop", fluxSystem)
		prune := ssa.DeleteOptions{PropagationPolicy: metav1.DeletePropagationBackground, Inclusions: m.GetOwnerLabels("shop", fluxSystem),
			Exclusions: map[string]string{kustomizev1.GroupVersion.Group + "/prune": kustomizev1.DisabledValue}}
		_, err = m.DeleteAll(ctx, stale, prune)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(Equal(fmt.Sprintf(`delete failed, errors: ConfigMap/%s/web-config delete failed: configmaps "web-config" is forbidden: %s;`,
			ns, refusal(cl, "delete", "configmaps", "web-config", ns, "kustomize-controller"))))

		By("thawed: the same revision applies")
		thaw(cl)
		Eventually(func() error {
			cs, err = apply("nginx:1.28")
			return err
		}).WithTimeout(settle).WithPolling(poll).Should(Succeed())
		Expect(cs.String()).To(Equal("ConfigMap/" + ns + "/web-config unchanged\nDeployment/" + ns + "/web configured"))
		cs, err = m.DeleteAll(ctx, stale, prune)
		Expect(err).NotTo(HaveOccurred())
		Expect(cs.String()).To(Equal("ConfigMap/" + ns + "/web-config deleted"))
	})
})
