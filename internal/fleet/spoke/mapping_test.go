package spoke

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

func TestHubName(t *testing.T) {
	if got := HubName("eu-west-1", "apply-7f3a"); got != "eu-west-1.apply-7f3a" {
		t.Errorf("HubName = %q, want eu-west-1.apply-7f3a", got)
	}
	cluster := strings.Repeat("c", 63)
	long := strings.Repeat("a", 200) + "." + strings.Repeat("b", 52) // 253: the longest name
	fits := strings.Repeat("n", maxName-len("eu-west-1."))
	cases := map[string]struct {
		cluster, name string
		hashed        bool
	}{
		"fits exactly":                 {cluster: "eu-west-1", name: fits},
		"one over":                     {cluster: "eu-west-1", name: fits + "n", hashed: true},
		"the longest cluster and name": {cluster: cluster, name: long, hashed: true},
		// The cut keeps 236 characters (253 less the hash): 172 of the name after a cluster of
		// 63 and its dot. A kept part that ends in a dot or a dash would not be a name.
		"a cut on a dot":                 {cluster: cluster, name: strings.Repeat("a", 171) + "." + strings.Repeat("b", 80), hashed: true},
		"a cut on a dash":                {cluster: cluster, name: strings.Repeat("a", 171) + "-" + strings.Repeat("b", 80), hashed: true},
		"a cut on dashes":                {cluster: cluster, name: strings.Repeat("a", 168) + "----" + strings.Repeat("b", 80), hashed: true},
		"the longest name, short prefix": {cluster: "a", name: long, hashed: true},
	}
	seen := map[string]string{}
	for name, tc := range cases {
		if errs := validation.IsDNS1123Subdomain(tc.name); len(errs) > 0 {
			t.Fatalf("%s: the spoke name %q is not a name: %v", name, tc.name, errs)
		}
		got := HubName(tc.cluster, tc.name)
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Errorf("%s: %q is not a name: %v", name, got, errs)
		}
		if tc.hashed == (got == tc.cluster+"."+tc.name) {
			t.Errorf("%s: %q, hashed %v", name, got, tc.hashed)
		}
		if !strings.HasPrefix(got, tc.cluster+".") {
			t.Errorf("%s: %q does not start with its cluster", name, got)
		}
		if again := HubName(tc.cluster, tc.name); again != got {
			t.Errorf("%s: %q, then %q", name, got, again)
		}
		if prev, dup := seen[got]; dup {
			t.Errorf("%s and %s share the hub name %q", prev, name, got)
		}
		seen[got] = name
	}
	// Two long names that differ only past the cut are two hub names.
	a, b := HubName(cluster, long), HubName(cluster, long[:252]+"c")
	if a == b {
		t.Errorf("two names that differ past the cut share %q", a)
	}
}

func spokeRequest() *locksv1.LockRequest {
	return &locksv1.LockRequest{
		ObjectMeta: metav1.ObjectMeta{
			Name: "apply-job-x", Namespace: "team-a", UID: types.UID("uid-1"), Generation: 3,
			Labels:      map[string]string{"locks.turnstile.dev/repo": "acme.infra", "app": "web"},
			Annotations: map[string]string{"locks.turnstile.dev/created-by": "system:serviceaccount:turnstile-system:turnstile-manager"},
		},
		Spec: locksv1.LockRequestSpec{
			Locks:   []locksv1.LockTarget{{Repo: "acme/infra", Path: "vpc", Workspace: "default"}},
			Holder:  locksv1.Holder{Owner: "alice", Pull: 7, Session: "job/apply", Lease: "runner-1"},
			Command: "apply", Priority: locksv1.PriorityHigh,
			TTL: &metav1.Duration{Duration: time.Minute},
		},
	}
}

