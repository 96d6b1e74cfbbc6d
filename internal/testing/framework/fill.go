package framework

import (
	"context"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/whoami"
)

// The names the mutating policies fill in (config/admission), as a user writes them by hand.
const (
	labelGated     = "locks.turnstile.dev/gated"
	annotationLock = "locks.turnstile.dev/lock"
	schedulingGate = "locks.turnstile.dev/lock"
	labelRole      = "locks.turnstile.dev/role"
)

// FillAsUser wraps c, whose requests the API server authenticates as user, to write on every
// object it creates what Turnstile's mutating policies would fill in, and only where the object
// leaves it out: what a careful user of a cluster without MutatingAdmissionPolicy writes by
// hand (docs/install.md, "Supported Kubernetes versions"), so that a suite's specs about
// something else run the same in both modes. A LockRequest gets its owner (user) and creator; a
// holder Lease (label locks.turnstile.dev/role) its creator; an annotated Pod (not a Job's own)
// or Job the label locks.turnstile.dev/gated, its creator, and the scheduling gate or
// spec.suspend. What the policies require of what is written is tested without it
// (test/validatingonly).
func FillAsUser(c client.WithWatch, user string) client.WithWatch {
	return interceptor.NewClient(c, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			fill(obj, user)
			return c.Create(ctx, obj, opts...)
		},
	})
}

// FillAsSelf is FillAsUser for the user c authenticates as (a SelfSubjectReview).
func FillAsSelf(ctx context.Context, c client.WithWatch) (client.WithWatch, error) {
	user, err := whoami.Ask(ctx, c)
	if err != nil {
		return nil, err
	}
	return FillAsUser(c, user), nil
}

func fill(obj client.Object, user string) {
	switch o := obj.(type) {
	case *locksv1.LockRequest:
		if o.Spec.Holder.Owner == "" {
			o.Spec.Holder.Owner = user
		}
		setDefault(o, whoami.AnnotationCreatedBy, user, false)
	case *coordinationv1.Lease:
		if o.Labels[labelRole] != "" {
			setDefault(o, whoami.AnnotationCreatedBy, user, false)
		}
	case *corev1.Pod:
		if _, ok := o.Annotations[annotationLock]; !ok || ownedByJob(o) {
			return
		}
		setDefault(o, labelGated, "true", true)
		setDefault(o, whoami.AnnotationCreatedBy, user, false)
		if !slices.ContainsFunc(o.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == schedulingGate }) {
			o.Spec.SchedulingGates = append(o.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: schedulingGate})
		}
	case *batchv1.Job:
		_, own := o.Annotations[annotationLock]
		_, template := o.Spec.Template.Annotations[annotationLock]
		if !own && !template {
			return
		}
		setDefault(o, labelGated, "true", true)
		setDefault(o, whoami.AnnotationCreatedBy, user, false)
		if !ptr.Deref(o.Spec.Suspend, false) {
			o.Spec.Suspend = ptr.To(true)
		}
	}
}

func ownedByJob(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.OwnerReferences, func(r metav1.OwnerReference) bool {
		return ptr.Deref(r.Controller, false) && r.Kind == "Job" && r.APIVersion == "batch/v1"
	})
}

// setDefault sets a label (label) or annotation k to v unless obj has it.
func setDefault(obj client.Object, k, v string, label bool) {
	get, set := obj.GetAnnotations, obj.SetAnnotations
	if label {
		get, set = obj.GetLabels, obj.SetLabels
	}
	m := get()
	if _, ok := m[k]; ok {
		return
	}
	if m == nil {
		m = map[string]string{}
	}
	m[k] = v
	set(m)
}
