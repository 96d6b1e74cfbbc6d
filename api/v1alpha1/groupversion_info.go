// Package v1alpha1 contains the Turnstile lock API: LockRequest (ask for locks), ProjectLock (one
// per lock key, the single point of serialization) and CommandLock (a cluster-wide freeze).
//
// +kubebuilder:object:generate=true
// +groupName=locks.turnstile.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of the Turnstile API.
	GroupVersion = schema.GroupVersion{Group: "locks.turnstile.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the Turnstile types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the Turnstile types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&LockRequest{}, &LockRequestList{},
		&ProjectLock{}, &ProjectLockList{},
		&CommandLock{}, &CommandLockList{},
		&Spoke{}, &SpokeList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
