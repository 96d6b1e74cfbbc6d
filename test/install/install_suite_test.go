// Package install proves both install paths yield a working operator. For the Helm chart
// (`helm template`) and for the kustomize build (`kubectl kustomize config/default`), each on a
// fresh local control plane (kube-apiserver + etcd built by hack/), it
//
//   - passes a server-side dry-run of the manifests, then installs them with the real kubectl;
//   - creates the manager's pod spec under the restricted Pod Security Standard (dry-run);
//   - runs the real manager binary, as the Deployment runs it (its args, active-active),
//     authenticated only as the installed ServiceAccount: a token from the TokenRequest API, no
//     admin kubeconfig, so the installed RBAC is all it has;
//   - drives a grant, a hand-off and an expiry with kubectl as a user bound to the installed
//     requester role;
//   - checks that the installed admission policies deny another user's release and a priority
//     above the installed params' maxPriority (kubectl --as, server-side dry-run), with their
//     messages;
//   - scrapes the manager's HTTPS metrics as a scraper bound to the metrics-reader role, and
//     checks that every metric and label the alerts and the dashboard select is exported;
//   - fails on any "forbidden" in the manager's log.
//
// For the chart it also measures how long hand-offs pause while a replica is replaced in a
// rollout (SIGTERM of one replica; it leaves the membership and the other takes its keys).
//
// On an API server emulating 1.32, before the support range (the binaries of 1.33 to 1.35 can),
// it installs the bundle for it and checks that the manager says so in its log, an Event on its
// Pod and its metric, and the plugin in one warning line (outside_range_test.go).
//
// Run it with `make test`, or alone with:
//
//	make build helm k8s-bins && KUBEBUILDER_ASSETS=$PWD/bin/k8s/1.37.2-linux-amd64 go test -count=1 -v ./test/install/
package install

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"

	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

var (
	repoRoot   string
	managerBin string
	kubectlBin string
	helmBin    string
)

func TestInstall(t *testing.T) { framework.RunSuite(t, "Turnstile install suite") }

var _ = BeforeSuite(func() {
	repoRoot, managerBin = framework.Root(), framework.ManagerBinary()
	kubectlBin, helmBin = framework.KubectlBinary(), framework.HelmBinary()
})
