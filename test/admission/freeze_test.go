package admission

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	gtypes "github.com/onsi/gomega/types"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	"github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

// Write freezes (config/admission/freeze.yaml, docs/freeze-admission.md): a CommandLock with
// spec.admission, refused by the API server for every client.

// stage is a pair of namespaces for one spec: prod (labelled with a label of its own, which the
// freeze selects) and dev; alice and bob may edit both (the built-in edit role).
type stage struct {
	prod, dev, label string
}

// stageWriter is a ClusterRole to write what the specs write (the built-in edit role is
// aggregated by kube-controller-manager, which envtest does not run).
const stageWriter = "freeze-stage-writer"

func newStage() *stage {
	GinkgoHelper()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: stageWriter}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets", "pods"}, Verbs: []string{"*"}},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"*"}},
	}}
	if err := admin.Create(ctx, role); err != nil {
		Expect(apierrors.IsAlreadyExists(err)).To(BeTrue(), "%v", err)
	}
	s := &stage{label: "freeze-" + randSuffix()}
	for _, ns := range []*string{&s.prod, &s.dev} {
		obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "stage-"}}
		if ns == &s.prod {
			obj.Labels = map[string]string{s.label: "prod"}
		}
		Expect(admin.Create(ctx, obj)).To(Succeed())
		DeferCleanup(func() { _ = admin.Delete(ctx, obj) })
		*ns = obj.Name
		bind(obj.Name, stageWriter, rbacv1.Subject{Kind: rbacv1.UserKind, Name: "alice"}, rbacv1.Subject{Kind: rbacv1.UserKind, Name: "bob"})
	}
	return s
}

func randSuffix() string { return fmt.Sprintf("%d", time.Now().UnixNano()%1e9) }

// configMap is a ConfigMap manifest as a user would apply it.
func configMap(ns, name, value string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: %s\ndata:\n  value: %q\n", name, ns, value)
}

func manifest(content string) string {
	GinkgoHelper()
	p := filepath.Join(GinkgoT().TempDir(), "m.yaml")
	Expect(os.WriteFile(p, []byte(content), 0o600)).To(Succeed())
	return p
}

// writeFreeze creates a CommandLock named after the stage that freezes writes of ConfigMaps and
// Deployments in the stage's prod namespace by alice, and waits until the API server enforces
// it (policies and their params load asynchronously): a probe create by alice is refused.
func writeFreeze(s *stage, locked bool, mode locksv1.AdmissionMode, windows ...locksv1.FreezeWindow) *locksv1.CommandLock {
	GinkgoHelper()
	w := wrappers.MakeCommandLock(s.label).Admission(locksv1.AdmissionFreeze{
		Mode: mode,
		Resources: []locksv1.AdmissionResources{
			{APIGroups: []string{""}, Kinds: []string{"ConfigMap"}},
			{APIGroups: []string{"apps"}, Kinds: []string{"Deployment"}},
		},
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{s.label: "prod"}},
		Subjects:          &locksv1.AdmissionSubjects{Users: []string{"alice"}},
		Except:            &locksv1.AdmissionSubjects{Groups: []string{"platform:break-glass"}},
	})
	if locked {
		w = w.Locked("release freeze")
	}
	for _, win := range windows {
		w = w.Window(win)
	}
	cl := w.Obj()
	cl.Generation = 0
	Expect(admin.Create(ctx, cl)).To(Succeed())
	DeferCleanup(func() { _ = admin.Delete(ctx, cl) })
	return cl
}

// probe creates and deletes a ConfigMap as alice in ns: the error of the create, if any.
func probe(ns string) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "probe-"}}
	err := as("alice").Create(ctx, cm)
	if err == nil {
		_ = admin.Delete(ctx, cm)
	}
	return err
}

func frozenBy(name string) gtypes.GomegaMatcher {
	return MatchError(ContainSubstring("writes are frozen by commandlock " + name))
}

// the message the freeze gives for op on configmap name in ns by user, without the kubectl prefix.
func freezeMessage(cl, op, object, ns, user, when string) string {
	return fmt.Sprintf("ValidatingAdmissionPolicy 'turnstile-freeze' with binding 'turnstile-freeze' denied request: writes are frozen by commandlock %s (release freeze)%s: %s of %s in namespace %s by %s is refused; "+
		"to get past it, a turnstile-admin of namespace %s can break glass (kubectl turnstile break-glass %s -n %s --reason ...), or a platform admin can thaw it (kubectl turnstile thaw %s); kubectl turnstile why explains this message",
		cl, when, op, object, ns, user, ns, cl, ns, cl)
}

