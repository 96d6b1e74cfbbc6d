package controller_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/cache"
	"github.com/turnstile-dev/turnstile/internal/controller"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// The requests-by-phase metric and the deadlock scan read counts an informer keeps, not a list
// of every request: on a real informer they follow creates, decisions and deletes.
var _ = Describe("Request counts", func() {
	It("follow a real informer through grants, waits and deletes", func() {
		c, err := ctrlcache.New(env.Config, ctrlcache.Options{Scheme: framework.Scheme, DefaultTransform: cache.Options().DefaultTransform})
		Expect(err).NotTo(HaveOccurred())
		inf, err := c.GetInformer(ctx, &locksv1.LockRequest{})
		Expect(err).NotTo(HaveOccurred())
		counts := controller.NewRequestCounts()
		_, err = inf.AddEventHandler(counts)
		Expect(err).NotTo(HaveOccurred())
		cctx, cancel := context.WithCancel(ctx)
		DeferCleanup(cancel)
		go func() { _ = c.Start(cctx) }()

		ns := newNamespace()
		create(req("first", ns).Owner("alice", 1).Obj(), req("second", ns).Owner("bob", 2).Obj())
		inNS := func() map[locksv1.LockRequestPhase]int {
			out := map[locksv1.LockRequestPhase]int{}
			counts.Each(func(n string, p locksv1.LockRequestPhase, k int) {
				if n == ns {
					out[p] = k
				}
			})
			return out
		}
		Eventually(inNS, timeout, interval).Should(Equal(map[locksv1.LockRequestPhase]int{locksv1.PhaseGranted: 1, locksv1.PhasePending: 1}))
		Expect(counts.Namespaces()).To(ContainElement(ns))

		deleteRequest(ns, "first")
		deleteRequest(ns, "second")
		Eventually(counts.Namespaces, timeout, interval).ShouldNot(ContainElement(ns))
		Expect(inNS()).To(BeEmpty())
	})
})
