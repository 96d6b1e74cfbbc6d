/*
 * fleetack.pml -- a spoke's grant ends on the hub only once its spoke has stopped showing it
 * (issue #45; api/v1alpha1 AnnotationSpokeStopped, `fleet.turnstile.dev/stopped`).
 *
 * The hub decides who holds key k: G, the hub request that mirrors the spoke's request S, or H,
 * a holder elsewhere that waits for k. The spoke's agent copies G's decision into S; the
 * workload runs while S shows Granted (the workload controller reads S live), so "S Granted"
 * is "the spoke's holder runs". The agent reads G only through a view that lags: G's versions
 * in order, each after any delay (the view moves one version at a time, and moving through
 * versions without acting is skipping them). G's versions carry its phase, token, the ending
 * written on it (spec.release or a deletion, by an admin), the ack annotation and, for the ttl,
 * the epoch of its expiresAt (a ttl renewal writes a later one). Expiry is a matter of clocks,
 * not a write: the hub's clock passes the current expiresAt (hExp) and the agent's clock passes
 * the expiresAt of an epoch (aEp), each at any moment once G is granted, in either order.
 *
 * The hub (the lock controller), each step any of:
 *   - grants a waiting G, or H, when nobody holds k, with a token above every earlier one;
 *   - writes a waiting G that is ending final at once (it holds nothing);
 *   - writes a granted G that is ending final, and only then is k free for H, once G's ack is
 *     G's token: ending = released, deleted (spec.release or deletionTimestamp on the hub
 *     request) or expired by the hub's clock;
 *   - lands an ack patch that is in flight (two may be: a patch whose answer the agent gave up
 *     on, or forgot in a crash, can still land later, on whatever the name holds then).
 * The agent, each step any of (each one atomic: S is written with a resourceVersion
 * precondition, so one write of S against S as stored):
 *   - its view moves on one version;
 *   - let-go: the view shows G Granted T, not released, not deleted, not expired by the agent's
 *     clock, and S is Waiting (neither final nor Granted): S := Granted T;
 *   - stop: the view shows G ending (or final) and S shows Granted: S := final (the workload
 *     stops; S not Granted is "not running", as a force-release is in one cluster); a final G
 *     is copied to S whatever S shows;
 *   - ack: the view shows G granted and ending, with token T and no ack T, and S is final or
 *     does not show Granted T: sends the patch `stopped: T` on G (in flight; the agent waits for
 *     its answer, or gives up on it and may send it again; once per version of its view);
 *   - restart (CRASH budget): forgets what it waits for, and starts with a view at least as new
 *     as its last write that it saw answered (FRESH=0: a list from a lagging API server cache
 *     can be older than the view before the crash), or with G as stored (FRESH=1, a quorum
 *     list); S as stored.
 * The environment: an admin releases or deletes G (ENDS times, over the incarnations of G);
 * the clocks; ttl renewals (RENEW of them, by the agent carrying S's spec.ttl); the agent's
 * patches timing out (LOSS); with REMAKE=1, H lets k go and asks again, and the spoke's user
 * deletes the final S and makes it anew under its name, so the agent makes G anew (a second
 * incarnation, tokens above H's).
 *
 * Checked after every write of S or of who holds k:
 *   NOOVERLAP  never S Granted while H holds k.
 * With PROGRESS=1 (pan -a -f, weak fairness): once the environment has stopped, an ending G
 * is written final and H holds k (ltl live).
 *
 * Mutations (-DMUTATION=n), each refuted by a trail:
 *   1  the hub hands k on as soon as G is ending, without the ack (the old protocol without
 *      its live read)
 *   2  the ack before the stop: the agent acks whatever S shows, and stops S after
 *   3  the hub takes any ack, not only G's token (REMAKE: an ack for the first G lands on the
 *      second, made anew under the same name)
 *   4  the let-go does not look at spec.release
 *   5  (PROGRESS) the ack only once S is final, the stop as before (only an S showing the grant
 *      is written final): an S that never showed the grant is never acked, and the hub waits
 *
 * The rule as briefed holds only where the agent's view of G never un-ends: with FRESH=1 and
 * no renewals (RENEW=0). Two gaps, each refuted by a trail (hack/model-check.sh A-stale,
 * A-renew), both in the ack for an S that never showed T:
 *   - FRESH=0: the agent acks T from a view showing G released (S waiting), crashes with the
 *     patch in flight, and restarts on a list older than the release (its last answered write
 *     is older still); the patch lands, the hub hands k on, and the agent lets go from the old
 *     view;
 *   - RENEW=1: the agent's clock passes expiresAt just as a ttl renewal lands on the hub; the
 *     agent acks T from its view of the old expiresAt (S waiting), then its view shows the
 *     renewed G, not expired, and it lets go; an admin's release and the ack end G at once.
 * FIX=1 closes both: the ack only once S is final, and the stop writes S final whenever the
 * view shows G ending, whether S shows the grant or not. S final is stored in the spoke, so no
 * stale view and no restart lets go of T again (the let-go needs S waiting). Under FIX the
 * let-go's look at spec.release is no longer needed for NOOVERLAP (mutation 4 survives it: the
 * hub waits for the ack, and the ack for S final, which no let-go undoes); mutations 1-3 are
 * refuted under FIX as well.
 */
