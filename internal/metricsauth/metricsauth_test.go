package metricsauth

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
)

// apiServer starts a kube-apiserver (RBAC, service account tokens) and returns its config.
func apiServer(t *testing.T) *rest.Config {
	t.Helper()
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	return cfg
}

// serviceAccountToken creates a service account and returns a token of it.
func serviceAccountToken(t *testing.T, cs kubernetes.Interface, name string) string {
	t.Helper()
	ctx := t.Context()
	if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// countingReviews counts the TokenReviews sent.
type countingReviews struct {
	authnclient.TokenReviewInterface
	mu sync.Mutex
	n  int
}

func (c *countingReviews) Create(ctx context.Context, tr *authnv1.TokenReview, o metav1.CreateOptions) (*authnv1.TokenReview, error) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return c.TokenReviewInterface.Create(ctx, tr, o)
}

// TestFilter: against a real kube-apiserver, the metrics endpoint answers a service account
// that RBAC lets get /metrics, and no one else: no token or a token the API server does not
// know is 401; a known user without the right, another path or another verb is 403. Answers
// are kept for their time, then reviewed again.
func TestFilter(t *testing.T) {
	cfg := apiServer(t)
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := t.Context()
	scraper, stranger := serviceAccountToken(t, cs, "scraper"), serviceAccountToken(t, cs, "stranger")
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "scraper", Namespace: "default"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	filter, err := Filter(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) })
	h, err := filter(logr.Discard(), ok)
	if err != nil {
		t.Fatal(err)
	}
	// controller-runtime's filter, which this one replaces, answers every case the same.
	upstream, err := filters.WithAuthenticationAndAuthorization(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := upstream(logr.Discard(), ok)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, method, path, auth string
		want                     int
		upstream                 int // controller-runtime's filter, when it answers otherwise
	}{
		{"no token", "GET", "/metrics", "", http.StatusUnauthorized, 0},
		{"not a bearer token", "GET", "/metrics", "Basic " + scraper, http.StatusUnauthorized, 0},
		{"a token the API server does not know", "GET", "/metrics", "Bearer not-a-token", http.StatusUnauthorized,
			http.StatusInternalServerError}, // it reads the review's error as its own failure
		{"the scraper", "GET", "/metrics", "Bearer " + scraper, http.StatusOK, 0},
		{"the scraper again (kept), the scheme in lower case", "GET", "/metrics", "bearer " + scraper, http.StatusOK, 0},
		{"two spaces before the token", "GET", "/metrics", "Bearer  " + scraper, http.StatusUnauthorized, 0},
		{"the scraper, another path", "GET", "/debug/pprof/", "Bearer " + scraper, http.StatusForbidden, 0},
		{"the scraper, another verb", "POST", "/metrics", "Bearer " + scraper, http.StatusForbidden, 0},
		{"a service account without the right", "GET", "/metrics", "Bearer " + stranger, http.StatusForbidden, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequestWithContext(ctx, tc.method, tc.path, nil)
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			rec, them := httptest.NewRecorder(), httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			theirs.ServeHTTP(them, req.Clone(ctx))
			if rec.Code != tc.want {
				t.Fatalf("%s %s: %d %q, want %d", tc.method, tc.path, rec.Code, rec.Body.String(), tc.want)
			}
			if tc.upstream != 0 {
				if them.Code != tc.upstream {
					t.Fatalf("controller-runtime's filter: %d, want %d", them.Code, tc.upstream)
				}
				return
			}
			if rec.Code != them.Code || rec.Body.String() != them.Body.String() {
				t.Fatalf("%s %s: %d %q; controller-runtime's filter: %d %q", tc.method, tc.path, rec.Code, rec.Body.String(), them.Code, them.Body.String())
			}
		})
	}

	t.Run("answers are kept for their time", func(t *testing.T) {
		now := time.Unix(1000, 0)
		tokens := &countingReviews{TokenReviewInterface: authnclient.NewForConfigOrDie(cfg).TokenReviews()}
		g := &Guard{Tokens: tokens, Access: cs.AuthorizationV1().SubjectAccessReviews(), Now: func() time.Time { return now }, Backoff: backoff}
		get := func() int {
			req := httptest.NewRequestWithContext(ctx, "GET", "/metrics", nil)
			req.Header.Set("Authorization", "Bearer "+scraper)
			rec := httptest.NewRecorder()
			g.serve(logr.Discard(), ok, rec, req)
			return rec.Code
		}
		for i, step := range []struct {
			after   time.Duration
			reviews int
		}{{0, 1}, {authnTTL - time.Second, 1}, {time.Second, 2}} {
			now = now.Add(step.after)
			if code := get(); code != http.StatusOK {
				t.Fatalf("step %d: %d", i, code)
			}
			if tokens.n != step.reviews {
				t.Fatalf("step %d: %d token reviews, want %d", i, tokens.n, step.reviews)
			}
		}
	})
}
