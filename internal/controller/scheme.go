package controller

import (
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// NewScheme is the scheme the controllers are written for: the built-in types and Turnstile's.
// The manager and the test framework both build theirs here.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err) // static registrations: only a programming error fails them
	}
	if err := locksv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}