#ifndef MUTATION
#define MUTATION 0
#endif
#ifndef PROGRESS
#define PROGRESS 0
#endif
#ifndef ENDS
#define ENDS 1       /* admin releases or deletions, over all incarnations of G */
#endif
#ifndef CRASH
#define CRASH 1      /* agent restarts */
#endif
#ifndef FRESH
#define FRESH 0      /* 1: a restarted agent's view is G as stored (a quorum list) */
#endif
#ifndef LOSS
#define LOSS 1       /* ack patches the agent gives up on (they may still land) */
#endif
#ifndef RENEW
#define RENEW 0      /* ttl renewals: a later expiresAt */
#endif
#ifndef REMAKE
#define REMAKE 0     /* 1: S and G made anew under their names; H lets k go and asks again */
#endif
#ifndef FIX
#define FIX 0
#endif
#define NV 12        /* versions of G kept: the view's, the agent's last write's, and after */

/* phases (G and S) */
#define WAITING 0
#define GRANTED 1
#define FINAL   2
/* what ended G, written on it */
#define NONE    0
#define RELEASE 1
#define DELETE  2

typedef Ver {
	byte ph;    /* phase */
	byte rel;   /* NONE, RELEASE (spec.release), DELETE (deletionTimestamp) */
	byte tok;   /* status.fencingToken */
	byte ack;   /* the annotation fleet.turnstile.dev/stopped, 0: none */
	byte inc;   /* which G the name holds (REMAKE: 1, then 2) */
	byte ep     /* the expiresAt's epoch: 0 none, 1 at the grant, +1 a ttl renewal */
};

Ver hist[NV];     /* G's versions: hist[gv-1] is G as stored, hist[vw] the agent's view */
byte gv = 1;
byte vw = 0;
byte lastW = 0;   /* the agent's last G write it saw answered (restarts start at or after it) */
bool hExp;        /* the hub's clock is past G's current expiresAt */
byte aEp;         /* the agent's clock is past the expiresAt of epochs 1..aEp of the current G */

byte sPh = WAITING, sTok, sInc = 1;   /* S as stored in the spoke */
bool hWant = 1, hHolds;               /* H waits for k, holds k */
byte ktok = 1;                        /* the last token k was granted with */

byte fl[2];          /* ack patches in flight (their token), 0: none */
byte await;          /* bit i: the agent waits for fl[i]'s answer */
bool sentHere;       /* the agent sent an ack from this view already */
bool envDone;

#define CUR  hist[gv-1]
#define V    hist[vw]

/* ending, on the hub: written (release, deletion) or the hub's clock past expiresAt */
#define HEND (CUR.rel != NONE || (CUR.ph == GRANTED && hExp))
/* ending, in the agent's view: written, or the agent's clock past the view's expiresAt */
#define VEXP (V.inc == CUR.inc && V.ep != 0 && V.ep <= aEp)
#define VEND (V.rel != NONE || VEXP)
#if MUTATION == 4
#define LETGO_REL (V.rel != DELETE)
#else
#define LETGO_REL (V.rel == NONE)
#endif
#if MUTATION == 1
#define ACKOK 1
#elif MUTATION == 3
#define ACKOK (CUR.ack != 0)
#else
#define ACKOK (CUR.ack == CUR.tok)
#endif
#if MUTATION == 2
#define ACK_S 1
#elif FIX || MUTATION == 5
#define ACK_S (sInc != V.inc || sPh == FINAL)
#else
#define ACK_S (sInc != V.inc || sPh == FINAL || !(sPh == GRANTED && sTok == V.tok))
#endif
#if FIX
#define STOP_S (sPh != FINAL)
#else
#define STOP_S (sPh == GRANTED)
#endif

#define NOOVERLAP \
	if \
	:: sPh == GRANTED && hHolds -> \
		printf("@@ VIOLATION NOOVERLAP: S shows Granted %d (its holder runs) while H holds k (token %d)\n", sTok, ktok) \
	:: else -> skip \
	fi; \
	assert(!(sPh == GRANTED && hHolds))

/* a new version of G, a copy of the stored one, to be changed */
inline newver() {
	assert(gv < NV);
	hist[gv].ph = CUR.ph; hist[gv].rel = CUR.rel; hist[gv].tok = CUR.tok;
	hist[gv].ack = CUR.ack; hist[gv].inc = CUR.inc; hist[gv].ep = CUR.ep;
	gv++
}

