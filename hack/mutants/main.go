// Command mutants takes each guard of the grant path out of the code, one at a time, runs the
// tests that should notice, and fails if any mutant survives: a guard whose removal no test
// notices is a guard nobody has shown is needed. It edits the working tree and restores every
// file it touched, also when interrupted.
//
// Every guard carries a marker comment in the code, directly above it (markers.go has the rule):
// a mutant's edits name markers, not files, so a refactor that moves a guard moves its marker
// with it, and one that drops a marker, or leaves one no mutant names, fails the tool.
//
//	go run ./hack/mutants             # every mutant
//	go run ./hack/mutants -only token # the mutants whose name contains "token"
//	go run ./hack/mutants -dry        # check every marker, and that every mutant applies and builds
//
// The full run needs KUBEBUILDER_ASSETS (make mutants sets it); -dry needs nothing but Go
// (make mutants-dry, in CI).
package main

// edit replaces old with new inside the region of the marker "guard:<marker>" (old must occur
// exactly once there).
type edit struct{ marker, old, new string }

// mutant is one guard taken out, and the tests that must then fail.
type mutant struct {
	name  string
	guard string // what the guard is, for the report
	edits []edit // the first names marker <name>, the next <name>/2, <name>/3...
	pkg   string // the test package
	focus string // a Ginkgo focus, or a -run pattern for plain tests ("run:...")
}

const (
	safety    = "./test/safety/"
	runPlugin = "./cmd/kubectl-turnstile/"
	controls  = "./internal/controller/"
)

