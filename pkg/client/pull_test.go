package client_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/pkg/client"
)

var _ = Describe("Requests of a pull request", func() {
	It("carry the reason and the labels of their spec, and ReleaseByPull releases exactly that pull's in the repository", func() {
		tc := newClient()
		infra := func(path string) []locksv1.LockTarget {
			return []locksv1.LockTarget{{Repo: "acme/infra", Path: path, Workspace: "default"}}
		}
		a, err := tc.Acquire(ctx, client.Request{Name: "a", Locks: infra("net"), Holder: locksv1.Holder{Owner: "alice", Pull: 100},
			Reason: "migrating state", Labels: map[string]string{"team": "net", client.LabelPull: "999"}})
		Expect(err).NotTo(HaveOccurred())
		var lr locksv1.LockRequest
		Expect(k8s.Get(ctx, a.Key(), &lr)).To(Succeed())
		Expect(lr.Spec.Reason).To(Equal("migrating state"))
		Expect(lr.Labels).To(Equal(map[string]string{"team": "net",
			client.LabelRepo: "acme.infra", client.LabelPull: "100", client.LabelOwner: "alice"}), "the spec's labels win over the caller's")

		_, err = tc.Create(ctx, client.Request{Name: "waiting", Locks: infra("net"), Holder: locksv1.Holder{Owner: "bob", Pull: 101}})
		Expect(err).NotTo(HaveOccurred())
		_, err = tc.Create(ctx, client.Request{Name: "same-pull", Locks: infra("net"), Holder: locksv1.Holder{Owner: "alice", Pull: 100}})
		Expect(err).NotTo(HaveOccurred())
		_, err = tc.Acquire(ctx, client.Request{Name: "other-repo", Locks: []locksv1.LockTarget{{Repo: "acme/dns", Path: ".", Workspace: "default"}}, Holder: locksv1.Holder{Owner: "alice", Pull: 100}})
		Expect(err).NotTo(HaveOccurred())

		released, err := tc.ReleaseByPull(ctx, "acme/infra", 100)
		Expect(err).NotTo(HaveOccurred())
		names := []string{}
		for _, r := range released {
			names = append(names, r.Name)
		}
		Expect(names).To(Equal([]string{"a", "same-pull"}))
		phase := func(name string) func() locksv1.LockRequestPhase {
			return func() locksv1.LockRequestPhase {
				var lr locksv1.LockRequest
				Expect(k8s.Get(ctx, ctrlclient.ObjectKey{Namespace: tc.Namespace(), Name: name}, &lr)).To(Succeed())
				return lr.Status.Phase
			}
		}
		Eventually(phase("a")).Should(Equal(locksv1.PhaseReleased))
		Eventually(phase("same-pull")).Should(Equal(locksv1.PhaseReleased))
		Eventually(phase("waiting")).Should(Equal(locksv1.PhaseGranted), "the next pull request is granted")
		Consistently(phase("other-repo")).Should(Equal(locksv1.PhaseGranted))

		again, err := tc.ReleaseByPull(ctx, "acme/infra", 100)
		Expect(err).NotTo(HaveOccurred())
		Expect(again).To(BeEmpty(), "finished requests are not released twice")
		_, err = tc.ReleaseByPull(ctx, "acme/infra", 0)
		Expect(err).To(MatchError(ContainSubstring("a pull number above 0")))
	})
})