/* drop the versions nobody reads any more (before the view and the last write) */
inline canon() {
#if FRESH
	lo = vw;      /* a restart starts from G as stored: lastW is never read */
#else
	lo = (vw < lastW -> vw : lastW);
#endif
	if
	:: lo > 0 ->
		i = 0;
		do
		:: i + lo < gv ->
			hist[i].ph = hist[i+lo].ph; hist[i].rel = hist[i+lo].rel; hist[i].tok = hist[i+lo].tok;
			hist[i].ack = hist[i+lo].ack; hist[i].inc = hist[i+lo].inc; hist[i].ep = hist[i+lo].ep;
			i++
		:: else -> break
		od;
		do
		:: i < gv ->
			hist[i].ph = 0; hist[i].rel = 0; hist[i].tok = 0; hist[i].ack = 0; hist[i].inc = 0; hist[i].ep = 0;
			i++
		:: else -> break
		od;
		gv = gv - lo; vw = vw - lo; lastW = lastW - lo
	:: else -> skip
	fi;
	i = 0; lo = 0
}

/* the agent's view, for the trail: one printf a line (pw, pr are reset after) */
mtype = { waiting, Granted, final, released, deleted, notEnded, expired, notExpired };
inline showV() {
	pw = (V.ph == WAITING -> waiting : (V.ph == GRANTED -> Granted : final));
	pr = (V.rel == RELEASE -> released : (V.rel == DELETE -> deleted : notEnded));
	px = (VEXP -> expired : notExpired);
	printf("@@ the agent's view now shows G%d %e token %d, %e, %e by its clock, ack %d, expiresAt epoch %d\n",
		V.inc, pw, V.tok, pr, px, V.ack, V.ep);
	pw = waiting; pr = waiting; px = waiting
}

proctype agent() {
	byte i, lo, crashes = 0;
	mtype pw = waiting, pr = waiting, px = waiting;
end:	do
	:: d_step { vw < gv - 1 -> vw++; sentHere = 0; showV(); canon() }
	:: d_step {
		V.inc == sInc && V.ph == GRANTED && LETGO_REL && !VEXP && sPh == WAITING ->
		sPh = GRANTED; sTok = V.tok;
		printf("@@ the agent lets go: S Granted %d (its holder runs)\n", sTok);
		NOOVERLAP
	   }
	:: d_step {
		V.inc == sInc && ((V.ph == FINAL && sPh != FINAL) || (V.ph != FINAL && VEND && STOP_S)) ->
		sPh = FINAL;
		printf("@@ the agent writes S final\n")
	   }
	:: d_step {
		V.ph == GRANTED && VEND && V.ack != V.tok && ACK_S && !sentHere &&
		!((await & 1) && fl[0] == V.tok) && !((await & 2) && fl[1] == V.tok) && (fl[0] == 0 || fl[1] == 0) ->
		if
		:: fl[0] == 0 -> fl[0] = V.tok; await = await | 1
		:: else -> fl[1] = V.tok; await = await | 2
		fi;
		sentHere = 1;
		pw = (sPh == WAITING -> waiting : (sPh == GRANTED -> Granted : final));
		printf("@@ the agent sends the ack stopped=%d (S%d %e, token %d)\n", V.tok, sInc, pw, sTok);
		pw = waiting
	   }
#if REMAKE
	:: d_step {
		sInc == 2 && CUR.inc == 1 && V.inc == 1 && V.ph == FINAL ->
		newver(); CUR.inc = 2; CUR.ph = WAITING; CUR.rel = NONE; CUR.tok = 0; CUR.ack = 0; CUR.ep = 0;
		hExp = 0; aEp = 0; lastW = gv - 1;
		printf("@@ the agent makes G anew for the new S (the old one is final)\n");
		canon()
	   }
#endif
	:: atomic {
		crashes < CRASH ->
		crashes++; await = 0; sentHere = 0;
#if FRESH
		vw = gv - 1;
#else
		/* any version from the last write it saw answered on */
		vw = lastW;
		do
		:: vw < gv - 1 -> vw++
		:: break
		od;
#endif
		d_step {
			printf("@@ the agent restarts: its first list is %d version(s) behind G as stored\n", gv - 1 - vw);
			showV();
			canon()
		}
	   }
	od
}