func TestHubRequest(t *testing.T) {
	sp := spokeRequest()
	before := sp.DeepCopy()
	hub := HubRequest("eu-west-1", sp)
	want := &locksv1.LockRequest{
		ObjectMeta: metav1.ObjectMeta{
			Name: "eu-west-1.apply-job-x", Namespace: "team-a",
			Labels: map[string]string{"locks.turnstile.dev/repo": "acme.infra", LabelCluster: "eu-west-1"},
			Annotations: map[string]string{
				AnnotationSpokeUID: "uid-1", AnnotationSpokeName: "apply-job-x", AnnotationSpokeGeneration: "3", locksv1.AnnotationConfirmsStops: "true",
			},
		},
		Spec: *sp.Spec.DeepCopy(),
	}
	// The holder's identity gains its cluster; its Lease is the spoke's on the hub (the spoke's
	// own Lease is the spoke's business: the agent sees its workloads end).
	want.Spec.Holder.Cluster, want.Spec.Holder.Lease = "eu-west-1", "spoke-eu-west-1"
	if diff := cmp.Diff(want, hub); diff != "" {
		t.Errorf("hub request (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before, sp); diff != "" {
		t.Errorf("the spoke request changed (-before +after):\n%s", diff)
	}
	// Two gated Jobs of one name in two clusters are two identities on the hub.
	if HubRequest("us-east-1", sp).Spec.Holder.ID() == hub.Spec.Holder.ID() {
		t.Error("one identity for a request of eu-west-1 and its namesake of us-east-1")
	}
}

// TestHubRequestKeepRunning: a request that opted out of the partition stop names no hub
// Lease (the hub keeps its lock until released) and says so to the hub's policy; with a ttl it
// does not opt out (the hub would end its grant, which a spoke cut off cannot renew): it gets
// the spoke's Lease and is stopped on a partition as any other; any other value is no opt-out.
func TestHubRequestKeepRunning(t *testing.T) {
	for _, tc := range []struct {
		name      string
		value     string
		ttl       bool
		wantLease string
		wantKeep  bool
	}{
		{"keep-running, no ttl: no Lease", locksv1.OnPartitionKeepRunning, false, "", true},
		{"keep-running with a ttl: the spoke's Lease", locksv1.OnPartitionKeepRunning, true, "spoke-eu-west-1", false},
		{"another value: the spoke's Lease", "Keep-Running", false, "spoke-eu-west-1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := spokeRequest()
			sp.Annotations[locksv1.AnnotationOnPartition] = tc.value
			if !tc.ttl {
				sp.Spec.TTL = nil
			}
			if got := KeepRunning(sp); got != tc.wantKeep {
				t.Errorf("KeepRunning = %v, want %v", got, tc.wantKeep)
			}
			hub := HubRequest("eu-west-1", sp)
			if hub.Spec.Holder.Lease != tc.wantLease {
				t.Errorf("hub spec.holder.lease = %q, want %q", hub.Spec.Holder.Lease, tc.wantLease)
			}
			_, annotated := hub.Annotations[locksv1.AnnotationOnPartition]
			if annotated != tc.wantKeep {
				t.Errorf("hub request annotated %s: %v, want %v", locksv1.AnnotationOnPartition, annotated, tc.wantKeep)
			}
		})
	}
}

// TestHubRequestIgnoresWhatASpokeUserClaims: the agent writes on the hub with its spoke's
// rights, so nothing a user of the spoke writes on her request may speak for another cluster,
// another spoke's Lease, or another spoke request: the cluster, the hub Lease and the spoke
// annotations are the agent's own, whatever the request says (the hub's turnstile-fleet-spoke
// policy would refuse the rest; test/admission attacks it as a spoke).
func TestHubRequestIgnoresWhatASpokeUserClaims(t *testing.T) {
	honest := HubRequest("eu-west-1", spokeRequest())
	forged := spokeRequest()
	forged.Spec.Holder.Cluster = "us-east-1"
	forged.Spec.Holder.Lease = "spoke-us-east-1"
	forged.Labels[LabelCluster] = "us-east-1"
	forged.Annotations[AnnotationSpokeUID] = "uid-of-another"
	forged.Annotations[AnnotationSpokeName] = "another"
	forged.Annotations[AnnotationSpokeGeneration] = "99"
	if diff := cmp.Diff(honest, HubRequest("eu-west-1", forged)); diff != "" {
		t.Errorf("a spoke user's claims reached the hub request (-honest +forged):\n%s", diff)
	}
}

