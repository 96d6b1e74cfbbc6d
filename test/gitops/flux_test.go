package gitops_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	fluxstatus "github.com/fluxcd/cli-utils/pkg/kstatus/status"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	. "github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

// docObject is one YAML document of docs/flux.md, with the file the page puts it in (the
// comment on the first line of its block).
type docObject struct {
	path string
	raw  []byte
}

var yamlBlock = regexp.MustCompile("(?s)```yaml\n# ([^\n]+)\n(.*?)```")

// fluxDocObjects reads every YAML block of docs/flux.md.
func fluxDocObjects() []docObject {
	GinkgoHelper()
	root, err := framework.RepoRoot()
	Expect(err).NotTo(HaveOccurred())
	page, err := os.ReadFile(filepath.Join(root, "docs", "flux.md"))
	Expect(err).NotTo(HaveOccurred())
	var out []docObject
	for _, m := range yamlBlock.FindAllSubmatch(page, -1) {
		for _, doc := range bytes.Split(m[2], []byte("\n---\n")) {
			out = append(out, docObject{path: string(m[1]), raw: doc})
		}
	}
	Expect(out).NotTo(BeEmpty(), "no YAML blocks in docs/flux.md")
	return out
}

var fluxVar = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// substitute replaces ${VAR} from vars, as Flux's postBuild.substituteFrom does; a variable
// the ConfigMap does not define fails the spec (Flux would leave it empty).
func substitute(raw []byte, vars map[string]string) []byte {
	GinkgoHelper()
	return fluxVar.ReplaceAllFunc(raw, func(v []byte) []byte {
		name := string(fluxVar.FindSubmatch(v)[1])
		val, ok := vars[name]
		Expect(ok).To(BeTrue(), "${%s} is not in the deploy-vars ConfigMap", name)
		return []byte(val)
	})
}

func toUnstructured(raw []byte) *unstructured.Unstructured {
	GinkgoHelper()
	js, err := yaml.YAMLToJSON(raw)
	Expect(err).NotTo(HaveOccurred())
	u := &unstructured.Unstructured{}
	Expect(utiljson.Unmarshal(js, &u.Object)).To(Succeed())
	return u
}

// fluxKstatus is what kustomize-controller v1.9.6's health check concludes: the kstatus it
// links, github.com/fluxcd/cli-utils v1.2.3, on the object as the API server returns it.
func fluxKstatus(ns, name string) func() string {
	return func() string {
		u, err := read(lockRequestGVK, ns, name)
		if err != nil {
			return err.Error()
		}
		res, err := fluxstatus.Compute(u)
		if err != nil {
			return err.Error()
		}
		return string(res.Status) + ": " + res.Message
	}
}

