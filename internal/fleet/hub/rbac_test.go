package hub_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/fleet/hub"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// The manager reads the members ConfigMap through its cache with the shipped role
// (config/rbac/role.yaml, generated from the markers), which names that ConfigMap alone: the
// cache's list and watch carry the name as a field selector, which RBAC's resourceNames admits,
// and any other ConfigMap stays forbidden. Run as a user bound to the role, through the real
// API server's authorizer.
func TestManagerRoleReadsTheMembersOnly(t *testing.T) {
	c := start(t)
	g := gomega.NewWithT(t)
	ctx := context.Background()
	root, err := framework.RepoRoot()
	g.Expect(err).NotTo(gomega.HaveOccurred())
	data, err := os.ReadFile(filepath.Join(root, "config", "rbac", "role.yaml"))
	g.Expect(err).NotTo(gomega.HaveOccurred())
	var role rbacv1.ClusterRole
	g.Expect(yaml.UnmarshalStrict(data, &role)).To(gomega.Succeed())
	role.Name = "rbac-test-manager"
	g.Expect(c.Create(ctx, &role)).To(gomega.Succeed())
	const user = "rbac-test-manager"
	g.Expect(c.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	})).To(gomega.Succeed())
	member(t, c, "rbac-eu", labels(`{}`))
	defer member(t, c, "rbac-eu", nil)
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: hub.Namespace, Name: "someone-elses"}}
	g.Expect(c.Create(ctx, other)).To(gomega.Succeed())

	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	cache, err := ctrlcache.New(cfg, ctrlcache.Options{Scheme: framework.Scheme,
		ByObject: map[client.Object]ctrlcache.ByObject{hub.CacheObject(): hub.CacheOptions()}})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = cache.Start(cctx) }()
	g.Eventually(func() (map[string]string, error) {
		var cm corev1.ConfigMap
		err := cache.Get(ctx, client.ObjectKey{Namespace: hub.Namespace, Name: hub.MembersConfigMap}, &cm)
		return cm.Data, err
	}, 30*time.Second).Should(gomega.HaveKey("rbac-eu"), "the members, listed and watched as the manager")
	syncCtx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	g.Expect(cache.WaitForCacheSync(syncCtx)).To(gomega.BeTrue())

	as, err := client.New(cfg, client.Options{Scheme: framework.Scheme})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	err = as.Get(ctx, client.ObjectKeyFromObject(other), &corev1.ConfigMap{})
	g.Expect(apierrors.IsForbidden(err)).To(gomega.BeTrue(), "another ConfigMap: %v", err)
	g.Expect(as.List(ctx, &locksv1.SpokeList{})).To(gomega.Succeed())
}
