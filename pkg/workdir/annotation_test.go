package workdir

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func manyHeld(n, holderLen int) []Held {
	out := make([]Held, n)
	for i := range out {
		out[i] = Held{
			Key:    Key{Repo: "acme/infra", Pull: int64(i), Workspace: "default", Path: "."},
			Holder: strings.Repeat("h", holderLen),
			Since:  t0.Add(time.Duration(i) * time.Second),
		}
	}
	return out
}

func entriesOf(held []Held) []guardEntry {
	out := []guardEntry{}
	for _, h := range held {
		out = append(out, guardEntry{Key: h.Key.String(), Holder: h.Holder, Since: h.Since.UTC().Format(time.RFC3339)})
	}
	return out
}

func TestEncodeGuards(t *testing.T) {
	cases := map[string]struct {
		held          []Held
		wantEntries   int
		wantTruncated int
	}{
		"none":                    {held: nil, wantEntries: 0},
		"a few":                   {held: manyHeld(3, 4), wantEntries: 3},
		"exactly the entry limit": {held: manyHeld(maxGuardEntries, 4), wantEntries: maxGuardEntries},
		"over the entry limit":    {held: manyHeld(150, 4), wantEntries: maxGuardEntries, wantTruncated: 50},
		// Each entry is ~580 bytes, so the byte bound cuts before the entry bound.
		"over the byte limit":  {held: manyHeld(60, 500), wantEntries: 28, wantTruncated: 32},
		"one oversized holder": {held: manyHeld(1, maxGuardBytes), wantEntries: 0, wantTruncated: 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			value, truncated := encodeGuards(tc.held)
			if len(value) > maxGuardBytes {
				t.Errorf("value is %d bytes, over the %d byte bound", len(value), maxGuardBytes)
			}
			var got []guardEntry
			if err := json.Unmarshal([]byte(value), &got); err != nil {
				t.Fatalf("value is not a JSON list: %v\n%s", err, value)
			}
			if got == nil {
				t.Fatalf("value %q is not a list", value)
			}
			if truncated != tc.wantTruncated || len(got) != tc.wantEntries {
				t.Fatalf("encoded %d entries, truncated %d; want %d and %d", len(got), truncated, tc.wantEntries, tc.wantTruncated)
			}
			if diff := cmp.Diff(entriesOf(tc.held[:len(got)]), got); diff != "" {
				t.Errorf("entries are not the held prefix (-want +got):\n%s", diff)
			}
			// The byte bound must be tight: the first entry left out would not have fit.
			if truncated > 0 && len(got) < maxGuardEntries {
				next, err := json.Marshal(entriesOf(tc.held[len(got) : len(got)+1])[0])
				if err != nil {
					t.Fatal(err)
				}
				if len(value)+len(",")+len(next) <= maxGuardBytes {
					t.Errorf("left out an entry of %d bytes although %d of %d bytes were used", len(next), len(value), maxGuardBytes)
				}
			}
		})
	}
}

func TestEncodeGuardsFormat(t *testing.T) {
	held := []Held{{
		Key:    vpcKey(),
		Holder: `plan "x"`,
		Since:  time.Date(2026, 3, 14, 10, 26, 53, 500, time.FixedZone("CET", 3600)),
	}}
	value, truncated := encodeGuards(held)
	want := `[{"key":"acme/infra#12/default/modules/vpc","holder":"plan \"x\"","since":"2026-03-14T09:26:53Z"}]`
	if value != want || truncated != 0 {
		t.Errorf("encodeGuards = %s, %d; want %s, 0", value, truncated, want)
	}
}

func TestSetGuardAnnotations(t *testing.T) {
	annotations := map[string]string{"other": "kept"}
	setGuardAnnotations(annotations, manyHeld(101, 1))
	if got := annotations[AnnotationGuardsTruncated]; got != "1" {
		t.Errorf("%s = %q, want \"1\"", AnnotationGuardsTruncated, got)
	}
	setGuardAnnotations(annotations, manyHeld(1, 1))
	want := map[string]string{
		"other":          "kept",
		AnnotationGuards: fmt.Sprintf(`[{"key":"acme/infra#0/default/.","holder":"h","since":%q}]`, t0.Format(time.RFC3339)),
	}
	if diff := cmp.Diff(want, annotations); diff != "" {
		t.Errorf("annotations mismatch (-want +got):\n%s", diff)
	}
}
