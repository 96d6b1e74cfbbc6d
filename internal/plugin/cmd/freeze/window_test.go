package freeze

import (
	"strings"
	"testing"
	"time"
)

func TestParseWindow(t *testing.T) {
	cases := map[string]struct {
		tc                     string
		wantSchedule, wantZone string
		wantDuration           time.Duration
		wantErr                string
	}{
		"the Friday freeze": {tc: "Fri 16:00 -> Mon 08:00 Europe/Berlin", wantSchedule: "0 16 * * 5", wantDuration: 64 * time.Hour, wantZone: "Europe/Berlin"},
		"with a unicode arrow and long day names": {tc: "friday 16:00 → monday 08:00 Europe/Berlin",
			wantSchedule: "0 16 * * 5", wantDuration: 64 * time.Hour, wantZone: "Europe/Berlin"},
		"within one day":                        {tc: "Sat 10:30 to Sat 12:00", wantSchedule: "30 10 * * 6", wantDuration: 90 * time.Minute},
		"a whole week around, Sunday to Sunday": {tc: "Sun 23:00 -> Sun 01:00 UTC", wantSchedule: "0 23 * * 0", wantDuration: 146 * time.Hour, wantZone: "UTC"},
		"every day across midnight":             {tc: "22:00 -> 02:00 UTC", wantSchedule: "0 22 * * *", wantDuration: 4 * time.Hour, wantZone: "UTC"},
		"no arrow":                              {tc: "Fri 16:00 Mon 08:00", wantErr: "no arrow"},
		"a day on one side only":                {tc: "Fri 16:00 -> 08:00", wantErr: "a day on both sides or on neither"},
		"no such day":                           {tc: "Frei 16:00 -> Mon 08:00", wantErr: "each side is"},
		"empty":                                 {tc: "12:00 -> 12:00", wantErr: "it ends when it starts"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s, d, z, err := parseWindow(tc.tc)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseWindow(%q) error = %v, want %q", tc.tc, err, tc.wantErr)
				}
				return
			}
			if err != nil || s != tc.wantSchedule || d != tc.wantDuration || z != tc.wantZone {
				t.Errorf("parseWindow(%q) = %q, %s, %q, %v; want %q, %s, %q", tc.tc, s, d, z, err, tc.wantSchedule, tc.wantDuration, tc.wantZone)
			}
		})
	}
}

func TestWindowFlagsBuild(t *testing.T) {
	w := windowFlags{form: "Fri 16:00 -> Mon 08:00 Europe/Berlin", action: "Deny", selector: "team=a"}
	got, err := w.build()
	if err != nil || got.Name != "deny" || got.NamespaceSelector.MatchLabels["team"] != "a" {
		t.Errorf("build = %+v, %v", got, err)
	}
	for _, bad := range []windowFlags{
		{form: "Fri 16:00 -> Mon 08:00", schedule: "0 16 * * 5", action: "Deny"},
		{schedule: "0 16 * * 5", duration: time.Hour, action: "Maybe"},
		{schedule: "0 16 * * 5", duration: time.Hour, zone: "Mars/Base", action: "Deny"},
		{schedule: "0 16 * *", duration: time.Hour, action: "Deny"},
	} {
		if _, err := bad.build(); err == nil {
			t.Errorf("build(%+v) = nil error, want one", bad)
		}
	}
}
