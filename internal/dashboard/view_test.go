package dashboard

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
	w "github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

const ns = "team-a"

var (
	now     = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	vpc     = locksv1.LockTarget{Repo: "acme/infra", Path: "modules/vpc", Workspace: "default"}
	dns     = locksv1.LockTarget{Repo: "acme/infra", Path: "modules/dns", Workspace: "default"}
	vpcName = lockkey.Name(vpc)
	dnsName = lockkey.Name(dns)
)

func at(d time.Duration) *time.Time { t := now.Add(d); return &t }

func mt(d time.Duration) metav1.Time { return metav1.Time{Time: now.Add(d)} }

func micro(d time.Duration) *metav1.MicroTime { return &metav1.MicroTime{Time: now.Add(d)} }

// holding is the status of a request granted the targets' keys.
func holding(token int64, targets ...locksv1.LockTarget) locksv1.LockRequestStatus {
	st := locksv1.LockRequestStatus{Phase: locksv1.PhaseGranted, FencingToken: token}
	for _, t := range targets {
		st.Locks = append(st.Locks, locksv1.LockStatus{Key: lockkey.String(t), Name: lockkey.Name(t), Held: true})
	}
	return st
}

// waitingFor is the status of a request the controller queued at queuedAt (relative to now).
func waitingFor(position int32, queuedAt time.Duration, msg string, targets ...locksv1.LockTarget) locksv1.LockRequestStatus {
	st := locksv1.LockRequestStatus{Phase: locksv1.PhasePending, QueuePosition: position, QueuedAt: micro(queuedAt),
		Conditions: []metav1.Condition{{Type: locksv1.ConditionGranted, Status: metav1.ConditionFalse, Reason: locksv1.ReasonQueued, Message: msg}}}
	for _, t := range targets {
		st.Locks = append(st.Locks, locksv1.LockStatus{Key: lockkey.String(t), Name: lockkey.Name(t)})
	}
	return st
}

func req(name string, t locksv1.LockTarget, owner string, pull int64) *w.LockRequestWrapper {
	return w.MakeLockRequest(name, ns).Lock(t.Repo, t.Path, t.Workspace).Owner(owner, pull).UID("uid-" + name)
}

func holderOf(owner string, pull int64, url string, since, expires time.Duration, reqs ...string) locksv1.LockHolder {
	h := locksv1.LockHolder{Owner: owner, Pull: pull, URL: url, Since: mt(since)}
	if expires != 0 {
		e := mt(expires)
		h.ExpiresAt = &e
	}
	for _, r := range reqs {
		h.Requests = append(h.Requests, locksv1.HolderRequest{Name: r, UID: "uid-" + r})
	}
	return h
}

