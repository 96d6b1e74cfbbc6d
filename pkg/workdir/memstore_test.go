package workdir

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

var leasesResource = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}

// memStore is an in-memory leaseStore with the API server's optimistic concurrency (a
// resourceVersion per write, conflicts on stale ones, delete preconditions) and a switch to make
// every call fail. It stands in for the API server in unit tests; the client-backed store is
// exercised against a real one by envtest.
type memStore struct {
	mu     sync.Mutex
	leases map[types.NamespacedName]*coordinationv1.Lease
	rv     int
	fail   error
	calls  []string
}

func newMemStore() *memStore {
	return &memStore{leases: map[types.NamespacedName]*coordinationv1.Lease{}}
}

func (s *memStore) setFail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = err
}

// record notes the call and returns the injected failure, if any. Callers hold s.mu.
func (s *memStore) record(call string) error {
	s.calls = append(s.calls, call)
	return s.fail
}

// stored records the call and returns the Lease stored at key: the injected failure, or
// NotFound when there is none. Callers hold s.mu.
func (s *memStore) stored(call string, key types.NamespacedName) (*coordinationv1.Lease, error) {
	if err := s.record(call); err != nil {
		return nil, err
	}
	l, ok := s.leases[key]
	if !ok {
		return nil, apierrors.NewNotFound(leasesResource, key.Name)
	}
	return l, nil
}

func keyOf(l *coordinationv1.Lease) types.NamespacedName {
	return types.NamespacedName{Namespace: l.Namespace, Name: l.Name}
}

func (s *memStore) takeCalls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.calls
	s.calls = nil
	return c
}

func (s *memStore) nextRV() string {
	s.rv++
	return strconv.Itoa(s.rv)
}

func (s *memStore) get(_ context.Context, key types.NamespacedName) (*coordinationv1.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, err := s.stored("get", key)
	if err != nil {
		return nil, err
	}
	return l.DeepCopy(), nil
}

func (s *memStore) create(_ context.Context, lease *coordinationv1.Lease) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.record("create"); err != nil {
		return err
	}
	key := keyOf(lease)
	if _, ok := s.leases[key]; ok {
		return apierrors.NewAlreadyExists(leasesResource, key.Name)
	}
	lease.ResourceVersion = s.nextRV()
	lease.UID = types.UID("uid-" + lease.ResourceVersion)
	s.leases[key] = lease.DeepCopy()
	return nil
}

func (s *memStore) update(_ context.Context, lease *coordinationv1.Lease) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, err := s.stored("update", keyOf(lease))
	if err != nil {
		return err
	}
	if cur.ResourceVersion != lease.ResourceVersion {
		return apierrors.NewConflict(leasesResource, lease.Name, fmt.Errorf("resourceVersion %s is stale, current %s", lease.ResourceVersion, cur.ResourceVersion))
	}
	lease.ResourceVersion = s.nextRV()
	lease.UID = cur.UID
	s.leases[keyOf(lease)] = lease.DeepCopy()
	return nil
}

func (s *memStore) delete(_ context.Context, lease *coordinationv1.Lease) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, err := s.stored("delete", keyOf(lease))
	if err != nil {
		return err
	}
	if cur.UID != lease.UID || cur.ResourceVersion != lease.ResourceVersion {
		return apierrors.NewConflict(leasesResource, lease.Name, errors.New("precondition failed"))
	}
	delete(s.leases, keyOf(lease))
	return nil
}

// lease returns the stored Lease, or nil, without recording a call.
func (s *memStore) lease(key types.NamespacedName) *coordinationv1.Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.leases[key]; ok {
		return l.DeepCopy()
	}
	return nil
}

// put writes a Lease as another party would, bumping its resourceVersion.
func (s *memStore) put(lease *coordinationv1.Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := lease.DeepCopy()
	key := keyOf(l)
	if cur, ok := s.leases[key]; ok {
		l.UID = cur.UID
	} else if l.UID == "" {
		l.UID = "uid-other"
	}
	l.ResourceVersion = s.nextRV()
	s.leases[key] = l
}

// remove deletes a Lease as another party would.
func (s *memStore) remove(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.leases, key)
}
