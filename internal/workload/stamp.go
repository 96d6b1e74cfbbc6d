package workload

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
)

// The stamp of a request the manager made for a workload. The manager acts (lets a workload go
// on it, renews, releases, deletes it) only on a request that carries its stamp: created by the
// manager (the annotation locks.turnstile.dev/created-by, which the admission policies write
// with the creator's user name, is the manager's own), for this kind and name, and for the
// workload object's uid. A request's name, its ownerReferences and its spec are written by
// whoever creates it; none of them says the manager made it. The policy
// turnstile-workload-requests (config/admission/workload-requests.yaml) lets only the manager's
// ServiceAccount create a request with these annotations, and nobody change them afterwards.
const (
	// AnnotationWorkload is "pod/NAME" or "job/NAME": the workload the request was made for.
	AnnotationWorkload = "locks.turnstile.dev/workload"
	// AnnotationWorkloadUID is that workload object's uid: a Job deleted and created again
	// under the same name is another workload.
	AnnotationWorkloadUID = "locks.turnstile.dev/workload-uid"
	// AnnotationLockEnded is written on a workload whose lock request ended before the
	// workload did (it failed before a grant, or the workload lost its lock and was stopped):
	// the manager never asks again for it (delete it and create it again to ask anew).
	AnnotationLockEnded = "locks.turnstile.dev/lock-ended"
)

// made is one of the manager's requests: lr, made for the workload object of uid.
type made struct {
	lr  *locksv1.LockRequest
	uid types.UID
}

// madeFor says whether lr is a request the manager self made for the workload of kind and
// name, and for which object of that name (its uid). A request made before the stamp existed
// (no AnnotationWorkload) names its workload by its controlling ownerReference, which the
// policy turnstile-workload-requests keeps as the manager wrote it.
// guard:workload-trusts-only-its-stamp
func madeFor(lr *locksv1.LockRequest, self, kind, name string) (types.UID, bool) {
	if self == "" || lr.Annotations[AnnotationCreatedBy] != self {
		return "", false
	}
	if w, ok := lr.Annotations[AnnotationWorkload]; ok {
		uid := lr.Annotations[AnnotationWorkloadUID]
		return types.UID(uid), w == kind+"/"+name && uid != ""
	}
	c := metav1.GetControllerOf(lr)
	if c == nil || !strings.EqualFold(c.Kind, kind) || c.Name != name || c.UID == "" {
		return "", false
	}
	return c.UID, true
}

// stampedWorkload is the kind and name a request's stamp names ("", "" without one).
func stampedWorkload(o client.Object) (kind, name string) {
	kind, name, _ = strings.Cut(o.GetAnnotations()[AnnotationWorkload], "/")
	return kind, name
}

// sameLocks says whether a request asks for exactly the locks of a workload's annotation: the
// same keys, in the same order, in the same mode.
func sameLocks(a, b []locksv1.LockTarget) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if lockkey.Normalize(a[i]) != lockkey.Normalize(b[i]) || a[i].Mode.IsShared() != b[i].Mode.IsShared() {
			return false
		}
	}
	return true
}
