package workload

import (
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// kind is what the controller needs to know of one workload kind.
type kind interface {
	// name is the kind in lower case ("pod", "job"): the LockRequest's name prefix and label.
	name() string
	newObject() client.Object
	// annotations are the ones the lock is read from.
	annotations(obj client.Object) map[string]string
	// finished says whether the workload has ended for good, and how.
	finished(obj client.Object) (bool, string)
	// held says whether the workload is still held (gated or suspended).
	held(obj client.Object) bool
	// letGo writes the fencing token and lets the workload run, into obj (the caller writes it).
	letGo(obj client.Object, token string)
	// runAs is who the workload runs as: the owner when no creator was recorded.
	runAs(obj client.Object) string
}

type podKind struct{}

func (podKind) name() string                                    { return "pod" }
func (podKind) newObject() client.Object                        { return &corev1.Pod{} }
func (podKind) annotations(obj client.Object) map[string]string { return obj.GetAnnotations() }

func (podKind) finished(obj client.Object) (bool, string) {
	switch p := obj.(*corev1.Pod); p.Status.Phase {
	case corev1.PodSucceeded, corev1.PodFailed:
		return true, "the Pod " + string(p.Status.Phase)
	}
	return false, ""
}

func (podKind) held(obj client.Object) bool {
	return slices.ContainsFunc(obj.(*corev1.Pod).Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == SchedulingGate })
}

func (podKind) letGo(obj client.Object, token string) {
	p := obj.(*corev1.Pod)
	// guard:workload-no-token
	setAnnotation(p, AnnotationFencingToken, token)
	p.Spec.SchedulingGates = slices.DeleteFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == SchedulingGate })
}

func (podKind) runAs(obj client.Object) string {
	p := obj.(*corev1.Pod)
	return serviceAccountUser(p.Namespace, p.Spec.ServiceAccountName)
}

type jobKind struct{}

func (jobKind) name() string             { return "job" }
func (jobKind) newObject() client.Object { return &batchv1.Job{} }

// annotations of a Job are its own, over its Pod template's: either may carry the lock.
func (jobKind) annotations(obj client.Object) map[string]string {
	j := obj.(*batchv1.Job)
	out := map[string]string{}
	for k, v := range j.Spec.Template.Annotations {
		out[k] = v
	}
	for k, v := range j.Annotations {
		out[k] = v
	}
	return out
}

func (jobKind) finished(obj client.Object) (bool, string) {
	for _, c := range obj.(*batchv1.Job).Status.Conditions {
		if c.Status == corev1.ConditionTrue && (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) {
			return true, "the Job " + map[batchv1.JobConditionType]string{batchv1.JobComplete: "completed", batchv1.JobFailed: "failed"}[c.Type]
		}
	}
	return false, ""
}

func (jobKind) held(obj client.Object) bool {
	s := obj.(*batchv1.Job).Spec.Suspend
	return s != nil && *s
}

// letGo also writes the token into the Pod template, so the Job's Pods carry it (a suspended
// Job that never ran may change its template's annotations).
func (jobKind) letGo(obj client.Object, token string) {
	j := obj.(*batchv1.Job)
	// guard:workload-no-token/2
	setAnnotation(j, AnnotationFencingToken, token)
	if j.Spec.Template.Annotations == nil {
		j.Spec.Template.Annotations = map[string]string{}
	}
	j.Spec.Template.Annotations[AnnotationFencingToken] = token
	f := false
	j.Spec.Suspend = &f
}

func (jobKind) runAs(obj client.Object) string {
	j := obj.(*batchv1.Job)
	return serviceAccountUser(j.Namespace, j.Spec.Template.Spec.ServiceAccountName)
}

func serviceAccountUser(ns, sa string) string {
	if sa == "" {
		sa = "default"
	}
	return "system:serviceaccount:" + ns + ":" + sa
}

func setAnnotation(obj client.Object, k, v string) {
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[k] = v
	obj.SetAnnotations(a)
}
