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
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	authzclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/utils/ptr"
)

// TestAccessKey: one SubjectAccessReview, one key, however Go orders the user's Extra map; and
// two reviews that say different things never share a key.
func TestAccessKey(t *testing.T) {
	// What a token bound to a Pod carries (five keys: a map of five is read in many orders).
	bound := func() *authnv1.UserInfo {
		return &authnv1.UserInfo{Username: "system:serviceaccount:monitoring:prometheus", UID: "u-1",
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:monitoring", "system:authenticated"},
			Extra: map[string]authnv1.ExtraValue{
				"authentication.kubernetes.io/credential-id": {"JTI=0f9c"},
				"authentication.kubernetes.io/node-name":     {"node-a"},
				"authentication.kubernetes.io/node-uid":      {"n-1"},
				"authentication.kubernetes.io/pod-name":      {"prometheus-0"},
				"authentication.kubernetes.io/pod-uid":       {"p-1"},
			}}
	}
	want := accessKey(bound(), "get", "/metrics")
	for i := range 200 {
		if got := accessKey(bound(), "get", "/metrics"); got != want {
			t.Fatalf("call %d: the same review got another key: Extra is hashed in map order", i)
		}
	}
	differ := map[string]func(u *authnv1.UserInfo) (*authnv1.UserInfo, string, string){
		"the values of a key in another order": func(u *authnv1.UserInfo) (*authnv1.UserInfo, string, string) {
			u.Extra["scopes"] = authnv1.ExtraValue{"b", "a"}
			v := bound()
			v.Extra["scopes"] = authnv1.ExtraValue{"a", "b"}
			return v, "get", "/metrics"
		},
		"a value moved to another key": func(u *authnv1.UserInfo) (*authnv1.UserInfo, string, string) {
			u.Extra["a"] = authnv1.ExtraValue{"b"}
			v := bound()
			v.Extra["ab"] = nil
			return v, "get", "/metrics"
		},
		"an empty value list and none": func(u *authnv1.UserInfo) (*authnv1.UserInfo, string, string) {
			u.Extra["x"] = authnv1.ExtraValue{}
			v := bound()
			v.Extra["x"] = authnv1.ExtraValue{""}
			return v, "get", "/metrics"
		},
		"two groups and one that joins them": func(u *authnv1.UserInfo) (*authnv1.UserInfo, string, string) {
			u.Groups = []string{"a", "b"}
			v := bound()
			v.Groups = []string{"ab"}
			return v, "get", "/metrics"
		},
		"a name run into the uid": func(u *authnv1.UserInfo) (*authnv1.UserInfo, string, string) {
			u.Username, u.UID = "alice", "b"
			v := bound()
			v.Username, v.UID = "aliceb", ""
			return v, "get", "/metrics"
		},
		"a group that reads like an extra key": func(u *authnv1.UserInfo) (*authnv1.UserInfo, string, string) {
			u.Groups = append(u.Groups, "k")
			u.Extra = nil
			v := bound()
			v.Extra = map[string]authnv1.ExtraValue{"k": nil}
			return v, "get", "/metrics"
		},
		"another path": func(*authnv1.UserInfo) (*authnv1.UserInfo, string, string) { return bound(), "get", "/metrics/x" },
		"another verb": func(*authnv1.UserInfo) (*authnv1.UserInfo, string, string) { return bound(), "post", "/metrics" },
	}
	for name, f := range differ {
		t.Run(name, func(t *testing.T) {
			u := bound()
			v, verb, path := f(u)
			if accessKey(u, "get", "/metrics") == accessKey(v, verb, path) {
				t.Error("two different reviews share a key: one's answer would be given to the other")
			}
		})
	}
}

// countingAccess counts the SubjectAccessReviews sent.
type countingAccess struct {
	authzclient.SubjectAccessReviewInterface
	mu sync.Mutex
	n  int
}

func (c *countingAccess) Create(ctx context.Context, sar *authzv1.SubjectAccessReview, o metav1.CreateOptions) (*authzv1.SubjectAccessReview, error) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return c.SubjectAccessReviewInterface.Create(ctx, sar, o)
}

// TestBoundTokenScrapes: Prometheus scrapes with a token bound to its Pod (a TokenRequest with
// the Pod as its bound object, as the kubelet mounts it), whose user carries Extra. On a real
// kube-apiserver, 20 scrapes within the answers' lifetime cost one TokenReview and one
// SubjectAccessReview.
func TestBoundTokenScrapes(t *testing.T) {
	cfg := apiServer(t)
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := t.Context()
	if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "prometheus"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "prometheus", Namespace: "default"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-0"},
		Spec:       corev1.PodSpec{ServiceAccountName: "prometheus", Containers: []corev1.Container{{Name: "prometheus", Image: "prometheus"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, "prometheus", &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To[int64](3600),
		BoundObjectRef:    &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	now := time.Unix(1000, 0)
	tokens := &countingReviews{TokenReviewInterface: cs.AuthenticationV1().TokenReviews()}
	access := &countingAccess{SubjectAccessReviewInterface: cs.AuthorizationV1().SubjectAccessReviews()}
	g := &Guard{Tokens: tokens, Access: access, Now: func() time.Time { return now }, Backoff: backoff}
	user, err := g.authenticate(ctx, tr.Status.Token)
	if err != nil || user == nil {
		t.Fatalf("the bound token does not authenticate: %v", err)
	}
	if len(user.Extra) < 2 {
		t.Fatalf("the bound token's user carries %d Extra keys (%v): the test needs a map read in several orders", len(user.Extra), user.Extra)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) })
	for i := range 20 {
		// 20 scrapes within the kept authentication's minute (the allow is kept five).
		now = now.Add(2 * time.Second)
		req := httptest.NewRequestWithContext(ctx, "GET", "/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+tr.Status.Token)
		rec := httptest.NewRecorder()
		g.serve(logr.Discard(), ok, rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("scrape %d: %d %s", i, rec.Code, rec.Body.String())
		}
	}
	if tokens.n != 1 || access.n != 1 {
		t.Errorf("20 scrapes sent %d TokenReviews and %d SubjectAccessReviews, want 1 and 1 (Extra %v)", tokens.n, access.n, user.Extra)
	}
}
