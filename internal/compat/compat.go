// Package compat knows which Kubernetes versions Turnstile supports and finds out what a
// cluster serves and enforces of what Turnstile needs: its version, the MutatingAdmissionPolicy
// version it serves (the mutating policies need one), Turnstile's own kinds (its CRDs), and
// which of the admission policies actually run (Probe). The manager says all of it once at
// start (a log line, an Event, the turnstile_cluster_info metric) and the kubectl plugin says
// what matters to a user, so that a cluster outside the range, a missing CRD or an
// unprotected install is never a silent state or a raw "no matches for kind".
//
// docs/install.md, "Supported Kubernetes versions", is the user's side of this package.
package compat

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/discovery"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// The support range: every minor in it is tested (make test-versions). A minor past MaxMinor
// still runs, with a warning; one before MinMinor is refused by the chart (kubeVersion) and
// warned about by the manager and the plugin.
const (
	MinMinor = 33
	MaxMinor = 37
)

// Range is the support range as the docs write it.
func Range() string { return fmt.Sprintf("1.%d to 1.%d", MinMinor, MaxMinor) }

// Version is the API server's version.
type Version struct {
	// Git is what the server says of itself, e.g. v1.34.4 or v1.33.5-eks-2c4b6f0.
	Git          string
	Major, Minor int
	// EmulatedMajor and EmulatedMinor are the older version the server emulates
	// (kube-apiserver --emulated-version, as a control plane is upgraded in steps), or 0: it
	// then serves that version's APIs and features, not its binary's, so that is the version
	// Turnstile judges (Effective).
	EmulatedMajor, EmulatedMinor int
}

// gitVersion reads the major and minor of a gitVersion when the server's major and minor
// fields are not plain numbers.
var gitVersion = regexp.MustCompile(`^v?(\d+)\.(\d+)`)

// ParseVersion reads the server's /version answer. Managed clusters write the minor with a
// "+" (GKE, EKS: "33+"); the gitVersion is read when the fields are empty or not numbers.
func ParseVersion(info *version.Info) (Version, error) {
	v := Version{Git: info.GitVersion}
	major, errMajor := strconv.Atoi(info.Major)
	minor, errMinor := strconv.Atoi(trimPlus(info.Minor))
	if errMajor == nil && errMinor == nil {
		v.Major, v.Minor = major, minor
	} else {
		m := gitVersion.FindStringSubmatch(info.GitVersion)
		if m == nil {
			return v, fmt.Errorf("the API server's version %q (major %q, minor %q) is not a Kubernetes version", info.GitVersion, info.Major, info.Minor)
		}
		v.Major, _ = strconv.Atoi(m[1])
		v.Minor, _ = strconv.Atoi(m[2])
	}
	// Since 1.31 the server says which version it emulates (the binary's own, unless it was
	// started with --emulated-version); an older one is what it serves.
	// guard:compat-emulated-version
	major, errMajor = strconv.Atoi(info.EmulationMajor)
	minor, errMinor = strconv.Atoi(trimPlus(info.EmulationMinor))
	if errMajor == nil && errMinor == nil && (major != v.Major || minor != v.Minor) {
		v.EmulatedMajor, v.EmulatedMinor = major, minor
	}
	return v, nil
}

// Effective is the major and minor whose APIs and behaviour the server has: the version it
// emulates, or its own.
func (v Version) Effective() (major, minor int) {
	if v.EmulatedMajor != 0 {
		return v.EmulatedMajor, v.EmulatedMinor
	}
	return v.Major, v.Minor
}

func trimPlus(s string) string {
	for len(s) > 0 && s[len(s)-1] == '+' {
		s = s[:len(s)-1]
	}
	return s
}

// Supported is whether the version (the one the server emulates, if any) is in the support
// range.
func (v Version) Supported() bool {
	major, minor := v.Effective()
	return major == 1 && minor >= MinMinor && minor <= MaxMinor
}

// String is the version as the server says it (what helm's .Capabilities.KubeVersion is).
func (v Version) String() string {
	if v.Git != "" {
		return v.Git
	}
	return fmt.Sprintf("v%d.%d", v.Major, v.Minor)
}

// Describe is the version as the server says it, and the one it emulates: what the manager and
// the plugin say.
func (v Version) Describe() string {
	if v.EmulatedMajor != 0 {
		return fmt.Sprintf("%s (emulating %d.%d)", v, v.EmulatedMajor, v.EmulatedMinor)
	}
	return v.String()
}