proctype hub() {
	byte i, lo;
end:	do
	/* an ack patch lands on what the name holds now (a G written final is gone: not found) */
	:: d_step {
		fl[0] != 0 ->
		if
		:: CUR.ph != FINAL && CUR.ack != fl[0] -> newver(); CUR.ack = fl[0];
			printf("@@ the hub: the ack stopped=%d lands on G (token %d)\n", fl[0], CUR.tok)
		:: else -> skip
		fi;
		if :: await & 1 -> lastW = gv - 1; await = await & 2 :: else -> skip fi;
		fl[0] = 0; canon()
	   }
	:: d_step {
		fl[1] != 0 ->
		if
		:: CUR.ph != FINAL && CUR.ack != fl[1] -> newver(); CUR.ack = fl[1];
			printf("@@ the hub: the ack stopped=%d lands on G (token %d)\n", fl[1], CUR.tok)
		:: else -> skip
		fi;
		if :: await & 2 -> lastW = gv - 1; await = await & 1 :: else -> skip fi;
		fl[1] = 0; canon()
	   }
	/* the lock controller */
	:: d_step {
		CUR.ph == WAITING && CUR.rel == NONE && !hHolds ->
		ktok++; newver(); CUR.ph = GRANTED; CUR.tok = ktok; CUR.ep = 1; hExp = 0;
		printf("@@ the hub grants k to G with token %d\n", ktok)
	   }
	:: d_step {
		CUR.ph == WAITING && CUR.rel != NONE ->
		newver(); CUR.ph = FINAL;
		printf("@@ the hub writes G final (it held nothing)\n")
	   }
	:: d_step {
		CUR.ph == GRANTED && HEND && ACKOK ->
		newver(); CUR.ph = FINAL;
		printf("@@ the hub writes G final (ending, ack %d, token %d)\n", CUR.ack, CUR.tok)
	   }
	:: d_step {
		hWant && !hHolds && CUR.ph != GRANTED ->
		ktok++; hHolds = 1;
		printf("@@ the hub grants k to H with token %d\n", ktok);
		NOOVERLAP
	   }
	/* time: the agent's clock reaches the hub's */
	:: d_step { hExp && CUR.ph == GRANTED && aEp < CUR.ep -> aEp = CUR.ep }
	od
}

proctype env() {
	byte i, lo, ends = 0, losses = 0, renews = 0, remakes = 0, hagain = 0;
	do
	:: d_step {
		ends < ENDS && CUR.ph != FINAL && CUR.rel == NONE ->
		ends++; newver(); CUR.rel = RELEASE; printf("@@ an admin releases G (spec.release)\n")
	   }
	:: d_step {
		ends < ENDS && CUR.ph != FINAL && CUR.rel == NONE ->
		ends++; newver(); CUR.rel = DELETE; printf("@@ an admin deletes G\n")
	   }
	/* clocks, in either order */
	:: d_step { CUR.ph == GRANTED && !hExp -> hExp = 1; printf("@@ the hub's clock passes G's expiresAt\n") }
	:: d_step { CUR.ph == GRANTED && aEp < CUR.ep -> aEp = CUR.ep; printf("@@ the agent's clock passes G's expiresAt (epoch %d)\n", aEp) }
	:: d_step {
		renews < RENEW && CUR.ph == GRANTED && CUR.rel == NONE && !hExp ->
		renews++; newver(); CUR.ep++; lastW = gv - 1;
		printf("@@ the agent renews G's ttl: expiresAt epoch %d\n", CUR.ep)
	   }
	/* the agent gives up on a patch's answer; the patch lands later or never */
	:: d_step { losses < LOSS && (await & 1) -> losses++; await = await & 2; sentHere = 0; printf("@@ the agent gives up on its ack patch stopped=%d\n", fl[0]) }
	:: d_step { losses < LOSS && (await & 2) -> losses++; await = await & 1; sentHere = 0; printf("@@ the agent gives up on its ack patch stopped=%d\n", fl[1]) }
	:: d_step { losses < LOSS && fl[0] != 0 && !(await & 1) -> losses++; fl[0] = 0 }
	:: d_step { losses < LOSS && fl[1] != 0 && !(await & 2) -> losses++; fl[1] = 0 }
#if REMAKE
	:: d_step { hHolds && hagain == 0 -> hHolds = 0; hWant = 0; printf("@@ H lets k go\n") }
	:: d_step { !hWant && hagain == 0 -> hagain++; hWant = 1; printf("@@ H asks for k again\n") }
	:: d_step {
		remakes < 1 && sPh == FINAL && sInc == 1 ->
		remakes++; sInc = 2; sPh = WAITING; sTok = 0;
		printf("@@ the spoke's user deletes S and makes it anew under its name\n")
	   }
#endif
	:: break
	od;
	envDone = 1
}

#if PROGRESS
#define ENDINGNOW (CUR.ph == GRANTED && HEND)
ltl live { [] ((envDone && ENDINGNOW) -> <> (CUR.ph == FINAL && hHolds)) }
#endif

init {
	atomic {
		/* G granted with token 1; S not shown it yet; H waits */
		hist[0].ph = GRANTED; hist[0].tok = 1; hist[0].inc = 1; hist[0].ep = 1;
		run agent(); run hub(); run env()
	}
}
