// Package validation proves every admission rule of the Turnstile CRDs (OpenAPI constraints,
// defaults and CEL x-kubernetes-validations) against a real kube-apiserver and etcd. No manager
// runs: every case is decided by the API server alone.
package validation

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// k is the client of the shared control plane, started once for the package.
var k client.Client

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	env, err := framework.Start("")
	if err != nil {
		fmt.Fprintf(os.Stderr, "start control plane: %v\n", err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop control plane: %v\n", err)
		}
	}()
	k = env.Client
	return m.Run()
}

// ctx bounds one test's API calls.
func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// newNamespace creates a fresh namespace for one test function and deletes it afterwards.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "validation-"}}
	if err := k.Create(ctx(t), ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = k.Delete(context.Background(), ns)
	})
	return ns.Name
}

// checkAdmission asserts that err is nil when want is empty, and otherwise that the API server
// rejected the object as Invalid (422) with an error naming every phrase in want.
func checkAdmission(t *testing.T, err error, want []string) {
	t.Helper()
	if len(want) == 0 {
		if err != nil {
			t.Fatalf("rejected, want accepted: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("accepted, want rejected with %q", want)
	}
	if !apierrors.IsInvalid(err) {
		t.Fatalf("want an Invalid (422) error, got %T %v", err, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error does not mention %q:\n%v", w, err)
		}
	}
}

// Messages as written in the CEL markers of api/v1alpha1: a case asserts on the message of the
// rule it proves, so deleting that rule fails the case even when another rule also rejects.
const (
	msgRepo           = "repo must be owner/name (letters, digits, '_', '.', '-'), e.g. acme/infra"
	msgRepoDots       = "repo must not contain '.' or '..' segments; name the repository itself, e.g. acme/infra"
	msgPathAbsolute   = "path must be relative to the repository root (no leading '/'), e.g. modules/vpc"
	msgPathDots       = "path must not contain '.' or '..' segments; use the directory's plain relative path, or '.' for the root"
	msgPathSegments   = "path must be slash-separated directory names without empty segments or a trailing '/'"
	msgWorkspace      = "workspace must be letters, digits, '_', '.', '-' and start with a letter, digit or '_'"
	msgProject        = "project must be letters, digits, '_', '.', '-' and start with a letter, digit or '_'"
	msgProjectEmpty   = "project, when set, must not be empty"
	msgDuplicate      = "locks must not name the same repo/path/workspace/project twice"
	msgLocksImmutable = "locks are immutable; create a new LockRequest to lock something else"
	msgHolderImmut    = "holder is immutable; create a new LockRequest for another holder"
	msgCommand        = "command must be lowercase letters, digits and '-', start with a letter and not end with '-' (a CommandLock is named after it), e.g. apply"
	msgCommandAll     = "command must not be 'all': that name is reserved for the CommandLock that freezes every command; name the command itself, e.g. apply"
	msgCommandImmut   = "command is immutable"
	msgReleaseUndo    = "release cannot be undone; create a new LockRequest"
	msgTTLFormat      = "ttl must be a positive Go duration such as 90s, 30m or 1h30m"
	msgTTLRange       = "ttl must be between 1s and 24h"
	msgWaitFormat     = "waitTimeout must be a non-negative Go duration such as 0s, 90s or 10m"
	msgWaitRange      = "waitTimeout must be at most 168h"
	msgOwnerBlank     = "owner must not be blank"
	msgOwnerSpace     = "owner must not start or end with whitespace"
	msgOwnerControl   = "owner must not contain control characters (newlines, tabs, escapes)"
	msgURL            = "url must be an http or https URL with a host and no spaces, e.g. https://github.com/acme/infra/pull/100"
	msgLease          = "lease must be the name of a Lease (a DNS subdomain: lowercase letters, digits, '-', '.')"
	msgCluster        = "cluster must be a cluster name of the fleet (a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a letter or digit), e.g. eu-west-1"
	msgKeyImmutable   = "a ProjectLock's key is immutable"
	msgCommandLock    = "a CommandLock is named after the command it freezes (e.g. apply, or all): at most 63 lowercase letters, digits and '-', starting with a letter and not ending with '-'"
)

// obj builds an unstructured Turnstile object of kind with spec, so a case can send exactly the
// JSON a user would (strings the typed API cannot hold, explicit empty strings, missing fields).
func obj(kind, namespace string, metadata, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": locksv1.GroupVersion.String(),
		"kind":       kind,
		"metadata":   metadata,
	}}
	if spec != nil {
		u.Object["spec"] = spec
	}
	if namespace != "" {
		u.SetNamespace(namespace)
	}
	return u
}

// checkStoredSpec reads back the object created as created and compares the spec the API server
// stored, defaults included, with want.
func checkStoredSpec[S any](t *testing.T, created client.Object, want S) {
	t.Helper()
	gvk, err := apiutil.GVKForObject(created, k.Scheme())
	if err != nil {
		t.Fatal(err)
	}
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(gvk)
	if err := k.Get(ctx(t), client.ObjectKeyFromObject(created), got); err != nil {
		t.Fatalf("get: %v", err)
	}
	spec, _, err := unstructured.NestedMap(got.Object, "spec")
	if err != nil {
		t.Fatal(err)
	}
	var gotSpec S
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(spec, &gotSpec); err != nil {
		t.Fatalf("stored spec: %v", err)
	}
	if diff := cmp.Diff(want, gotSpec); diff != "" {
		t.Errorf("stored spec (-want +got):\n%s", diff)
	}
}

// merge returns base with over applied on top: a nil value in over removes the field.
func merge(base, over map[string]any) map[string]any {
	out := make(map[string]any, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		if v == nil {
			delete(out, k)
			continue
		}
		out[k] = v
	}
	return out
}

// target is a valid lock target (acme/infra, modules/vpc) with over applied.
func target(over map[string]any) map[string]any {
	return merge(map[string]any{"repo": "acme/infra", "path": "modules/vpc"}, over)
}

// holder is a valid holder (alice, pull 100) with over applied.
func holder(over map[string]any) map[string]any {
	return merge(map[string]any{"owner": "alice", "pull": int64(100)}, over)
}

// locks makes a spec.locks value.
func locks(ts ...map[string]any) []any {
	out := make([]any, len(ts))
	for i, t := range ts {
		out[i] = t
	}
	return out
}

// lockRequestSpec is a valid LockRequest spec with over applied.
func lockRequestSpec(over map[string]any) map[string]any {
	return merge(map[string]any{
		"locks":  locks(target(nil)),
		"holder": holder(nil),
	}, over)
}
