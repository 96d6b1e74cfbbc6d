package compat

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/version"
)

func TestParseVersion(t *testing.T) {
	tests := map[string]struct {
		info          version.Info
		want          Version
		wantErr       bool
		wantSupported bool
	}{
		"upstream":              {info: version.Info{Major: "1", Minor: "33", GitVersion: "v1.33.13"}, want: Version{Git: "v1.33.13", Major: 1, Minor: 33}, wantSupported: true},
		"EKS writes a plus":     {info: version.Info{Major: "1", Minor: "34+", GitVersion: "v1.34.4-eks-2c4b6f0"}, want: Version{Git: "v1.34.4-eks-2c4b6f0", Major: 1, Minor: 34}, wantSupported: true},
		"a beta past the range": {info: version.Info{Major: "1", Minor: "38", GitVersion: "v1.38.0-beta.0"}, want: Version{Git: "v1.38.0-beta.0", Major: 1, Minor: 38}},
		"fields empty":          {info: version.Info{GitVersion: "v1.36.3"}, want: Version{Git: "v1.36.3", Major: 1, Minor: 36}, wantSupported: true},
		"too old":               {info: version.Info{Major: "1", Minor: "32", GitVersion: "v1.32.9"}, want: Version{Git: "v1.32.9", Major: 1, Minor: 32}},
		"newer than the range":  {info: version.Info{Major: "1", Minor: "39", GitVersion: "v1.39.0"}, want: Version{Git: "v1.39.0", Major: 1, Minor: 39}},
		"not a version":         {info: version.Info{GitVersion: "devel"}, want: Version{Git: "devel"}, wantErr: true},
		"emulating itself": {info: version.Info{Major: "1", Minor: "36", EmulationMajor: "1", EmulationMinor: "36", GitVersion: "v1.36.3"},
			want: Version{Git: "v1.36.3", Major: 1, Minor: 36}, wantSupported: true},
		"emulating an older version in the range": {info: version.Info{Major: "1", Minor: "36", EmulationMajor: "1", EmulationMinor: "34", GitVersion: "v1.36.3"},
			want: Version{Git: "v1.36.3", Major: 1, Minor: 36, EmulatedMajor: 1, EmulatedMinor: 34}, wantSupported: true},
		"emulating a version before the range": {info: version.Info{Major: "1", Minor: "33", EmulationMajor: "1", EmulationMinor: "32", GitVersion: "v1.33.13"},
			want: Version{Git: "v1.33.13", Major: 1, Minor: 33, EmulatedMajor: 1, EmulatedMinor: 32}},
		"emulation with the fields read from gitVersion": {info: version.Info{GitVersion: "v1.34.4", EmulationMajor: "1", EmulationMinor: "31"},
			want: Version{Git: "v1.34.4", Major: 1, Minor: 34, EmulatedMajor: 1, EmulatedMinor: 31}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseVersion(&tc.info)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseVersion error = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseVersion (-want +got):\n%s", diff)
			}
			if got.Supported() != tc.wantSupported {
				t.Errorf("Supported() = %v, want %v", got.Supported(), tc.wantSupported)
			}
			if (got.Warning() == "") != tc.wantSupported {
				t.Errorf("Warning() = %q for supported=%v", got.Warning(), tc.wantSupported)
			}
		})
	}
}

func TestWarningSaysWhichSide(t *testing.T) {
	old := Version{Git: "v1.32.9", Major: 1, Minor: 32}.Warning()
	if !strings.Contains(old, "older than the versions Turnstile supports (1.33 to 1.37)") || !strings.Contains(old, "upgrade the cluster") {
		t.Errorf("old: %q", old)
	}
	newer := Version{Git: "v1.39.0", Major: 1, Minor: 39}.Warning()
	if !strings.Contains(newer, "newer than the versions Turnstile is tested on (1.33 to 1.37)") {
		t.Errorf("newer: %q", newer)
	}
	// A binary in the range emulating an older version: finishing the upgrade is the remedy.
	emulating := Version{Git: "v1.33.13", Major: 1, Minor: 33, EmulatedMajor: 1, EmulatedMinor: 32}.Warning()
	want := "Kubernetes v1.33.13 (emulating 1.32) is older than the versions Turnstile supports (1.33 to 1.37): it serves the APIs of 1.32"
	if !strings.HasPrefix(emulating, want) || !strings.Contains(emulating, "raise or drop kube-apiserver's --emulated-version") {
		t.Errorf("emulating: %q", emulating)
	}
}

func TestCheckInstalled(t *testing.T) {
	c := Cluster{Version: Version{Git: "v1.34.4", Major: 1, Minor: 34}}
	if err := c.CheckInstalled(); err != nil {
		t.Errorf("all served: %v", err)
	}
	c.Missing = []string{"lockrequests", "projectlocks", "commandlocks"}
	err := c.CheckInstalled()
	want := "turnstile's CRDs are not installed: the API server (Kubernetes v1.34.4) does not serve [lockrequests projectlocks commandlocks] of locks.turnstile.dev/v1alpha1: install Turnstile's CRDs first (helm install, or kubectl apply -k config/default; docs/install.md)"
	if err == nil || err.Error() != want {
		t.Errorf("CheckInstalled() = %v, want %s", err, want)
	}
}
