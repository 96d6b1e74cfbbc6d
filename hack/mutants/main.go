// Command mutants takes each guard of the grant path out of the code, one at a time, runs the
// tests that should notice, and fails if any mutant survives: a guard whose removal no test
// notices is a guard nobody has shown is needed. It edits the working tree and restores every
// file it touched, also when interrupted.
//
//	go run ./hack/mutants            # every mutant
//	go run ./hack/mutants -only token # the mutants whose name contains "token"
//	go run ./hack/mutants -dry       # only check that every mutant still applies to the code
//
// It needs KUBEBUILDER_ASSETS (make mutants sets it).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"time"
)

// edit replaces old (which must occur exactly once) with new in file.
type edit struct{ file, old, new string }

// mutant is one guard taken out, and the tests that must then fail.
type mutant struct {
	name  string
	guard string // what the guard is, for the report
	edits []edit
	pkg   string // the test package
	focus string // a Ginkgo focus, or a -run pattern for plain tests ("run:...")
}

const (
	decide     = "internal/queue/decide.go"
	tokens     = "internal/queue/tokens.go"
	order      = "internal/queue/order.go"
	controller = "internal/controller/lock_controller.go"
	commands   = "internal/controller/commandlock_controller.go"
	overlay    = "internal/controller/overlay.go"
	memory     = "internal/controller/memory.go"
	counts     = "internal/controller/request_counts.go"
	leases     = "internal/controller/holder_lease.go"
	detector   = "internal/controller/deadlock_detector.go"
	safety     = "./test/safety/"
	runPlugin  = "./cmd/kubectl-turnstile/"
	runKeeper  = "cmd/kubectl-turnstile/run_keeper.go"
	runGo      = "cmd/kubectl-turnstile/run.go"
	controls   = "./internal/controller/"
)