var _ = Describe("Write freezes", func() {
	It("kubectl apply and delete by a frozen user are refused with the message, and admitted after the thaw; other users, namespaces and kinds are not frozen", func() {
		s := newStage()
		cm := manifest(configMap(s.prod, "app", "v1"))
		out, err := kubectl("--as=alice", "apply", "-f", cm)
		Expect(err).NotTo(HaveOccurred(), out)
		cl := writeFreeze(s, true, locksv1.AdmissionDeny)
		Eventually(func() error { return probe(s.prod) }).WithTimeout(settle).WithPolling(poll).Should(frozenBy(cl.Name))

		By("alice's kubectl apply (an update) is refused, word for word")
		v2 := manifest(configMap(s.prod, "app", "v2"))
		out, err = kubectl("--as=alice", "apply", "-f", v2)
		Expect(err).To(HaveOccurred())
		Expect(out).To(HavePrefix("Error from server (Forbidden): error when applying patch:\n"))
		Expect(out).To(HaveSuffix(fmt.Sprintf("for: %q: error when patching %q: configmaps \"app\" is forbidden: %s\n",
			v2, v2, freezeMessage(cl.Name, "update", "configmaps app", s.prod, "alice", " until it is thawed"))))

		By("and so are a create, a server-side apply and a delete")
		out, err = kubectl("--as=alice", "apply", "-f", manifest(configMap(s.prod, "new", "v1")))
		Expect(err).To(HaveOccurred())
		Expect(out).To(ContainSubstring(freezeMessage(cl.Name, "create", "configmaps new", s.prod, "alice", " until it is thawed")))
		out, err = kubectl("--as=alice", "apply", "--server-side", "-f", v2)
		Expect(err).To(HaveOccurred())
		Expect(out).To(ContainSubstring("writes are frozen by commandlock " + cl.Name))
		out, err = kubectl("--as=alice", "-n", s.prod, "delete", "configmap", "app")
		Expect(err).To(HaveOccurred())
		Expect(out).To(Equal(`Error from server (Forbidden): configmaps "app" is forbidden: ` +
			freezeMessage(cl.Name, "delete", "configmaps app", s.prod, "alice", " until it is thawed") + "\n"))

		By("a server-side dry run changes nothing and passes (diffs and previews)")
		out, err = kubectl("--as=alice", "apply", "--dry-run=server", "-f", v2)
		Expect(err).NotTo(HaveOccurred(), out)

		By("the break-glass group is never frozen")
		out, err = kubectl("--as=alice", "--as-group=platform:break-glass", "--as-group=system:authenticated", "apply", "-f", v2)
		Expect(err).NotTo(HaveOccurred(), out)

		By("out of scope: another user, another namespace, another kind")
		out, err = kubectl("--as=bob", "apply", "-f", v2)
		Expect(err).NotTo(HaveOccurred(), out)
		out, err = kubectl("--as=alice", "apply", "-f", manifest(configMap(s.dev, "app", "v2")))
		Expect(err).NotTo(HaveOccurred(), out)
		out, err = kubectl("--as=alice", "-n", s.prod, "create", "secret", "generic", "token", "--from-literal=k=v")
		Expect(err).NotTo(HaveOccurred(), out)

		By("thawed: alice's apply and delete are admitted")
		out, err = kubectl("patch", "commandlock", cl.Name, "--type=merge", "-p", `{"spec":{"locked":false}}`)
		Expect(err).NotTo(HaveOccurred(), out)
		Eventually(func() error { return probe(s.prod) }).WithTimeout(settle).WithPolling(poll).Should(Succeed())
		out, err = kubectl("--as=alice", "apply", "-f", manifest(configMap(s.prod, "app", "v3")))
		Expect(err).NotTo(HaveOccurred(), out)
		out, err = kubectl("--as=alice", "-n", s.prod, "delete", "configmap", "app")
		Expect(err).NotTo(HaveOccurred(), out)
	})

	It("relabelling a frozen namespace out of the freeze's selector is a frozen write, and so is labelling one into it", func() {
		s := newStage()
		namespaceWriter(s, "alice", "bob")
		cl := writeFreeze(s, true, locksv1.AdmissionDeny)
		Expect(admin.Patch(ctx, cl.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"admission":{"resources":null}}}`)))).To(Succeed())
		Eventually(func() error { return probe(s.prod) }).WithTimeout(settle).WithPolling(poll).Should(frozenBy(cl.Name))

		unlabel := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, s.label)
		relabel := fmt.Sprintf(`{"metadata":{"labels":{%q:"prod"}}}`, s.label)
		By("alice may not take the frozen namespace out of the selector")
		out, err := kubectl("--as=alice", "patch", "namespace", s.prod, "--type=merge", "-p", unlabel)
		Expect(err).To(HaveOccurred())
		Expect(out).To(ContainSubstring(fmt.Sprintf("writes are frozen by commandlock %s (release freeze) until it is thawed: update of namespaces %s in namespace %s by alice is refused", cl.Name, s.prod, s.prod)))
		Expect(probe(s.prod)).To(frozenBy(cl.Name), "the namespace is still frozen")
		By("nor bring another namespace into it, nor create one in it")
		out, err = kubectl("--as=alice", "patch", "namespace", s.dev, "--type=merge", "-p", relabel)
		Expect(err).To(HaveOccurred())
		Expect(out).To(ContainSubstring("writes are frozen by commandlock " + cl.Name))
		Expect(as("alice").Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "stage-", Labels: map[string]string{s.label: "prod"}}})).To(frozenBy(cl.Name))
		By("other labels of the frozen namespace are hers to change only after the thaw; bob, who is not frozen, may relabel it")
		out, err = kubectl("--as=alice", "label", "namespace", s.prod, "team=shop")
		Expect(err).To(HaveOccurred())
		Expect(out).To(ContainSubstring("writes are frozen by commandlock " + cl.Name))
		out, err = kubectl("--as=bob", "patch", "namespace", s.prod, "--type=merge", "-p", unlabel)
		Expect(err).NotTo(HaveOccurred(), out)
		Eventually(func() error { return probe(s.prod) }).WithTimeout(settle).WithPolling(poll).Should(Succeed())
	})

	It("in mode Warn, a frozen write is admitted with a warning that says it would have been refused", func() {
		s := newStage()
		cl := writeFreeze(s, true, locksv1.AdmissionWarn)
		want := fmt.Sprintf("Warning: Validation failed for ValidatingAdmissionPolicy 'turnstile-freeze-warn' with binding 'turnstile-freeze-warn': this would have been refused: writes are frozen by commandlock %s (release freeze) until it is thawed: create of configmaps app in namespace %s by alice is refused;", cl.Name, s.prod)
		Eventually(func() string {
			out, err := kubectl("--as=alice", "-n", s.prod, "create", "configmap", "app", "--from-literal=k=v")
			Expect(err).NotTo(HaveOccurred(), out)
			_, _ = kubectl("-n", s.prod, "delete", "configmap", "app")
			return out
		}).WithTimeout(settle).WithPolling(poll).Should(ContainSubstring(want))
	})

	It("is never in the way of the cluster itself: system namespaces, events, leases, endpoints, nodes, subresources, the control plane, the manager, Turnstile's objects and the policies", func() {
		s := newStage()
		By("objects the cluster will write while everything is frozen")
		dep := deployment(s.dev, "web")
		Expect(admin.Create(ctx, dep)).To(Succeed())
		garbage := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.dev, Name: "garbage"}}
		Expect(admin.Create(ctx, garbage)).To(Succeed())
		gated := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: s.dev, Name: "gated"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		Expect(admin.Create(ctx, gated)).To(Succeed())

		// Everyone's writes of every kind in every namespace: the widest freeze there is.
		cl := wrappers.MakeCommandLock(s.label).Locked("release freeze").Admission(locksv1.AdmissionFreeze{}).Obj()
		cl.Generation = 0
		Expect(admin.Create(ctx, cl)).To(Succeed())
		DeferCleanup(func() { _ = admin.Delete(ctx, cl) })
		Eventually(func() error {
			return admin.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.dev, GenerateName: "probe-"}})
		}).WithTimeout(settle).WithPolling(poll).Should(frozenBy(cl.Name))
		label := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"touched":"yes"}}}`))
		Expect(admin.Patch(ctx, dep.DeepCopy(), label)).To(frozenBy(cl.Name), "a cluster admin's writes are frozen too")

		admitted := func(what string, err error) {
			GinkgoHelper()
			Expect(err).NotTo(HaveOccurred(), what)
		}
		By("kube-system, kube-node-lease and kube-public")
		for _, ns := range []string{"kube-system", "kube-node-lease", "kube-public"} {
			c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "never-frozen-"}}
			admitted("configmap in "+ns, admin.Create(ctx, c))
			admitted("delete configmap in "+ns, admin.Delete(ctx, c))
		}
		By("events, leases, endpoints, endpoint slices and nodes")
		admitted("event", admin.Create(ctx, &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: s.dev, GenerateName: "e-"},
			EventTime: metav1.NowMicro(), ReportingController: "x/y", ReportingInstance: "i", Action: "A", Reason: "R", Type: "Normal",
			Regarding: corev1.ObjectReference{Kind: "ConfigMap", Namespace: s.dev, Name: "x"}}))
		admitted("core event", admin.Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: s.dev, GenerateName: "e-"},
			InvolvedObject: corev1.ObjectReference{Kind: "ConfigMap", Namespace: s.dev, Name: "x"}, Reason: "R"}))
		admitted("lease", admin.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: s.dev, GenerateName: "l-"}}))
		admitted("endpoints", admin.Create(ctx, &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: s.dev, GenerateName: "ep-"}})) //nolint:staticcheck // the endpoints controller still writes them
		admitted("endpointslice", admin.Create(ctx, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: s.dev, GenerateName: "eps-"}, AddressType: discoveryv1.AddressTypeIPv4}))
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{GenerateName: "node-"}}
		admitted("node", admin.Create(ctx, node))
		admitted("delete node", admin.Delete(ctx, node))

		By("subresources: a Deployment's status and scale, while its spec is frozen")
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(dep), dep)).To(Succeed())
		dep.Status.ObservedGeneration = dep.Generation
		admitted("status", admin.Status().Update(ctx, dep))
		scale := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 2}}
		admitted("scale", admin.SubResource("scale").Update(ctx, dep, client.WithSubResourceBody(scale)))

		By("the control plane: the garbage collector deletes, the ReplicaSet controller creates Pods")
		sa := func(name string) client.Client {
			return as("system:serviceaccount:kube-system:"+name, "system:serviceaccounts", "system:serviceaccounts:kube-system")
		}
		admitted("garbage collector", sa("generic-garbage-collector").Delete(ctx, garbage))
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: s.dev, GenerateName: "web-"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}}
		admitted("replicaset controller", sa("replicaset-controller").Create(ctx, pod))

		By("the manager's ServiceAccount (by the name it writes into status.admission.manager), which ungates Pods")
		user, groups := serviceAccount("turnstile-system", "turnstile-controller-manager")
		startManagerAsServiceAccount()
		Eventually(func() string {
			var got locksv1.CommandLock
			Expect(admin.Get(ctx, client.ObjectKeyFromObject(cl), &got)).To(Succeed())
			if got.Status.Admission == nil {
				return ""
			}
			return got.Status.Admission.Manager
		}).WithTimeout(settle).WithPolling(poll).Should(Equal(user))
		Expect(admin.Patch(ctx, gated.DeepCopy(), label)).To(frozenBy(cl.Name))
		admitted("the manager patches a pod", as(user, groups...).Patch(ctx, gated.DeepCopy(), label))

		By("Turnstile's own objects and the admission policies: what lifting a freeze needs")
		other := wrappers.MakeCommandLock("other-" + s.label).Locked("x").Obj()
		other.Generation = 0
		admitted("create a CommandLock", admin.Create(ctx, other))
		admitted("delete a CommandLock", admin.Delete(ctx, other))
		out, err := kubectl("annotate", "validatingadmissionpolicybinding", "turnstile-freeze", "touched="+randSuffix(), "--overwrite")
		Expect(err).NotTo(HaveOccurred(), out)

		By("lifting it: editing the CommandLock thaws at once, manager or not")
		admitted("thaw", admin.Patch(ctx, cl.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"locked":false}}`))))
		Eventually(func() error { return admin.Patch(ctx, dep.DeepCopy(), label) }).WithTimeout(settle).WithPolling(poll).Should(Succeed())
	})

	It("a freeze policy whose params cannot be read never stops the cluster's writes (failurePolicy Ignore)", func() {
		s := newStage()
		By("the shipped policy, as a copy whose params are of a kind no API server serves (the CRD deleted)")
		policy := freezePolicies()["turnstile-freeze"]
		name := "broken-" + s.label
		policy["metadata"] = map[string]any{"name": name}
		spec := policy["spec"].(map[string]any)
		spec["paramKind"] = map[string]any{"apiVersion": "locks.turnstile.dev/v1alpha1", "kind": "NoSuchKind"}
		binding := map[string]any{"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
			"metadata": map[string]any{"name": name},
			"spec": map[string]any{"policyName": name, "validationActions": []any{"Deny"},
				"paramRef":       map[string]any{"selector": map[string]any{}, "parameterNotFoundAction": "Deny"},
				"matchResources": map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{s.label: "prod"}}}}}
		for _, o := range []map[string]any{policy, binding} {
			data, err := yaml.Marshal(o)
			Expect(err).NotTo(HaveOccurred())
			out, err := kubectl("apply", "-f", manifest(string(data)))
			Expect(err).NotTo(HaveOccurred(), out)
			kind := o["kind"].(string)
			DeferCleanup(func() { _, _ = kubectl("delete", strings.ToLower(kind), name) })
		}
		By("writes in the namespace it matches are admitted, now and after the policy has loaded")
		// A sibling policy that fails closed shows when policies of this kind have loaded.
		sibling := strings.ReplaceAll(mustYAML(binding), name, name+"-canary")
		canary := mustYAML(policy)
		canary = strings.ReplaceAll(canary, "failurePolicy: Ignore", "failurePolicy: Fail")
		canary = strings.ReplaceAll(canary, "name: "+name, "name: "+name+"-canary")
		out, err := kubectl("apply", "-f", manifest(canary+"\n---\n"+sibling))
		Expect(err).NotTo(HaveOccurred(), out)
		DeferCleanup(func() {
			_, _ = kubectl("delete", "validatingadmissionpolicybinding", name+"-canary")
			_, _ = kubectl("delete", "validatingadmissionpolicy", name+"-canary")
		})
		Eventually(func() error { return probe(s.prod) }).WithTimeout(settle).WithPolling(poll).Should(MatchError(ContainSubstring("ValidatingAdmissionPolicy '" + name + "-canary'")))
		_, _ = kubectl("delete", "validatingadmissionpolicybinding", name+"-canary")
		Eventually(func() error { return probe(s.prod) }).WithTimeout(settle).WithPolling(poll).Should(Succeed())
		out, err = kubectl("--as=alice", "apply", "-f", manifest(configMap(s.prod, "app", "v1")))
		Expect(err).NotTo(HaveOccurred(), out)
	})

	It("the two policies are one: the Warn policy is the Deny policy but for its name and mode", func() {
		policies := freezePolicies()
		deny, warn := policies["turnstile-freeze"], policies["turnstile-freeze-warn"]
		Expect(deny).NotTo(BeNil())
		Expect(warn).NotTo(BeNil())
		warn["metadata"] = deny["metadata"]
		conds := warn["spec"].(map[string]any)["matchConditions"].([]any)
		Expect(conds[0].(map[string]any)["expression"]).To(ContainSubstring("== 'Warn'"))
		conds[0].(map[string]any)["expression"] = strings.Replace(conds[0].(map[string]any)["expression"].(string), "== 'Warn'", "== 'Deny'", 1)
		Expect(warn).To(Equal(deny))
	})
})

// namespaceWriter lets users get, create and change namespaces (a ClusterRole bound to them for
// the spec) and waits until RBAC says so.
func namespaceWriter(s *stage, users ...string) {
	GinkgoHelper()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "freeze-namespace-writer-" + s.label}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "patch", "update", "create"}},
	}}
	Expect(admin.Create(ctx, role)).To(Succeed())
	DeferCleanup(func() { _ = admin.Delete(ctx, role) })
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}}
	for _, u := range users {
		crb.Subjects = append(crb.Subjects, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: u})
	}
	Expect(admin.Create(ctx, crb)).To(Succeed())
	DeferCleanup(func() { _ = admin.Delete(ctx, crb) })
	for _, user := range users {
		Eventually(func(g Gomega) {
			review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: []string{"system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "create", Resource: "namespaces"}}}
			g.Expect(admin.Create(ctx, review)).To(Succeed())
			g.Expect(review.Status.Allowed).To(BeTrue(), "%s", review.Status.Reason)
		}).WithTimeout(settle).WithPolling(poll).Should(Succeed())
	}
}

// freezePolicies are the ValidatingAdmissionPolicies of config/admission/freeze.yaml, by name.
func freezePolicies() map[string]map[string]any {
	GinkgoHelper()
	root, err := framework.RepoRoot()
	Expect(err).NotTo(HaveOccurred())
	data, err := os.ReadFile(filepath.Join(root, "config", "admission", "freeze.yaml"))
	Expect(err).NotTo(HaveOccurred())
	policies := map[string]map[string]any{}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var o map[string]any
		Expect(yaml.Unmarshal([]byte(doc), &o)).To(Succeed())
		if o["kind"] == "ValidatingAdmissionPolicy" {
			policies[o["metadata"].(map[string]any)["name"].(string)] = o
		}
	}
	return policies
}

func mustYAML(o any) string {
	GinkgoHelper()
	data, err := yaml.Marshal(o)
	Expect(err).NotTo(HaveOccurred())
	return string(data)
}

func deployment(ns, name string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}},
			},
		},
	}
}

// attempt is one create by alice during the window spec, as the API server judged it.
type attempt struct {
	err     string
	at      time.Time // the API server's stamp of an admitted create; before it was sent, for a refused one
	refused bool
}

var _ = Describe("Write freezes by window", func() {
	It("windows that open and close during the test flip creates and updates at their edges by the API server's clock, with or without a manager; deletes follow the manager's judgement and fail closed while none runs", func() {
		s := newStage()
		stopManager := runManagerAsServiceAccount()
		defer func() { stopManager() }()

		// Two windows of 20 s, a minute apart: the first opens at the next whole minute at least
		// 25 s away. Each is "M H * * *", so nothing else of theirs is near.
		const length = 20 * time.Second
		open1 := time.Now().UTC().Add(25 * time.Second).Truncate(time.Minute).Add(time.Minute)
		close1, open2 := open1.Add(length), open1.Add(time.Minute)
		close2 := open2.Add(length)
		window := func(name string, at time.Time) locksv1.FreezeWindow {
			return locksv1.FreezeWindow{Name: name, Schedule: fmt.Sprintf("%d %d * * *", at.Minute(), at.Hour()),
				Duration: metav1.Duration{Duration: length}, Action: locksv1.WindowDeny}
		}
		cl := writeFreeze(s, false, locksv1.AdmissionDeny, window("release-1", open1), window("release-2", open2))
		frozen := func(at time.Time) bool {
			return (!at.Before(open1) && at.Before(close1)) || (!at.Before(open2) && at.Before(close2))
		}

		By("the manager judges the windows ahead into status.admission")
		judged := func() *locksv1.AdmissionStatus {
			var got locksv1.CommandLock
			Expect(admin.Get(ctx, client.ObjectKeyFromObject(cl), &got)).To(Succeed())
			return got.Status.Admission
		}
		interval := func(from, until time.Time, name string) gtypes.GomegaMatcher {
			return And(HaveField("From.Time", BeTemporally("==", from)), HaveField("Until", HaveField("Time", BeTemporally("==", until))), HaveField("Window", name))
		}
		Eventually(func() []locksv1.FreezeInterval {
			if a := judged(); a != nil {
				return a.Intervals
			}
			return nil
		}).WithTimeout(settle).WithPolling(poll).Should(ContainElements(interval(open1, close1, "release-1"), interval(open2, close2, "release-2")))

		alice := as("alice")
		fixture := func(name string) *corev1.ConfigMap {
			c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.prod, Name: name}, Data: map[string]string{"keep": "1"}}
			Expect(admin.Create(ctx, c)).To(Succeed())
			return c
		}
		updated := fixture("updated")
		var attempts []attempt
		n := 0
		// create tries a create as alice and records how the API server judged it.
		create := func() {
			GinkgoHelper()
			n++
			sent := time.Now()
			c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.prod, Name: fmt.Sprintf("c-%d", n)}}
			if err := alice.Create(ctx, c); err != nil {
				Expect(err).To(frozenBy(cl.Name))
				attempts = append(attempts, attempt{at: sent, refused: true, err: err.Error()})
			} else {
				attempts = append(attempts, attempt{at: c.CreationTimestamp.Time})
			}
		}
		admitted := func(op string) error { return fmt.Errorf("%s admitted", op) }
		// update changes a field of a ConfigMap as alice: the refusal, or "update admitted".
		update := func() error {
			n++
			u := &corev1.ConfigMap{}
			Expect(admin.Get(ctx, client.ObjectKeyFromObject(updated), u)).To(Succeed())
			u.Data["n"] = fmt.Sprint(n)
			if err := alice.Update(ctx, u, client.FieldOwner("alice")); err != nil {
				return err
			}
			return admitted("update")
		}
		// forgedUpdate is an update that sends managedFields of its own, every time rewritten
		// to a second long before the windows: it cannot hide the API server's stamp.
		forgedUpdate := func() error {
			n++
			u := &corev1.ConfigMap{}
			Expect(admin.Get(ctx, client.ObjectKeyFromObject(updated), u)).To(Succeed())
			for i := range u.ManagedFields {
				u.ManagedFields[i].Time = &metav1.Time{Time: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)}
			}
			u.Data["n"] = fmt.Sprint(n)
			if err := alice.Update(ctx, u, client.FieldOwner("alice")); err != nil {
				return err
			}
			return admitted("forged update")
		}
		// removal is an update that only removes a field: the field manager stamps nothing.
		removal := func() error {
			c := fixture(fmt.Sprintf("r-%d", time.Now().UnixNano()))
			delete(c.Data, "keep")
			if err := alice.Update(ctx, c); err != nil {
				return err
			}
			return admitted("removal")
		}
		del := func() error {
			c := fixture(fmt.Sprintf("d-%d", time.Now().UnixNano()))
			if err := alice.Delete(ctx, c); err != nil {
				return err
			}
			return admitted("delete")
		}
		createsUntil := func(t time.Time) {
			GinkgoHelper()
			for time.Now().Before(t) {
				create()
			}
		}
		isFrozen := frozenBy(cl.Name)

		By("before the windows: admitted")
		createsUntil(open1.Add(-3 * time.Second))
		Expect(del()).To(MatchError(admitted("delete")))
		Expect(update()).To(MatchError(admitted("update")))
		createsUntil(open1)

		By("release-1 opens while the manager runs: creates and updates at once, deletes once it writes the edge (within a reconcile)")
		Expect(update()).To(isFrozen)
		Eventually(del).WithTimeout(5 * time.Second).WithPolling(poll).Should(isFrozen)
		createsUntil(open1.Add(8 * time.Second))

		By("the manager stops during the freeze: still refused; bob, whom it does not freeze, writes a field of his own")
		stopManager()
		createsUntil(open1.Add(15 * time.Second))
		Expect(del()).To(isFrozen)
		Expect(update()).To(isFrozen)
		u := &corev1.ConfigMap{}
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(updated), u)).To(Succeed())
		u.Data["bob"] = "was here"
		Expect(as("bob").Update(ctx, u, client.FieldOwner("bob"))).To(Succeed())
		createsUntil(close1.Add(3 * time.Second))

		By("release-1 closes while no manager runs: creates are admitted by the API server's clock; updates and deletes fail closed (judged as of the opening too)")
		Expect(del()).To(isFrozen)
		Expect(update()).To(isFrozen)
		a := judged()
		Expect(a.JudgedAt.Time).To(BeTemporally(">=", open1), "the manager wrote the opening")
		Expect(a.JudgedAt.Time).To(BeTemporally("<", close1), "no manager wrote the close")
		createsUntil(close1.Add(5 * time.Second))

		By("a manager again: it judges the close, and updates and deletes are admitted (bob's entry, stamped inside the window, is not alice's write's time)")
		stopManager = runManagerAsServiceAccount()
		Eventually(del).WithTimeout(settle).WithPolling(poll).Should(MatchError(admitted("delete")))
		Expect(update()).To(MatchError(admitted("update")))
		stopManager()
		Expect(time.Now()).To(BeTemporally("<", open2.Add(-3*time.Second)), "the machine was too slow to judge release-1's close before release-2 opens")
		Expect(judged().JudgedAt.Time).To(BeTemporally(">=", close1))
		createsUntil(open2)

		By("release-2 opens while no manager runs: creates and updates are refused by the API server's clock, also with forged managedFields")
		Expect(update()).To(isFrozen)
		Expect(forgedUpdate()).To(isFrozen)
		By("bob, whom it does not freeze, writes inside release-2: his entry's time is his write's, never alice's next one's")
		u = &corev1.ConfigMap{}
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(updated), u)).To(Succeed())
		u.Data["bob"] = "inside release-2"
		Expect(as("bob").Update(ctx, u, client.FieldOwner("bob"))).To(Succeed())
		By("only a delete and an update that only removes a field carry no time: judged as of the manager's last judgement, before the opening")
		Expect(del()).To(MatchError(admitted("delete")))
		Expect(removal()).To(MatchError(admitted("removal")))
		createsUntil(close2.Add(3 * time.Second))

		By("release-2 closes, still no manager: creates and updates are admitted (their stamps and the last judgement are outside every window)")
		Expect(update()).To(MatchError(admitted("update")))
		Expect(del()).To(MatchError(admitted("delete")))
		createsUntil(close2.Add(5 * time.Second))

		By("every create is judged by the second the API server stamped on it: none admitted inside a window, none refused outside them")
		inside, outside := 0, 0
		for _, a := range attempts {
			if !a.refused {
				Expect(frozen(a.at)).To(BeFalse(), "a create admitted at %s, inside a window [%s, %s) or [%s, %s)", a.at, open1, close1, open2, close2)
				outside++
				continue
			}
			// A refusal's time is when it was sent: at most a second before its stamp.
			Expect(frozen(a.at) || frozen(a.at.Add(2*time.Second))).To(BeTrue(), "a create refused when sent at %s, outside the windows: %s", a.at, a.err)
			inside++
		}
		Expect(inside).To(BeNumerically(">", 10))
		Expect(outside).To(BeNumerically(">", 10))
		for _, w := range [][2]time.Time{{close1, close1.Add(5 * time.Second)}, {close2, close2.Add(5 * time.Second)}} {
			seen := false
			for _, a := range attempts {
				seen = seen || (!a.refused && !a.at.Before(w[0]) && a.at.Before(w[1]))
			}
			Expect(seen).To(BeTrue(), "no create was admitted in [%s, %s), after a close with no manager", w[0], w[1])
		}
	})

	It("break glass: a turnstile-admin's granted bypass lets their writes in their namespace past the freeze, recorded on the CommandLock", func() {
		s := newStage()
		bind(s.prod, "turnstile-admin", rbacv1.Subject{Kind: rbacv1.UserKind, Name: "alice"})
		startManagerAsServiceAccount()
		cl := writeFreeze(s, true, locksv1.AdmissionDeny)
		// alice's writes of every kind in every namespace, dev too, where she is no admin, and of
		// cluster-scoped objects: she may create namespaces.
		Expect(admin.Patch(ctx, cl.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"admission":{"namespaceSelector":null,"resources":null}}}`)))).To(Succeed())
		Eventually(func() error { return probe(s.dev) }).WithTimeout(settle).WithPolling(poll).Should(frozenBy(cl.Name))
		namespaceWriter(s, "alice")
		newNamespace := func() error {
			return as("alice").Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "by-alice-"}})
		}
		Expect(newNamespace()).To(MatchError(ContainSubstring(fmt.Sprintf("writes are frozen by commandlock %s (release freeze) until it is thawed: create of namespaces by-alice-", cl.Name))))
		Expect(newNamespace()).To(MatchError(ContainSubstring("by alice is refused; to get past it, a platform admin can thaw it (kubectl turnstile thaw " + cl.Name + ")")))

		By("alice takes a break-glass grant, as kubectl turnstile break-glass does")
		lr := wrappers.MakeLockRequest("break-glass", s.prod).Lock("break-glass/"+cl.Name, "alice", "default").Obj()
		lr.Spec.Command = cl.Name
		lr.Spec.BypassFreeze = &locksv1.FreezeBypass{Reason: "incident 4711"}
		lr.Spec.TTL = &metav1.Duration{Duration: 10 * time.Minute}
		Expect(as("alice").Create(ctx, lr)).To(Succeed())
		Eventually(outcome(s.prod, lr.Name)).WithTimeout(settle).WithPolling(poll).Should(HavePrefix("Granted"))

		By("her writes in that namespace pass; in another namespace, and bob's, do not")
		Eventually(func() error { return probe(s.prod) }).WithTimeout(settle).WithPolling(poll).Should(Succeed())
		Expect(probe(s.dev)).To(frozenBy(cl.Name), "the grant is for her namespace only")
		Expect(newNamespace()).To(frozenBy(cl.Name), "the grant is for her namespace only, not for cluster-scoped objects")
		Expect(as("bob").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.prod, GenerateName: "x-"}})).To(Succeed(), "bob is not frozen")
		cl2 := &locksv1.CommandLock{}
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(cl), cl2)).To(Succeed())
		Expect(cl2.Status.Admission.Bypasses).To(ConsistOf(And(HaveField("User", "alice"), HaveField("Namespace", s.prod),
			HaveField("Request", lr.Name), HaveField("Reason", "incident 4711"))))

		By("recorded: a BreakGlass event on the CommandLock")
		Eventually(func() []string {
			var evs eventsv1.EventList
			Expect(admin.List(ctx, &evs, client.InNamespace("default"))).To(Succeed())
			var out []string
			for _, e := range evs.Items {
				if e.Regarding.Name == cl.Name && e.Reason == locksv1.ReasonBreakGlass {
					out = append(out, e.Note)
				}
			}
			return out
		}).WithTimeout(settle).WithPolling(poll).Should(ContainElement(MatchRegexp(
			`^break glass: alice may write in namespace %s past the write freeze until \S+Z \(lockrequest %s/break-glass\): incident 4711$`, s.prod, s.prod)))

		By("released: frozen again")
		Expect(patch(as("alice"), lr.DeepCopy(), release)).To(Succeed())
		Eventually(func() error { return probe(s.prod) }).WithTimeout(settle).WithPolling(poll).Should(frozenBy(cl.Name))
	})
})
