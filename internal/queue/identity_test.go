package queue

import (
	"testing"
	"time"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// Hole C (issue #26): identity is owner, pull and session, and (issue #45) cluster, compared
// field by field. A holder and a newcomer whose "owner#pull" strings are equal are two identities
// when their fields differ: the newcomer waits. Only the holder's own identity re-enters at once.
func TestDecideComparesIdentitiesStructurally(t *testing.T) {
	type holder struct {
		owner   string
		pull    int64
		session string
		cluster string
	}
	cases := map[string]struct {
		holds, asks holder
		shares      bool
	}{
		"alice pull 1 holds, owner alice#1 without a pull asks": {holds: holder{"alice", 1, "", ""}, asks: holder{"alice#1", 0, "", ""}},
		"owner alice#1 holds, alice pull 1 asks":                {holds: holder{"alice#1", 0, "", ""}, asks: holder{"alice", 1, "", ""}},
		"an OIDC issuer#claim holds, the issuer with a session": {holds: holder{"https://issuer.example#alice", 0, "", ""}, asks: holder{"https://issuer.example", 0, "alice", ""}},
		"one owner and pull, another session":                   {holds: holder{"alice", 1, "run-1", ""}, asks: holder{"alice", 1, "run-2", ""}},
		"one owner and pull, a session against none":            {holds: holder{"alice", 1, "", ""}, asks: holder{"alice", 1, "run-1", ""}},
		"the same owner, pull and session share the key":        {holds: holder{"alice#1", 2, "run-1", ""}, asks: holder{"alice#1", 2, "run-1", ""}, shares: true},
		"the same owner with a '#' and no pull share the key":   {holds: holder{"https://issuer.example#alice", 0, "", ""}, asks: holder{"https://issuer.example#alice", 0, "", ""}, shares: true},
		// docs/fleet.md "Identity is per cluster": a gated Job named apply in team-a of two
		// clusters is session job/apply in both; only the cluster tells them apart.
		"a gated Job in one cluster holds, its namesake in another asks":  {holds: holder{"ci/deploy", 7, "job/apply", "eu-west-1"}, asks: holder{"ci/deploy", 7, "job/apply", "us-east-1"}},
		"a gated Job of this cluster holds, its namesake in a spoke asks": {holds: holder{"ci/deploy", 7, "job/apply", ""}, asks: holder{"ci/deploy", 7, "job/apply", "eu-west-1"}},
		"the same gated Job of one cluster shares the key":                {holds: holder{"ci/deploy", 7, "job/apply", "eu-west-1"}, asks: holder{"ci/deploy", 7, "job/apply", "eu-west-1"}, shares: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := makeReq("h").Owner(tc.holds.owner, tc.holds.pull).Session(tc.holds.session).Cluster(tc.holds.cluster).Granted(t0.Add(-5*time.Minute), 41)
			r := makeReq("r").Owner(tc.asks.owner, tc.asks.pull).Session(tc.asks.session).Cluster(tc.asks.cluster).QueuedAt(t0.Add(-time.Minute))
			in := decideCase{lock: aliceLock(h.Obj()), reqs: reqs(h, r)}.input()
			d := Decide(in)
			want := locksv1.HolderID{Owner: tc.holds.owner, Pull: tc.holds.pull, Session: tc.holds.session, Cluster: tc.holds.cluster}
			if !d.HasHolder || d.Holder != want {
				t.Fatalf("holder %#v (held %v), want %#v", d.Holder, d.HasHolder, want)
			}
			granted := false
			for _, u := range d.Grant {
				granted = granted || u.Request.Name == "r"
			}
			waits := len(d.Queue) == 1 && d.Queue[0].Name == "r"
			if granted != tc.shares || waits == tc.shares {
				t.Fatalf("r granted %v, waiting %v; want it to share the key: %v\n%s", granted, waits, tc.shares, describeDecision(d))
			}
			if tc.shares {
				return
			}
			// The ProjectLock's holder is the structural identity, session included.
			if d.Lock == nil || d.Lock.Holder == nil || d.Lock.Holder.ID() != want || len(d.Lock.Holder.Requests) != 1 {
				t.Fatalf("ProjectLock status %+v, want only h of %#v holding", d.Lock, want)
			}
		})
	}
}
