package main

// A spoke's grant ends on the hub only once its spoke has stopped it (docs/fleet.md, "A spoke's
// grant ends when its spoke has stopped it"; issue #45): the hub's side (internal/queue, the
// watchdog) and the agent's (internal/fleet/spoke). In a file of their own, as the other fleet
// areas.
func init() {
	mutants = append(mutants,
		mutant{name: "spoke-held-only-if-it-says-stops", pkg: queuePkg, focus: "run:TestLeaving", guard: "the hub awaits a stop only for a request whose agent says its stops: an older agent's released grant is handed on as before (a hub upgraded before its spokes)", edits: []edit{
			{"spoke-held-only-if-it-says-stops", " && lr.Annotations[locksv1.AnnotationConfirmsStops] == \"true\"\n", "\n"},
		}},
		mutant{name: "spoke-grant-awaits-its-spoke", pkg: queuePkg, focus: "run:TestLeaving", guard: "a spoke's released or deleted grant holds the key on the hub until its spoke has stopped it (its token in fleet.turnstile.dev/stopped) or its hub Lease lapses", edits: []edit{
			{"spoke-grant-awaits-its-spoke", "\tcase awaitsSpoke(e, in):\n", "\tcase false && awaitsSpoke(e, in):\n"},
		}},
		mutant{name: "spoke-grant-awaits-its-spoke-envtest", pkg: spokePkg, focus: "run:TestAGrantEndedOnTheHubPassesOnOnceItsSpokeStoppedIt", guard: "the same, seen through a spoke whose view of the hub lags: the key is not handed on while the spoke may still show the grant", edits: []edit{
			{"spoke-grant-awaits-its-spoke-envtest", "\tcase awaitsSpoke(e, in):\n", "\tcase false && awaitsSpoke(e, in):\n"},
		}},
		mutant{name: "watchdog-release-awaits-spoke", pkg: controls, focus: "run:TestPendingWork", guard: "the watchdog counts no pending work for a spoke's released grant that waits for its spoke (no decision has any until the spoke says so or its Lease lapses)", edits: []edit{
			{"watchdog-release-awaits-spoke", "\t\tcase held && lr.Spec.Release && !queue.AwaitsSpoke(lr):\n", "\t\tcase held && lr.Spec.Release:\n"},
		}},
		mutant{name: "spoke-says-stopped-after-the-stop", pkg: spokePkg, focus: "run:TestAGrantEndedOnTheHubPassesOnOnceItsSpokeStoppedIt", guard: "the agent says a grant ended on the hub is stopped only after the spoke request shows it no more", edits: []edit{
			{"spoke-says-stopped-after-the-stop", "\tif err := a.writeStatus(ctx, spoke, EndedStatus(spoke, hub, a.opts.Cluster, a.opts.Clock.Now())); err != nil {\n\t\treturn err\n\t}\n\treturn a.confirmStopped(ctx, hub)\n",
				"\tif err := a.confirmStopped(ctx, hub); err != nil {\n\t\treturn err\n\t}\n\twant := SpokeStatus(spoke, hub)\n\treturn a.writeStatus(ctx, spoke, want)\n"},
		}},
		mutant{name: "spoke-lets-go-only-to-live-requests", pkg: spokePkg, focus: "run:TestNotForDoneRequests", guard: "no grant is let go to a spoke request released or being deleted (its stop may have been said with the release)", edits: []edit{
			{"spoke-lets-go-only-to-live-requests", "\tif want.Phase == locksv1.PhaseGranted && spoke.Status.Phase != locksv1.PhaseGranted && (spoke.Spec.Release || spoke.DeletionTimestamp != nil) {\n", "\tif false {\n"},
		}},
	)
}