func TestBuildKeys(t *testing.T) {
	pr100 := req("pr-100", vpc, "alice", 100).Command("apply").URL("https://github.com/acme/infra/pull/100").Status(holding(41, vpc))
	cases := map[string]struct {
		locks    []*locksv1.ProjectLock
		requests []*locksv1.LockRequest
		wantKeys []Key
	}{
		"a free key: its token, no holder, nobody waiting": {
			locks:    []*locksv1.ProjectLock{w.MakeProjectLock(ns, vpc, vpcName).UID("pl-1").Token(7).Obj()},
			wantKeys: []Key{{ID: ns + "/" + vpcName, Namespace: ns, Name: vpcName, UID: "pl-1", Key: "acme/infra/modules/vpc/default", Token: "7", Queue: []Waiter{}}},
		},
		"a held key: holder, url, command from its request, since, expiry": {
			locks: []*locksv1.ProjectLock{w.MakeProjectLock(ns, vpc, vpcName).UID("pl-1").Token(41).
				Holder(holderOf("alice", 100, "https://github.com/acme/infra/pull/100", -time.Minute, 29*time.Minute, "pr-100")).Obj()},
			requests: []*locksv1.LockRequest{pr100.Obj()},
			wantKeys: []Key{{
				ID: ns + "/" + vpcName, Namespace: ns, Name: vpcName, UID: "pl-1", Key: "acme/infra/modules/vpc/default", Token: "41", Queue: []Waiter{},
				Holder: &Holder{Who: "pull #100 (alice)", Owner: "alice", Pull: 100, URL: "https://github.com/acme/infra/pull/100",
					Requests: []HolderRequest{{Name: "pr-100", UID: "uid-pr-100"}}, Command: "apply", Since: now.Add(-time.Minute), Expires: at(29 * time.Minute)},
			}},
		},
		"a key held shared: every shared holder, each with its own token": {
			locks: []*locksv1.ProjectLock{func() *locksv1.ProjectLock {
				pl := w.MakeProjectLock(ns, vpc, vpcName).UID("pl-1").Token(43).Obj()
				pl.Status.Mode, pl.Status.HolderCount = locksv1.ModeShared, 2
				pl.Status.SharedHolders = []locksv1.SharedHolder{
					{Request: locksv1.HolderRequest{Name: "plan-1", UID: "uid-plan-1"}, Owner: "alice", Pull: 100, FencingToken: 41, GrantedAt: metav1.NewTime(now.Add(-time.Minute))},
					{Request: locksv1.HolderRequest{Name: "plan-2", UID: "uid-plan-2"}, Owner: "bob", FencingToken: 43, GrantedAt: metav1.NewTime(now)},
				}
				return pl
			}()},
			requests: []*locksv1.LockRequest{req("plan-1", vpc, "alice", 100).Command("plan").Status(holding(41, vpc)).Obj()},
			wantKeys: []Key{{
				ID: ns + "/" + vpcName, Namespace: ns, Name: vpcName, UID: "pl-1", Key: "acme/infra/modules/vpc/default", Token: "43", Queue: []Waiter{},
				Mode: "Shared",
				Shared: []*Holder{
					{Who: "pull #100 (alice)", Owner: "alice", Pull: 100, Requests: []HolderRequest{{Name: "plan-1", UID: "uid-plan-1"}}, Command: "plan", Since: now.Add(-time.Minute), Token: "41"},
					{Who: "bob", Owner: "bob", Requests: []HolderRequest{{Name: "plan-2", UID: "uid-plan-2"}}, Since: now, Token: "43"},
				},
			}},
		},
		"a holder releasing, and one being deleted, say so": {
			locks: []*locksv1.ProjectLock{
				w.MakeProjectLock(ns, vpc, vpcName).UID("pl-1").Token(41).Holder(holderOf("alice", 100, "", 0, 0, "pr-100")).Obj(),
				w.MakeProjectLock(ns, dns, dnsName).UID("pl-2").Token(9).Holder(holderOf("bob", 0, "", 0, 0, "bob-1")).Obj(),
			},
			requests: []*locksv1.LockRequest{
				req("pr-100", vpc, "alice", 100).Release().Status(holding(41, vpc)).Obj(),
				req("bob-1", dns, "bob", 0).Deleting(now).Status(holding(9, dns)).Obj(),
			},
			wantKeys: []Key{
				{ID: ns + "/" + dnsName, Namespace: ns, Name: dnsName, UID: "pl-2", Key: "acme/infra/modules/dns/default", Token: "9", Queue: []Waiter{},
					Holder: &Holder{Who: "bob", Owner: "bob", Requests: []HolderRequest{{Name: "bob-1", UID: "uid-bob-1"}}, Since: now, Reason: "Deleting"}},
				{ID: ns + "/" + vpcName, Namespace: ns, Name: vpcName, UID: "pl-1", Key: "acme/infra/modules/vpc/default", Token: "41", Queue: []Waiter{},
					Holder: &Holder{Who: "pull #100 (alice)", Owner: "alice", Pull: 100, Requests: []HolderRequest{{Name: "pr-100", UID: "uid-pr-100"}}, Since: now, Reason: "Releasing"}},
			},
		},
		"a holder request replaced by a namesake lends it nothing": {
			locks: []*locksv1.ProjectLock{w.MakeProjectLock(ns, vpc, vpcName).UID("pl-1").Token(41).Holder(holderOf("alice", 100, "", 0, 0, "pr-100")).Obj()},
			requests: []*locksv1.LockRequest{
				req("pr-100", vpc, "alice", 100).UID("uid-other").Command("apply").Release().Obj(),
			},
			wantKeys: []Key{{ID: ns + "/" + vpcName, Namespace: ns, Name: vpcName, UID: "pl-1", Key: "acme/infra/modules/vpc/default", Token: "41", Queue: []Waiter{},
				Holder: &Holder{Who: "pull #100 (alice)", Owner: "alice", Pull: 100, Requests: []HolderRequest{{Name: "pr-100", UID: "uid-pr-100"}}, Since: now}}},
		},
		"the queue is the ProjectLock's head in its order, aged priority from it, joined with each request": {
			locks: []*locksv1.ProjectLock{w.MakeProjectLock(ns, vpc, vpcName).UID("pl-1").Token(41).
				Holder(holderOf("alice", 100, "", 0, 0, "pr-100")).
				Queue(2,
					locksv1.QueueEntry{Request: "pr-102", Owner: "carol", Pull: 102, Priority: locksv1.PriorityHigh},
					locksv1.QueueEntry{Request: "pr-101", Owner: "bob", Pull: 101, Priority: locksv1.PriorityHigh}).Obj()},
			requests: []*locksv1.LockRequest{
				pr100.Obj(),
				req("pr-101", vpc, "bob", 101).URL("javascript:alert(1)").Status(waitingFor(2, -25*time.Minute, "locked by pull #100 (alice); position 2 of 2", vpc)).Obj(),
				req("pr-102", vpc, "carol", 102).Priority(locksv1.PriorityHigh).Command("plan").Status(waitingFor(1, -time.Minute, "locked by pull #100 (alice); position 1 of 2", vpc)).Obj(),
			},
			wantKeys: []Key{{
				ID: ns + "/" + vpcName, Namespace: ns, Name: vpcName, UID: "pl-1", Key: "acme/infra/modules/vpc/default", Token: "41", QueueLength: 2,
				Holder: &Holder{Who: "pull #100 (alice)", Owner: "alice", Pull: 100, Requests: []HolderRequest{{Name: "pr-100", UID: "uid-pr-100"}}, Command: "apply", Since: now},
				Queue: []Waiter{
					{Position: 1, Request: "pr-102", UID: "uid-pr-102", Who: "pull #102 (carol)", Owner: "carol", Pull: 102, Command: "plan",
						Priority: "High", Aged: "High", Since: at(-time.Minute), Reason: "Queued", Message: "locked by pull #100 (alice); position 1 of 2"},
					// A javascript: url is dropped: the page makes links of http(s) only.
					{Position: 2, Request: "pr-101", UID: "uid-pr-101", Who: "pull #101 (bob)", Owner: "bob", Pull: 101,
						Priority: "Normal", Aged: "High", Since: at(-25 * time.Minute), Reason: "Queued", Message: "locked by pull #100 (alice); position 2 of 2"},
				},
			}},
		},
		"a stale head: a request since finished is left out, one not in the cache is kept as the ProjectLock says": {
			locks: []*locksv1.ProjectLock{w.MakeProjectLock(ns, vpc, vpcName).UID("pl-1").Holder(holderOf("alice", 100, "", 0, 0, "pr-100")).
				Queue(2,
					locksv1.QueueEntry{Request: "gone", Owner: "bob", Pull: 101, Priority: locksv1.PriorityNormal},
					locksv1.QueueEntry{Request: "unseen", Owner: "dave", Pull: 103, Priority: locksv1.PriorityLow}).Obj()},
			requests: []*locksv1.LockRequest{
				pr100.Obj(),
				req("gone", vpc, "bob", 101).Status(locksv1.LockRequestStatus{Phase: locksv1.PhaseFailed}).Obj(),
			},
			wantKeys: []Key{{
				ID: ns + "/" + vpcName, Namespace: ns, Name: vpcName, UID: "pl-1", Key: "acme/infra/modules/vpc/default", QueueLength: 2,
				Holder: &Holder{Who: "pull #100 (alice)", Owner: "alice", Pull: 100, Requests: []HolderRequest{{Name: "pr-100", UID: "uid-pr-100"}}, Command: "apply", Since: now},
				Queue:  []Waiter{{Position: 1, Request: "unseen", Who: "pull #103 (dave)", Owner: "dave", Pull: 103, Priority: "Normal", Aged: "Low"}},
			}},
		},
		"waiters beyond the head come after it, by their own position; an unplaced one last, aged by the flag": {
			locks: []*locksv1.ProjectLock{w.MakeProjectLock(ns, vpc, vpcName).UID("pl-1").Holder(holderOf("alice", 100, "", 0, 0, "pr-100")).
				Queue(3, locksv1.QueueEntry{Request: "head", Owner: "bob", Priority: locksv1.PriorityNormal}).Obj()},
			requests: []*locksv1.LockRequest{
				pr100.Obj(),
				req("new", vpc, "erin", 0).Priority(locksv1.PriorityLow).Obj(),
				req("third", vpc, "dave", 0).Status(waitingFor(3, -2*time.Minute, "", vpc)).Obj(),
				req("head", vpc, "bob", 0).Status(waitingFor(1, -3*time.Minute, "", vpc)).Obj(),
				req("second", vpc, "carol", 0).Status(waitingFor(2, -21*time.Minute, "", vpc)).Obj(),
			},
			wantKeys: []Key{{
				ID: ns + "/" + vpcName, Namespace: ns, Name: vpcName, UID: "pl-1", Key: "acme/infra/modules/vpc/default", QueueLength: 4,
				Holder: &Holder{Who: "pull #100 (alice)", Owner: "alice", Pull: 100, Requests: []HolderRequest{{Name: "pr-100", UID: "uid-pr-100"}}, Command: "apply", Since: now},
				Queue: []Waiter{
					{Position: 1, Request: "head", UID: "uid-head", Who: "bob", Owner: "bob", Priority: "Normal", Aged: "Normal", Since: at(-3 * time.Minute), Reason: "Queued"},
					{Position: 2, Request: "second", UID: "uid-second", Who: "carol", Owner: "carol", Priority: "Normal", Aged: "High", Since: at(-21 * time.Minute), Reason: "Queued"},
					{Position: 3, Request: "third", UID: "uid-third", Who: "dave", Owner: "dave", Priority: "Normal", Aged: "Normal", Since: at(-2 * time.Minute), Reason: "Queued"},
					{Position: 0, Request: "new", UID: "uid-new", Who: "erin", Owner: "erin", Priority: "Low", Aged: "Low"},
				},
			}},
		},
		"a gated Pod that holds and a gated Job that waits are named as kubectl names them, from the manager's stamp; a session or an ownerReference that anyone may write names none": {
			locks: []*locksv1.ProjectLock{w.MakeProjectLock(ns, vpc, vpcName).UID("pl-1").
				Holder(holderOf("alice", 0, "", 0, 0, "pod-migrate-db")).
				Queue(2,
					locksv1.QueueEntry{Request: "job-apply-vpc", Owner: "alice", Priority: locksv1.PriorityNormal},
					locksv1.QueueEntry{Request: "bob-1", Owner: "bob", Priority: locksv1.PriorityNormal}).Obj()},
			requests: []*locksv1.LockRequest{
				req("pod-migrate-db", vpc, "alice", 0).Session("pod/migrate-db").MadeFor("pod", "migrate-db").Status(holding(7, vpc)).Obj(),
				req("job-apply-vpc", vpc, "alice", 0).Session("job/apply-vpc").MadeFor("job", "apply-vpc").Status(waitingFor(1, -time.Minute, "", vpc)).Obj(),
				// A session that looks like a workload's, and a controlling ownerReference, name
				// nothing: anyone who creates a request writes them.
				req("bob-1", vpc, "bob", 0).Session("pod/migrate-db").ControlledBy("v1", "Pod", "migrate-db").Status(waitingFor(2, -time.Minute, "", vpc)).Obj(),
			},
			wantKeys: []Key{{
				ID: ns + "/" + vpcName, Namespace: ns, Name: vpcName, UID: "pl-1", Key: "acme/infra/modules/vpc/default", QueueLength: 2,
				Holder: &Holder{Who: "alice", Owner: "alice", Requests: []HolderRequest{{Name: "pod-migrate-db", UID: "uid-pod-migrate-db"}}, Workload: "pod/migrate-db", Since: now},
				Queue: []Waiter{
					{Position: 1, Request: "job-apply-vpc", UID: "uid-job-apply-vpc", Who: "alice", Owner: "alice", Workload: "job/apply-vpc",
						Priority: "Normal", Aged: "Normal", Since: at(-time.Minute), Reason: "Queued"},
					{Position: 2, Request: "bob-1", UID: "uid-bob-1", Who: "bob", Owner: "bob",
						Priority: "Normal", Aged: "Normal", Since: at(-time.Minute), Reason: "Queued"},
				},
			}},
		},
		"a key requests wait for before its ProjectLock exists is shown, with no uid to force-unlock": {
			requests: []*locksv1.LockRequest{req("first", dns, "bob", 0).Obj()},
			wantKeys: []Key{{ID: ns + "/" + dnsName, Namespace: ns, Name: dnsName, Key: "acme/infra/modules/dns/default", QueueLength: 1,
				Queue: []Waiter{{Request: "first", UID: "uid-first", Who: "bob", Owner: "bob", Priority: "Normal", Aged: "Normal"}}}},
		},
		"a multi-lock request that holds one key waits only in the other's queue": {
			locks: []*locksv1.ProjectLock{
				w.MakeProjectLock(ns, dns, dnsName).UID("pl-d").Holder(holderOf("bob", 2, "", 0, 0, "bob-2")).Queue(1, locksv1.QueueEntry{Request: "both", Owner: "alice", Pull: 1, Priority: locksv1.PriorityNormal}).Obj(),
				w.MakeProjectLock(ns, vpc, vpcName).UID("pl-v").Holder(holderOf("alice", 1, "", 0, 0, "both")).Obj(),
			},
			requests: []*locksv1.LockRequest{
				req("bob-2", dns, "bob", 2).Status(holding(5, dns)).Obj(),
				req("both", vpc, "alice", 1).Lock(dns.Repo, dns.Path, dns.Workspace).Status(locksv1.LockRequestStatus{
					Phase: locksv1.PhasePending, QueuedAt: micro(-time.Second),
					Locks: []locksv1.LockStatus{{Name: vpcName, Held: true}, {Name: dnsName}},
				}).Obj(),
			},
			wantKeys: []Key{
				{ID: ns + "/" + dnsName, Namespace: ns, Name: dnsName, UID: "pl-d", Key: "acme/infra/modules/dns/default", QueueLength: 1,
					Holder: &Holder{Who: "pull #2 (bob)", Owner: "bob", Pull: 2, Requests: []HolderRequest{{Name: "bob-2", UID: "uid-bob-2"}}, Since: now},
					Queue:  []Waiter{{Position: 1, Request: "both", UID: "uid-both", Who: "pull #1 (alice)", Owner: "alice", Pull: 1, Priority: "Normal", Aged: "Normal", Since: at(-time.Second)}}},
				{ID: ns + "/" + vpcName, Namespace: ns, Name: vpcName, UID: "pl-v", Key: "acme/infra/modules/vpc/default", Queue: []Waiter{},
					Holder: &Holder{Who: "pull #1 (alice)", Owner: "alice", Pull: 1, Requests: []HolderRequest{{Name: "both", UID: "uid-both"}}, Since: now}},
			},
		},
		"a force-unlock in progress, and a token past what a JavaScript number holds exactly": {
			locks: []*locksv1.ProjectLock{w.MakeProjectLock(ns, vpc, vpcName).UID("pl-1").Token(9007199254740993).Deleting(now).
				Holder(holderOf("alice", 100, "", 0, 0, "pr-100")).Obj()},
			requests: []*locksv1.LockRequest{pr100.Obj()},
			wantKeys: []Key{{ID: ns + "/" + vpcName, Namespace: ns, Name: vpcName, UID: "pl-1", Key: "acme/infra/modules/vpc/default",
				Token: "9007199254740993", Deleting: at(0), Queue: []Waiter{},
				Holder: &Holder{Who: "pull #100 (alice)", Owner: "alice", Pull: 100, Requests: []HolderRequest{{Name: "pr-100", UID: "uid-pr-100"}}, Command: "apply", Since: now}}},
		},
		"keys are in namespace then key order": {
			locks: []*locksv1.ProjectLock{
				w.MakeProjectLock("b", vpc, vpcName).UID("1").Obj(),
				w.MakeProjectLock("a", vpc, vpcName).UID("2").Obj(),
				w.MakeProjectLock("a", dns, dnsName).UID("3").Obj(),
			},
			wantKeys: []Key{
				{ID: "a/" + dnsName, Namespace: "a", Name: dnsName, UID: "3", Key: "acme/infra/modules/dns/default", Queue: []Waiter{}},
				{ID: "a/" + vpcName, Namespace: "a", Name: vpcName, UID: "2", Key: "acme/infra/modules/vpc/default", Queue: []Waiter{}},
				{ID: "b/" + vpcName, Namespace: "b", Name: vpcName, UID: "1", Key: "acme/infra/modules/vpc/default", Queue: []Waiter{}},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Build(Input{Now: now, AgingStep: 10 * time.Minute, ProjectLocks: tc.locks, Requests: tc.requests})
			if diff := cmp.Diff(tc.wantKeys, got.Keys); diff != "" {
				t.Errorf("keys (-want +got):\n%s", diff)
			}
		})
	}
}

