package validation

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// TestLockRequestCreateRejected sends invalid LockRequests; each must be rejected with an error
// that names the field and the problem.
func TestLockRequestCreateRejected(t *testing.T) {
	ns := newNamespace(t)

	manyLocks := func(n int) []any {
		out := make([]any, n)
		for i := range n {
			out[i] = target(map[string]any{"path": fmt.Sprintf("dir%02d", i)})
		}
		return out
	}

	type rejectCase struct {
		spec    map[string]any // merged over a valid spec; nil values remove fields
		wantErr []string
	}
	cases := map[string]rejectCase{
		"spec missing": {
			spec:    nil,
			wantErr: []string{"spec: Required value"},
		},
		// locks (the fields of one target are covered by targetRejections, added below)
		"zero locks": {
			spec:    lockRequestSpec(map[string]any{"locks": []any{}}),
			wantErr: []string{"spec.locks", "should have at least 1 items"},
		},
		"locks missing": {
			spec:    lockRequestSpec(map[string]any{"locks": nil}),
			wantErr: []string{"spec.locks", "Required value"},
		},
		"33 locks": {
			spec:    lockRequestSpec(map[string]any{"locks": manyLocks(33)}),
			wantErr: []string{"spec.locks", "must have at most 32 items"},
		},
		"duplicate targets": {
			spec:    lockRequestSpec(map[string]any{"locks": locks(target(nil), target(map[string]any{"path": "dns"}), target(nil))}),
			wantErr: []string{"spec.locks", msgDuplicate},
		},
		"duplicate targets differing only by the defaulted workspace": {
			spec:    lockRequestSpec(map[string]any{"locks": locks(target(nil), target(map[string]any{"workspace": "default"}))}),
			wantErr: []string{"spec.locks", msgDuplicate},
		},
		"duplicate targets differing only by the defaulted path": {
			spec: lockRequestSpec(map[string]any{"locks": locks(
				target(map[string]any{"path": nil}),
				target(map[string]any{"path": "."}),
			)}),
			wantErr: []string{"spec.locks", msgDuplicate},
		},
		"duplicate targets with the same project": {
			spec: lockRequestSpec(map[string]any{"locks": locks(
				target(map[string]any{"project": "edge"}),
				target(map[string]any{"project": "edge", "workspace": "default"}),
			)}),
			wantErr: []string{"spec.locks", msgDuplicate},
		},
		// mode: the enum names the valid values (issue #31)
		"mode Sharde (a typo)": {
			spec:    lockRequestSpec(map[string]any{"locks": locks(target(map[string]any{"mode": "Sharde"}))}),
			wantErr: []string{"spec.locks[0].mode", `Unsupported value: "Sharde"`, `supported values: "Exclusive", "Shared"`},
		},
		"mode lowercase": {
			spec:    lockRequestSpec(map[string]any{"locks": locks(target(map[string]any{"mode": "shared"}))}),
			wantErr: []string{"spec.locks[0].mode", `Unsupported value: "shared"`, `supported values: "Exclusive", "Shared"`},
		},
		"duplicate targets differing only by mode": {
			spec: lockRequestSpec(map[string]any{"locks": locks(
				target(map[string]any{"mode": "Shared"}),
				target(map[string]any{"mode": "Exclusive"}),
			)}),
			wantErr: []string{"spec.locks", msgDuplicate},
		},
		// maxHolders: a counting lock is a Shared one, of 1 to 100 holders (issue #45)
		"maxHolders without mode": {
			spec:    lockRequestSpec(map[string]any{"locks": locks(target(map[string]any{"maxHolders": 3}))}),
			wantErr: []string{"spec.locks[0]", "maxHolders makes a Shared lock a counting lock: set mode: Shared with it, or leave maxHolders out"},
		},
		"maxHolders on an Exclusive target": {
			spec:    lockRequestSpec(map[string]any{"locks": locks(target(map[string]any{"mode": "Exclusive", "maxHolders": 3}))}),
			wantErr: []string{"spec.locks[0]", "maxHolders makes a Shared lock a counting lock: set mode: Shared with it, or leave maxHolders out"},
		},
		"maxHolders 0": {
			spec:    lockRequestSpec(map[string]any{"locks": locks(target(map[string]any{"mode": "Shared", "maxHolders": 0}))}),
			wantErr: []string{"spec.locks[0].maxHolders", "should be greater than or equal to 1"},
		},
		"maxHolders 101": {
			spec:    lockRequestSpec(map[string]any{"locks": locks(target(map[string]any{"mode": "Shared", "maxHolders": 101}))}),
			wantErr: []string{"spec.locks[0].maxHolders", "should be less than or equal to 100"},
		},
		"maxHolders a string": {
			spec:    lockRequestSpec(map[string]any{"locks": locks(target(map[string]any{"mode": "Shared", "maxHolders": "3"}))}),
			wantErr: []string{"spec.locks[0].maxHolders", "must be of type integer"},
		},
		// priority
		"priority Urgent": {
			spec:    lockRequestSpec(map[string]any{"priority": "Urgent"}),
			wantErr: []string{"spec.priority", `Unsupported value: "Urgent"`},
		},
		"priority lowercase": {
			spec:    lockRequestSpec(map[string]any{"priority": "high"}),
			wantErr: []string{"spec.priority", `Unsupported value: "high"`},
		},
		// ttl
		"ttl negative": {
			spec:    lockRequestSpec(map[string]any{"ttl": "-5m"}),
			wantErr: []string{"spec.ttl", msgTTLFormat},
		},
		"ttl not a duration": {
			spec:    lockRequestSpec(map[string]any{"ttl": "abc"}),
			wantErr: []string{"spec.ttl", msgTTLFormat},
		},
		"ttl without unit": {
			spec:    lockRequestSpec(map[string]any{"ttl": "30"}),
			wantErr: []string{"spec.ttl", msgTTLFormat},
		},
		"ttl zero": {
			spec:    lockRequestSpec(map[string]any{"ttl": "0s"}),
			wantErr: []string{"spec.ttl", msgTTLRange},
		},
		"ttl below 1s": {
			spec:    lockRequestSpec(map[string]any{"ttl": "500ms"}),
			wantErr: []string{"spec.ttl", msgTTLRange},
		},
		"ttl 25h": {
			spec:    lockRequestSpec(map[string]any{"ttl": "25h"}),
			wantErr: []string{"spec.ttl", msgTTLRange},
		},
		"ttl 24h1s": {
			spec:    lockRequestSpec(map[string]any{"ttl": "24h0m1s"}),
			wantErr: []string{"spec.ttl", msgTTLRange},
		},
		"ttl overflowing a duration": {
			// Well-formed but out of a duration's range: duration() fails, and the rule fails closed.
			spec:    lockRequestSpec(map[string]any{"ttl": "3000000h"}),
			wantErr: []string{"spec.ttl", msgTTLRange},
		},
		"ttl of 33 chars, though a valid duration": {
			// Bounded before CEL parses it: 31 zeros and 1s.
			spec:    lockRequestSpec(map[string]any{"ttl": strings.Repeat("0", 31) + "1s"}),
			wantErr: []string{"spec.ttl", "Too long", "32"},
		},
		"ttl of a megabyte": {
			spec:    lockRequestSpec(map[string]any{"ttl": strings.Repeat("1h", 1<<19)}),
			wantErr: []string{"spec.ttl", "Too long", "32"},
		},
		// waitTimeout
		"waitTimeout of 33 chars, though a valid duration": {
			spec:    lockRequestSpec(map[string]any{"waitTimeout": strings.Repeat("0", 31) + "5m"}),
			wantErr: []string{"spec.waitTimeout", "Too long", "32"},
		},
		"waitTimeout of a megabyte": {
			spec:    lockRequestSpec(map[string]any{"waitTimeout": strings.Repeat("1s", 1<<19)}),
			wantErr: []string{"spec.waitTimeout", "Too long", "32"},
		},
		"waitTimeout negative": {
			spec:    lockRequestSpec(map[string]any{"waitTimeout": "-1s"}),
			wantErr: []string{"spec.waitTimeout", msgWaitFormat},
		},
		"waitTimeout forever": {
			spec:    lockRequestSpec(map[string]any{"waitTimeout": "forever"}),
			wantErr: []string{"spec.waitTimeout", msgWaitFormat},
		},
		"waitTimeout 169h": {
			spec:    lockRequestSpec(map[string]any{"waitTimeout": "169h"}),
			wantErr: []string{"spec.waitTimeout", msgWaitRange},
		},
		"waitTimeout overflowing a duration": {
			spec:    lockRequestSpec(map[string]any{"waitTimeout": "99999999999999999999h"}),
			wantErr: []string{"spec.waitTimeout", msgWaitRange},
		},
		// holder
		"holder missing": {
			spec:    lockRequestSpec(map[string]any{"holder": nil}),
			wantErr: []string{"spec.holder", "Required value"},
		},
		"owner missing": {
			spec:    lockRequestSpec(map[string]any{"holder": holder(map[string]any{"owner": nil})}),
			wantErr: []string{"spec.holder.owner", "Required value"},
		},
		"owner empty": {
			spec:    lockRequestSpec(map[string]any{"holder": holder(map[string]any{"owner": ""})}),
			wantErr: []string{"spec.holder.owner", "should be at least 1 chars long"},
		},
		"owner blank": {
			spec:    lockRequestSpec(map[string]any{"holder": holder(map[string]any{"owner": "   "})}),
			wantErr: []string{"spec.holder.owner", msgOwnerBlank},
		},
		"owner with a leading space": {
			spec:    lockRequestSpec(map[string]any{"holder": holder(map[string]any{"owner": " alice"})}),
			wantErr: []string{"spec.holder.owner", msgOwnerSpace},
		},
		"owner with a trailing newline": {
			spec:    lockRequestSpec(map[string]any{"holder": holder(map[string]any{"owner": "alice\n"})}),
			wantErr: []string{"spec.holder.owner", msgOwnerSpace, msgOwnerControl},
		},
		"owner with a tab inside": {
			spec:    lockRequestSpec(map[string]any{"holder": holder(map[string]any{"owner": "ali\tce"})}),
			wantErr: []string{"spec.holder.owner", msgOwnerControl},
		},
		"owner with a terminal escape": {
			spec:    lockRequestSpec(map[string]any{"holder": holder(map[string]any{"owner": "alice\x1b[2J"})}),
			wantErr: []string{"spec.holder.owner", msgOwnerControl},
		},
		"owner with DEL": {
			spec:    lockRequestSpec(map[string]any{"holder": holder(map[string]any{"owner": "ali\x7fce"})}),
			wantErr: []string{"spec.holder.owner", msgOwnerControl},
		},
		"owner with a C1 control (NEL)": {
			spec:    lockRequestSpec(map[string]any{"holder": holder(map[string]any{"owner": "ali\u0085ce"})}),
			wantErr: []string{"spec.holder.owner", msgOwnerControl},
		},
		"owner of 254 chars": {
			spec:    lockRequestSpec(map[string]any{"holder": holder(map[string]any{"owner": strings.Repeat("o", 254)})}),
			wantErr: []string{"spec.holder.owner", "Too long", "253"},
		},
		"pull negative": {
			spec:    lockRequestSpec(map[string]any{"holder": holder(map[string]any{"pull": int64(-1)})}),
			wantErr: []string{"spec.holder.pull", "should be greater than or equal to 0"},
		},
		"url over 2048 chars": {
			spec:    lockRequestSpec(map[string]any{"holder": holder(map[string]any{"url": "https://example.com/" + strings.Repeat("u", 2048)})}),
			wantErr: []string{"spec.holder.url", "Too long", "2048"},
		},
		"url without a scheme": {
			spec:    lockRequestSpec(map[string]any{"holder": holder(map[string]any{"url": "github.com/acme/infra/pull/100"})}),
			wantErr: []string{"spec.holder.url", msgURL},
		},
		"url scheme-relative": {
			spec:    lockRequestSpec(map[string]any{"holder": holder(map[string]any{"url": "//github.com/acme/infra/pull/100"})}),
			wantErr: []string{"spec.holder.url", msgURL},
		},
		"url with a path only": {
			spec:    lockRequestSpec(map[string]any{"holder": holder(map[string]any{"url": "/acme/infra/pull/100"})}),
			wantErr: []string{"spec.holder.url", msgURL},
		},
		"url javascript:": {
			spec:    lockRequestSpec(map[string]any{"holder": holder(map[string]any{"url": "javascript:alert(1)"})}),
			wantErr: []string{"spec.holder.url", msgURL},
		},
		"url ftp": {
			spec:    lockRequestSpec(map[string]any{"holder": holder(map[string]any{"url": "ftp://example.com/run/1"})}),
			wantErr: []string{"spec.holder.url", msgURL},
		},
		"url mailto": {
			spec:    lockRequestSpec(map[string]any{"holder": holder(map[string]any{"url": "mailto:alice@example.com"})}),
			wantErr: []string{"spec.holder.url", msgURL},
		},
		"url without a host": {
			spec:    lockRequestSpec(map[string]any{"holder": holder(map[string]any{"url": "https:///pull/100"})}),
			wantErr: []string{"spec.holder.url", msgURL},
		},
		"url https: without //": {
			spec:    lockRequestSpec(map[string]any{"holder": holder(map[string]any{"url": "https:example.com"})}),
			wantErr: []string{"spec.holder.url", msgURL},
		},
		"url with a space": {
			spec:    lockRequestSpec(map[string]any{"holder": holder(map[string]any{"url": "https://example.com/pull 100"})}),
			wantErr: []string{"spec.holder.url", msgURL},
		},
		"url with a newline": {
			spec:    lockRequestSpec(map[string]any{"holder": holder(map[string]any{"url": "https://example.com/pull/100\n"})}),
			wantErr: []string{"spec.holder.url", msgURL},
		},
		"url empty": {
			spec:    lockRequestSpec(map[string]any{"holder": holder(map[string]any{"url": ""})}),
			wantErr: []string{"spec.holder.url", msgURL},
		},
		"lease not a name": {
			spec:    lockRequestSpec(map[string]any{"holder": holder(map[string]any{"lease": "Not_A_Name"})}),
			wantErr: []string{"spec.holder.lease", msgLease},
		},
		"lease of 254 chars": {
			spec:    lockRequestSpec(map[string]any{"holder": holder(map[string]any{"lease": strings.Repeat("l", 254)})}),
			wantErr: []string{"spec.holder.lease", "Too long", "253"},
		},
		"lease ending with -": {
			spec:    lockRequestSpec(map[string]any{"holder": holder(map[string]any{"lease": "runner-"})}),
			wantErr: []string{"spec.holder.lease", msgLease},
		},
		// cluster (docs/fleet.md): a DNS-1123 label
		"cluster with capitals": {
			spec:    lockRequestSpec(map[string]any{"holder": holder(map[string]any{"cluster": "EU-west-1"})}),
			wantErr: []string{"spec.holder.cluster", msgCluster},
		},
		"cluster with a dot": {
			spec:    lockRequestSpec(map[string]any{"holder": holder(map[string]any{"cluster": "eu.west-1"})}),
			wantErr: []string{"spec.holder.cluster", msgCluster},
		},
		"cluster ending with -": {
			spec:    lockRequestSpec(map[string]any{"holder": holder(map[string]any{"cluster": "eu-west-"})}),
			wantErr: []string{"spec.holder.cluster", msgCluster},
		},
		"cluster empty": {
			spec:    lockRequestSpec(map[string]any{"holder": holder(map[string]any{"cluster": ""})}),
			wantErr: []string{"spec.holder.cluster", msgCluster},
		},
		"cluster of 64 chars": {
			spec:    lockRequestSpec(map[string]any{"holder": holder(map[string]any{"cluster": strings.Repeat("c", 64)})}),
			wantErr: []string{"spec.holder.cluster", "Too long", "63"},
		},
		// command
		"command Apply!": {
			spec:    lockRequestSpec(map[string]any{"command": "Apply!"}),
			wantErr: []string{"spec.command", msgCommand},
		},
		"command APPLY": {
			spec:    lockRequestSpec(map[string]any{"command": "APPLY"}),
			wantErr: []string{"spec.command", msgCommand},
		},
		"command empty": {
			spec:    lockRequestSpec(map[string]any{"command": ""}),
			wantErr: []string{"spec.command", msgCommand},
		},
		"command of 64 chars": {
			spec:    lockRequestSpec(map[string]any{"command": strings.Repeat("c", 64)}),
			wantErr: []string{"spec.command", "Too long", "63"},
		},
		"command with '_' (no CommandLock can be named so)": {
			spec:    lockRequestSpec(map[string]any{"command": "my_cmd"}),
			wantErr: []string{"spec.command", msgCommand},
		},
		"command ending with -": {
			spec:    lockRequestSpec(map[string]any{"command": "apply-"}),
			wantErr: []string{"spec.command", msgCommand},
		},
		"command starting with a digit": {
			spec:    lockRequestSpec(map[string]any{"command": "1apply"}),
			wantErr: []string{"spec.command", msgCommand},
		},
		"command with a dot": {
			spec:    lockRequestSpec(map[string]any{"command": "apply.now"}),
			wantErr: []string{"spec.command", msgCommand},
		},
		"command all (reserved for the freeze of every command)": {
			spec:    lockRequestSpec(map[string]any{"command": "all"}),
			wantErr: []string{"spec.command", msgCommandAll},
		},
	}
	for name, tc := range targetRejections() {
		cases["locks[0]: "+name] = rejectCase{
			spec:    lockRequestSpec(map[string]any{"locks": locks(target(tc.over))}),
			wantErr: tc.errorsAt("spec.locks[0]"),
		}
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			u := obj("LockRequest", ns, map[string]any{"generateName": "bad-"}, tc.spec)
			err := k.Create(ctx(t), u)
			checkAdmission(t, err, tc.wantErr)
		})
	}
}

