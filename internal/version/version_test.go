package version

import "testing"

func TestString(t *testing.T) {
	for name, tc := range map[string]struct {
		info Info
		want string
	}{
		"release": {Info{Version: "v0.2.0", Commit: "0123456789abcdef0123", GoVersion: "go1.26.8", Platform: "linux/arm64"},
			"v0.2.0 (commit 0123456789ab, go1.26.8, linux/arm64)"},
		"development build": {Info{Version: "(devel)", GoVersion: "go1.26.8", Platform: "darwin/amd64"},
			"(devel) (commit unknown, go1.26.8, darwin/amd64)"},
	} {
		if got := tc.info.String(); got != tc.want {
			t.Errorf("%s: %q, want %q", name, got, tc.want)
		}
	}
}

func TestGetWithoutLinkerValues(t *testing.T) {
	// A test binary is a development build: no -X values.
	i := Get()
	if i.Version == "" || i.GoVersion == "" || i.Platform == "" {
		t.Errorf("Get() = %+v: every field but Commit is set", i)
	}
}