var mutants = []mutant{
	// The manager's memory (internal/controller/memory.go): what the cache drops and what it
	// must keep, and the event budget.
	{name: "trim-managed-fields", pkg: controls, focus: "run:TestTrimLockRequest", guard: "cached LockRequests carry no managedFields", edits: []edit{{memory, "	lr.ManagedFields = nil\n", "\n"}}},
	{name: "trim-annotations", pkg: controls, focus: "run:TestTrimLockRequest", guard: "cached LockRequests drop the annotations no decision reads (kubectl's last-applied copy)", edits: []edit{{memory, "	lr.Annotations = keepAnnotations(lr.Annotations)\n", "\n"}}},
	{name: "trim-keeps-turnstile-annotations", pkg: controls, focus: "run:TestTrimLockRequest", guard: "the trim keeps the creator stamp the holder Lease check reads", edits: []edit{{memory, "		if strings.HasPrefix(k, annotationPrefix) {\n\t\t\tkept++", "		if strings.HasPrefix(k, annotationPrefix+\"-\") {\n\t\t\tkept++"}}},
	{name: "request-counts-forget-empty", pkg: controls, focus: "run:TestRequestCounts", guard: "a namespace whose requests are all gone leaves the counts (the scan and the metric forget it)", edits: []edit{{counts, "	if byPhase[p] <= 0 {", "	if false {"}}},
	{name: "event-budget", pkg: controls, focus: "run:TestBoundedRecorder", guard: "events over the recorder's budget are dropped", edits: []edit{{memory, "	if !r.limit.Allow() {", "	if false {"}}},
	// kubectl turnstile run: the whole process tree under the lock, stopped before the lease can
	// lapse (cmd/kubectl-turnstile/run*.go; the keeper is tested as a real process tree).
	{name: "run-keeper-not-subreaper", pkg: runPlugin, focus: "run:TestKeeperStopsWhatTheCommandLeftBehind", guard: "run's keeper is a child subreaper, so a double-forked orphan stays its to stop and wait for", edits: []edit{{runKeeper, "	if err := proctree.BecomeSubreaper(); err != nil {\n\t\tsay(", "	if err := error(nil); err != nil {\n\t\tsay("}}},
	{name: "run-leftovers-not-stopped", pkg: runPlugin, focus: "run:TestKeeperStopsWhatTheCommandLeftBehind", guard: "what the command leaves running when it exits is stopped before the locks are released", edits: []edit{{runKeeper, "before the locks are released.\n\t\t\tstop(syscall.SIGTERM)", "before the locks are released.\n\t\t\t_ = stop"}}},
	{name: "run-signal-only-the-group", pkg: runPlugin, focus: "run:TestKeeperForwardsSignalsToProcessesThatLeftTheGroup", guard: "signals reach the descendants that left the command's process group", edits: []edit{{"internal/proctree/proctree.go", "		if groupAlive && p.PGID == pgid {\n", "		if true {\n"}}},
	{name: "run-keeper-ignores-deadline", pkg: runPlugin, focus: "run:TestKeeperStopsTheTreeAtTheDeadline", guard: "the keeper stops the tree at the deadline run sends it (before the lease can lapse)", edits: []edit{{runKeeper, "deadline.Reset(time.Until(time.Unix(0, ns)))", "_ = ns"}}},
	{name: "run-keeper-outlives-run", pkg: runPlugin, focus: "run:TestKeeperStopsTheTreeWhenRunDies", guard: "the keeper stops the tree when run dies (its control pipe closes)", edits: []edit{{runKeeper, "				stop(syscall.SIGTERM) // run is gone", "				// run is gone"}}},
	{name: "run-no-sigkill-after-grace", pkg: runPlugin, focus: "run:TestKeeperKillsAfterGrace", guard: "what ignores SIGTERM gets SIGKILL after --grace", edits: []edit{{runKeeper, "kill.Reset(grace)", "_ = grace"}}},
	{name: "run-grace-unchecked", pkg: runPlugin, focus: "run:TestFits", guard: "a --grace that cannot fit in the lease (or ttl) with a failed renewal and its retry is refused", edits: []edit{{runGo, "	if grace+stopMargin+slack <= d/2 {", "	if true || grace+stopMargin+slack <= d/2 {"}}},
	{name: "run-deadline-ignores-expiry", pkg: runPlugin, focus: "run:TestStopAt", guard: "the tree is stopped before the grant can expire, not only before the Lease can lapse", edits: []edit{{runGo, "!expiresAt.IsZero() && exp.Before(d)", "false && exp.Before(d)"}}},
	{name: "run-shared-session", pkg: runPlugin, focus: "run:TestHolderSession", guard: "each run is a holder of its own (a fresh spec.holder.session)", edits: []edit{{runGo, "	return \"run-\" + randomHex(6), nil", "	return \"\", nil"}}},
	{name: "no-finalizer", pkg: safety, focus: "hole 1", guard: "ProjectLocks carry the release-holders finalizer (created with it, older ones given it)", edits: []edit{
		{controller, "	lock.Finalizers = []string{locksv1.ReleaseHoldersFinalizer}\n", ""},
		{controller, "if in.Lock.DeletionTimestamp == nil && !slices.Contains(", "if false && !slices.Contains("},
	}},
	{name: "counter-token", pkg: safety, focus: "hole 3|hole 4", guard: "a grant's token is the ProjectLock's resourceVersion", edits: []edit{{tokens, "return max(prev+1, revision, leaving+1)", "return prev + 1 + 0*revision + 0*leaving"}}},
	{name: "token-below-leaving-holder", pkg: safety, focus: "hole 3", guard: "a new holder's token is above the tokens of the holders leaving in the same write", edits: []edit{
		{tokens, "return max(prev+1, revision, leaving+1)", "return max(prev+1, revision, 0*leaving)"},
		{decide, "again = unknown && newHolder\n", "again = false && unknown && newHolder\n"},
	}},
	{name: "overlay-exact-version", pkg: safety, focus: "hole 2", guard: "the overlay serves our write over any older cached version", edits: []edit{{overlay, "return c != 0 && w != 0 && c < w", "return c != 0 && w != 0 && c == w-1"}}},
	{name: "deleting-holder-unwritten", pkg: safety, focus: "hole 5", guard: "a holder whose object is being deleted is written Released first", edits: []edit{{decide, "	case req.DeletionTimestamp != nil:\n", "	case req.DeletionTimestamp != nil && false:\n"}}},
	{name: "no-live-freeze-check", pkg: safety, focus: "hole 6", guard: "the CommandLocks are read live before a commanded request holds", edits: []edit{{controller, "	if len(commands) == 0 {\n", "	if len(commands) >= 0 {\n"}}},
	{name: "live-freeze-check-without-all", pkg: safety, focus: "hole 6", guard: "the live freeze check also reads the CommandLock that freezes every command", edits: []edit{{controller, "	live := map[string]bool{locksv1.CommandAll: true}\n", "	live := map[string]bool{}\n"}}},
	{name: "drained-from-cache", pkg: safety, focus: "live ProjectLock list", guard: "Drained is confirmed by a live ProjectLock list", edits: []edit{{commands, "		granting, err := r.granting(ctx, &cl)\n", "		granting, err := 0, error(nil)\n"}}},
	{name: "drained-ignores-unconfirmed-grants", pkg: safety, focus: "ProjectLock write came before the freeze", guard: "Drained counts a request the ProjectLock lists whose held write has not landed yet (an unconfirmed grant)", edits: []edit{{commands, "			if lr.Status.Phase == locksv1.PhaseGranted || !holds(lr, pl.Name) {\n", "			if lr.Status.Phase == locksv1.PhaseGranted {\n"}}},
	{name: "fifo-by-clock", pkg: safety, focus: "hole 7", guard: "queues order by the API server's order (creation, arrival revision), not queuedAt", edits: []edit{{order, "	if c := a.req.CreationTimestamp.Compare(b.req.CreationTimestamp.Time); c != 0 {\n\t\treturn c\n\t}\n\tif a.ticket != b.ticket {", "	if c := a.arrival.Compare(b.arrival); c != 0 {\n\t\treturn c\n\t}\n\tif a.ticket != b.ticket {"}}},
	{name: "no-live-holder-read", pkg: safety, focus: "live holder read", guard: "a holder missing from the cache is looked up live before its key moves on", edits: []edit{{controller, "			if byUID[uid] {\n", "			if true || byUID[uid] {\n"}}},
	{name: "no-live-holder-read-controller", pkg: controls, focus: "the live holder read\\)", guard: "the same live holder read, seen by the controller suite (a cache without the holder)", edits: []edit{{controller, "			if byUID[uid] {\n", "			if true || byUID[uid] {\n"}}},
	{name: "no-live-lease-read", pkg: controls, focus: "live Lease read", guard: "a holder Lease the cache shows lapsed is read live before its holder is released", edits: []edit{{leases, "if st := judgeLease(key, &lease, now); st.lost == \"\" {", "if st := judgeLease(key, &lease, now); true || st.lost == \"\" {"}}},
	{name: "drained-holder-from-cache", pkg: controls, focus: "live holder read of Drained", guard: "a ProjectLock holder missing from the cache is read live before Drained is said", edits: []edit{{commands, "			if lr == nil {\n", "			if lr == nil {\n\t\t\t\tcontinue\n"}}},
	{name: "deadlock-victim-moved-on", pkg: controls, focus: "victim's phase check", guard: "a deadlock victim is failed only while the cycle still stands, re-read live: every member still waits", edits: []edit{{detector, "		if lr.Status.Phase != locksv1.PhasePending || !isLive(&lr) || lr.Spec.Holder.ID() != e.From || !waits || ref.Key != e.Key {\n", "		if false && (lr.Status.Phase != locksv1.PhasePending || !isLive(&lr) || lr.Spec.Holder.ID() != e.From || !waits || ref.Key != e.Key) {\n"}}},
	{name: "deadlock-edge-to-departed-holder", pkg: controls, focus: "run:TestWaitsFor", guard: "a ProjectLock's holder counts for the wait-for graph only while one of its requests is live", edits: []edit{{detector, "			if live[r.UID] {\n", "			if true || live[r.UID] {\n"}}},
	{name: "deadlock-skip-with-waiters-behind", pkg: controls, focus: "run:TestCannotCloseCycle", guard: "a new wait with someone queued behind it is checked for cycles", edits: []edit{{detector, "	if !last {\n\t\treturn false\n\t}\n", ""}}},
	{name: "deadlock-skip-while-holding", pkg: controls, focus: "run:TestCannotCloseCycle", guard: "a new wait whose request holds a key is checked for cycles", edits: []edit{{detector, "		if l.Held {\n", "		if false && l.Held {\n"}}},
	{name: "no-live-projectlock-read", pkg: safety, focus: "live ProjectLock read\\)", guard: "a claimant the cached ProjectLock does not list is checked against the live one", edits: []edit{{controller, "if claims && (!listsAllClaimants(in.Lock, in.Requests, req.Name) ||", "if claims && (false && !listsAllClaimants(in.Lock, in.Requests, req.Name) ||"}}},
	{name: "stale-projectlock-token", pkg: safety, focus: "hole 8", guard: "a holder showing a token above the cached ProjectLock's makes the ProjectLock be read live", edits: []edit{{controller, " || tokenAhead(in.Lock, in.Requests, req.Name)) {", " || false && tokenAhead(in.Lock, in.Requests, req.Name)) {"}}},
	{name: "no-reissue", pkg: "./internal/queue/", focus: "run:TestDecideUnconfirmedGrant|TestDecideRandomized", guard: "an unconfirmed grant is written only after a ProjectLock write of the same decision", edits: []edit{{decide, "			reissue = true\n", ""}}},
	{name: "no-demotion", pkg: safety, focus: "demotion", guard: "an unconfirmed grant frozen since is taken back before the ProjectLock drops it", edits: []edit{{decide, "			if e.frozen != nil {\n\t\t\t\te.heldHere, e.demoted = false, true\n\t\t\t\tcontinue\n\t\t\t}\n", ""}}},
	{name: "again-drops-demotions", pkg: "./internal/queue/", focus: "run:TestDecideUnconfirmedGrant", guard: "the Again split writes its demotions before the ProjectLock drops them", edits: []edit{{tokens, "	d := Decision{Again: true, Demote: demote}\n", "	d := Decision{Again: true}\n\t_ = demote\n"}}},
	{name: "demotion-deferred-as-refresh", pkg: "./internal/queue/", focus: "run:TestDemotionIsNeverDeferredAsARefresh", guard: "a demotion is a fence, never a position refresh left for later past the refresh budget", edits: []edit{{decide, "e.req.Status.Phase == locksv1.PhasePending && !e.demoted\n", "e.req.Status.Phase == locksv1.PhasePending\n"}}},
	{name: "demotion-no-fence", pkg: safety, focus: "hole A", guard: "a demotion raises status.fences, so it changes the stored object (an unchanged write keeps its rv and fences nothing)", edits: []edit{{decide, "			st.Fences = e.req.Status.Fences + 1\n", ""}}},
	{name: "finish-after-projectlock", pkg: safety, focus: "write order", guard: "outgoing holders are written final before the ProjectLock moves on", edits: []edit{
		{controller, "	for _, u := range d.Finish {\n\t\tif err := r.writeRequest(ctx, req.NamespacedName, u); err != nil {\n\t\t\treturn r.retry(err, \"finish lockrequest %s\", u.Request.Name)", "	for _, u := range d.Finish[:0] {\n\t\tif err := r.writeRequest(ctx, req.NamespacedName, u); err != nil {\n\t\t\treturn r.retry(err, \"finish lockrequest %s\", u.Request.Name)"},
		{controller, "		r.overlay.wroteLock(lock, r.clock.Now())\n\t}\n\n\tif d.Again {", "		r.overlay.wroteLock(lock, r.clock.Now())\n\t}\n\tfor _, u := range d.Finish {\n\t\tif err := r.writeRequest(ctx, req.NamespacedName, u); err != nil {\n\t\t\treturn r.retry(err, \"finish lockrequest %s\", u.Request.Name)\n\t\t}\n\t}\n\n\tif d.Again {"},
	}},
	{name: "aging-by-own-clock", pkg: "./internal/queue/", focus: "run:TestAgingIsARatchetAcrossManagers", guard: "a waiter ranks at least as high as the ProjectLock's queue shows it (liveness: managers whose clocks straddle an aging step must not rewrite each other's queue)", edits: []edit{{decide, "	agedAsShown(lock, entries, in.Config, now)\n", ""}}},
	{name: "aging-ratchet-unbounded", pkg: "./internal/queue/", focus: "run:TestAgedAsShownTakesOneStepAtMost", guard: "the shown rank is taken at most one aging step above the deciding clock's", edits: []edit{{order, "		if rank > e.priority && rank <= AgedPriority(e.req.Spec.Priority, now.Sub(e.arrival)+cfg.AgingStep, cfg.AgingStep) {", "		if rank > e.priority {"}}},
	{name: "backup-ignores-owner", pkg: "./internal/sharding/", focus: "working owner", guard: "a backup leaves a key alone while its owner is seen deciding it (cost, not safety: no reconcile or 409 from a backup of a working owner)", edits: []edit{{controller, "sharding.WithProgress(progress), sharding.WithQueueClock(r.clock)", "sharding.WithQueueClock(r.clock)); _ = (progress"}}},
	{name: "delay-read-outside-lock", pkg: "./internal/sharding/", focus: "run:TestRerouteDuringAdd", guard: "a routed add reads a key's delay and records it as delayed under the lock reroute takes (liveness: an ownership change in between must not leave the key waiting)", edits: []edit{{"internal/sharding/queue.go", "		q.mu.Lock()\n		if d := q.router.Delay(item.String()); d > 0 {", "		if d := q.router.Delay(item.String()); d > 0 {\n			q.mu.Lock()"}, {"internal/sharding/queue.go", "deferred: was.deferred}\n			}\n		}\n		q.mu.Unlock()", "deferred: was.deferred}\n			}\n			q.mu.Unlock()\n		}"}}},
	// #26 holes B, E and F (branch guards).
	{name: "backup-defers-unbounded", pkg: "./internal/sharding/", focus: "run:TestBackupDefersOnce", guard: "a backup defers a due item to a working owner at most once (liveness: a hung owner's key is decided within two backup delays)", edits: []edit{{"internal/sharding/queue.go", "	if !delayed || was.deferred || q.progress == nil {\n", "	if !delayed || q.progress == nil {\n"}}},
	{name: "progress-counts-every-listed-key", pkg: controls, focus: "run:TestDecidedKeys", guard: "a request's status change is progress only on a key whose entry changed or that it waits in (liveness: another key's refreshes and renewals do not defer a backup)", edits: []edit{{"internal/controller/progress.go", "		if (i < 0 && l != locksv1.LockStatus{", "		if true || (i < 0 && l != locksv1.LockStatus{"}}},
	{name: "finalizer-policy-open", pkg: "./test/admission/", focus: "Hole E", guard: "only the manager's ServiceAccount removes a ProjectLock's finalizer (admission)", edits: []edit{{"config/admission/finalizer.yaml", "      request.userInfo.username == variables.manager || has(", "      true || request.userInfo.username == variables.manager || has("}}},
	{name: "unprotected-lease-granted", pkg: controls, focus: "the protection check", guard: "a request admitted under the policies is not granted on a holder Lease they do not protect", edits: []edit{{decide, "	case in.UnprotectedLeases[req.UID] != \"\" &&", "	case false && in.UnprotectedLeases[req.UID] != \"\" &&"}}},
	{name: "unprotected-lease-granted-admission", pkg: "./test/admission/", focus: "Hole F", guard: "the same, with the shipped policies and roles (bob's hand-made Lease, alice's Lease)", edits: []edit{{decide, "	case in.UnprotectedLeases[req.UID] != \"\" &&", "	case false && in.UnprotectedLeases[req.UID] != \"\" &&"}}},
	{name: "holder-lease-label-unchecked", pkg: controls, focus: "the protection check", guard: "a holder Lease without the label is unprotected even if annotated with a creator by hand", edits: []edit{{leases, "	case st.role == \"\":\n", "	case false && st.role == \"\":\n"}}},
	{name: "holder-lease-creator-unchecked", pkg: controls, focus: "the protection check", guard: "a holder Lease created by someone other than the request's owner or creator is unprotected for it", edits: []edit{{leases, "	case st.creator != owner && st.creator != requester:\n", "	case false && st.creator != owner && st.creator != requester:\n"}}},
	{name: "no-live-protection-read", pkg: controls, focus: "the live protection read", guard: "a holder Lease the cache shows unprotected is read live before the request is failed", edits: []edit{{leases, "leaseProblem(lr, key, st) != \"\" && !st.live {", "leaseProblem(lr, key, st) != \"\" && false {"}}},
	{name: "heartbeat-relabels-lease", pkg: "./pkg/workdir/", focus: "run:TestHeartbeatRecreatesUnlabelledLease", guard: "the heartbeat re-creates an unlabelled Lease (the policies protect only one created with the label)", edits: []edit{{"pkg/workdir/heartbeat.go", "		if lease.Labels[LabelRole] == \"\" {\n", "		if false {\n"}}},
	// Issue #26 (safety round three): holes A, C, D and the review's R1, R2.
	{name: "identity-joined-string", pkg: "./internal/queue/", focus: "run:TestDecideComparesIdentitiesStructurally", guard: "Decide compares holder identities field by field (owner, pull, session), never a joined owner#pull string", edits: []edit{{decide, "		id:    req.Spec.Holder.ID(),\n", "		id:    locksv1.HolderID{Owner: fmt.Sprintf(\"%s#%d\", req.Spec.Holder.Owner, req.Spec.Holder.Pull)},\n"}}},
	{name: "identity-key-not-injective", pkg: "./api/v1alpha1/", focus: "run:TestHolderIDIsStructural", guard: "the holder-identity index key is injective (length-prefixed fields)", edits: []edit{{"api/v1alpha1/holder.go", "func (id HolderID) Key() string {\n", "func (id HolderID) Key() string {\n\tif true {\n\t\treturn id.Owner + \"#\" + strconv.FormatInt(id.Pull, 10)\n\t}\n"}}},
	{name: "deadlock-victim-by-clock", pkg: safety, focus: "hole D: two detectors", guard: "the deadlock victim is ranked by the members' stored fields (priority aged to the cycle's newest queuedAt), not by the detector's clock and cache", edits: []edit{{detector, "	return p.Victim(ranked)\n", "	return p.Victim(c)\n"}}},
	{name: "deadlock-no-live-reread", pkg: safety, focus: "hole D: a detector on a cache", guard: "a deadlock cycle is re-read past the cache before its victim is failed", edits: []edit{{detector, "	reader := d.live\n", "	var reader client.Reader\n"}}},
	{name: "deadlock-holder-not-reread", pkg: safety, focus: "holder's release", guard: "a deadlock cycle's live re-read checks that each holder on it still holds its key", edits: []edit{{detector, "		if !held {\n", "		if false && !held {\n"}}},
	{name: "thaw-by-own-clock", pkg: safety, focus: "R1:", guard: "a freeze past its until holds grants until its reconciler writes the thaw (no deciding manager's clock ends it)", edits: []edit{{"internal/queue/freeze.go", "	return resolve(locks, flags, now, HoldsGrants)\n", "	return resolve(locks, flags, now, func(cl *locksv1.CommandLock) bool { return cl.Spec.Locked && (cl.Spec.Until == nil || now.Before(cl.Spec.Until.Time)) })\n"}}},
	{name: "thaw-of-old-generation", pkg: "./internal/queue/", focus: "run:TestResolveFreezes", guard: "a written thaw counts only for the CommandLock generation it was written for", edits: []edit{{"internal/queue/freeze.go", "	if cl.Spec.Until == nil || cl.Status.ObservedGeneration != cl.Generation {\n", "	if cl.Spec.Until == nil {\n"}}},
	{name: "all-speaks-for-apply", pkg: safety, focus: "R2:", guard: "under --disable-global-apply-lock, all's Drained does not speak for apply, which it cannot hold back", edits: []edit{{"internal/queue/freeze.go", "	return cl == locksv1.CommandAll && (command != CommandApply || !flags.DisableGlobalApplyLock)\n", "	return cl == locksv1.CommandAll\n"}}},
}