// TestLockRequestCreateAccepted sends valid LockRequests as a user writes them and checks the
// stored spec, defaults included.
func TestLockRequestCreateAccepted(t *testing.T) {
	ns := newNamespace(t)

	// defaulted is what the API server stores for target(nil): path and workspace defaulted.
	defaulted := func(repo, path, workspace, project string) locksv1.LockTarget {
		return locksv1.LockTarget{Repo: repo, Path: path, Workspace: workspace, Project: project}
	}
	alice := locksv1.Holder{Owner: "alice", Pull: 100}
	dur := func(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

	manyLocks := func(n int) ([]any, []locksv1.LockTarget) {
		in, out := make([]any, n), make([]locksv1.LockTarget, n)
		for i := range n {
			p := fmt.Sprintf("dir%02d", i)
			in[i] = target(map[string]any{"path": p})
			out[i] = defaulted("acme/infra", p, "default", "")
		}
		return in, out
	}
	in32, want32 := manyLocks(32)

	cases := map[string]struct {
		spec     map[string]any
		wantSpec locksv1.LockRequestSpec
	}{
		"minimal: path, workspace and priority defaulted": {
			spec: map[string]any{
				"locks":  locks(map[string]any{"repo": "acme/infra"}),
				"holder": map[string]any{"owner": "alice"},
			},
			wantSpec: locksv1.LockRequestSpec{
				Locks:    []locksv1.LockTarget{defaulted("acme/infra", ".", "default", "")},
				Holder:   locksv1.Holder{Owner: "alice"},
				Priority: locksv1.PriorityNormal,
			},
		},
		"a shared and an exclusive target": {
			spec: lockRequestSpec(map[string]any{"locks": locks(
				target(map[string]any{"mode": "Shared"}),
				target(map[string]any{"path": "dns", "mode": "Exclusive"}),
			)}),
			wantSpec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{
				{Repo: "acme/infra", Path: "modules/vpc", Workspace: "default", Mode: locksv1.ModeShared},
				{Repo: "acme/infra", Path: "dns", Workspace: "default", Mode: locksv1.ModeExclusive},
			}, Holder: alice, Priority: locksv1.PriorityNormal},
		},
		"a counting lock: Shared, maxHolders 3": {
			spec: lockRequestSpec(map[string]any{"locks": locks(target(map[string]any{"mode": "Shared", "maxHolders": 3}))}),
			wantSpec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{
				{Repo: "acme/infra", Path: "modules/vpc", Workspace: "default", Mode: locksv1.ModeShared, MaxHolders: 3},
			}, Holder: alice, Priority: locksv1.PriorityNormal},
		},
		"a counting lock at the bounds: 1 and 100": {
			spec: lockRequestSpec(map[string]any{"locks": locks(
				target(map[string]any{"mode": "Shared", "maxHolders": 1}),
				target(map[string]any{"path": "dns", "mode": "Shared", "maxHolders": 100}),
			)}),
			wantSpec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{
				{Repo: "acme/infra", Path: "modules/vpc", Workspace: "default", Mode: locksv1.ModeShared, MaxHolders: 1},
				{Repo: "acme/infra", Path: "dns", Workspace: "default", Mode: locksv1.ModeShared, MaxHolders: 100},
			}, Holder: alice, Priority: locksv1.PriorityNormal},
		},
		"ttl 90s": {
			spec:     lockRequestSpec(map[string]any{"ttl": "90s"}),
			wantSpec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{defaulted("acme/infra", "modules/vpc", "default", "")}, Holder: alice, Priority: locksv1.PriorityNormal, TTL: dur(90 * time.Second)},
		},
		"ttl 1h30m": {
			spec:     lockRequestSpec(map[string]any{"ttl": "1h30m"}),
			wantSpec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{defaulted("acme/infra", "modules/vpc", "default", "")}, Holder: alice, Priority: locksv1.PriorityNormal, TTL: dur(90 * time.Minute)},
		},
		"ttl at the bounds 1s": {
			spec:     lockRequestSpec(map[string]any{"ttl": "1s"}),
			wantSpec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{defaulted("acme/infra", "modules/vpc", "default", "")}, Holder: alice, Priority: locksv1.PriorityNormal, TTL: dur(time.Second)},
		},
		"ttl at the bounds 24h": {
			spec:     lockRequestSpec(map[string]any{"ttl": "24h"}),
			wantSpec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{defaulted("acme/infra", "modules/vpc", "default", "")}, Holder: alice, Priority: locksv1.PriorityNormal, TTL: dur(24 * time.Hour)},
		},
		"ttl fractional 1.5h": {
			spec:     lockRequestSpec(map[string]any{"ttl": "1.5h"}),
			wantSpec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{defaulted("acme/infra", "modules/vpc", "default", "")}, Holder: alice, Priority: locksv1.PriorityNormal, TTL: dur(90 * time.Minute)},
		},
		"ttl of 32 chars": {
			spec:     lockRequestSpec(map[string]any{"ttl": strings.Repeat("0", 30) + "1m"}),
			wantSpec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{defaulted("acme/infra", "modules/vpc", "default", "")}, Holder: alice, Priority: locksv1.PriorityNormal, TTL: dur(time.Minute)},
		},
		"waitTimeout of 32 chars": {
			spec:     lockRequestSpec(map[string]any{"waitTimeout": strings.Repeat("0", 30) + "5m"}),
			wantSpec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{defaulted("acme/infra", "modules/vpc", "default", "")}, Holder: alice, Priority: locksv1.PriorityNormal, WaitTimeout: dur(5 * time.Minute)},
		},
		"waitTimeout 0s tries once": {
			spec:     lockRequestSpec(map[string]any{"waitTimeout": "0s"}),
			wantSpec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{defaulted("acme/infra", "modules/vpc", "default", "")}, Holder: alice, Priority: locksv1.PriorityNormal, WaitTimeout: dur(0)},
		},
		"waitTimeout 168h": {
			spec:     lockRequestSpec(map[string]any{"waitTimeout": "168h"}),
			wantSpec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{defaulted("acme/infra", "modules/vpc", "default", "")}, Holder: alice, Priority: locksv1.PriorityNormal, WaitTimeout: dur(168 * time.Hour)},
		},
		"nested group repo": {
			spec:     lockRequestSpec(map[string]any{"locks": locks(target(map[string]any{"repo": "group/sub/name"}))}),
			wantSpec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{defaulted("group/sub/name", "modules/vpc", "default", "")}, Holder: alice, Priority: locksv1.PriorityNormal},
		},
		"owner with inner spaces, an e-mail and non-ASCII letters": {
			spec:     lockRequestSpec(map[string]any{"holder": map[string]any{"owner": "Zoë Müller <zoe@acme.example>"}}),
			wantSpec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{defaulted("acme/infra", "modules/vpc", "default", "")}, Holder: locksv1.Holder{Owner: "Zoë Müller <zoe@acme.example>"}, Priority: locksv1.PriorityNormal},
		},
		"owner of 253 chars": {
			spec:     lockRequestSpec(map[string]any{"holder": map[string]any{"owner": strings.Repeat("o", 253)}}),
			wantSpec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{defaulted("acme/infra", "modules/vpc", "default", "")}, Holder: locksv1.Holder{Owner: strings.Repeat("o", 253)}, Priority: locksv1.PriorityNormal},
		},
		"url http with a port, query and fragment": {
			spec:     lockRequestSpec(map[string]any{"holder": holder(map[string]any{"url": "http://ci.acme.example:8080/job/deploy/42?tab=log#step-3"})}),
			wantSpec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{defaulted("acme/infra", "modules/vpc", "default", "")}, Holder: locksv1.Holder{Owner: "alice", Pull: 100, URL: "http://ci.acme.example:8080/job/deploy/42?tab=log#step-3"}, Priority: locksv1.PriorityNormal},
		},
		"url HTTPS in capitals": {
			spec:     lockRequestSpec(map[string]any{"holder": holder(map[string]any{"url": "HTTPS://GitHub.com/acme/infra/pull/100"})}),
			wantSpec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{defaulted("acme/infra", "modules/vpc", "default", "")}, Holder: locksv1.Holder{Owner: "alice", Pull: 100, URL: "HTTPS://GitHub.com/acme/infra/pull/100"}, Priority: locksv1.PriorityNormal},
		},
		"url with an IPv6 host": {
			spec:     lockRequestSpec(map[string]any{"holder": holder(map[string]any{"url": "https://[2001:db8::1]/runs/7"})}),
			wantSpec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{defaulted("acme/infra", "modules/vpc", "default", "")}, Holder: locksv1.Holder{Owner: "alice", Pull: 100, URL: "https://[2001:db8::1]/runs/7"}, Priority: locksv1.PriorityNormal},
		},
		"repo and path segments that only start with a dot": {
			spec:     lockRequestSpec(map[string]any{"locks": locks(target(map[string]any{"repo": "acme/.github", "path": "..config/.x"}))}),
			wantSpec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{defaulted("acme/.github", "..config/.x", "default", "")}, Holder: alice, Priority: locksv1.PriorityNormal},
		},
		"repo with dotted names": {
			spec:     lockRequestSpec(map[string]any{"locks": locks(target(map[string]any{"repo": "acme.io/infra.live..v2"}))}),
			wantSpec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{defaulted("acme.io/infra.live..v2", "modules/vpc", "default", "")}, Holder: alice, Priority: locksv1.PriorityNormal},
		},
		"project set": {
			spec:     lockRequestSpec(map[string]any{"locks": locks(target(map[string]any{"project": "edge"}))}),
			wantSpec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{defaulted("acme/infra", "modules/vpc", "default", "edge")}, Holder: alice, Priority: locksv1.PriorityNormal},
		},
		"two projects sharing a directory and workspace": {
			spec: lockRequestSpec(map[string]any{"locks": locks(
				target(map[string]any{"project": "edge"}),
				target(map[string]any{"project": "core"}),
				target(nil),
			)}),
			wantSpec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{
				defaulted("acme/infra", "modules/vpc", "default", "edge"),
				defaulted("acme/infra", "modules/vpc", "default", "core"),
				defaulted("acme/infra", "modules/vpc", "default", ""),
			}, Holder: alice, Priority: locksv1.PriorityNormal},
		},
		"one directory in two workspaces": {
			spec: lockRequestSpec(map[string]any{"locks": locks(
				target(nil),
				target(map[string]any{"workspace": "staging"}),
			)}),
			wantSpec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{
				defaulted("acme/infra", "modules/vpc", "default", ""),
				defaulted("acme/infra", "modules/vpc", "staging", ""),
			}, Holder: alice, Priority: locksv1.PriorityNormal},
		},
		"32 locks": {
			spec:     lockRequestSpec(map[string]any{"locks": in32}),
			wantSpec: locksv1.LockRequestSpec{Locks: want32, Holder: alice, Priority: locksv1.PriorityNormal},
		},
		"path with dotted and special directory names": {
			spec:     lockRequestSpec(map[string]any{"locks": locks(target(map[string]any{"path": ".github/env=prod/v1.2_a@b+c,d~e-f"}))}),
			wantSpec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{defaulted("acme/infra", ".github/env=prod/v1.2_a@b+c,d~e-f", "default", "")}, Holder: alice, Priority: locksv1.PriorityNormal},
		},
		"workspace of 63 chars": {
			spec:     lockRequestSpec(map[string]any{"locks": locks(target(map[string]any{"workspace": strings.Repeat("w", 63)}))}),
			wantSpec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{defaulted("acme/infra", "modules/vpc", strings.Repeat("w", 63), "")}, Holder: alice, Priority: locksv1.PriorityNormal},
		},
		"every field set": {
			spec: map[string]any{
				"locks": locks(map[string]any{"repo": "acme/infra", "path": "modules/vpc", "workspace": "prod", "project": "vpc_core-1.0"}),
				"holder": map[string]any{
					"owner": "ci/deploy", "pull": int64(7),
					"url":   "https://example.com/" + strings.Repeat("u", 2048-len("https://example.com/")),
					"lease": "runner-1.workdir", "session": "job/apply", "cluster": "eu-west-1",
				},
				"command":     "apply",
				"priority":    "Critical",
				"ttl":         "2h",
				"waitTimeout": "10m",
				"release":     false,
			},
			wantSpec: locksv1.LockRequestSpec{
				Locks: []locksv1.LockTarget{defaulted("acme/infra", "modules/vpc", "prod", "vpc_core-1.0")},
				Holder: locksv1.Holder{
					Owner: "ci/deploy", Pull: 7,
					URL:   "https://example.com/" + strings.Repeat("u", 2048-len("https://example.com/")),
					Lease: "runner-1.workdir", Session: "job/apply", Cluster: "eu-west-1",
				},
				Command:     "apply",
				Priority:    locksv1.PriorityCritical,
				TTL:         dur(2 * time.Hour),
				WaitTimeout: dur(10 * time.Minute),
			},
		},
		"command with '-' and digits": {
			spec:     lockRequestSpec(map[string]any{"command": "my-cmd2"}),
			wantSpec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{defaulted("acme/infra", "modules/vpc", "default", "")}, Holder: alice, Priority: locksv1.PriorityNormal, Command: "my-cmd2"},
		},
		"command of one letter": {
			spec:     lockRequestSpec(map[string]any{"command": "x"}),
			wantSpec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{defaulted("acme/infra", "modules/vpc", "default", "")}, Holder: alice, Priority: locksv1.PriorityNormal, Command: "x"},
		},
		"command of 63 chars": {
			spec:     lockRequestSpec(map[string]any{"command": strings.Repeat("c", 63)}),
			wantSpec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{defaulted("acme/infra", "modules/vpc", "default", "")}, Holder: alice, Priority: locksv1.PriorityNormal, Command: strings.Repeat("c", 63)},
		},
		"command starting with all": {
			spec:     lockRequestSpec(map[string]any{"command": "all-envs"}),
			wantSpec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{defaulted("acme/infra", "modules/vpc", "default", "")}, Holder: alice, Priority: locksv1.PriorityNormal, Command: "all-envs"},
		},
		"release at creation": {
			spec:     lockRequestSpec(map[string]any{"release": true, "priority": "Low"}),
			wantSpec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{defaulted("acme/infra", "modules/vpc", "default", "")}, Holder: alice, Priority: locksv1.PriorityLow, Release: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			u := obj("LockRequest", ns, map[string]any{"generateName": "good-"}, tc.spec)
			if err := k.Create(ctx(t), u); err != nil {
				t.Fatalf("rejected, want accepted: %v", err)
			}
			checkStoredSpec(t, u, tc.wantSpec)
		})
	}
}

