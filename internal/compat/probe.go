package compat

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// Admission is what the API server enforces of Turnstile's admission policies.
type Admission string

const (
	// AdmissionMutating means the mutating policies run: owners and creators are filled in and
	// annotated Pods and Jobs are held for their locks.
	AdmissionMutating Admission = "mutating"
	// AdmissionValidatingOnly means only the validating policies run (the API server serves no
	// MutatingAdmissionPolicy, or the install left them out): a request must name its owner, a
	// delegate its creator, a gated workload its gate; the rest is refused. Safe, with more to write.
	AdmissionValidatingOnly Admission = "validating-only"
	// AdmissionNone means no policy refused what they all refuse: anyone may take a lock for anyone.
	AdmissionNone Admission = "none"
	// AdmissionUnknown means the probe could not tell; its error says why.
	AdmissionUnknown Admission = "unknown"
)

// UnrecordedCreator is the part of the owner policy's refusal (config/admission/owner.yaml)
// that says the request's creator was not recorded: what only the validating-only install
// refuses a delegate's probe with.
const UnrecordedCreator = "this cluster does not record who created the request"

// probeOwner is the owner the probe asks for: never the prober itself.
const probeOwner = "turnstile-admission-probe"

// Probe finds out which of Turnstile's admission policies the API server enforces, by asking
// it: a dry-run create, as c's user, of a LockRequest in namespace for another owner and
// without the annotation locks.turnstile.dev/created-by. Nothing is stored (dryRun=All runs the
// whole admission chain and stops before etcd). The mutating owner policy records the creator;
// without it, the validating owner policy refuses a delegate's request that does not name its
// creator; with no policy at all, the request is accepted as it is. c's user needs the
// "create" and "delegate" verbs on lockrequests in namespace (the manager has both).
func Probe(ctx context.Context, c client.Client, namespace string) (Admission, error) {
	lr := &locksv1.LockRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: "turnstile-admission-probe-"},
		Spec: locksv1.LockRequestSpec{
			Locks:  []locksv1.LockTarget{{Repo: "turnstile.dev/admission-probe", Path: "probe", Workspace: "default"}},
			Holder: locksv1.Holder{Owner: probeOwner},
			Reason: "Turnstile's manager asks which admission policies run (dry run: never stored)",
		},
	}
	err := c.Create(ctx, lr, client.DryRunAll)
	switch {
	case err == nil && lr.Annotations[createdBy] != "":
		return AdmissionMutating, nil
	case err == nil:
		return AdmissionNone, nil
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), UnrecordedCreator):
		return AdmissionValidatingOnly, nil
	default:
		return AdmissionUnknown, fmt.Errorf("dry-run create of a lock request in namespace %s: %w", namespace, err)
	}
}

// createdBy is the annotation the owner policy records a request's creator in.
const createdBy = "locks.turnstile.dev/created-by"

// Describe says what an admission mode means for users, in one sentence.
func (a Admission) Describe() string {
	switch a {
	case AdmissionMutating:
		return "the mutating and validating admission policies run: owners, creators and workload gates are filled in"
	case AdmissionValidatingOnly:
		return "only the validating admission policies run (no MutatingAdmissionPolicy): a request must name its owner, a delegate its creator, " +
			"a gated Pod or Job its gate; the API server refuses the rest, saying what to add"
	case AdmissionNone:
		return "NO admission policy runs: anyone who may create a LockRequest may take a lock for anyone and release anyone's; " +
			"install config/admission (or the chart with admissionPolicies.enabled)"
	default:
		return "could not tell which admission policies run"
	}
}