func TestSpecUpdate(t *testing.T) {
	sp := spokeRequest()
	hub := HubRequest("eu-west-1", sp)
	if _, changed := SpecUpdate(sp, hub); changed {
		t.Error("an unchanged spoke request changes its hub request")
	}
	cases := map[string]func(*locksv1.LockRequestSpec){
		"release":     func(s *locksv1.LockRequestSpec) { s.Release = true },
		"renewal":     func(s *locksv1.LockRequestSpec) { s.TTL = &metav1.Duration{Duration: 61 * time.Second} },
		"priority":    func(s *locksv1.LockRequestSpec) { s.Priority = locksv1.PriorityLow },
		"waitTimeout": func(s *locksv1.LockRequestSpec) { s.WaitTimeout = &metav1.Duration{Duration: time.Hour} },
		"reason":      func(s *locksv1.LockRequestSpec) { s.Reason = "hotfix" },
	}
	for name, change := range cases {
		s := sp.DeepCopy()
		change(&s.Spec)
		got, changed := SpecUpdate(s, hub)
		want := *s.Spec.DeepCopy()
		want.Holder = hub.Spec.Holder
		if !changed {
			t.Errorf("%s: not carried to the hub", name)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: hub spec (-want +got):\n%s", name, diff)
		}
	}
	// A release on the hub is never undone (the CRD refuses it; the agent does not try).
	released := hub.DeepCopy()
	released.Spec.Release = true
	if got, _ := SpecUpdate(sp, released); !got.Release {
		t.Error("a hub release undone")
	}
}

// TestSpokeStatusCopiesEveryField: every field of a LockRequest's status is accounted for, found
// by reflection: the hub's value is copied as it is, but for the spoke's own observedGeneration.
// A field added to the status fails here until it is classified.
func TestSpokeStatusCopiesEveryField(t *testing.T) {
	spokeOwn := map[string]bool{"ObservedGeneration": true}
	typ := reflect.TypeFor[locksv1.LockRequestStatus]()
	for i := range typ.NumField() {
		f := typ.Field(i).Name
		sp := spokeRequest()
		sp.Status.ObservedGeneration = 2
		hub := HubRequest("eu-west-1", sp)
		hub.Generation = 5
		hub.Status.ObservedGeneration = 5
		fill(reflect.ValueOf(&hub.Status).Elem().FieldByName(f))
		got := SpokeStatus(sp, hub)
		gotF := reflect.ValueOf(got).FieldByName(f).Interface()
		hubF := reflect.ValueOf(hub.Status).FieldByName(f).Interface()
		switch {
		case spokeOwn[f]:
			// The hub decided on its spec, which reflects spoke generation 3.
			if got.ObservedGeneration != 3 {
				t.Errorf("observedGeneration %d, want the spoke's 3", got.ObservedGeneration)
			}
		case f == "Conditions":
			want := hub.Status.DeepCopy().Conditions
			for i := range want {
				want[i].ObservedGeneration = 3
			}
			if diff := cmp.Diff(want, got.Conditions); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
		case !reflect.DeepEqual(gotF, hubF):
			t.Errorf("status.%s not copied from the hub: %v, hub %v", f, gotF, hubF)
		}
	}
}

// The spoke's observedGeneration says what the hub decided on: until the hub has seen its
// latest spec (a renewal carried over), the spoke keeps what it showed.
func TestSpokeStatusObservedGeneration(t *testing.T) {
	sp := spokeRequest() // generation 3
	sp.Status.ObservedGeneration = 2
	hub := HubRequest("eu-west-1", sp)
	hub.Generation, hub.Status.ObservedGeneration = 6, 5
	if got := SpokeStatus(sp, hub).ObservedGeneration; got != 2 {
		t.Errorf("hub behind its spec: observedGeneration %d, want the spoke's own 2", got)
	}
	hub.Status.ObservedGeneration = 6
	if got := SpokeStatus(sp, hub).ObservedGeneration; got != 3 {
		t.Errorf("hub decided: observedGeneration %d, want 3", got)
	}
}

var fillTime = time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)

// fill sets v to a non-zero value.
func fill(v reflect.Value) {
	switch v.Interface().(type) {
	case metav1.Time:
		v.Set(reflect.ValueOf(metav1.NewTime(fillTime)))
		return
	case metav1.MicroTime:
		v.Set(reflect.ValueOf(metav1.NewMicroTime(fillTime)))
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Slice:
		v.Set(reflect.Append(v, reflect.New(v.Type().Elem()).Elem()))
		fill(v.Index(v.Len() - 1))
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(v.Int() + 1)
	}
}
