package controller

import (
	"fmt"
	"reflect"
	"testing"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/cache"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
	"github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

// indexedRequest is request i of namespace team, waiting: one target, a holder of its own, the
// command apply.
func indexedRequest(i int) *locksv1.LockRequest {
	return wrappers.MakeLockRequest(fmt.Sprintf("r%d", i), "team").UID(fmt.Sprintf("uid-%d", i)).
		Lock("org/infra", "prod", "default").Owner(fmt.Sprintf("owner%d", i), int64(i)).Command("apply").
		Phase(locksv1.PhasePending).Obj()
}

func indexByField(t *testing.T, field string) Index {
	t.Helper()
	for _, ix := range Indexes {
		if ix.Field == field {
			return ix
		}
	}
	t.Fatalf("no index %s", field)
	return Index{}
}

// TestIndexKeys: each index keeps its values under the one scope its readers list: a lock
// name, a holder Lease and an identity bucket within the namespace, a command across all.
func TestIndexKeys(t *testing.T) {
	lr := indexedRequest(1)
	lr.Spec.Holder.Lease = "runner"
	keys := func(field string) []string {
		ks, err := indexByField(t, field).keys(lr)
		if err != nil {
			t.Fatal(err)
		}
		return ks
	}
	for field, want := range map[string][]string{
		cache.KeyIndex:      {"team/" + lockkey.Name(lr.Spec.Locks[0])},
		IndexHolderLease:    {"team/runner"},
		IndexHolderIdentity: {"team/" + IdentityBucket(lr.Spec.Holder.ID())},
		IndexCommand:        {"__all_namespaces/apply"},
	} {
		if got := keys(field); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: keys %v, want %v", field, got, want)
		}
	}
	// Every request of one identity is in one bucket, and the buckets are few.
	buckets := map[string]bool{}
	for i := range 200 {
		other := indexedRequest(i)
		other.Spec.Holder = locksv1.Holder{Owner: fmt.Sprintf("o%d", i), Pull: int64(i)}
		buckets[IdentityBucket(other.Spec.Holder.ID())] = true
		again := other.DeepCopy()
		again.Name = "again"
		if IdentityBucket(again.Spec.Holder.ID()) != IdentityBucket(other.Spec.Holder.ID()) {
			t.Fatal("one identity in two buckets")
		}
	}
	if len(buckets) != identityBuckets {
		t.Errorf("200 identities fall in %d buckets, want %d", len(buckets), identityBuckets)
	}
}

// TestSameIdentity: a bucket holds other identities too; the deadlock detector's skip reads
// only the requests of the waiter's own identity, so another identity's live request in its
// bucket does not cost it the skip.
func TestSameIdentity(t *testing.T) {
	w := indexedRequest(1)
	w.Spec.Holder = locksv1.Holder{Owner: "carol", Pull: 3}
	var other *locksv1.LockRequest
	for i := range 10000 {
		o := indexedRequest(2)
		o.Spec.Holder = locksv1.Holder{Owner: fmt.Sprintf("o%d", i), Pull: 4}
		if IdentityBucket(o.Spec.Holder.ID()) == IdentityBucket(w.Spec.Holder.ID()) {
			other = o
			break
		}
	}
	if other == nil {
		t.Fatal("no identity shares carol's bucket")
	}
	bucket := []locksv1.LockRequest{*w, *other}
	same := sameIdentity(bucket, w.Spec.Holder.ID())
	if len(same) != 1 || same[0].Name != w.Name {
		t.Fatalf("sameIdentity kept %d requests, want carol's one", len(same))
	}
	if !cannotCloseCycle(w, true, same) {
		t.Error("a waiter nobody can wait for is checked because another identity shares its bucket")
	}
	// carol#3 in a spoke of a fleet is another identity (docs/fleet.md "Identity is per
	// cluster"), even in carol's bucket: her live request there costs carol's waiter nothing.
	var spoke *locksv1.LockRequest
	for i := range 10000 {
		o := indexedRequest(3)
		o.Spec.Holder = w.Spec.Holder
		o.Spec.Holder.Cluster = fmt.Sprintf("spoke-%d", i)
		if IdentityBucket(o.Spec.Holder.ID()) == IdentityBucket(w.Spec.Holder.ID()) {
			spoke = o
			break
		}
	}
	if spoke == nil {
		t.Fatal("no cluster of carol#3 shares her bucket")
	}
	if same := sameIdentity(append(bucket, *spoke), w.Spec.Holder.ID()); len(same) != 1 || same[0].Name != w.Name {
		t.Fatalf("sameIdentity kept %d requests, want carol's own in this cluster", len(same))
	}
	twin := other.DeepCopy()
	twin.Name, twin.UID, twin.Spec.Holder = "twin", "uid-twin", w.Spec.Holder
	if cannotCloseCycle(w, true, sameIdentity(append(bucket, *twin), w.Spec.Holder.ID())) {
		t.Error("a waiter whose identity has another live request is skipped")
	}
}
