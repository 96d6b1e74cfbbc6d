package controller_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/controller"
	. "github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

// setMembers writes the fleet's members ConfigMap (config/fleet/members.yaml) with data, making
// its namespace first, and deletes it after the spec.
func setMembers(data map[string]string) {
	GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: controller.FleetMembersNamespace}}
	if err := k8s.Create(ctx, ns); !apierrors.IsAlreadyExists(err) {
		Expect(err).NotTo(HaveOccurred())
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: controller.FleetMembersNamespace, Name: controller.FleetMembersName}}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(cm), cm); apierrors.IsNotFound(err) {
		cm.Data = data
		Expect(k8s.Create(ctx, cm)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(ctx, cm))).To(Succeed()) })
		return
	}
	cm.Data = data
	Expect(k8s.Update(ctx, cm)).To(Succeed())
}

// mustZone loads an IANA zone.
func mustZone(name string) *time.Location {
	GinkgoHelper()
	loc, err := time.LoadLocation(name)
	Expect(err).NotTo(HaveOccurred())
	return loc
}

var _ = Describe("CommandLock cluster scopes (a fleet's hub)", func() {
	var ns string
	BeforeEach(func() {
		ns = newNamespace()
		DeferCleanup(func() {
			Expect(k8s.DeleteAllOf(ctx, &locksv1.LockRequest{}, client.InNamespace(ns))).To(Succeed())
		})
	})
	apply := func(name, path, cluster string) *locksv1.LockRequest {
		return MakeLockRequest(name, ns).Lock("acme/infra", path, "default").Owner("alice", 1).Command("apply").Cluster(cluster).Obj()
	}

	It("freezes only the requests of the clusters its selector matches, by the members' labels read fresh", func() {
		setMembers(map[string]string{"eu-west-1": `{"labels":{"region":"eu"}}`, "us-east-1": `{"labels":{"region":"us"}}`})
		cl := &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: "apply"}}
		cl.Spec = locksv1.CommandLockSpec{Locked: true, Reason: "EU weekend freeze",
			Clusters: &locksv1.ClusterScope{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"region": "eu"}}}}
		Expect(k8s.Create(ctx, cl)).To(Succeed())
		DeferCleanup(deleteCommandLock, "apply")
		const msg = "Apply commands are locked in clusters labelled region=eu: EU weekend freeze"
		Eventually(clCond("apply", locksv1.ConditionLocked), timeout, interval).Should(Equal("True/Frozen: " + msg))

		create(apply("eu", "eu", "eu-west-1"), apply("us", "us", "us-east-1"), apply("hub", "hub", ""))
		Eventually(condOf(ns, "eu"), timeout, interval).Should(Equal("False/CommandLocked: " + msg + "; position 1 of 1"))
		expectPhase(ns, "us", locksv1.PhaseGranted)
		expectPhase(ns, "hub", locksv1.PhaseGranted)

		By("the CommandLock counts and drains only its clusters' requests: the granted us and hub applies are not its")
		Eventually(clCounts("apply"), timeout, interval).Should(Equal("active=0 blocked=1"))
		Eventually(clCond("apply", locksv1.ConditionDrained), timeout, interval).Should(HavePrefix("True/"))

		By("a member relabelled into the scope: its next request is frozen")
		setMembers(map[string]string{"eu-west-1": `{"labels":{"region":"eu"}}`, "us-east-1": `{"labels":{"region":"eu"}}`})
		create(apply("us-2", "us-2", "us-east-1"))
		Eventually(condOf(ns, "us-2"), timeout, interval).Should(HavePrefix("False/CommandLocked: " + msg))

		By("members that cannot be read: the selector matches every cluster (fail safe)")
		setMembers(map[string]string{"us-east-1": `{"region":"us"}`})
		create(apply("us-3", "us-3", "us-east-1"))
		Eventually(condOf(ns, "us-3"), timeout, interval).Should(HavePrefix("False/CommandLocked: " + msg))
		expectPhase(ns, "hub", locksv1.PhaseGranted)
	})

	It("freezes the clusters it names, and lets them go on thaw", func() {
		cl := &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: "apply"}}
		cl.Spec = locksv1.CommandLockSpec{Locked: true, Clusters: &locksv1.ClusterScope{Names: []string{"eu-west-1"}}}
		Expect(k8s.Create(ctx, cl)).To(Succeed())
		DeferCleanup(deleteCommandLock, "apply")
		Eventually(clCond("apply", locksv1.ConditionLocked), timeout, interval).Should(HavePrefix("True/Frozen: Apply commands are locked in clusters eu-west-1"))
		create(apply("eu", "eu", "eu-west-1"), apply("eu2", "eu2", "eu-west-2"))
		Eventually(condOf(ns, "eu"), timeout, interval).Should(HavePrefix("False/CommandLocked: "))
		expectPhase(ns, "eu2", locksv1.PhaseGranted)
		lockApply(false)
		expectPhase(ns, "eu", locksv1.PhaseGranted)
	})

	It("refuses a cluster scope it cannot read, at admission", func() {
		for _, tc := range []struct {
			scope     *locksv1.ClusterScope
			admission bool
			want      string
		}{
			{scope: &locksv1.ClusterScope{}, want: "spec.clusters: Invalid value: a cluster scope names the clusters it freezes (names) or selects them by label (selector)"},
			{scope: &locksv1.ClusterScope{Names: []string{}}, want: "remove it (spec.clusters, or a window's clusters) to freeze every cluster"},
			{scope: &locksv1.ClusterScope{Names: []string{"EU_West"}}, want: "spec.clusters.names[0]"},
			{scope: &locksv1.ClusterScope{Names: []string{"eu-west-1", "eu-west-1"}}, want: "Duplicate value"},
			{scope: &locksv1.ClusterScope{Names: []string{"eu-west-1"}}, admission: true, want: "spec.admission freezes writes to this cluster's API server, which spec.clusters cannot scope"},
		} {
			cl := &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: "apply"}}
			cl.Spec = locksv1.CommandLockSpec{Locked: true, Clusters: tc.scope}
			if tc.admission {
				cl.Spec.Admission = &locksv1.AdmissionFreeze{Resources: []locksv1.AdmissionResources{{APIGroups: []string{"apps"}}}}
			}
			err := k8s.Create(ctx, cl)
			if err == nil {
				deleteCommandLock("apply")
			}
			Expect(err).To(HaveOccurred(), "%+v", tc.scope)
			Expect(err.Error()).To(ContainSubstring(tc.want))
		}
	})

	It("scopes a window to clusters of its own: the EU's weekend window freezes the EU's requests only (judged on the hub)", func() {
		setMembers(map[string]string{"eu-west-1": `{"labels":{"region":"eu"}}`, "us-east-1": `{"labels":{"region":"us"}}`})
		// Saturday noon in Berlin: the friday window (Friday 16:00 + 64h) is in force.
		withClockAt(time.Date(2026, 11, 28, 12, 0, 0, 0, mustZone("Europe/Berlin")))
		w := friday()
		w.Clusters = &locksv1.ClusterScope{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"region": "eu"}}}
		windowLock(w)
		const msg = "Apply commands are frozen by window friday of commandlock apply: Deny window in force"
		Eventually(clCond("apply", locksv1.ConditionLocked), timeout, interval).Should(
			Equal("True/Window: " + msg + " (for clusters labelled region=eu) until 2026-11-30T07:00:00Z"))
		var cl locksv1.CommandLock
		Expect(k8s.Get(ctx, client.ObjectKey{Name: "apply"}, &cl)).To(Succeed())
		Expect(cl.Status.Windows).To(HaveLen(1))
		Expect(cl.Status.Windows[0].Clusters).To(Equal(w.Clusters), "the judged window keeps its cluster scope: grants match against it")

		create(apply("eu", "eu", "eu-west-1"), apply("us", "us", "us-east-1"), apply("hub", "hub", ""))
		Eventually(condOf(ns, "eu"), timeout, interval).Should(HavePrefix("False/CommandLocked: " + msg + " until 2026-11-30T07:00:00Z"))
		expectPhase(ns, "us", locksv1.PhaseGranted)
		expectPhase(ns, "hub", locksv1.PhaseGranted)

		By("us-east-1 relabelled into the EU: its next request is frozen by the window, by the members read fresh")
		setMembers(map[string]string{"eu-west-1": `{"labels":{"region":"eu"}}`, "us-east-1": `{"labels":{"region":"eu"}}`})
		create(apply("us-2", "us-2", "us-east-1"))
		Eventually(condOf(ns, "us-2"), timeout, interval).Should(HavePrefix("False/CommandLocked: " + msg))

		By("a window scoped by name: the named cluster only")
		Expect(k8s.Get(ctx, client.ObjectKey{Name: "apply"}, &cl)).To(Succeed())
		patch := client.MergeFrom(cl.DeepCopy())
		cl.Spec.Windows[0].Clusters = &locksv1.ClusterScope{Names: []string{"eu-west-2"}}
		Expect(k8s.Patch(ctx, &cl, patch)).To(Succeed())
		expectPhase(ns, "eu", locksv1.PhaseGranted)
		expectPhase(ns, "us-2", locksv1.PhaseGranted)
		create(apply("eu-2", "eu-2", "eu-west-2"))
		Eventually(condOf(ns, "eu-2"), timeout, interval).Should(HavePrefix("False/CommandLocked: " + msg))
	})

	It("refuses a window's cluster scope it cannot read, at admission", func() {
		for _, tc := range []struct {
			scope     *locksv1.ClusterScope
			admission bool
			want      string
		}{
			{scope: &locksv1.ClusterScope{}, want: "spec.windows[0].clusters: Invalid value: a cluster scope names the clusters it freezes"},
			{scope: &locksv1.ClusterScope{Names: []string{"EU_West"}}, want: "spec.windows[0].clusters.names[0]"},
			{scope: &locksv1.ClusterScope{Names: []string{"eu-west-1"}}, admission: true, want: "must not be scoped (namespaceSelector, repos, paths, clusters)"},
		} {
			cl := &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: "apply"}}
			w := friday()
			w.Clusters = tc.scope
			cl.Spec.Windows = []locksv1.FreezeWindow{w}
			if tc.admission {
				cl.Spec.Admission = &locksv1.AdmissionFreeze{Resources: []locksv1.AdmissionResources{{APIGroups: []string{"apps"}}}}
			}
			err := k8s.Create(ctx, cl)
			if err == nil {
				deleteCommandLock("apply")
			}
			Expect(err).To(HaveOccurred(), "%+v", tc.scope)
			Expect(err.Error()).To(ContainSubstring(tc.want))
		}
	})
})