// TestLockRequestUpdate creates a valid LockRequest, then updates it: the lock targets, the
// holder and the command are immutable and a release cannot be undone; renewal (raising ttl)
// and releasing are allowed.
func TestLockRequestUpdate(t *testing.T) {
	ns := newNamespace(t)

	cases := map[string]struct {
		initial func(*locksv1.LockRequestSpec) // applied to the valid spec before Create
		updates []func(*locksv1.LockRequestSpec)
		// wantErr is the error of the last update; every earlier update must succeed.
		wantErr  []string
		wantSpec func(*locksv1.LockRequestSpec) // applied to the created spec: what is stored at the end
	}{
		"change a lock's repo": {
			updates: []func(*locksv1.LockRequestSpec){func(s *locksv1.LockRequestSpec) { s.Locks[0].Repo = "acme/other" }},
			wantErr: []string{"spec.locks", msgLocksImmutable},
		},
		"change a lock's workspace": {
			updates: []func(*locksv1.LockRequestSpec){func(s *locksv1.LockRequestSpec) { s.Locks[0].Workspace = "prod" }},
			wantErr: []string{"spec.locks", msgLocksImmutable},
		},
		"add a lock": {
			updates: []func(*locksv1.LockRequestSpec){func(s *locksv1.LockRequestSpec) {
				s.Locks = append(s.Locks, locksv1.LockTarget{Repo: "acme/infra", Path: "dns", Workspace: "default"})
			}},
			wantErr: []string{"spec.locks", msgLocksImmutable},
		},
		"change the holder's owner": {
			updates: []func(*locksv1.LockRequestSpec){func(s *locksv1.LockRequestSpec) { s.Holder.Owner = "mallory" }},
			wantErr: []string{"spec.holder", msgHolderImmut},
		},
		"change the holder's pull": {
			updates: []func(*locksv1.LockRequestSpec){func(s *locksv1.LockRequestSpec) { s.Holder.Pull = 101 }},
			wantErr: []string{"spec.holder", msgHolderImmut},
		},
		"set the holder's lease": {
			updates: []func(*locksv1.LockRequestSpec){func(s *locksv1.LockRequestSpec) { s.Holder.Lease = "runner-1" }},
			wantErr: []string{"spec.holder", msgHolderImmut},
		},
		// The cluster is part of the identity (docs/fleet.md): immutable once set, and never
		// set, or removed, after creation.
		"set the holder's cluster": {
			updates: []func(*locksv1.LockRequestSpec){func(s *locksv1.LockRequestSpec) { s.Holder.Cluster = "eu-west-1" }},
			wantErr: []string{"spec.holder", msgHolderImmut},
		},
		"change the holder's cluster": {
			initial: func(s *locksv1.LockRequestSpec) { s.Holder.Cluster = "eu-west-1" },
			updates: []func(*locksv1.LockRequestSpec){func(s *locksv1.LockRequestSpec) { s.Holder.Cluster = "us-east-1" }},
			wantErr: []string{"spec.holder", msgHolderImmut},
		},
		"remove the holder's cluster": {
			initial: func(s *locksv1.LockRequestSpec) { s.Holder.Cluster = "eu-west-1" },
			updates: []func(*locksv1.LockRequestSpec){func(s *locksv1.LockRequestSpec) { s.Holder.Cluster = "" }},
			wantErr: []string{"spec.holder", msgHolderImmut},
		},
		"change the command": {
			updates: []func(*locksv1.LockRequestSpec){func(s *locksv1.LockRequestSpec) { s.Command = "apply" }},
			wantErr: []string{"spec", msgCommandImmut},
		},
		"remove the command": {
			updates: []func(*locksv1.LockRequestSpec){func(s *locksv1.LockRequestSpec) { s.Command = "" }},
			wantErr: []string{"spec", msgCommandImmut},
		},
		"add a command": {
			initial: func(s *locksv1.LockRequestSpec) { s.Command = "" },
			updates: []func(*locksv1.LockRequestSpec){func(s *locksv1.LockRequestSpec) { s.Command = "apply" }},
			wantErr: []string{"spec", msgCommandImmut},
		},
		"release, then undo the release": {
			updates: []func(*locksv1.LockRequestSpec){
				func(s *locksv1.LockRequestSpec) { s.Release = true },
				func(s *locksv1.LockRequestSpec) { s.Release = false },
			},
			wantErr: []string{"spec", msgReleaseUndo},
		},
		"renew: raise ttl": {
			updates:  []func(*locksv1.LockRequestSpec){func(s *locksv1.LockRequestSpec) { s.TTL = &metav1.Duration{Duration: 2 * time.Hour} }},
			wantSpec: func(s *locksv1.LockRequestSpec) { s.TTL = &metav1.Duration{Duration: 2 * time.Hour} },
		},
		"renew twice": {
			updates: []func(*locksv1.LockRequestSpec){
				func(s *locksv1.LockRequestSpec) { s.TTL = &metav1.Duration{Duration: time.Hour} },
				func(s *locksv1.LockRequestSpec) { s.TTL = &metav1.Duration{Duration: 24 * time.Hour} },
			},
			wantSpec: func(s *locksv1.LockRequestSpec) { s.TTL = &metav1.Duration{Duration: 24 * time.Hour} },
		},
		"renew beyond 24h": {
			updates: []func(*locksv1.LockRequestSpec){func(s *locksv1.LockRequestSpec) { s.TTL = &metav1.Duration{Duration: 25 * time.Hour} }},
			wantErr: []string{"spec.ttl", msgTTLRange},
		},
		"release": {
			updates:  []func(*locksv1.LockRequestSpec){func(s *locksv1.LockRequestSpec) { s.Release = true }},
			wantSpec: func(s *locksv1.LockRequestSpec) { s.Release = true },
		},
		"release, then renew": {
			updates: []func(*locksv1.LockRequestSpec){
				func(s *locksv1.LockRequestSpec) { s.Release = true },
				func(s *locksv1.LockRequestSpec) { s.TTL = &metav1.Duration{Duration: time.Hour} },
			},
			wantSpec: func(s *locksv1.LockRequestSpec) { s.Release = true; s.TTL = &metav1.Duration{Duration: time.Hour} },
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			lr := &locksv1.LockRequest{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "upd-", Namespace: ns},
				Spec: locksv1.LockRequestSpec{
					Locks:   []locksv1.LockTarget{{Repo: "acme/infra", Path: "modules/vpc"}},
					Holder:  locksv1.Holder{Owner: "alice", Pull: 100, URL: "https://github.com/acme/infra/pull/100"},
					Command: "plan",
					TTL:     &metav1.Duration{Duration: 30 * time.Minute},
				},
			}
			if tc.initial != nil {
				tc.initial(&lr.Spec)
			}
			if err := k.Create(ctx(t), lr); err != nil {
				t.Fatalf("create: %v", err)
			}
			created := lr.Spec.DeepCopy()
			for i, update := range tc.updates {
				update(&lr.Spec)
				err := k.Update(ctx(t), lr)
				if i < len(tc.updates)-1 {
					if err != nil {
						t.Fatalf("update %d: %v", i+1, err)
					}
					continue
				}
				checkAdmission(t, err, tc.wantErr)
			}
			if t.Failed() || len(tc.wantErr) > 0 {
				return
			}
			want := created.DeepCopy()
			if tc.wantSpec != nil {
				tc.wantSpec(want)
			}
			checkStoredSpec(t, lr, *want)
		})
	}
}

