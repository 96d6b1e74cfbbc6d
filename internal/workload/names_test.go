package workload

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// longName is a valid Pod name (a DNS subdomain) of n characters, labels of "migrate" between
// dots.
func longName(n int) string {
	s := strings.Repeat("migrate.", n/8+1)[:n]
	if strings.HasSuffix(s, ".") {
		s = s[:n-1] + "x"
	}
	return s
}

// cutAt is a valid name of n characters with sep at index i: where a request name of "pod-"
// and a name of 250 and more characters is cut (a DNS name must not end a label with '.' or
// '-', and the hash follows a '-').
func cutAt(n, i int, sep string) string {
	return strings.Repeat("a", i) + sep + strings.Repeat("b", n-i-1)
}

// TestRequestNamesFitEveryValidName: every valid workload name (a Pod's name is a DNS
// subdomain of up to 253 characters) gets two valid, distinct request names and a session the
// LockRequest CRD accepts (253 characters at most); names that share their start still differ.
func TestRequestNamesFitEveryValidName(t *testing.T) {
	var names []string
	for _, n := range []int{1, 63, 64, 200, 248, 249, 250, 251, 252, 253} {
		names = append(names, longName(n))
	}
	// "pod-" + name is cut to its first 242 characters: name[237] is the last one kept.
	names = append(names, cutAt(253, 237, "."), cutAt(253, 237, "-"), cutAt(252, 236, "."), cutAt(253, 238, "."))
	for _, name := range names {
		n := len(name)
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Fatalf("test name of %d characters is not a valid Pod name: %v", n, errs)
		}
		other := name[:n-1] + "y"
		for _, kind := range []string{"pod", "job"} {
			names := RequestNames(kind, name)
			for i, rn := range names {
				if errs := validation.IsDNS1123Subdomain(rn); len(errs) > 0 {
					t.Errorf("%s name of %d characters: request name %d %q is not a valid name: %v", kind, n, i, rn, errs)
				}
			}
			if names[0] == names[1] {
				t.Errorf("%s name of %d characters: both request names are %q", kind, n, names[0])
			}
			if o := RequestNames(kind, other); o[0] == names[0] || o[1] == names[1] {
				t.Errorf("%s names of %d characters differing in the last one share a request name: %v", kind, n, o)
			}
			if n+len(kind)+1 <= maxName && names[0] != kind+"-"+name {
				t.Errorf("%s name of %d characters: first request name %q, want %q", kind, n, names[0], kind+"-"+name)
			}
			s := session(kind, name)
			if len(s) > maxName || (n+len(kind)+1 <= maxName && s != kind+"/"+name) || s == session(kind, other) {
				t.Errorf("%s name of %d characters: session %q (%d characters)", kind, n, s, len(s))
			}
			if got := fit("Pod team-a/"+name, maxReason); len(got) > maxReason {
				t.Errorf("reason of %d characters", len(got))
			}
		}
	}
}

// TestWorkloadOfName: a request at either of a workload's names wakes that workload.
func TestWorkloadOfName(t *testing.T) {
	for _, name := range []string{"nightly", "a-1", "migrate.db", "x-0123456789"} {
		for i, n := range RequestNames("job", name) {
			if got := workloadOfName("job", n); !contains(got, name) {
				t.Errorf("request name %d of job %s (%s) wakes %v", i, name, n, got)
			}
		}
	}
	if got := workloadOfName("pod", "job-nightly"); got != nil {
		t.Errorf("a Job's request name wakes Pods %v", got)
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// TestMadeFor: the manager recognises a request as its own only by its stamp: created by the
// manager, for this kind and name; the uid says for which object of that name. A request made
// before the stamp counts by its controlling ownerReference, when the manager created it.
func TestMadeFor(t *testing.T) {
	const self = "system:serviceaccount:turnstile-system:turnstile-controller-manager"
	stamped := func(creator, workload, uid string) *locksv1.LockRequest {
		return &locksv1.LockRequest{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
			AnnotationCreatedBy: creator, AnnotationWorkload: workload, AnnotationWorkloadUID: uid}}}
	}
	owned := func(creator, kind, name, uid string) *locksv1.LockRequest {
		lr := &locksv1.LockRequest{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationCreatedBy: creator}}}
		lr.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: kind, Name: name, UID: types.UID(uid), Controller: ptr.To(true)}}
		return lr
	}
	tests := map[string]struct {
		lr      *locksv1.LockRequest
		self    string
		wantUID types.UID
		wantOK  bool
	}{
		"the manager's stamp, for this workload":  {lr: stamped(self, "pod/migrate", "u1"), self: self, wantUID: "u1", wantOK: true},
		"a stamp a requester wrote":               {lr: stamped("alice", "pod/migrate", "u1"), self: self},
		"the manager's, for another name":         {lr: stamped(self, "pod/migrate2", "u1"), self: self},
		"the manager's, for a Job of that name":   {lr: stamped(self, "job/migrate", "u1"), self: self},
		"a stamp without a uid":                   {lr: stamped(self, "pod/migrate", ""), self: self},
		"a requester's, owned by the Pod":         {lr: owned("alice", "Pod", "migrate", "u1"), self: self},
		"the manager's, from before the stamp":    {lr: owned(self, "Pod", "migrate", "u1"), self: self, wantUID: "u1", wantOK: true},
		"from before the stamp, another workload": {lr: owned(self, "Pod", "other", "u1"), self: self},
		"no creator recorded":                     {lr: stamped("", "pod/migrate", "u1"), self: self},
		"the manager does not know who it is":     {lr: stamped("", "pod/migrate", "u1"), self: ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			uid, ok := madeFor(tc.lr, tc.self, "pod", "migrate")
			if ok != tc.wantOK || (ok && uid != tc.wantUID) {
				t.Errorf("madeFor = %q, %v; want %q, %v", uid, ok, tc.wantUID, tc.wantOK)
			}
		})
	}
}

