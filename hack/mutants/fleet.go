package main

// The fleet's guards (docs/fleet.md, issue #45): a holder's cluster is part of its identity,
// wherever an identity is made or compared. In a file of their own so the list in main.go stays
// the grant path's.
const (
	apiPkg   = "./api/v1alpha1/"
	spokePkg = "./internal/fleet/spoke/"
)

func init() {
	mutants = append(mutants,
		mutant{name: "identity-cluster", pkg: queuePkg, focus: "run:TestDecideComparesIdentitiesStructurally", guard: "a request's holder identity includes its cluster: two gated Jobs of one name in two clusters never share a key", edits: []edit{
			{"identity-cluster", "\treturn HolderID{Owner: h.Owner, Pull: h.Pull, Session: h.Session, Cluster: h.Cluster}\n", "\treturn HolderID{Owner: h.Owner, Pull: h.Pull, Session: h.Session}\n"},
		}},
		mutant{name: "identity-key-cluster", pkg: apiPkg, focus: "run:TestHolderIDIsStructural", guard: "the holder-identity index key writes the cluster (length-prefixed): one owner, pull and session in two clusters are two keys", edits: []edit{
			{"identity-key-cluster", "\tif id.Cluster != \"\" {", "\tif false && id.Cluster != \"\" {"},
		}},
		mutant{name: "deadlock-holder-cluster", pkg: controls, focus: "run:TestWaitsFor", guard: "the deadlock detector takes a ProjectLock holder's identity with its cluster", edits: []edit{
			{"deadlock-holder-cluster", "\t\t\t\tk.holder = new(h.ID()) // every field, the cluster included\n", "\t\t\t\tk.holder = &deadlock.Identity{Owner: h.Owner, Pull: h.Pull, Session: h.Session}\n"},
		}},
		mutant{name: "spoke-uid-adopted", pkg: spokePkg, focus: "run:TestAgentRestartedLosesAndDoublesNothing", guard: "a hub request of a spoke request deleted and re-created under its name is deleted, never adopted", edits: []edit{
			{"spoke-uid-adopted", "\tcase err == nil && hub.Annotations[AnnotationSpokeUID] != string(spoke.UID):\n", "\tcase false && err == nil && hub.Annotations[AnnotationSpokeUID] != string(spoke.UID):\n"},
		}},
		mutant{name: "spoke-stamps-creator", pkg: spokePkg, focus: "run:TestSpokeRequestFollowsTheHub", guard: "the agent's hub requests record their creator themselves (a validating-only hub refuses a delegate's request without it)", edits: []edit{
			{"spoke-stamps-creator", "\tif err := a.self.Stamp(ctx, a.hub, hub); err != nil {\n", "\tif err := error(nil); err != nil {\n"},
		}},
		mutant{name: "spoke-lease-before-request", pkg: spokePkg, focus: "run:TestSpokeRequestFollowsTheHub", guard: "the spoke's hub Lease exists before the hub request that names it (else the hub releases it, HolderLost)", edits: []edit{
			{"spoke-lease-before-request", "\tif err := a.ensureLease(ctx, spoke.Namespace); err != nil {\n", "\tif err := error(nil); err != nil {\n"},
		}},
		mutant{name: "spoke-decides-nothing", pkg: spokePkg, focus: "run:TestSpokeRequestIsNeverDecidedInTheSpoke", guard: "a spoke runs no lock controller: the hub is the only authority of its keys", edits: []edit{
			{"spoke-decides-nothing", "\treturn NewRetentionReconciler(mgr.GetClient(), o.Retention, WithRouter(o.Router), WithClock(clk)).SetupWithManager(mgr)\n", "\treturn Setup(context.Background(), mgr, o)\n"},
		}},
		mutant{name: "spoke-renews-at-once", pkg: spokePkg, focus: "run:TestAttack2SlowHubStopsHoldersItStillAnswers", guard: "the agent renews its namespaces' hub Leases at once, so a slow hub's answers do not add up past the stop deadline", edits: []edit{
			{"spoke-renews-at-once", "\t\tsem = make(chan struct{}, renewWorkers)\n", "\t\tsem = make(chan struct{}, 1)\n"},
		}},
		mutant{name: "spoke-judges-before-the-hub", pkg: spokePkg, focus: "run:TestAttack2AgentRestartedDuringACutNeverStopsItsHolders", guard: "an agent whose hub cache has not synced (started while the hub does not answer) still judges its running holders by the partition rule, and stops them", edits: []edit{
			{"spoke-judges-before-the-hub", "\tif !a.hubSynced.Load() {\n\t\treturn a.beforeHub(ctx, &spoke, err)\n", "\tif false {\n\t\treturn a.beforeHub(ctx, &spoke, err)\n"},
		}},
		mutant{name: "spoke-lease-fresh-before-request", pkg: spokePkg, focus: "run:TestAttack2RequestAfterAnIdleSpellIsLostAtOnce", guard: "a request's hub Lease is renewed first unless renewed within a renewal period: an idle namespace's Lease lapses, and a request named on it would be lost at once", edits: []edit{
			{"spoke-lease-fresh-before-request", "!st.Renewed.IsZero() && a.opts.Clock.Since(st.Renewed) < a.opts.Settings.RenewEvery() {", "!st.Renewed.IsZero() {"},
		}},
		mutant{name: "spoke-retry-capped", pkg: spokePkg, focus: "run:TestRetryBackoffIsCapped", guard: "a spoke request whose reconcile failed (a stop at the deadline not written yet) is tried again within 500 ms, not after controller-runtime's backoff of up to 1000 s", edits: []edit{
			{"spoke-retry-capped", "\treturn workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, maxRetryDelay)\n", "\treturn workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, 1000*time.Second)\n"},
		}},
		mutant{name: "spoke-adopts-only-its-own", pkg: spokePkg, focus: "run:^TestAttack$/(HubUserSquatsASpokeRequestsHubName|HashedNameCollisionDeletesAnothersHubRequest)", guard: "the agent adopts, copies, patches and deletes only the hub requests it made for that spoke request (its creator, its cluster, the spoke request's name), never one dressed as such", edits: []edit{
			{"spoke-adopts-only-its-own", "\treturn hub.Annotations[whoami.AnnotationCreatedBy] == self && hub.Spec.Holder.Cluster == a.opts.Cluster &&\n", "\treturn self == self || hub.Spec.Holder.Cluster == a.opts.Cluster &&\n"},
		}},
		mutant{name: "spoke-deletes-only-its-own", pkg: spokePkg, focus: "run:^TestAttack$/HashedNameCollisionDeletesAnothersHubRequest", guard: "a spoke request deleted deletes only the hub request made for it, not another's that its name shortens to", edits: []edit{
			{"spoke-deletes-only-its-own", "\tif !mine || uid != \"\" && cur.Annotations[AnnotationSpokeUID] != uid {\n", "\tif _ = mine; uid != \"\" && cur.Annotations[AnnotationSpokeUID] != uid {\n"},
		}},
		mutant{name: "spoke-refused-edit-copies-status", pkg: spokePkg, focus: "run:^TestAttack$/EditRefusedByTheHubFreezesTheSpokesGrant", guard: "a change the hub refuses still lets the hub's status (an expiry, a release) through to the spoke", edits: []edit{
			{"spoke-refused-edit-copies-status", "\tif !isRefusal {\n", "\tif true || !isRefusal {\n"},
		}},
		mutant{name: "spoke-judged-by-own-expiry", pkg: spokePkg, focus: "run:^TestAttack$/(ShortTTLInTheNamespaceStopsAnothersHolder|HubUserLabelledRequestStopsASpokesHolders)", guard: "a holder's partition deadline is its own grant's end, not the earliest of the namespace's", edits: []edit{
			{"spoke-judged-by-own-expiry", "\tst, v := a.judge(ctx, spoke.Namespace, []locksv1.LockRequest{*hub})\n", "\tvar all locksv1.LockRequestList\n\t_ = a.hubs.List(ctx, &all, client.InNamespace(spoke.Namespace))\n\tst, v := a.judge(ctx, spoke.Namespace, all.Items)\n"},
		}},
		mutant{name: "spoke-grant-gone-lost", pkg: spokePkg, focus: "run:^TestAttack$/HubAdminDeletesAGrantedHubRequest", guard: "a granted spoke request whose hub request is gone has lost its grant, and is not asked for again", edits: []edit{
			{"spoke-grant-gone-lost", "\tcase apierrors.IsNotFound(err) && spoke.Status.Phase == locksv1.PhaseGranted:\n", "\tcase false && apierrors.IsNotFound(err) && spoke.Status.Phase == locksv1.PhaseGranted:\n"},
		}},
		mutant{name: "spoke-name-taken-said", pkg: spokePkg, focus: "run:^TestAttack$/^HubUserSquatsASpokeRequestsHubName$", guard: "a spoke request whose hub name someone else's request holds says so (HubNameTaken) rather than wait silently", edits: []edit{
			{"spoke-name-taken-said", "\t\tmine, err := a.ours(ctx, &cur, spoke.Name)\n", "\t\tmine, err := true, error(nil)\n"},
		}},
		mutant{name: "spoke-stop-at-deadline", pkg: spokePkg, focus: "run:TestPartitionAction", guard: "a spoke cut off from the hub stops its running holders at the stop deadline (skew.Judge's Stop), before the hub can hand their locks on", edits: []edit{
			{"spoke-stop-at-deadline", "\tcase running && v.Stop:\n", "\tcase false && running && v.Stop:\n"},
		}},
		mutant{name: "spoke-held-while-unreachable", pkg: spokePkg, focus: "run:TestPartitionAction", guard: "a hub grant is not let go in the spoke while the partition rule lets nothing go (skew.Judge's LetGo false)", edits: []edit{
			{"spoke-held-while-unreachable", "\tcase !v.LetGo:\n", "\tcase false && !v.LetGo:\n"},
		}},
		mutant{name: "spoke-refusal-reported", pkg: spokePkg, focus: "run:TestRefusedClusterSaysSoInTheSpoke", guard: "a spoke request whose mirror the hub refuses (a cluster not a member, a name not the spoke's) says so (Stalled, FleetRefused, the hub's words) instead of waiting silently", edits: []edit{
			{"spoke-refusal-reported", "\tif !refused {\n", "\tif true || !refused {\n"},
		}},
		mutant{name: "spoke-lost-stays-lost", pkg: spokePkg, focus: "run:TestPartitionStopsHoldersBeforeTheHubLetsGo", guard: "a spoke request whose holder was stopped on a partition stays released (HubUnreachable): the hub's old grant is never shown again", edits: []edit{
			{"spoke-lost-stays-lost", "\tif LostToPartition(&spoke) {\n", "\tif false && LostToPartition(&spoke) {\n"},
		}},
		mutant{name: "spoke-release-after-holder-gone", pkg: spokePkg, focus: "run:TestHealedCutReleasesOnlyOnceTheHolderIsGone", guard: "the hub request of a holder the agent stopped is not released while the holder may still run (a cut healed just after the stop), until the hub could hand its lock on anyway", edits: []edit{
			{"spoke-release-after-holder-gone", "\tif until, held := a.holdsRelease(spoke); held {\n", "\tif until, held := a.holdsRelease(spoke); false && held {\n"},
		}},
		mutant{name: "spoke-wait-hand-on-capped", pkg: spokePkg, focus: "run:TestParseWaitTrustsTheStop", guard: "the hand-on time read back from a stopped request's annotation (which its owner may write) is taken no later than the stop + 1 s + L: it cannot hold the hub request from release longer", edits: []edit{
			{"spoke-wait-hand-on-capped", "\tif latest := lr.Status.FinishedAt.Add(time.Second + lease); t.After(latest) {\n", "\tif latest := lr.Status.FinishedAt.Add(time.Second + lease); false && t.After(latest) {\n"},
		}},
		mutant{name: "spoke-wait-outlived-at-hand-on", pkg: spokePkg, focus: "run:TestStoppedHolderGoneOrOutlivedTheHandOn", guard: "a stopped holder still running when the hub can hand its locks on is reported (HolderOutlivedLease), the evidence that the stop did not keep the promise", edits: []edit{
			{"spoke-wait-outlived-at-hand-on", "\tcase !now.Before(w.handOn):\n", "\tcase false && !now.Before(w.handOn):\n"},
		}},
	)
}