// TestLockRequestUpdateRevalidates checks that an update is held to the create rules too: a
// field that may change (priority, waitTimeout) must still be valid.
func TestLockRequestUpdateRevalidates(t *testing.T) {
	ns := newNamespace(t)
	cases := map[string]struct {
		released bool // create the request with release: true
		patch    string
		wantErr  []string
	}{
		"priority to Urgent":      {patch: `{"spec":{"priority":"Urgent"}}`, wantErr: []string{"spec.priority", `Unsupported value: "Urgent"`}},
		"waitTimeout to forever":  {patch: `{"spec":{"waitTimeout":"forever"}}`, wantErr: []string{"spec.waitTimeout", msgWaitFormat}},
		"ttl to 0s":               {patch: `{"spec":{"ttl":"0s"}}`, wantErr: []string{"spec.ttl", msgTTLRange}},
		"priority to High":        {patch: `{"spec":{"priority":"High"}}`},
		"waitTimeout to 5m":       {patch: `{"spec":{"waitTimeout":"5m"}}`},
		"locks by merge patch":    {patch: `{"spec":{"locks":[{"repo":"acme/infra","path":"dns"}]}}`, wantErr: []string{"spec.locks", msgLocksImmutable}},
		"holder url by patch":     {patch: `{"spec":{"holder":{"url":"https://example.com/other"}}}`, wantErr: []string{"spec.holder", msgHolderImmut}},
		"release null after true": {released: true, patch: `{"spec":{"release":null}}`, wantErr: []string{"spec", msgReleaseUndo}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			lr := &locksv1.LockRequest{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "patch-", Namespace: ns},
				Spec: locksv1.LockRequestSpec{
					Locks:   []locksv1.LockTarget{{Repo: "acme/infra", Path: "modules/vpc"}},
					Holder:  locksv1.Holder{Owner: "alice"},
					Release: tc.released,
				},
			}
			if err := k.Create(ctx(t), lr); err != nil {
				t.Fatalf("create: %v", err)
			}
			err := k.Patch(ctx(t), lr, client.RawPatch("application/merge-patch+json", []byte(tc.patch)))
			checkAdmission(t, err, tc.wantErr)
		})
	}
}