// TestPick: a workload follows the request whose grant it was let go on, else the one at its
// first name; the rest are duplicates.
func TestPick(t *testing.T) {
	req := func(name string, phase locksv1.LockRequestPhase, token int64) *locksv1.LockRequest {
		return &locksv1.LockRequest{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: locksv1.LockRequestStatus{Phase: phase, FencingToken: token}}
	}
	first, second := req("pod-x", locksv1.PhaseGranted, 7), req("pod-x-h", locksv1.PhaseGranted, 9)
	tests := map[string]struct {
		mine      []*locksv1.LockRequest
		token     string
		want      string
		wantExtra []string
	}{
		"none":                         {},
		"one":                          {mine: []*locksv1.LockRequest{first}, want: "pod-x"},
		"not let go: the first":        {mine: []*locksv1.LockRequest{first, second}, want: "pod-x", wantExtra: []string{"pod-x-h"}},
		"let go on the second's grant": {mine: []*locksv1.LockRequest{first, second}, token: "9", want: "pod-x-h", wantExtra: []string{"pod-x"}},
		"a token no request has":       {mine: []*locksv1.LockRequest{first, second}, token: "8", want: "pod-x", wantExtra: []string{"pod-x-h"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			lr, extra := pick(tc.mine, tc.token)
			got := ""
			if lr != nil {
				got = lr.Name
			}
			var gotExtra []string
			for _, e := range extra {
				gotExtra = append(gotExtra, e.Name)
			}
			if got != tc.want || !cmp.Equal(gotExtra, tc.wantExtra) {
				t.Errorf("pick = %q %v, want %q %v", got, gotExtra, tc.want, tc.wantExtra)
			}
		})
	}
}

// TestSameLocks: the same keys in the same order and mode, as the API server stores them (a
// path "." or a workspace left to its default are the same key).
func TestSameLocks(t *testing.T) {
	vpc := locksv1.LockTarget{Repo: "acme/infra", Path: "modules/vpc", Workspace: "default"}
	dns := locksv1.LockTarget{Repo: "acme/infra", Path: "modules/dns", Workspace: "default"}
	shared := vpc
	shared.Mode = locksv1.ModeShared
	exclusive := vpc
	exclusive.Mode = locksv1.ModeExclusive
	defaulted := vpc
	defaulted.Workspace = ""
	tests := map[string]struct {
		a, b []locksv1.LockTarget
		want bool
	}{
		"same":                  {a: []locksv1.LockTarget{vpc, dns}, b: []locksv1.LockTarget{vpc, dns}, want: true},
		"workspace defaulted":   {a: []locksv1.LockTarget{defaulted}, b: []locksv1.LockTarget{vpc}, want: true},
		"Exclusive as unset":    {a: []locksv1.LockTarget{exclusive}, b: []locksv1.LockTarget{vpc}, want: true},
		"another key":           {a: []locksv1.LockTarget{dns}, b: []locksv1.LockTarget{vpc}},
		"one more":              {a: []locksv1.LockTarget{vpc, dns}, b: []locksv1.LockTarget{vpc}},
		"another order":         {a: []locksv1.LockTarget{dns, vpc}, b: []locksv1.LockTarget{vpc, dns}},
		"shared, not exclusive": {a: []locksv1.LockTarget{shared}, b: []locksv1.LockTarget{vpc}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := sameLocks(tc.a, tc.b); got != tc.want {
				t.Errorf("sameLocks = %v, want %v", got, tc.want)
			}
		})
	}
}
