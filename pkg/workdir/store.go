package workdir

import (
	"context"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnstile-dev/turnstile/internal/whoami"
)

// leaseStore is the little of the API server the heartbeat needs. It exists so the renewal and
// lost-detection logic can be tested against an in-memory store that fails on demand; the real
// thing is clientStore, and errors follow the API server's (apierrors.IsNotFound, IsConflict, …).
type leaseStore interface {
	get(ctx context.Context, key types.NamespacedName) (*coordinationv1.Lease, error)
	// create and update write lease and refresh it from the response (resourceVersion, uid).
	create(ctx context.Context, lease *coordinationv1.Lease) error
	// update fails with a conflict unless lease.ResourceVersion is current.
	update(ctx context.Context, lease *coordinationv1.Lease) error
	// delete deletes lease only if its uid and resourceVersion are still current (else conflict),
	// so a replica never deletes a Lease that someone else has written since it last looked.
	delete(ctx context.Context, lease *coordinationv1.Lease) error
}

type clientStore struct {
	c client.Client
	// self is the caller's user name, recorded as the creator of the Leases it creates.
	self *whoami.Cache
}

func (s clientStore) get(ctx context.Context, key types.NamespacedName) (*coordinationv1.Lease, error) {
	lease := &coordinationv1.Lease{}
	if err := s.c.Get(ctx, key, lease); err != nil {
		return nil, err
	}
	return lease, nil
}

// create records the caller as the Lease's creator (locks.turnstile.dev/created-by), as the
// mutating admission policy would: where it does not run, the validating policies require it
// of a labelled Lease (config/admission/filled.yaml).
func (s clientStore) create(ctx context.Context, lease *coordinationv1.Lease) error {
	// guard:heartbeat-records-creator
	if err := s.self.Stamp(ctx, s.c, lease); err != nil {
		return err
	}
	return s.c.Create(ctx, lease)
}

func (s clientStore) update(ctx context.Context, lease *coordinationv1.Lease) error {
	return s.c.Update(ctx, lease)
}

func (s clientStore) delete(ctx context.Context, lease *coordinationv1.Lease) error {
	uid, rv := lease.UID, lease.ResourceVersion
	return s.c.Delete(ctx, lease, client.Preconditions{UID: &uid, ResourceVersion: &rv})
}