var _ = Describe("docs/flux.md", func() {
	It("decodes into Flux's types, gates the deploy on the lock being granted, and its Job releases the lock", func() {
		startManager()
		docs := fluxDocObjects()

		// The Kustomizations, strictly in kustomize-controller's API types.
		ks := map[string]kustomizev1.Kustomization{}
		var vars map[string]string
		for _, d := range docs {
			switch d.path {
			case "clusters/prod/deploy.yaml":
				var k kustomizev1.Kustomization
				Expect(yaml.UnmarshalStrict(d.raw, &k)).To(Succeed(), "%s", d.raw)
				Expect(k.APIVersion).To(Equal(kustomizev1.GroupVersion.String()))
				Expect(k.Kind).To(Equal(kustomizev1.KustomizationKind))
				ks[k.Name] = k
			case "clusters/prod/deploy-vars.yaml":
				var cm corev1.ConfigMap
				Expect(yaml.UnmarshalStrict(d.raw, &cm)).To(Succeed())
				Expect(cm.Name).To(Equal("deploy-vars"))
				vars = cm.Data
			}
		}
		Expect(ks).To(HaveKey("deploy-lock"))
		Expect(ks).To(HaveKey("deploy-app"))
		Expect(ks).To(HaveKey("deploy-unlock"))
		Expect(vars).To(HaveKey("LOCK_NAME"))
		lock, app, unlock := ks["deploy-lock"], ks["deploy-app"], ks["deploy-unlock"]
		Expect(lock.Spec.Wait || len(lock.Spec.HealthChecks) > 0).To(BeTrue(), "deploy-lock must wait for its LockRequest")
		Expect(app.Spec.DependsOn).To(ConsistOf(HaveField("Name", "deploy-lock")))
		Expect(unlock.Spec.DependsOn).To(ConsistOf(HaveField("Name", "deploy-app")))
		for _, k := range []kustomizev1.Kustomization{lock, app, unlock} {
			Expect(k.Spec.SourceRef).To(Equal(lock.Spec.SourceRef), "one source, so dependsOn also waits for the same revision")
		}
		for _, k := range []kustomizev1.Kustomization{lock, unlock} {
			Expect(k.Spec.PostBuild).NotTo(BeNil())
			Expect(k.Spec.PostBuild.SubstituteFrom).To(ContainElement(And(HaveField("Kind", "ConfigMap"), HaveField("Name", "deploy-vars"))))
		}

		// The objects under each path, substituted as postBuild does.
		var lockObjs, unlockObjs []*unstructured.Unstructured
		for _, d := range docs {
			switch {
			case strings.HasPrefix(d.path, strings.TrimPrefix(lock.Spec.Path, "./")+"/"):
				lockObjs = append(lockObjs, toUnstructured(substitute(d.raw, vars)))
			case strings.HasPrefix(d.path, strings.TrimPrefix(unlock.Spec.Path, "./")+"/"):
				unlockObjs = append(unlockObjs, toUnstructured(substitute(d.raw, vars)))
			}
		}
		Expect(lockObjs).To(HaveLen(1))
		lr := lockObjs[0]
		Expect(lr.GroupVersionKind()).To(Equal(lockRequestGVK))
		ns, name := lr.GetNamespace(), lr.GetName()
		Expect(name).To(Equal(vars["LOCK_NAME"]))

		// The page's namespace and Turnstile's requester role, as an installed cluster has them.
		nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
		create(nsObj)
		DeferCleanup(func() { _ = k8s.Delete(ctx, nsObj) })
		root, err := framework.RepoRoot()
		Expect(err).NotTo(HaveOccurred())
		roleYAML, err := os.ReadFile(filepath.Join(root, "config", "rbac", "lock_requester_role.yaml"))
		Expect(err).NotTo(HaveOccurred())
		var role rbacv1.ClusterRole
		Expect(yaml.UnmarshalStrict(roleYAML, &role)).To(Succeed())
		Expect(role.Name).To(Equal("turnstile-requester"))
		create(&role)
		DeferCleanup(func() { _ = k8s.Delete(ctx, &role) })

		// Someone else holds the key: the page's request waits, and Flux keeps deploy-lock not Ready.
		var spec locksv1.LockRequestSpec
		specJSON, err := utiljson.Marshal(lr.Object["spec"])
		Expect(err).NotTo(HaveOccurred())
		Expect(utiljson.Unmarshal(specJSON, &spec)).To(Succeed())
		other := MakeLockRequest("other-deploy", ns).Owner("bob", 7).Command(spec.Command)
		other.Spec.Locks = spec.Locks
		create(other.Obj())
		Eventually(phaseOf(ns, "other-deploy"), timeout, interval).Should(Equal(locksv1.PhaseGranted))

		Expect(k8s.Create(ctx, lr)).To(Succeed())
		Eventually(fluxKstatus(ns, name), timeout, interval).Should(Equal("InProgress: locked by pull #7 (bob); position 1 of 1"))
		Consistently(fluxKstatus(ns, name), "500ms", interval).Should(HavePrefix("InProgress: "))

		// The other holder releases: the request is granted, deploy-lock turns Ready.
		var o locksv1.LockRequest
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "other-deploy"}, &o)).To(Succeed())
		p := client.MergeFrom(o.DeepCopy())
		o.Spec.Release = true
		Expect(k8s.Patch(ctx, &o, p)).To(Succeed())
		Eventually(fluxKstatus(ns, name), timeout, interval).Should(Equal("Current: Resource is Ready"))
		Expect(phaseOf(ns, name)()).To(Equal(locksv1.PhaseGranted))

		// deploy-unlock: its objects are valid, and its Job's command, run with the real kubectl
		// as the Job's ServiceAccount, releases the lock; it still reads Current.
		var job *batchv1.Job
		var sa string
		for _, u := range unlockObjs {
			if u.GetKind() == "Job" {
				job = &batchv1.Job{}
				Expect(runtimeFromUnstructured(u, job)).To(Succeed())
				sa = job.Spec.Template.Spec.ServiceAccountName
				continue // created below, after its permission is shown to matter
			}
			Expect(k8s.Create(ctx, u)).To(Succeed(), "%s %s", u.GetKind(), u.GetName())
		}
		Expect(job).NotTo(BeNil())
		Expect(job.Name).To(Equal("release-" + name))
		Expect(job.Spec.Template.Spec.Containers).To(HaveLen(1))
		args := job.Spec.Template.Spec.Containers[0].Args
		Expect(k8s.Create(ctx, job)).To(Succeed(), "the API server accepts the Job")

		kubeconfig := filepath.Join(GinkgoT().TempDir(), "kubeconfig")
		Expect(env.WriteKubeconfig(kubeconfig)).To(Succeed())
		kubectl := func(as string, args ...string) (string, error) {
			// In the Job's pod kubectl talks to its own namespace as its ServiceAccount.
			full := append([]string{"--kubeconfig", kubeconfig, "--namespace", ns, "--as", as}, args...)
			out, err := exec.Command(env.Kubectl(), full...).CombinedOutput()
			return string(out), err
		}
		out, err := kubectl("system:serviceaccount:"+ns+":nobody", args...)
		Expect(err).To(HaveOccurred(), "without the RoleBinding the patch must be refused: %s", out)
		Expect(out).To(ContainSubstring("forbidden"))

		out, err = kubectl("system:serviceaccount:"+ns+":"+sa, args...)
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring("lockrequest.locks.turnstile.dev/" + name + " patched"))
		Eventually(phaseOf(ns, name), timeout, interval).Should(Equal(locksv1.PhaseReleased))
		Expect(fluxKstatus(ns, name)()).To(Equal("Current: Resource is Ready"))
	})
})

func runtimeFromUnstructured(u *unstructured.Unstructured, into any) error {
	js, err := u.MarshalJSON()
	if err != nil {
		return err
	}
	return utiljson.Unmarshal(js, into)
}