// cond is a condition the controller wrote for generation 1.
func cond(typ string, status metav1.ConditionStatus, msg string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, ObservedGeneration: 1, Message: msg}
}

func TestBuildFreezes(t *testing.T) {
	cases := map[string]struct {
		locks []*locksv1.CommandLock
		want  []Freeze
	}{
		"an unlocked CommandLock is no freeze": {
			locks: []*locksv1.CommandLock{w.MakeCommandLock("apply").Obj()},
			want:  []Freeze{},
		},
		"a freeze draining, then one drained, in command order": {
			locks: []*locksv1.CommandLock{
				w.MakeCommandLock("plan").Locked("").Status(0, 0, cond(locksv1.ConditionDrained, metav1.ConditionTrue, "")).Obj(),
				w.MakeCommandLock("apply").Locked("maintenance").Until(now.Add(time.Hour)).
					Status(2, 3, cond(locksv1.ConditionLocked, metav1.ConditionTrue, "Apply commands are locked globally: maintenance"),
						cond(locksv1.ConditionDrained, metav1.ConditionFalse, "")).Obj(),
			},
			want: []Freeze{
				{Command: "apply", Reason: "maintenance", Until: at(time.Hour), InForce: true, Active: 2, Blocked: 3, Drained: "False"},
				{Command: "plan", InForce: true, Drained: "True"},
			},
		},
		"Drained from before the last spec change is not reported yet": {
			locks: []*locksv1.CommandLock{func() *locksv1.CommandLock {
				cl := w.MakeCommandLock("apply").Locked("x").Status(0, 0, cond(locksv1.ConditionDrained, metav1.ConditionTrue, "")).Obj()
				cl.Generation = 2
				return cl
			}()},
			want: []Freeze{{Command: "apply", Reason: "x", InForce: true}},
		},
		"a manager flag's override is shown; a freeze past its until is no longer in force": {
			locks: []*locksv1.CommandLock{w.MakeCommandLock("apply").Locked("x").Until(now.Add(-time.Second)).
				Status(0, 0, cond(locksv1.ConditionLocked, metav1.ConditionTrue, "Apply commands are disabled on this server (--disable-apply)")).Obj()},
			want: []Freeze{{Command: "apply", Reason: "x", Until: at(-time.Second), Message: "Apply commands are disabled on this server (--disable-apply)"}},
		},
		"a thawed lock the controller still reports Locked (by --disable-apply) is listed": {
			locks: []*locksv1.CommandLock{w.MakeCommandLock("apply").Status(0, 0,
				cond(locksv1.ConditionLocked, metav1.ConditionTrue, "Apply commands are disabled on this server (--disable-apply)")).Obj()},
			want: []Freeze{{Command: "apply", Message: "Apply commands are disabled on this server (--disable-apply)"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Build(Input{Now: now, CommandLocks: tc.locks})
			if diff := cmp.Diff(tc.want, got.Freezes, cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".UID" }, cmp.Ignore())); diff != "" {
				t.Errorf("freezes (-want +got):\n%s", diff)
			}
		})
	}
}

