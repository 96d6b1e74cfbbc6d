package framework

import (
	"context"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// StartChecker starts an InvariantChecker on namespace for the running Ginkgo spec and stops it
// when the spec ends.
func StartChecker(ctx context.Context, c client.WithWatch, namespace string) *InvariantChecker {
	ginkgo.GinkgoHelper()
	ic, err := StartInvariantChecker(ctx, c, namespace)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.DeferCleanup(ic.Stop)
	return ic
}
