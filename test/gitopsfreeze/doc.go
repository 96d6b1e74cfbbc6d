// Package gitopsfreeze checks write freezes (docs/freeze-admission.md) with the GitOps tools' own
// code: Flux's server-side apply library (github.com/fluxcd/pkg/ssa, as kustomize-controller
// applies) and Helm's SDK (helm.sh/helm/v3/pkg/action), each acting as its controller's
// ServiceAccount against a real kube-apiserver with the shipped freeze policies.
//
// It is a module of its own: Flux's and Helm's libraries move k8s.io/kube-openapi, add
// k8s.io/kubectl and move github.com/fluxcd/cli-utils, which the root module pins for
// test/gitops. hack/test.sh (make test), make vet and make lint run it.
package gitopsfreeze