func event(uid, reason, kind, name string, when time.Duration, mutate ...func(*corev1.Event)) *corev1.Event {
	e := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{UID: types.UID("e-" + uid), Namespace: ns, CreationTimestamp: mt(-time.Hour)},
		InvolvedObject: corev1.ObjectReference{APIVersion: locksv1.GroupVersion.String(), Kind: kind, Name: name},
		Reason:         reason, Type: corev1.EventTypeWarning, Message: reason + " " + name,
		EventTime: metav1.MicroTime{Time: now.Add(when)},
	}
	for _, m := range mutate {
		m(e)
	}
	return e
}

func TestBuildEvents(t *testing.T) {
	cases := map[string]struct {
		events []*corev1.Event
		want   []Event
	}{
		"deadlocks, expiries, force-unlocks and lost holders, newest first; other reasons and groups are not shown": {
			events: []*corev1.Event{
				event("1", locksv1.ReasonDeadlock, "LockRequest", "a", -3*time.Second),
				event("2", locksv1.ReasonExpired, "LockRequest", "b", -time.Second),
				event("3", locksv1.ReasonForceUnlocked, "LockRequest", "c", -2*time.Second),
				event("4", locksv1.ReasonHolderLost, "LockRequest", "d", -4*time.Second),
				event("5", locksv1.ReasonQueueFull, "LockRequest", "e", 0),
				event("6", locksv1.ReasonDeadlock, "Pod", "f", 0, func(e *corev1.Event) { e.InvolvedObject.APIVersion = "v1" }),
			},
			want: []Event{
				{UID: "e-2", Time: now.Add(-time.Second), Reason: "Expired", Namespace: ns, Object: "lockrequest/b", Message: "Expired b"},
				{UID: "e-3", Time: now.Add(-2 * time.Second), Reason: "ForceUnlocked", Namespace: ns, Object: "lockrequest/c", Message: "ForceUnlocked c"},
				{UID: "e-1", Time: now.Add(-3 * time.Second), Reason: "Deadlock", Namespace: ns, Object: "lockrequest/a", Message: "Deadlock a"},
				{UID: "e-4", Time: now.Add(-4 * time.Second), Reason: "HolderLost", Namespace: ns, Object: "lockrequest/d", Message: "HolderLost d"},
			},
		},
		"the time is the series' last, else eventTime, else lastTimestamp; repeats are counted": {
			events: []*corev1.Event{
				event("s", locksv1.ReasonExpired, "LockRequest", "s", -time.Hour, func(e *corev1.Event) {
					e.Series = &corev1.EventSeries{Count: 3, LastObservedTime: metav1.MicroTime{Time: now}}
				}),
				event("l", locksv1.ReasonExpired, "LockRequest", "l", 0, func(e *corev1.Event) {
					e.EventTime = metav1.MicroTime{}
					e.LastTimestamp, e.Count = mt(-time.Minute), 2
				}),
			},
			want: []Event{
				{UID: "e-s", Time: now, Reason: "Expired", Namespace: ns, Object: "lockrequest/s", Message: "Expired s", Count: 3},
				{UID: "e-l", Time: now.Add(-time.Minute), Reason: "Expired", Namespace: ns, Object: "lockrequest/l", Message: "Expired l", Count: 2},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Build(Input{Now: now, Events: tc.events})
			if diff := cmp.Diff(tc.want, got.Events); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("only the newest are kept", func(t *testing.T) {
		var many []*corev1.Event
		for i := range maxEvents + 10 {
			many = append(many, event(fmt.Sprint(i), locksv1.ReasonExpired, "LockRequest", "x", time.Duration(i)*time.Second))
		}
		got := Build(Input{Now: now, Events: many}).Events
		if len(got) != maxEvents || got[0].UID != fmt.Sprintf("e-%d", maxEvents+9) {
			t.Errorf("kept %d events, newest %s; want %d, newest e-%d", len(got), got[0].UID, maxEvents, maxEvents+9)
		}
	})
}

func TestSafeURL(t *testing.T) {
	cases := map[string]string{
		"https://github.com/acme/infra/pull/1":     "https://github.com/acme/infra/pull/1",
		"http://ci.example/run/7?x=<b>":            "http://ci.example/run/7?x=<b>",
		"javascript:alert(1)":                      "",
		"JAVASCRIPT:alert(1)":                      "",
		"data:text/html,<script>alert(1)</script>": "",
		"//evil.example/x":                         "",
		"/relative":                                "",
		"https://":                                 "",
		"":                                         "",
		"https://exa mple.com":                     "",
	}
	for in, want := range cases {
		if got := SafeURL(in); got != want {
			t.Errorf("SafeURL(%q) = %q, want %q", in, got, want)
		}
	}
}