var mutants = []mutant{
	// kubectl turnstile run: the whole process tree under the lock, stopped before the lease can
	// lapse (cmd/kubectl-turnstile/run*.go; the keeper is tested as a real process tree).
	{name: "run-keeper-not-subreaper", pkg: runPlugin, focus: "run:TestKeeperStopsWhatTheCommandLeftBehind", guard: "run's keeper is a child subreaper, so a double-forked orphan stays its to stop and wait for", edits: []edit{{"run-keeper-not-subreaper", "	if err := proctree.BecomeSubreaper(); err != nil {\n\t\tsay(", "	if err := error(nil); err != nil {\n\t\tsay("}}},
	{name: "run-leftovers-not-stopped", pkg: runPlugin, focus: "run:TestKeeperStopsWhatTheCommandLeftBehind", guard: "what the command leaves running when it exits is stopped before the locks are released", edits: []edit{{"run-leftovers-not-stopped", "k.stop(syscall.SIGTERM)", "_ = k.stop"}}},
	{name: "run-signal-only-the-group", pkg: runPlugin, focus: "run:TestKeeperForwardsSignalsToProcessesThatLeftTheGroup", guard: "signals reach the descendants that left the command's process group", edits: []edit{{"run-signal-only-the-group", "		if groupAlive && p.PGID == pgid {\n", "		if true {\n"}}},
	{name: "run-keeper-ignores-deadline", pkg: runPlugin, focus: "run:TestKeeperStopsTheTreeAtTheDeadline", guard: "the keeper stops the tree at the deadline run sends it (before the lease can lapse)", edits: []edit{{"run-keeper-ignores-deadline", "k.deadline.Reset(time.Until(time.Unix(0, ns)))", "_ = ns"}}},
	{name: "run-keeper-outlives-run", pkg: runPlugin, focus: "run:TestKeeperStopsTheTreeWhenRunDies", guard: "the keeper stops the tree when run dies (its control pipe closes)", edits: []edit{{"run-keeper-outlives-run", "k.stop(syscall.SIGTERM) // run is gone", "// run is gone"}}},
	{name: "run-no-sigkill-after-grace", pkg: runPlugin, focus: "run:TestKeeperKillsAfterGrace", guard: "what ignores SIGTERM gets SIGKILL after --grace", edits: []edit{{"run-no-sigkill-after-grace", "k.kill.Reset(k.grace)", "_ = k.grace"}}},
	{name: "run-grace-unchecked", pkg: runPlugin, focus: "run:TestFits", guard: "a --grace that cannot fit in the lease (or ttl) with a failed renewal and its retry is refused", edits: []edit{{"run-grace-unchecked", "	if grace+stopMargin+slack <= d/2 {", "	if true || grace+stopMargin+slack <= d/2 {"}}},
	{name: "run-deadline-ignores-expiry", pkg: runPlugin, focus: "run:TestStopAt", guard: "the tree is stopped before the grant can expire, not only before the Lease can lapse", edits: []edit{{"run-deadline-ignores-expiry", "!expiresAt.IsZero() && exp.Before(d)", "false && exp.Before(d)"}}},
	{name: "run-shared-session", pkg: runPlugin, focus: "run:TestHolderSession", guard: "each run is a holder of its own (a fresh spec.holder.session)", edits: []edit{{"run-shared-session", "	return \"run-\" + randomHex(6), nil", "	return \"\", nil"}}},
	{name: "no-finalizer", pkg: safety, focus: "hole 1", guard: "ProjectLocks carry the release-holders finalizer (created with it, older ones given it)", edits: []edit{
		{"no-finalizer", "	lock.Finalizers = []string{locksv1.ReleaseHoldersFinalizer}\n", ""},
		{"no-finalizer/2", "if lock.DeletionTimestamp != nil || slices.Contains(", "if true || lock.DeletionTimestamp != nil || slices.Contains("},
	}},
	{name: "counter-token", pkg: safety, focus: "hole 3|hole 4", guard: "a grant's token is the ProjectLock's resourceVersion", edits: []edit{{"counter-token", "return max(prev+1, revision, leaving+1)", "return prev + 1 + 0*revision + 0*leaving"}}},
	{name: "token-below-leaving-holder", pkg: safety, focus: "hole 3", guard: "a new holder's token is above the tokens of the holders leaving in the same write", edits: []edit{
		{"token-below-leaving-holder", "return max(prev+1, revision, leaving+1)", "return max(prev+1, revision, 0*leaving)"},
		{"token-below-leaving-holder/2", ", unknown && newHolder\n", ", false && unknown && newHolder\n"},
	}},
	{name: "overlay-exact-version", pkg: safety, focus: "hole 2", guard: "the overlay serves our write over any older cached version", edits: []edit{{"overlay-exact-version", "return c != 0 && w != 0 && c < w", "return c != 0 && w != 0 && c == w-1"}}},
	{name: "deleting-holder-unwritten", pkg: safety, focus: "hole 5", guard: "a holder whose object is being deleted is written Released first", edits: []edit{{"deleting-holder-unwritten", "	case req.DeletionTimestamp != nil:\n", "	case req.DeletionTimestamp != nil && false:\n"}}},
	{name: "no-live-freeze-check", pkg: safety, focus: "hole 6", guard: "the CommandLocks are read live before a commanded request holds", edits: []edit{{"no-live-freeze-check", "len(commands) > 0 {\n", "false && len(commands) > 0 {\n"}}},
	{name: "live-freeze-check-without-all", pkg: safety, focus: "hole 6", guard: "the live freeze check also reads the CommandLock that freezes every command", edits: []edit{{"live-freeze-check-without-all", "	live := map[string]bool{locksv1.CommandAll: true}\n", "	live := map[string]bool{}\n"}}},
	{name: "drained-from-cache", pkg: safety, focus: "live ProjectLock list", guard: "Drained is confirmed by a live ProjectLock list", edits: []edit{{"drained-from-cache", "		granting, err := r.granting(ctx, &cl)\n", "		granting, err := 0, error(nil)\n"}}},
	{name: "drained-ignores-unconfirmed-grants", pkg: safety, focus: "ProjectLock write came before the freeze", guard: "Drained counts a request the ProjectLock lists whose held write has not landed yet (an unconfirmed grant)", edits: []edit{{"drained-ignores-unconfirmed-grants", "			if lr.Status.Phase == locksv1.PhaseGranted || !holds(lr, pl.Name) {\n", "			if lr.Status.Phase == locksv1.PhaseGranted {\n"}}},
	{name: "fifo-by-clock", pkg: safety, focus: "hole 7", guard: "queues order by the API server's order (creation, arrival revision), not queuedAt", edits: []edit{{"fifo-by-clock", "	if c := a.req.CreationTimestamp.Compare(b.req.CreationTimestamp.Time); c != 0 {\n\t\treturn c\n\t}\n\tif a.ticket != b.ticket {", "	if c := a.arrival.Compare(b.arrival); c != 0 {\n\t\treturn c\n\t}\n\tif a.ticket != b.ticket {"}}},
	{name: "no-live-holder-read", pkg: safety, focus: "live holder read", guard: "a holder missing from the cache is looked up live before its key moves on", edits: []edit{{"no-live-holder-read", "		if byUID[uid] {\n", "		if true || byUID[uid] {\n"}}},
	{name: "no-live-holder-read-controller", pkg: controls, focus: "the live holder read\\)", guard: "the same live holder read, seen by the controller suite (a cache without the holder)", edits: []edit{{"no-live-holder-read-controller", "		if byUID[uid] {\n", "		if true || byUID[uid] {\n"}}},
	{name: "no-live-lease-read", pkg: controls, focus: "live Lease read", guard: "a holder Lease the cache shows lapsed is read live before its holder is released", edits: []edit{{"no-live-lease-read", "if st := judgeLease(key, &lease, now); st.lost == \"\" {", "if st := judgeLease(key, &lease, now); true || st.lost == \"\" {"}}},
	{name: "drained-holder-from-cache", pkg: controls, focus: "live holder read of Drained", guard: "a ProjectLock holder missing from the cache is read live before Drained is said", edits: []edit{{"drained-holder-from-cache", "			if lr == nil {\n", "			if lr == nil {\n\t\t\t\tcontinue\n"}}},
	{name: "deadlock-victim-moved-on", pkg: controls, focus: "victim's phase check", guard: "a deadlock victim is failed only while the cycle still stands, re-read live: every member still waits", edits: []edit{{"deadlock-victim-moved-on", "		if lr.Status.Phase != locksv1.PhasePending || !isLive(&lr) || lr.Spec.Holder.ID() != e.From || !waits || ref.Key != e.Key {\n", "		if false && (lr.Status.Phase != locksv1.PhasePending || !isLive(&lr) || lr.Spec.Holder.ID() != e.From || !waits || ref.Key != e.Key) {\n"}}},
	{name: "deadlock-edge-to-departed-holder", pkg: controls, focus: "run:TestWaitsFor", guard: "a ProjectLock's holder counts for the wait-for graph only while one of its requests is live", edits: []edit{{"deadlock-edge-to-departed-holder", "			if live[r.UID] {\n", "			if true || live[r.UID] {\n"}}},
	{name: "deadlock-skip-with-waiters-behind", pkg: controls, focus: "run:TestCannotCloseCycle", guard: "a new wait with someone queued behind it is checked for cycles", edits: []edit{{"deadlock-skip-with-waiters-behind", "	if !last {\n\t\treturn false\n\t}\n", ""}}},
	{name: "deadlock-skip-while-holding", pkg: controls, focus: "run:TestCannotCloseCycle", guard: "a new wait whose request holds a key is checked for cycles", edits: []edit{{"deadlock-skip-while-holding", "		if l.Held {\n", "		if false && l.Held {\n"}}},
	{name: "no-live-projectlock-read", pkg: safety, focus: "live ProjectLock read\\)", guard: "a claimant the cached ProjectLock does not list is checked against the live one", edits: []edit{{"no-live-projectlock-read", "if claims && (!listsAllClaimants(in.Lock, in.Requests, req.Name) ||", "if claims && (false && !listsAllClaimants(in.Lock, in.Requests, req.Name) ||"}}},
	{name: "stale-projectlock-token", pkg: safety, focus: "hole 8", guard: "a holder showing a token above the cached ProjectLock's makes the ProjectLock be read live", edits: []edit{{"stale-projectlock-token", " || tokenAhead(in.Lock, in.Requests, req.Name)) {", " || false && tokenAhead(in.Lock, in.Requests, req.Name)) {"}}},
	{name: "no-reissue", pkg: "./internal/queue/", focus: "run:TestDecideUnconfirmedGrant|TestDecideRandomized", guard: "an unconfirmed grant is written only after a ProjectLock write of the same decision", edits: []edit{{"no-reissue", "			st.reissue = true\n", ""}}},
	{name: "no-demotion", pkg: safety, focus: "demotion", guard: "an unconfirmed grant frozen since is taken back before the ProjectLock drops it", edits: []edit{{"no-demotion", "			if e.frozen != nil {\n\t\t\t\tst.entries = append(st.entries, demoted(e))\n\t\t\t\tcontinue\n\t\t\t}\n", ""}}},
	{name: "again-drops-demotions", pkg: "./internal/queue/", focus: "run:TestDecideUnconfirmedGrant", guard: "the Again split writes its demotions before the ProjectLock drops them", edits: []edit{{"again-drops-demotions", "	d := Decision{Again: true, Demote: demote}\n", "	d := Decision{Again: true}\n\t_ = demote\n"}}},
	{name: "demotion-deferred-as-refresh", pkg: "./internal/queue/", focus: "run:TestDemotionIsNeverDeferredAsARefresh", guard: "a demotion is a fence, never a position refresh left for later past the refresh budget", edits: []edit{{"demotion-deferred-as-refresh", "e.req.Status.Phase == locksv1.PhasePending && !e.demoted\n", "e.req.Status.Phase == locksv1.PhasePending\n"}}},
	{name: "demotion-no-fence", pkg: safety, focus: "hole A", guard: "a demotion raises status.fences, so it changes the stored object (an unchanged write keeps its rv and fences nothing)", edits: []edit{{"demotion-no-fence", "			st.Fences = e.req.Status.Fences + 1\n", ""}}},
	{name: "finish-after-projectlock", pkg: safety, focus: "write order", guard: "outgoing holders are written final before the ProjectLock moves on", edits: []edit{
		{"finish-after-projectlock", "	for _, u := range d.Finish {\n", "	for _, u := range d.Finish[:0] {\n"},
		{"finish-after-projectlock/2", "Lock: d.Lock, Why: lockWhy(d, lock)})\n\t}\n", "Lock: d.Lock, Why: lockWhy(d, lock)})\n\t}\n\tfor _, u := range d.Finish {\n\t\tw = append(w, requestWrite(WriteFinish, StepLock, u, \"after the ProjectLock\"))\n\t}\n"},
	}},
	{name: "update-filter-ignores-fences", pkg: controls, focus: "run:TestUpdateFilterFailsClosed", guard: "an update is relevant unless it changes only the explicitly ignored fields (a demotion's status.fences wakes the key)", edits: []edit{{"update-filter-ignores-fences", "{\"QueuePosition\", \"BlockedBy\", \"Conditions\"},", "{\"QueuePosition\", \"BlockedBy\", \"Conditions\", \"Fences\"},"}}},
	{name: "executor-goes-on-after-failure", pkg: safety, focus: "hole", guard: "the executor stops a plan at its first failed write: a grant after a ProjectLock write that lost its race would land unlisted", edits: []edit{{"executor-goes-on-after-failure", "		if err := x.do(ctx, w); err != nil {\n", "		if err := x.do(ctx, w); err != nil && false {\n"}}},
	{name: "aging-by-own-clock", pkg: "./internal/queue/", focus: "run:TestAgingIsARatchetAcrossManagers", guard: "a waiter ranks at least as high as the ProjectLock's queue shows it (liveness: managers whose clocks straddle an aging step must not rewrite each other's queue)", edits: []edit{{"aging-by-own-clock", "	agedAsShown(lock, entries, in.Config, now)\n", ""}}},
	{name: "aging-ratchet-unbounded", pkg: "./internal/queue/", focus: "run:TestAgedAsShownTakesOneStepAtMost", guard: "the shown rank is taken at most one aging step above the deciding clock's", edits: []edit{{"aging-ratchet-unbounded", "		if rank > e.priority && rank <= AgedPriority(e.req.Spec.Priority, now.Sub(e.arrival)+cfg.AgingStep, cfg.AgingStep) {", "		if rank > e.priority {"}}},
	{name: "backup-ignores-owner", pkg: "./internal/sharding/", focus: "working owner", guard: "a backup leaves a key alone while its owner is seen deciding it (cost, not safety: no reconcile or 409 from a backup of a working owner)", edits: []edit{{"backup-ignores-owner", "sharding.WithProgress(progress), sharding.WithQueueClock(r.clock)", "sharding.WithQueueClock(r.clock)); _ = (progress"}}},
	{name: "delay-read-outside-lock", pkg: "./internal/sharding/", focus: "run:TestRerouteDuringAdd", guard: "a routed add reads a key's delay and records it as delayed under the lock reroute takes (liveness: an ownership change in between must not leave the key waiting)", edits: []edit{{"delay-read-outside-lock", "		q.mu.Lock()\n		if j := Judge(q.router, item.String()); !j.Owner {", "		if j := Judge(q.router, item.String()); !j.Owner {\n			q.mu.Lock()"}, {"delay-read-outside-lock/2", "deferred: was.deferred}\n			}\n		}\n		q.mu.Unlock()", "deferred: was.deferred}\n			}\n			q.mu.Unlock()\n		}"}}},
	// #26 holes B, E and F (branch guards).
	{name: "backup-defers-unbounded", pkg: "./internal/sharding/", focus: "run:TestBackupDefersOnce", guard: "a backup defers a due item to a working owner at most once (liveness: a hung owner's key is decided within two backup delays)", edits: []edit{{"backup-defers-unbounded", "	return !j.Owner && !deferredBefore && lastDecided.After(due)\n", "	return !j.Owner && lastDecided.After(due)\n"}}},
	{name: "progress-counts-every-listed-key", pkg: controls, focus: "run:TestDecidedKeys", guard: "a request's status change is progress only on a key whose entry changed or that it waits in (liveness: another key's refreshes and renewals do not defer a backup)", edits: []edit{{"progress-counts-every-listed-key", "		if (i < 0 && l != locksv1.LockStatus{", "		if true || (i < 0 && l != locksv1.LockStatus{"}}},
	{name: "finalizer-policy-open", pkg: "./test/admission/", focus: "Hole E", guard: "only the manager's ServiceAccount removes a ProjectLock's finalizer (admission)", edits: []edit{{"finalizer-policy-open", "      request.userInfo.username == variables.manager || has(", "      true || request.userInfo.username == variables.manager || has("}}},
	{name: "unprotected-lease-granted", pkg: controls, focus: "the protection check", guard: "a request admitted under the policies is not granted on a holder Lease they do not protect", edits: []edit{{"unprotected-lease-granted", "	case in.UnprotectedLeases[req.UID] != \"\" &&", "	case false && in.UnprotectedLeases[req.UID] != \"\" &&"}}},
	{name: "unprotected-lease-granted-admission", pkg: "./test/admission/", focus: "Hole F", guard: "the same, with the shipped policies and roles (bob's hand-made Lease, alice's Lease)", edits: []edit{{"unprotected-lease-granted-admission", "	case in.UnprotectedLeases[req.UID] != \"\" &&", "	case false && in.UnprotectedLeases[req.UID] != \"\" &&"}}},
	{name: "holder-lease-label-unchecked", pkg: controls, focus: "the protection check", guard: "a holder Lease without the label is unprotected even if annotated with a creator by hand", edits: []edit{{"holder-lease-label-unchecked", "	case st.role == \"\":\n", "	case false && st.role == \"\":\n"}}},
	{name: "holder-lease-creator-unchecked", pkg: controls, focus: "the protection check", guard: "a holder Lease created by someone other than the request's owner or creator is unprotected for it", edits: []edit{{"holder-lease-creator-unchecked", "	case st.creator != owner && st.creator != requester:\n", "	case false && st.creator != owner && st.creator != requester:\n"}}},
	{name: "no-live-protection-read", pkg: controls, focus: "the live protection read", guard: "a holder Lease the cache shows unprotected is read live before the request is failed", edits: []edit{{"no-live-protection-read", "leaseProblem(lr, key, st) != \"\" && !st.live {", "leaseProblem(lr, key, st) != \"\" && false {"}}},
	{name: "heartbeat-relabels-lease", pkg: "./pkg/workdir/", focus: "run:TestHeartbeatRecreatesUnlabelledLease", guard: "the heartbeat re-creates an unlabelled Lease (the policies protect only one created with the label)", edits: []edit{{"heartbeat-relabels-lease", "		if lease.Labels[LabelRole] == \"\" {\n", "		if false {\n"}}},
	// Issue #26 (safety round three): holes A, C, D and the review's R1, R2.
	{name: "identity-joined-string", pkg: "./internal/queue/", focus: "run:TestDecideComparesIdentitiesStructurally", guard: "Decide compares holder identities field by field (owner, pull, session), never a joined owner#pull string", edits: []edit{{"identity-joined-string", "		id:    req.Spec.Holder.ID(),\n", "		id:    locksv1.HolderID{Owner: fmt.Sprintf(\"%s#%d\", req.Spec.Holder.Owner, req.Spec.Holder.Pull)},\n"}}},
	{name: "identity-key-not-injective", pkg: "./api/v1alpha1/", focus: "run:TestHolderIDIsStructural", guard: "the holder-identity index key is injective (length-prefixed fields)", edits: []edit{{"identity-key-not-injective", "func (id HolderID) Key() string {\n", "func (id HolderID) Key() string {\n\tif true {\n\t\treturn id.Owner + \"#\" + strconv.FormatInt(id.Pull, 10)\n\t}\n"}}},
	{name: "deadlock-victim-by-clock", pkg: safety, focus: "hole D: two detectors", guard: "the deadlock victim is ranked by the members' stored fields (priority aged to the cycle's newest queuedAt), not by the detector's clock and cache", edits: []edit{{"deadlock-victim-by-clock", "	return p.Victim(ranked)\n", "	return p.Victim(c)\n"}}},
	{name: "deadlock-no-live-reread", pkg: safety, focus: "hole D: a detector on a cache", guard: "a deadlock cycle is re-read past the cache before its victim is failed", edits: []edit{{"deadlock-no-live-reread", "	reader := d.live\n", "	var reader client.Reader\n"}}},
	{name: "deadlock-holder-not-reread", pkg: safety, focus: "holder's release", guard: "a deadlock cycle's live re-read checks that each holder on it still holds its key", edits: []edit{{"deadlock-holder-not-reread", "		if !held {\n", "		if false && !held {\n"}}},
	{name: "thaw-by-own-clock", pkg: safety, focus: "R1:", guard: "a freeze past its until holds grants until its reconciler writes the thaw (no deciding manager's clock ends it)", edits: []edit{{"thaw-by-own-clock", "	return resolve(locks, flags, now, HoldsGrants)\n", "	return resolve(locks, flags, now, func(cl *locksv1.CommandLock) bool { return cl.Spec.Locked && (cl.Spec.Until == nil || now.Before(cl.Spec.Until.Time)) })\n"}}},
	{name: "thaw-of-old-generation", pkg: "./internal/queue/", focus: "run:TestResolveFreezes", guard: "a written thaw counts only for the CommandLock generation it was written for", edits: []edit{{"thaw-of-old-generation", "	if cl.Spec.Until == nil || cl.Status.ObservedGeneration != cl.Generation {\n", "	if cl.Spec.Until == nil {\n"}}},
	{name: "all-speaks-for-apply", pkg: safety, focus: "R2:", guard: "under --disable-global-apply-lock, all's Drained does not speak for apply, which it cannot hold back", edits: []edit{{"all-speaks-for-apply", "	return cl == locksv1.CommandAll && (command != CommandApply || !flags.DisableGlobalApplyLock)\n", "	return cl == locksv1.CommandAll\n"}}},
}
