package controller_test

import (
	"context"
	"net/http"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/controller"
)

var _ = Describe("Readiness", func() {
	It("is not ready until the cache has started and its informers have synced", func() {
		c, err := cache.New(env.Config, cache.Options{Scheme: controller.NewScheme()})
		Expect(err).NotTo(HaveOccurred())
		ready := controller.CachesSynced(c)
		probe := func() error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "/readyz", nil)
			Expect(err).NotTo(HaveOccurred())
			return ready(req)
		}
		_, err = c.GetInformer(ctx, &locksv1.LockRequest{}, cache.BlockUntilSynced(false))
		Expect(err).NotTo(HaveOccurred())
		Expect(probe()).To(MatchError(ContainSubstring("not synced")), "a cache that has not started")

		cctx, cancel := context.WithCancel(ctx)
		DeferCleanup(cancel)
		go func() { _ = c.Start(cctx) }()
		Eventually(probe, timeout, interval).Should(Succeed())
	})
})
