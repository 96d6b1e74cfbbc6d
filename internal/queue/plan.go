package queue

// The plan: the writes of one decision, in the order docs/protocol.md proves safe, each with
// the object it writes, the resourceVersion it is preconditioned on and why it is made.

import (
	"fmt"
	"slices"
	"time"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// Step is the protocol step a write belongs to (docs/protocol.md, "A decision about key k").
type Step int

// The protocol's steps, and the waiters' statuses written after them.
const (
	StepCreate      Step = 1 // create the ProjectLock, then decide again on it
	StepForceUnlock Step = 2 // the holders of a ProjectLock being deleted written final, then its finalizer removed
	StepLeave       Step = 3 // every holder that leaves written final, or demoted, first
	StepLock        Step = 4 // the ProjectLock status: holders and token
	StepFreezeCheck Step = 5 // the freezes read live before a commanded request is written as holding
	StepGrant       Step = 6 // each new holder written as holding
	StepWaiters     Step = 7 // waiters' positions, last: they make nobody a holder
)

var stepNames = [...]string{"", "create", "force-unlock", "leave", "projectlock", "freeze-check", "grant", "waiters"}

func (s Step) String() string {
	if s < 1 || int(s) >= len(stepNames) {
		return fmt.Sprintf("step%d", int(s))
	}
	return stepNames[s]
}

// WriteKind is what a write of a plan does.
type WriteKind string

// The kinds of writes (and the one live read) a plan is made of.
const (
	WriteCreate           WriteKind = "create"
	WriteFinish           WriteKind = "finish"
	WriteDemote           WriteKind = "demote"
	WriteReleaseFinalizer WriteKind = "release-finalizer"
	WriteLockStatus       WriteKind = "projectlock-status"
	// WriteCheckFreezes writes nothing: it reads the freezes live, and stops the plan (the key is
	// decided again with those freezes) if one of Commands is frozen.
	WriteCheckFreezes WriteKind = "check-freezes"
	WriteGrant        WriteKind = "grant"
	WriteWaiting      WriteKind = "waiting"
)

// Write is one write of a plan.
type Write struct {
	Kind WriteKind
	Step Step
	// Object is the name of the object written: the ProjectLock (the key) or a LockRequest.
	Object string
	// RV is the precondition, the resourceVersion the object was read at; "" for a create, which
	// fails if the object exists, and for the freeze check.
	RV string
	// Why the write is made, for the log.
	Why string
	// Update is the request status of a request write.
	Update *Update
	// Lock is the ProjectLock status of WriteLockStatus.
	Lock *locksv1.ProjectLockStatus
	// Commands are the commands WriteCheckFreezes reads the freezes of.
	Commands []string
}

// DecidesAgain reports whether the plan ends in deciding the key again on what it wrote: on the
// created ProjectLock (step 1), on the ProjectLock that only took out a holder whose token
// nobody knows (step 4), or after a counted grant that had the write to itself (More).
//
// guard:counting-decides-again
func (d Decision) DecidesAgain() bool { return d.CreateLock || d.Again || d.More }

// plan orders the decision's writes as docs/protocol.md's steps 1-6 do, then the waiters.
func plan(d Decision, name string, lock *locksv1.ProjectLock) Decision {
	var w []Write
	rv := ""
	if lock != nil {
		rv = lock.ResourceVersion
	}
	if d.CreateLock {
		w = append(w, Write{Kind: WriteCreate, Step: StepCreate, Object: name, Why: "someone needs the key; a grant is decided on the created ProjectLock"})
	}
	leaveStep := StepLeave
	if d.ReleaseFinalizer || (lock != nil && lock.DeletionTimestamp != nil) {
		leaveStep = StepForceUnlock
	}
	// guard:finish-after-projectlock
	for _, u := range d.Finish {
		w = append(w, requestWrite(WriteFinish, leaveStep, u, fmt.Sprintf("%s (%s) before the ProjectLock moves on", u.Status.Phase, u.Event.Reason)))
	}
	for _, u := range d.Demote {
		w = append(w, requestWrite(WriteDemote, StepLeave, u, "an unconfirmed grant whose command froze: a fence before the ProjectLock drops it"))
	}
	if d.ReleaseFinalizer {
		w = append(w, Write{Kind: WriteReleaseFinalizer, Step: StepForceUnlock, Object: name, RV: rv, Why: "force-unlocked and every holder told"})
	}
	// guard:finish-after-projectlock/2
	if d.Lock != nil {
		w = append(w, Write{Kind: WriteLockStatus, Step: StepLock, Object: name, RV: rv, Lock: d.Lock, Why: lockWhy(d, lock)})
	}
	if d.Again {
		d.Writes = w
		return d
	}
	// guard:no-live-freeze-check
	if commands := acquiringCommands(d.Grant); len(commands) > 0 {
		w = append(w, Write{Kind: WriteCheckFreezes, Step: StepFreezeCheck, Commands: commands, Why: "a commanded request is about to hold the key: its freeze is read live"})
	}
	for _, u := range d.Grant {
		w = append(w, requestWrite(WriteGrant, StepGrant, u, grantWhy(u)))
	}
	// A waiter's first status (or one that changes what it may do) is a decision: until it is
	// written the request reads undecided. A refresh of a position is information. Decisions
	// first: behind 20 refreshes of a deep queue, a new request waited out all of them, seconds
	// each under load (issue #47).
	// guard:refresh-after-decisions
	for _, refresh := range []bool{false, true} {
		for _, u := range d.Waiting {
			if u.Refresh != refresh {
				continue
			}
			why := "waits"
			if u.Refresh {
				why = "its queue position moved"
			}
			w = append(w, requestWrite(WriteWaiting, StepWaiters, u, why))
		}
	}
	d.Writes = w
	return d
}

func requestWrite(kind WriteKind, step Step, u Update, why string) Write {
	return Write{Kind: kind, Step: step, Object: u.Request.Name, RV: u.Request.ResourceVersion, Update: &u, Why: why}
}

func lockWhy(d Decision, lock *locksv1.ProjectLock) string {
	switch {
	case d.Again:
		return "only the leaving holders out: one is gone with a token nobody knows"
	case lock != nil && d.Lock.FencingToken != lock.Status.FencingToken:
		return fmt.Sprintf("new holders, token %d", d.Lock.FencingToken)
	}
	return "holders or queue changed"
}

func grantWhy(u Update) string {
	if u.Acquires {
		return fmt.Sprintf("holds the key (token %d), listed by this plan's ProjectLock write", u.Status.FencingToken)
	}
	return "a holder's status changed (renewal, another key, its term)"
}

// acquiringCommands are the commands of the requests the grants make hold the key for the first
// time: their freezes are read live before (step 5).
func acquiringCommands(grants []Update) []string {
	var commands []string
	for _, u := range grants {
		if u.Acquires && u.Request.Spec.Command != "" && !slices.Contains(commands, u.Request.Spec.Command) {
			commands = append(commands, u.Request.Spec.Command)
		}
	}
	return commands
}

// finishUpdate is the write that makes e final, with its outcome.
func finishUpdate(e *entry, now time.Time) Update {
	return Update{Request: e.req, Status: finishedStatus(e, now), Event: &Event{e.outcome.event, e.outcome.reason, e.outcome.message}}
}

// finishUpdates writes final every entry that leaves and every waiter rejected, in the order the
// requests were read.
func finishUpdates(entries, rejected []*entry, now time.Time) []Update {
	var done []*entry
	for _, e := range entries {
		if e.outcome != nil {
			done = append(done, e)
		}
	}
	done = append(done, rejected...)
	slices.SortStableFunc(done, func(a, b *entry) int { return a.idx - b.idx })
	out := make([]Update, 0, len(done))
	for _, e := range done {
		out = append(out, finishUpdate(e, now))
	}
	return out
}

// grantUpdates are the holders' statuses that change: new grants (Acquires), renewals, terms.
func grantUpdates(holders []*entry, token int64, now time.Time) []Update {
	var out []Update
	for _, e := range holders {
		tok := token
		if e.tok != 0 {
			tok = e.tok // a shared holder's own token (holderTokens)
		}
		st, changed := heldStatus(e, tok, now)
		if !changed {
			continue
		}
		u := Update{Request: e.req, Status: st, Acquires: !e.claims}
		if st.Phase == locksv1.PhaseGranted && e.req.Status.Phase != locksv1.PhaseGranted {
			u.Event = &Event{"Normal", locksv1.ReasonGranted, grantedMessage(e, st)}
		} else if ev := renewalEvent(e, st); ev != nil {
			u.Event = ev
		}
		out = append(out, u)
	}
	return out
}

// waitingUpdates are the waiters' statuses that change, the demotions among them apart, and
// whether some were left for later because the refresh budget ran out.
func waitingUpdates(waiting []*entry, told blockers, in Input) (demote, updates []Update, deferred bool) {
	refreshes := 0
	for i, e := range waiting {
		// Left for the next decision of this reconcile, which grants it: no status now.
		if e.deferred && !e.demoted {
			continue
		}
		// guard:demotion-deferred-as-refresh
		refresh := e.stamped && e.req.Status.Phase == locksv1.PhasePending && !e.demoted
		// Past the budget, a waiter whose position or message visibly changed is left for a
		// later decision without building its status: in a deep queue every hand-off moves them
		// all and every arrival changes the length their messages quote, and only the budget's
		// worth can be written anyway. One that may not have changed is still checked exactly,
		// so nothing is deferred that would not be written.
		if refresh && in.Refreshes.Limited && refreshes >= in.Refreshes.N && visiblyChanged(e, i, len(waiting), told) {
			deferred = true
			continue
		}
		st := waitingStatus(e, i, len(waiting), told, in.Now)
		// A demotion is a fence: its write must make the held write still in flight for the
		// request fail (its precondition) before the ProjectLock stops listing it. An update
		// equal to the stored object is a no-op that keeps the resourceVersion, so the demotion
		// raises status.fences: it always changes the stored object (docs/protocol.md, "A fence
		// must change the stored object").
		if e.demoted {
			// guard:demotion-no-fence
			st.Fences = e.req.Status.Fences + 1
		}
		if equalStatus(e.req.Status, st) {
			continue
		}
		if refresh {
			refreshes++
		}
		u := Update{Request: e.req, Status: st, Refresh: refresh}
		if !e.stamped || e.demoted {
			u.Event = &Event{"Normal", condReason(st), condMessage(st)}
		}
		if e.demoted {
			demote = append(demote, u)
			continue
		}
		updates = append(updates, u)
	}
	return demote, updates, deferred
}
