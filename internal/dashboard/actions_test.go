package dashboard

import (
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestParseUntil(t *testing.T) {
	cases := map[string]struct {
		in      string
		want    time.Time
		wantErr bool
	}{
		"a duration from now": {in: "2h", want: now.Add(2 * time.Hour)},
		"an RFC 3339 time":    {in: "2026-11-23T18:00:00Z", want: time.Date(2026, 11, 23, 18, 0, 0, 0, time.UTC)},
		"anything else":       {in: "tomorrow", wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseUntil(tc.in, now)
			if (err != nil) != tc.wantErr || !got.Equal(tc.want) {
				t.Errorf("ParseUntil(%q) = %v, %v; want %v (error %v)", tc.in, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestUIDPatch(t *testing.T) {
	got, err := uidPatch("u-1", map[string]any{"release": true}).Data(nil)
	if err != nil {
		t.Fatal(err)
	}
	// The uid in the patch is what makes the API server refuse a namesake.
	if want := `{"metadata":{"uid":"u-1"},"spec":{"release":true}}`; string(got) != want {
		t.Errorf("patch %s, want %s", got, want)
	}
}

func TestReplaced(t *testing.T) {
	gk := schema.GroupKind{Group: "locks.turnstile.dev", Kind: "LockRequest"}
	uid := apierrors.NewInvalid(gk, "x", field.ErrorList{field.Invalid(field.NewPath("metadata", "uid"), "u-old", "field is immutable")})
	other := apierrors.NewInvalid(gk, "x", field.ErrorList{field.Invalid(field.NewPath("spec", "ttl"), "9h", "too long")})
	if err := replaced("lockrequest a/x", uid); !strings.HasPrefix(err.Error(), "lockrequest a/x was replaced by a new one") || !apierrors.IsInvalid(err) {
		t.Errorf("a uid refusal: %v (still Invalid: %v)", err, apierrors.IsInvalid(err))
	}
	if err := replaced("lockrequest a/x", other); err.Error() != other.Error() {
		t.Errorf("another refusal was changed: %v", err)
	}
}
