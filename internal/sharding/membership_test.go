package sharding

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestLiveMembers(t *testing.T) {
	now := time.Date(2026, 11, 23, 21, 0, 0, 0, time.UTC)
	lapse := 3 * time.Second
	cases := map[string]struct {
		seen map[string]observation
		want []string
	}{
		"nobody": {want: nil},
		"renewed within the lapse": {
			seen: map[string]observation{
				"turnstile-member-b": {identity: "b", changed: now.Add(-time.Second)},
				"turnstile-member-a": {identity: "a", changed: now.Add(-2900 * time.Millisecond)},
			},
			want: []string{"a", "b"},
		},
		"unchanged for the lapse": {
			seen: map[string]observation{
				"turnstile-member-a": {identity: "a", changed: now.Add(-lapse)},
				"turnstile-member-b": {identity: "b", changed: now},
			},
			want: []string{"b"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, liveMembers(tc.seen, now, lapse)); diff != "" {
				t.Errorf("liveMembers (-want +got):\n%s", diff)
			}
		})
	}
}

func TestObserve(t *testing.T) {
	now := time.Date(2026, 11, 23, 21, 0, 0, 0, time.UTC)
	lease := func(renew time.Time) *coordinationv1.Lease {
		id := "mgr-1"
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: LeaseName(id), ResourceVersion: "7"}}
		l.Spec.HolderIdentity = &id
		rt := metav1.NewMicroTime(renew)
		l.Spec.RenewTime = &rt
		return l
	}
	cases := map[string]struct {
		lease      *coordinationv1.Lease
		seenBefore bool
		want       observation
	}{
		// A replica that starts must not count a long-dead member as live for a whole lapse.
		"first sight counts from its past renewal": {
			lease: lease(now.Add(-time.Hour)),
			want:  observation{identity: "mgr-1", resourceVersion: "7", changed: now.Add(-time.Hour)},
		},
		// Clocks differ: a renewal "in the future" counts from now.
		"first sight of a renewal ahead of our clock": {
			lease: lease(now.Add(time.Hour)),
			want:  observation{identity: "mgr-1", resourceVersion: "7", changed: now},
		},
		// Once seen, a change counts from when we saw it, whatever its clock says.
		"a change counts from when it was seen": {
			lease: lease(now.Add(-time.Hour)), seenBefore: true,
			want: observation{identity: "mgr-1", resourceVersion: "7", changed: now},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := observe(tc.lease, tc.seenBefore, now)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(observation{})); diff != "" {
				t.Errorf("observe (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDelay(t *testing.T) {
	live := []string{"a", "b"}
	var ownedByA, ownedByB string
	for _, k := range keys(50) {
		switch Owner(live, k) {
		case "a":
			ownedByA = k
		case "b":
			ownedByB = k
		}
	}
	cases := map[string]struct {
		live []string
		key  string
		want time.Duration
	}{
		"own key":                      {live: live, key: ownedByA, want: 0},
		"another member's key":         {live: live, key: ownedByB, want: 250 * time.Millisecond},
		"no members known: act on all": {live: nil, key: ownedByB, want: 0},
		"not a member yet: after all":  {live: []string{"b", "c"}, key: ownedByA, want: 500 * time.Millisecond},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			m := New(Config{Identity: "a", Namespace: "ns", Renew: time.Second, Lapse: 3 * time.Second, Backup: 250 * time.Millisecond}, nil, nil, nil)
			if tc.live != nil {
				m.live.Store(&tc.live)
			}
			if got := m.Delay(tc.key); got != tc.want {
				t.Errorf("Delay(%q) = %s, want %s", tc.key, got, tc.want)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Identity: "a", Namespace: "ns", Renew: time.Second, Lapse: 3 * time.Second, Backup: 300 * time.Millisecond}
	cases := map[string]struct {
		mutate  func(*Config)
		wantErr bool
	}{
		"valid":                  {mutate: func(*Config) {}},
		"no namespace":           {mutate: func(c *Config) { c.Namespace = "" }, wantErr: true},
		"lapse not above renew":  {mutate: func(c *Config) { c.Lapse = c.Renew }, wantErr: true},
		"negative backup delay":  {mutate: func(c *Config) { c.Backup = -1 }, wantErr: true},
		"zero backup is allowed": {mutate: func(c *Config) { c.Backup = 0 }},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := ok
			tc.mutate(&c)
			if err := c.Validate(); (err != nil) != tc.wantErr {
				t.Errorf("Validate() = %v, want error %t", err, tc.wantErr)
			}
		})
	}
}

// TestObserveOnlyTheManagersNamespace: a Lease labelled locks.turnstile.dev/role=member that a
// team member made in her own namespace (a requester may create Leases there) does not join the
// managers: only the manager's namespace, where teams have no rights, holds members.
func TestObserveOnlyTheManagersNamespace(t *testing.T) {
	now := time.Date(2026, 11, 23, 21, 0, 0, 0, time.UTC)
	m := New(Config{Identity: "mgr-1", Namespace: "turnstile-system", Renew: time.Second, Lapse: 5 * time.Second, Backup: time.Second},
		nil, nil, clocktesting.NewFakeClock(now))
	member := func(ns, id string) *coordinationv1.Lease {
		rt := metav1.NewMicroTime(now)
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: LeaseName(id), ResourceVersion: "1", Labels: map[string]string{LabelRole: RoleMember}},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &id, RenewTime: &rt},
		}
	}
	m.observe(member("team-a", "intruder"), false)
	if live := m.Live(); len(live) != 0 {
		t.Errorf("a member Lease in a team's namespace joined: live %v", live)
	}
	m.observe(member("turnstile-system", "mgr-2"), false)
	if diff := cmp.Diff([]string{"mgr-2"}, m.Live()); diff != "" {
		t.Errorf("live members (-want +got):\n%s", diff)
	}
}
