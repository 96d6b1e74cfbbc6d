// Package whoami asks the API server who the caller is: a SelfSubjectReview
// (authentication.k8s.io/v1, what `kubectl auth whoami` asks; every authenticated user may).
//
// Turnstile's clients write their own user name where the admission policies record a creator
// (the annotation locks.turnstile.dev/created-by): where the mutating policies run they write
// the same name over it, and where they do not (no MutatingAdmissionPolicy served) the
// validating policies require it (config/admission/filled.yaml). So pkg/client, pkg/workdir, the
// manager's membership Leases and its workload requests work the same in both.
package whoami

import (
	"context"
	"errors"
	"fmt"
	"sync"

	authenticationv1 "k8s.io/api/authentication/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AnnotationCreatedBy records who created a LockRequest, a holder Lease or a gated workload.
const AnnotationCreatedBy = "locks.turnstile.dev/created-by"

// Ask is the caller's user name as the API server authenticates it: "alice", or
// "system:serviceaccount:ci:deployer" for a ServiceAccount.
func Ask(ctx context.Context, c client.Client) (string, error) {
	review := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, review); err != nil {
		return "", fmt.Errorf("selfsubjectreview: %w", err)
	}
	if review.Status.UserInfo.Username == "" {
		return "", errors.New("selfsubjectreview: the API server returned no user name")
	}
	return review.Status.UserInfo.Username, nil
}

// Cache asks once and remembers the answer (a failure is asked again next time). A client's
// credentials may be renewed (a projected token) but not changed to another user's.
type Cache struct {
	mu   sync.Mutex
	name string
}

// Name is Ask's answer, asked the first time.
func (s *Cache) Name(ctx context.Context, c client.Client) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.name != "" {
		return s.name, nil
	}
	name, err := Ask(ctx, c)
	if err != nil {
		return "", err
	}
	s.name = name
	return name, nil
}

// Stamp records the caller as obj's creator (AnnotationCreatedBy).
func (s *Cache) Stamp(ctx context.Context, c client.Client, obj client.Object) error {
	name, err := s.Name(ctx, c)
	if err != nil {
		return fmt.Errorf("record who creates %s: %w", obj.GetName()+obj.GetGenerateName(), err)
	}
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[AnnotationCreatedBy] = name
	obj.SetAnnotations(a)
	return nil
}

// Known is a Cache that already knows its user name (tests, and callers that learned it
// elsewhere): it asks the API server nothing.
func Known(name string) *Cache { return &Cache{name: name} }