// Warning is the one line said about a version outside the range; empty inside it.
func (v Version) Warning() string {
	major, minor := v.Effective()
	switch {
	case v.Supported():
		return ""
	case major == 1 && minor > MaxMinor:
		return fmt.Sprintf("Kubernetes %s is newer than the versions Turnstile is tested on (%s): it should work, but report what does not (docs/install.md, \"Supported Kubernetes versions\")", v.Describe(), Range())
	case v.EmulatedMajor != 0 && v.Major == 1 && v.Minor >= MinMinor:
		return fmt.Sprintf("Kubernetes %s is older than the versions Turnstile supports (%s): it serves the APIs of %d.%d, so its admission policies may not install and its watches may fail; "+
			"finish the upgrade (raise or drop kube-apiserver's --emulated-version) (docs/install.md, \"Supported Kubernetes versions\")", v.Describe(), Range(), major, minor)
	default:
		return fmt.Sprintf("Kubernetes %s is older than the versions Turnstile supports (%s): its admission policies may not install and its watches may fail; upgrade the cluster (docs/install.md, \"Supported Kubernetes versions\")", v.Describe(), Range())
	}
}

// AdmissionGroup is the API group of the admission policies.
const AdmissionGroup = "admissionregistration.k8s.io"

// mutatingVersions are the versions of MutatingAdmissionPolicy Turnstile installs its mutating
// policies as, the preferred first. Their fields are the same; v1alpha1 (1.32, 1.33) is not
// used: alpha APIs are off on managed clusters and changed before beta.
var mutatingVersions = []string{"v1", "v1beta1"}

// Cluster is what the API server serves of what Turnstile needs.
type Cluster struct {
	Version Version
	// MutatingAdmissionPolicy is the version of admissionregistration.k8s.io that serves
	// MutatingAdmissionPolicy and that Turnstile installs its mutating policies as ("v1",
	// "v1beta1"), or "" when it serves none of them.
	MutatingAdmissionPolicy string
	// Missing are Turnstile's resources (lockrequests, projectlocks, commandlocks) that the API
	// server does not serve: its CRDs are not installed, or are older.
	Missing []string
}

// Discover asks the API server's version and discovery what it serves.
func Discover(dc discovery.DiscoveryInterface) (Cluster, error) {
	info, err := dc.ServerVersion()
	if err != nil {
		return Cluster{}, fmt.Errorf("ask the API server's version: %w", err)
	}
	var c Cluster
	if c.Version, err = ParseVersion(info); err != nil {
		return c, err
	}
	for _, v := range mutatingVersions {
		missing, err := serves(dc, AdmissionGroup+"/"+v, "mutatingadmissionpolicies")
		if err != nil {
			return c, err
		}
		if len(missing) == 0 {
			c.MutatingAdmissionPolicy = v
			break
		}
	}
	if c.Missing, err = serves(dc, locksv1.GroupVersion.String(), "lockrequests", "projectlocks", "commandlocks"); err != nil {
		return c, err
	}
	return c, nil
}

// serves returns which of resources the group version does not serve.
func serves(dc discovery.DiscoveryInterface, groupVersion string, resources ...string) (missing []string, err error) {
	list, err := dc.ServerResourcesForGroupVersion(groupVersion)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("discover %s: %w", groupVersion, err)
	}
	var have []string
	if list != nil {
		for _, r := range list.APIResources {
			have = append(have, r.Name)
		}
	}
	for _, r := range resources {
		if !slices.Contains(have, r) {
			missing = append(missing, r)
		}
	}
	return missing, nil
}

// ErrNotInstalled is returned (wrapped) by CheckInstalled when Turnstile's CRDs are missing.
var ErrNotInstalled = errors.New("turnstile's CRDs are not installed")

// CheckInstalled says, as an error a person can act on, that the cluster lacks Turnstile's
// CRDs; nil when it serves them all.
func (c Cluster) CheckInstalled() error {
	if len(c.Missing) == 0 {
		return nil
	}
	return fmt.Errorf("%w: the API server (Kubernetes %s) does not serve %v of %s: install Turnstile's CRDs first "+
		"(helm install, or kubectl apply -k config/default; docs/install.md)", ErrNotInstalled, c.Version, c.Missing, locksv1.GroupVersion)
}

// MutatingDescription says which mutating policies the cluster can run.
func (c Cluster) MutatingDescription() string {
	if c.MutatingAdmissionPolicy == "" {
		return "none: the API server serves no MutatingAdmissionPolicy (v1 or v1beta1), so Turnstile's validating policies require what the mutating ones would fill in"
	}
	return "MutatingAdmissionPolicy " + AdmissionGroup + "/" + c.MutatingAdmissionPolicy
}