func main() {
	only := flag.String("only", "", "run only the mutants whose name contains this")
	dry := flag.Bool("dry", false, "apply and restore each mutant without running its tests: after a refactor, which edits no longer match the code")
	flag.Parse()
	os.Exit(runMutants(*only, *dry))
}

// runMutants runs the mutants whose name contains only and returns the exit status; every file
// it touched is restored before it returns.
func runMutants(only string, dry bool) int {
	originals := map[string][]byte{}
	restore := func() {
		for f, b := range originals {
			if err := os.WriteFile(f, b, 0o644); err != nil {
				fmt.Fprintf(os.Stderr, "RESTORE %s BY HAND: %v\n", f, err)
			}
		}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	go func() { <-sig; restore(); os.Exit(130) }()
	defer restore()

	if os.Getenv("KUBEBUILDER_ASSETS") == "" && !dry {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run `make mutants` (the envtest suites would fail in setup, which kills no mutant)")
		return 2
	}
	survived, killed, broken := 0, 0, 0
	for _, m := range mutants {
		if !strings.Contains(m.name, only) {
			continue
		}
		if err := apply(m, originals); err != nil {
			restore()
			fmt.Fprintf(os.Stderr, "mutant %s: %v (the code changed: update hack/mutants)\n", m.name, err)
			return 2
		}
		if dry {
			restore()
			clear(originals)
			fmt.Printf("%-34s applies\n", m.name)
			continue
		}
		start := time.Now()
		out, err := run(m)
		restore()
		clear(originals)
		first := firstFailure(out)
		verdict := "KILLED by " + first
		switch {
		case err == nil:
			verdict = "SURVIVED: no test noticed"
			survived++
		case notAKill(first, out):
			// A suite that cannot start, or code that does not compile, says nothing of the guard.
			verdict = "BROKEN (not a kill): " + first
			broken++
		default:
			killed++
		}
		fmt.Printf("%-26s %-8s %s (%s)\n  guard: %s\n", m.name, time.Since(start).Round(time.Second), verdict, m.focus, m.guard)
	}
	if dry {
		fmt.Println("dry run: every mutant selected applies")
		return 0
	}
	fmt.Printf("%d mutants killed, %d survived, %d broken\n", killed, survived, broken)
	switch {
	case survived > 0:
		return 1
	case broken > 0:
		return 2
	}
	return 0
}

// notAKill: the run failed before any spec or test could judge the mutant (a suite's setup or
// teardown, or the build).
func notAKill(first, out string) bool {
	return strings.Contains(first, "[BeforeSuite]") || strings.Contains(first, "[AfterSuite]") ||
		strings.Contains(first, "[SynchronizedBeforeSuite]") || strings.Contains(out, "[build failed]") ||
		strings.Contains(first, "build failed")
}

func apply(m mutant, originals map[string][]byte) error {
	for _, e := range m.edits {
		if _, ok := originals[e.file]; !ok {
			b, err := os.ReadFile(e.file)
			if err != nil {
				return err
			}
			originals[e.file] = b
		}
		cur, err := os.ReadFile(e.file)
		if err != nil {
			return err
		}
		if n := bytes.Count(cur, []byte(e.old)); n != 1 {
			return fmt.Errorf("%s: %q occurs %d times, want once", e.file, e.old, n)
		}
		if err := os.WriteFile(e.file, bytes.Replace(cur, []byte(e.old), []byte(e.new), 1), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func run(m mutant) (string, error) {
	args := []string{"test", "-count=1", m.pkg}
	if strings.HasPrefix(m.focus, "run:") {
		args = append(args, "-run", strings.TrimPrefix(m.focus, "run:"))
	} else {
		args = append(args, "-ginkgo.focus", m.focus)
	}
	cmd := exec.Command("go", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// firstFailure names the first failed spec or test in go test's output.
func firstFailure(out string) string {
	for _, line := range strings.Split(out, "\n") {
		if i := strings.Index(line, "[FAIL]"); i >= 0 {
			return strings.TrimSpace(stripColor(line[i+len("[FAIL]"):]))
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "--- FAIL") || strings.Contains(line, "build failed") {
			return strings.TrimSpace(line)
		}
	}
	return "a failing run"
}

func stripColor(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == 0x1b {
			for i < len(s) && s[i] != 'm' {
				i++
			}
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
