package faults

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// hold is a clean record: asked at call, granted 10 ms later, worked from granted to end,
// released 5 ms after.
func hold(req, key string, token int64, call, granted, end int) Hold {
	return Hold{Client: req, Request: req, Key: key, Token: token, Call: ms(call), Granted: ms(granted),
		WorkStart: ms(granted), WorkEnd: ms(end), ReleaseCall: ms(end), Release: ms(end + 5)}
}

// TestJudgeFindsEachBrokenPromise feeds the judge hand-made records, each breaking one promise,
// and checks that it names that promise (and that a clean history has none).
func TestJudgeFindsEachBrokenPromise(t *testing.T) {
	fault := []Fault{{Start: ms(1000), Heal: ms(3000)}}
	cases := []struct {
		name  string
		holds []Hold
		want  []string // prefixes of the violations, in order
	}{
		{"clean hand-offs", []Hold{
			hold("a", "k", 1, 0, 10, 100), hold("b", "k", 2, 5, 110, 200), hold("c", "j", 1, 0, 10, 50),
		}, nil},
		{"two holds overlap", []Hold{
			hold("a", "k", 1, 0, 10, 100), hold("b", "k", 2, 5, 90, 200),
		}, []string{"overlap on k: a worked"}},
		{"a token that does not increase", []Hold{
			hold("a", "k", 2, 0, 10, 100), hold("b", "k", 2, 5, 110, 200),
		}, []string{"token order on k: b (token 2) held after a (token 2)"}},
		{"a waiter granted long after the heal", []Hold{
			hold("a", "k", 1, 0, 10, 100), hold("b", "k", 2, 500, 3000+5001, 9000),
		}, []string{"slow: b on k granted 5.001s"}},
		{"a waiter granted late, but within the bound of the heal", []Hold{
			hold("a", "k", 1, 0, 10, 100), hold("b", "k", 2, 500, 3000+4000, 8000),
		}, nil},
		{"a request that was never granted", []Hold{
			hold("a", "k", 1, 0, 10, 100), {Client: "b", Request: "b", Key: "k", Call: ms(5), Err: "wait: deadline"},
		}, []string{"lost: b (b) on k: wait: deadline"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := Judge(tc.holds, fault, 5*time.Second)
			var got []string
			for i, viol := range v.Violations {
				if i < len(tc.want) && strings.HasPrefix(viol, tc.want[i]) {
					got = append(got, tc.want[i])
					continue
				}
				if strings.HasPrefix(viol, "porcupine:") {
					continue // porcupine agrees where the records break the model; checked below
				}
				got = append(got, viol)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("violations (-want +got):\n%s\nall: %q", diff, v.Violations)
			}
		})
	}
}

// TestJudgePorcupineRefusesOverlap: the overlap the interval check finds is also not a fenced
// lock's history for porcupine.
func TestJudgePorcupineRefusesOverlap(t *testing.T) {
	v := Judge([]Hold{hold("a", "k", 1, 0, 10, 100), hold("b", "k", 2, 20, 30, 200)}, nil, time.Minute)
	if !strings.Contains(v.Porcupine, "Illegal") {
		t.Errorf("porcupine on two overlapping holds: %s, want Illegal", v.Porcupine)
	}
}

// TestJudgeRecovery: recovery is measured from the heal to the next grant of a key that had a
// waiter at the heal.
func TestJudgeRecovery(t *testing.T) {
	holds := []Hold{hold("a", "k", 1, 0, 10, 100), hold("b", "k", 2, 500, 3700, 3800), hold("c", "j", 1, 3500, 3510, 3600)}
	v := Judge(holds, []Fault{{Start: ms(1000), Heal: ms(3000)}}, time.Minute)
	if diff := cmp.Diff([]time.Duration{ms(700)}, v.Recovery); diff != "" {
		t.Errorf("recovery (-want +got):\n%s", diff)
	}
}

// TestJudgeRecoveryFromServed: after a control plane restart recovery counts from when the API
// server served again (Served), while liveness still counts from the heal.
func TestJudgeRecoveryFromServed(t *testing.T) {
	holds := []Hold{hold("a", "k", 1, 0, 10, 100), hold("b", "k", 2, 500, 3700, 3800)}
	v := Judge(holds, []Fault{{Start: ms(1000), Heal: ms(3000), Served: ms(3200)}}, time.Minute)
	if diff := cmp.Diff([]time.Duration{ms(500)}, v.Recovery); diff != "" {
		t.Errorf("recovery (-want +got):\n%s", diff)
	}
	v = Judge(holds, []Fault{{Start: ms(1000), Heal: ms(3000), Served: ms(3200)}}, 600*time.Millisecond)
	if len(v.Violations) != 1 || !strings.Contains(v.Violations[0], "slow: b") {
		t.Errorf("liveness should count from the heal (700 ms > 600 ms), not from Served: %q", v.Violations)
	}
}
