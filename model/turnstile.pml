/*
 * turnstile.pml -- a Promela model of Turnstile's lock hand-off protocol, docs/protocol.md.
 *
 * Managers decide lock keys from their own lagging views of the store, may crash between any
 * two writes, and race each other; clients create, release and delete LockRequests; an admin
 * force-unlocks ProjectLocks and freezes / thaws a command; grants expire and holder Leases
 * lapse. After every change of the store a monitor checks
 *   ME  mutual exclusion: the non-final requests holding k are of one identity, and H(k) too;
 *   J   every non-final request holding k is listed in H(k) of the existing PL(k);
 *   TM  tokens: a holder of k shows (per key and request-level) tokens above every token an
 *       earlier holder identity of k showed (its requests, or PL(k) itself);
 *   DR  Drained: while the CommandLock says Drained, no request of the command is Granted;
 * and, with -DPROGRESS=1, an LTL property (pan -a -f: weak fairness) says that a free key with
 * a live waiter is eventually not free-with-a-waiter.
 *
 * One file holds the protocol, its configurations and its mutations. See model/README.md for
 * what is modelled and abstracted and why, and hack/model-check.sh for the runs.
 *
 * Mutations (-DMUTATION=n), each a protocol rule taken out:
 *   1  no finalizer: an admin's delete removes the ProjectLock at once (hole 1 of issue #12)
 *   2  counter tokens: max(ProjectLock token, tokens of the requests in view) + 1 (the old code)
 *   3  an unconfirmed grant is written holding again without the decision's own PL write
 *   4  no live freeze check before a commanded request is written holding (step 5 skipped)
 *   5  the leaving holders are written final AFTER the ProjectLock write (steps 3, 4 swapped)
 *   6  T_leave ignored: t = max(token+1, rv(PL(k))) (the rule the first model run refuted)
 *   7  a gone holder whose token is unknown leaves in the same write that grants (no Again)
 *   8  the Again write drops a demoted unconfirmed grant from H(k) WITHOUT its demote write
 *      (what internal/queue/decide.go's dropFirst does today; see model/README.md)
 *   9  a demotion writes the status it read (no status.fences raised): the API server keeps
 *      the rv of an update equal to the stored object, so it fences nothing (hole A, #26)
 *  10  shared beside exclusive: an exclusive request joins shared holders, and a shared one an
 *      exclusive holder (the compatibility check taken out; issue #31)
 *  11  no writer preference: a shared request passes the exclusive waiter ahead of it
 *  12  no limit: a counted request joins however many hold the key (issue #45)
 *  13  the joiner's own limit only: a counted request joins holders whose own limit is lower
 *  14  counted grants share a write: a counted request is granted (or re-issued) in the same
 *      ProjectLock write as another grant, so the two show one token
 *
 * Shared mode (issue #31, -DSHR_REQS=mask): the requests in the mask ask for their keys in
 * Shared mode. ME then reads: no exclusive holder beside a holder of another identity (shared
 * holders of any identities hold together); TM reads: a request first seen holding k shows
 * tokens above every token an exclusive holder of k showed before, an exclusive one above every
 * token any holder showed before, and a shared one a per-key token not below an earlier shared
 * holder's (shared grants of one write share its token). Queue order is the order of arrival
 * (arr[], renamed 1..NR), which writer preference reads. -DSTARVE=1 (with PROGRESS=1) runs the
 * shared readers as processes that release what they hold and ask again, forever, under weak
 * fairness, and checks that the waiting writer B is granted (ltl starve).
 *
 * Counting locks (issue #45, -DLIMA/-DLIMB/-DLIMC=n, with the request in SHR_REQS): a Shared
 * request with a limit n holds only while at most n requests hold the key, counting itself,
 * whatever their identities. Requests on one key may disagree: a request joins only if the
 * holders would then number at most the lowest limit among them and itself (CN below). A
 * counted grant has a ProjectLock write of its own: no other request is granted or re-issued
 * in that write, so its token is unique; a waiter the limit keeps out stops the waiters behind
 * it, as an exclusive one does (FIFO at the limit). The monitor then also checks
 *   CN  counting: the non-final requests holding k, and H(k), number at most the lowest limit
 *       among them;
 * and TM reads, for a counted request first seen holding k: its per-key token is above every
 * per-key token any request of k showed before and every token an exclusive holder showed, and
 * every later holder's token is above it.
 *
 * Modelling conventions
 *  - Every action is one d_step: one API call (a write, or a refresh of one view), or the
 *    reads (cache + live) and the computation of one decision.
 *  - ProjectLock resourceVersions come from ONE global counter `gc` (etcd's revision), so they
 *    grow across keys and across deletion and re-creation; a token is such an rv, or 1 + a
 *    token. Values are only compared, maxed and incremented by one, so after every step they
 *    are renamed (canon()) keeping their order and whether two of them are adjacent (a gap of
 *    one stays one, a larger gap becomes two): exact for these operations, and the state
 *    space stays finite however many writes happen. LockRequest rvs are per object and only
 *    compared for equality; canonR() renames them to 1, 2, ... in order of first appearance.
 *  - The API server's no-op rule, for every write: an update whose body equals the stored
 *    object succeeds and keeps its rv (WRV, WPLRV), so a later write preconditioned on that rv
 *    still lands. A request's modelled status is ph, held and tok; a demotion also raises
 *    status.fences (not modelled as a value: it makes the demotion change the object), except
 *    under MUTATION 9.
 */

/* ------------------------------------------------------------------ configuration -------- */
#ifndef MUTATION
#define MUTATION 0
#endif
/* managers: 1 or 2 */
#ifndef NMGR
#define NMGR 2
#endif
/* overlay of a manager's own writes on its view: 0 never, 1 always, 2 either (per write) */
#ifndef OVERLAY
#define OVERLAY 2
#endif
#ifndef PROGRESS
#define PROGRESS 0
#endif
/* 0: managers never crash (abandon a decision between two writes) */
#ifndef CRASH
#define CRASH 1
#endif
/* 1: a manager's views may move while it is in the middle of a decision */
#ifndef MIDREFRESH
#define MIDREFRESH 1
#endif
/* 1: the managers start with empty views (nothing seen yet) instead of the initial store */
#ifndef VIEWS_EMPTY
#define VIEWS_EMPTY 0
#endif
/* which keys each request locks (bit k): A and C are identity a, B is identity b */
#ifndef KA
#define KA 1
#endif
#ifndef KB
#define KB 3
#endif
#ifndef KC
#define KC 1
#endif
/* requests (bit r = request r): which exist from the start, which a client creates later */
#ifndef INIT_REQS
#define INIT_REQS 3
#endif
#ifndef CREATE_REQS
#define CREATE_REQS 0
#endif
/* which requests a client may release (spec.release) / delete, which grants may expire,
   whose holder Lease may lapse: each at most once per request */
#ifndef REL_REQS
#define REL_REQS 7
#endif
#ifndef DEL_REQS
#define DEL_REQS 0
#endif
#ifndef EXP_REQS
#define EXP_REQS 0
#endif
#ifndef LOST_REQS
#define LOST_REQS 0
#endif
/* how many force-unlocks (admin deletes of a ProjectLock), in all */
#ifndef FU_BUDGET
#define FU_BUDGET 0
#endif
/* which requests name the command; FREEZE=1: one freeze of it (THAW=1: and one thaw later) */
#ifndef CMD_REQS
#define CMD_REQS 1
#endif
#ifndef FREEZE
#define FREEZE 0
#endif
#ifndef THAW
#define THAW 1
#endif
/* 1 (docs/protocol.md): the Again split also applies to a re-issue; 0: only to a new
   identity (internal/queue/decide.go: `unknown && newHolder`) */
#ifndef AGAIN_REISSUE
#define AGAIN_REISSUE 1
#endif
/* 1: other objects' writes may advance etcd's revision between ours (gaps between rvs) */
#ifndef GAPS
#define GAPS 0
#endif
/* 1: swap the two managers' data into a canonical order (symmetry reduction); needs NMGR=2,
   FREEZE=0 (the CommandLock reconciler reads manager 0's view) and PROGRESS=0 */
#ifndef SYMM
#define SYMM 0
#endif
/* shared mode (issue #31): which requests are Shared; C's identity (0: a, as A; 2: its own) */
#ifndef SHR_REQS
#define SHR_REQS 0
#endif
#ifndef IDC
#define IDC 0
#endif
/* 1: readers loop (release, ask again) forever; the writer B must be granted (ltl starve) */
#ifndef STARVE
#define STARVE 0
#endif
/* counting locks (issue #45): the limit of A, B and C on the holders of their keys; 0: none
   (in the code, a Shared request without a limit counts to MaxSharedHolders, far above NR) */
#ifndef LIMA
#define LIMA 0
#endif
#ifndef LIMB
#define LIMB 0
#endif
#ifndef LIMC
#define LIMC 0
#endif
#if LIMA || LIMB || LIMC
#define COUNTING 1
#else
#define COUNTING 0
#endif
/* which property the monitor asserts for counting (CN) */
#ifndef CHECK_CN
#define CHECK_CN 1
#endif
/* 1: membership changes (issue #18): the last manager may also die for good, in the middle of a
   decision or between two, while the environment runs; a crash without DIE is a restart with
   the view it had (stale) and no memory of gone holders. Active-active routing only decides
   which manager acts first on a key: the owner at once, the others a backup delay later, and
   only if nobody decided the key in between (so some live manager still decides every key with
   an event); the managers here, which decide any key at any time, are a superset of it; a
   manager that only starts later is one that stays idle on its initial view. */
#ifndef DIE
#define DIE 0
#endif
/* 1 (default): views carry no tokens, and an rv in a view or a decision that is not the
   store's any more is replaced by one "stale" marker (exact: see stale()). The counter-token
   and no-own-PL-write mutations read tokens from the view, so they keep them (0). */
#ifndef VIEWTOK
#if MUTATION == 2 || MUTATION == 3
#define VIEWTOK 1
#else
#define VIEWTOK 0
#endif
#endif
/* 1: forget the tokens of a final or deleted request that no ProjectLock lists any more
   (exact: see dead() and model/README.md) */
#ifndef ZERO_DEAD
#if MUTATION == 2
#define ZERO_DEAD 0
#else
#define ZERO_DEAD 1
#endif
#endif
/* which properties the monitor asserts */
#ifndef CHECK_ME
#define CHECK_ME 1
#endif
#ifndef CHECK_J
#define CHECK_J 1
#endif
#ifndef CHECK_TM
#define CHECK_TM 1
#endif
#ifndef CHECK_DR
#define CHECK_DR 1
#endif

/* ------------------------------------------------------------------ the world ------------ */
#define NK 2          /* keys k1 (index 0), k2 (index 1); canonical order k1 < k2 */
#define NR 3          /* requests A (0), B (1), C (2) */
#define NM 2          /* manager slots M0, M1 (NMGR of them run) */

/* Requests (spec, immutable): A identity a, B identity b, C identity a (re-entrant with A);
   the keys each locks are KA, KB, KC. A multi-lock request tries its keys in canonical
   order (k1 first). */
#define ID(r)       ((r) == 1 -> 1 : ((r) == 2 -> IDC : 0))
#define SHR(r)      HAS(SHR_REQS, r)
#define LIM(r)      ((r) == 0 -> LIMA : ((r) == 1 -> LIMB : LIMC))
#define LIMITED(r)  (LIM(r) != 0)
#define LIM_REQS    ((LIMA != 0) | ((LIMB != 0) << 1) | ((LIMC != 0) << 2))
#define KEYS(r)     ((r) == 0 -> KA : ((r) == 1 -> KB : KC))
#define BIT(x)      (1 << (x))
#define HAS(m, x)   (((m) >> (x)) & 1)
#define NAMES(r, k) HAS(KEYS(r), k)
#define CMD(r)      HAS(CMD_REQS, r)
#define NOT(x)      (255 - BIT(x))
#define MAX(a, b)   ((a) > (b) -> (a) : (b))

/* request phases; request existence */
#define PENDING 0
#define GRANTED 1
#define FINAL   2
#define ABSENT  0   /* not created yet (or: not in this view) */
#define LIVE    1
#define GONE    2   /* deleted: a live read says NotFound */

#define MAXV 90     /* bound of the renamed rv/token domain */
#define NEWR 200    /* a fresh request rv before canonR() renames it */
#define NONE 255

typedef PLock {          /* ProjectLock PL(k) */
	byte ex;             /* 0 absent, 1 exists */
	bool del;            /* deletionTimestamp set (the finalizer holds the object) */
	byte rv;             /* resourceVersion, from the global counter */
	byte H;              /* status.holder.requests: a set of requests (bit r) */
	byte tok             /* status.fencingToken */
};
typedef Req {            /* LockRequest X */
	byte ex;             /* ABSENT / LIVE / GONE */
	byte rv;
	byte ph;             /* PENDING / GRANTED / FINAL */
	byte held;           /* status.locks[k].held, bit k */
	byte tok[NK];        /* status.locks[k].fencingToken; the request token is their max.
	                        Kept when final (T_leave reads it) and, for a deleted request,
	                        what its delete event carried */
	bool rel             /* spec.release */
};
typedef CLock {          /* CommandLock of the command */
	bool frozen;
	bool drained;        /* condition Drained=True */
	byte rv
};

/* the store (the API server) */
PLock pl[NK];
Req   rq[NR];
CLock cl;
byte  gc;                /* etcd's revision: the last ProjectLock rv handed out (renamed) */

/* the managers' views (their caches): per kind a snapshot of the store taken at a moment the
   manager chose, plus (overlay) its own writes */
PLock vpl[NM * NK];
Req   vrq[NM * NR];
CLock vcl[NM];
#define VP(m, k) vpl[(m) * NK + (k)]
#define VR(m, r) vrq[(m) * NR + (r)]

/* a manager's decision in flight (its reconciler's memory): the writes still to make, with
   the rvs they are preconditioned on */
bool pb[NM];             /* busy deciding */
byte pk[NM];             /* the key decided */
bool pcr[NM];            /* step 1: create PL(k) */
byte pfin[NM];           /* steps 2/3: requests to write final */
byte pdem[NM];           /* step 3: requests to demote (unconfirmed, now frozen) */
bool prem[NM];           /* step 2: remove the finalizer */
bool pplw[NM];           /* step 4: write PL(k).status */
byte pnewH[NM];          /*   with this H(k) */
byte ptok[NM];           /*   and this token (also the token of the grants) */
byte pplrv[NM];          /*   the rv of PL(k) read (precondition of steps 2 and 4) */
bool pfc[NM];            /* step 5: live freeze check */
byte pgr[NM];            /* step 6: requests to write holding k */
byte prv[NM * NR];       /* the rv of each request read (precondition of its write) */
bool plive[NM];          /* step 5 found the command frozen: the next decision uses that
                            live read (Go decides again with the live freezes) */
bit  nk[NM];             /* PROGRESS: the key the calm loop decides next */
#define PRV(m, r) prv[(m) * NR + (r)]

/* environment budgets (bit r = may still happen to request r) and ghost clock/Lease facts */
byte ecr, erel, edel, eexp, elost, efu, efrz;
bool expired[NR];        /* the grant's expiresAt has passed (the deciding clock says so) */
bool lost[NR];           /* the holder's Lease lapsed (a live read of the Lease says so) */
bool envDone;            /* PROGRESS: the environment has finished */

/* the CommandLock reconciler */
byte clst, clc;

/* monitor ghosts (TM): per key, the identity of the current tenure (+1), the highest token the
   earlier identities showed, and the highest the current one showed */
byte curId[NK], prevMax[NK], tenMax[NK];
bool fw0, fw1;           /* PROGRESS: key k1 / k2 is free and has a live waiter */
#if SHR_REQS
/* shared mode: the arrival order (1 = first; 0: not live), and per key the requests seen
   holding (bit r), the highest token an exclusive holder showed and the highest per-key token
   a shared holder showed (TM in shared mode) */
byte arr[NR];
byte obs[NK];
byte exMax[NK], shMax[NK], anyMax[NK];
bool wB;                 /* STARVE: the writer B waits for k1 */
#endif

/* temporaries (not part of the state) */
hidden byte i, j, sk, kk, sel, w, what, H, stays, unconf, fin, dem, cand, hid, joiners, newH, tk, mx;
hidden byte frz, tl, unk, newid, again, ci, cj, cn, clast, ot, oT, sw, cmpc, tmp;
hidden byte blk, sjoin, rk, nid, exm;
hidden byte stp, ng, rm, lm, hc, cmp;
hidden byte cu[MAXV + 1];
hidden byte rn[5];
hidden PLock tpl;        /* the decision's inputs: the view (or a live read) of PL(k) ... */
hidden Req trq[NR];      /* ... and of the requests */
hidden int realOf[MAXV + 1], realTmp[MAXV + 1], realgc;   /* for printing trails only */

#if PROGRESS
#define CHAOS (!envDone)
#else
#define CHAOS 1
#endif
#if OVERLAY == 0
#define OVDEF 0
#else
#define OVDEF 1
#endif

/* ------------------------------------------------------------------ helpers -------------- */
inline cpPL(d, s) { d.ex = s.ex; d.del = s.del; d.rv = s.rv; d.H = s.H; d.tok = s.tok }
inline clrPL(d)   { d.ex = 0; d.del = 0; d.rv = 0; d.H = 0; d.tok = 0 }
inline cpRQ(d, s) { d.ex = s.ex; d.rv = s.rv; d.ph = s.ph; d.held = s.held; d.tok[0] = s.tok[0]; d.tok[1] = s.tok[1]; d.rel = s.rel }
/* into a view (a cache): without tokens, unless VIEWTOK */
#if VIEWTOK
inline cpRQv(d, s) { cpRQ(d, s) }
inline cpPLv(d, s) { cpPL(d, s) }
#else
inline cpRQv(d, s) { d.ex = s.ex; d.rv = s.rv; d.ph = s.ph; d.held = s.held; d.tok[0] = 0; d.tok[1] = 0; d.rel = s.rel }
inline cpPLv(d, s) { d.ex = s.ex; d.del = s.del; d.rv = s.rv; d.H = s.H; d.tok = 0 }
#endif
inline cpCL(d, s) { d.frozen = s.frozen; d.drained = s.drained; d.rv = s.rv }

#define HELD(v, k)    HAS(v.held, k)
#define RTOK(v)       MAX(v.tok[0], v.tok[1])
/* a multi-lock request tries k2 only once it holds k1 (canonical order) */
#define REACHED(v, r, k) ((k) == 0 || !NAMES(r, 0) || HELD(v, 0))
#define FROZEN(r)     (CMD(r) && frz)
#define ACTIVE(v)     (v.ex == LIVE && v.ph != FINAL)
#define RN(r)         (65 + (r))          /* 'A' + r, for printf %c */
#define RT(x)         realOf[x]
/* The no-op rule: a request written from (ph0, held0, tok0) keeps its rv when the write left
   its status as it was and changed nothing else (fenced: a status.fences raise); otherwise it
   gets a fresh one. */
#define RCHANGED(x, ph0, held0, t0, t1) (x.ph != ph0 || x.held != held0 || x.tok[0] != t0 || x.tok[1] != t1)
inline WRV(x, ph0, held0, t0, t1, fenced) {
	if
	:: RCHANGED(x, ph0, held0, t0, t1) || fenced -> x.rv = NEWR
	:: else -> printf("@@ the API server answers the write of %c as a no-op: its rv stays\n", RN(sel))
	fi
}

/* a fresh ProjectLock rv: etcd's next revision, above every rv and token in the state */
inline newrv(x) {
	gc++;
	assert(gc < MAXV);
	realgc++;
	realOf[gc] = realgc;
	x = gc
}

/* 1 + a token (t = 1 + T_leave, token + 1): for the trail, its model revision number too */
inline plus1(x, y) {
	x = y + 1;
	assert(x < MAXV);
	if
	:: realOf[x] == 0 -> realOf[x] = realOf[y] + 1
	:: else
	fi
}

#define MARK(x) cu[x] = 1
#define MAP(x)  x = cu[x]
/* Rename the rv/token domain keeping order and adjacency (gap 1 stays 1, larger gaps become
   2). Exact: the model only compares these values, takes maxima, adds one (once per step,
   before the next renaming) and makes new revisions above all of them. */
inline canon() {
	for (ci : 0 .. MAXV) { cu[ci] = 0 }
	MARK(gc);
	for (ci : 0 .. NK - 1) { MARK(pl[ci].rv); MARK(pl[ci].tok); MARK(prevMax[ci]); MARK(tenMax[ci]) }
	for (ci : 0 .. NM * NK - 1) { MARK(vpl[ci].rv); MARK(vpl[ci].tok) }
	for (ci : 0 .. NR - 1) { MARK(rq[ci].tok[0]); MARK(rq[ci].tok[1]) }
	for (ci : 0 .. NM * NR - 1) { MARK(vrq[ci].tok[0]); MARK(vrq[ci].tok[1]) }
	for (ci : 0 .. NM - 1) { MARK(ptok[ci]); MARK(pplrv[ci]) }
#if SHR_REQS
	for (ci : 0 .. NK - 1) { MARK(exMax[ci]); MARK(shMax[ci]); MARK(anyMax[ci]) }
#endif
	cu[0] = 0;
	cn = 0; clast = 0;
	for (ci : 1 .. MAXV) {
		if
		:: cu[ci] -> cn = cn + (ci - clast == 1 -> 1 : 2); clast = ci; cu[ci] = cn; realTmp[cn] = realOf[ci]
		:: else
		fi
	}
	for (ci : 1 .. MAXV) { realOf[ci] = 0 }
	for (ci : 1 .. MAXV) {
		if
		:: cu[ci] -> realOf[cu[ci]] = realTmp[cu[ci]]
		:: else
		fi
	}
	MAP(gc);
	for (ci : 0 .. NK - 1) { MAP(pl[ci].rv); MAP(pl[ci].tok); MAP(prevMax[ci]); MAP(tenMax[ci]) }
	for (ci : 0 .. NM * NK - 1) { MAP(vpl[ci].rv); MAP(vpl[ci].tok) }
	for (ci : 0 .. NR - 1) { MAP(rq[ci].tok[0]); MAP(rq[ci].tok[1]) }
	for (ci : 0 .. NM * NR - 1) { MAP(vrq[ci].tok[0]); MAP(vrq[ci].tok[1]) }
	for (ci : 0 .. NM - 1) { MAP(ptok[ci]); MAP(pplrv[ci]) }
#if SHR_REQS
	for (ci : 0 .. NK - 1) { MAP(exMax[ci]); MAP(shMax[ci]); MAP(anyMax[ci]) }
#endif
	ci = 0
}

/* shared mode: rename the arrival stamps of live requests to 1, 2, ... keeping their order */
inline canonA() {
#if SHR_REQS
	cn = 0;
	for (rk : 1 .. NR + 1) {
		for (ci : 0 .. NR - 1) {
			if
			:: arr[ci] == rk && rq[ci].ex == LIVE -> cn++; arr[ci] = 100 + cn
			:: else
			fi
		}
	}
	for (ci : 0 .. NR - 1) {
		arr[ci] = (arr[ci] > 100 -> arr[ci] - 100 : 0)
	}
	ci = 0; rk = 0
#else
	skip
#endif
}

/* Request rvs are only compared for equality with the store's, and a request's rv never
   takes an old value again: rename the store's (of an existing request) to 1, an equal one in
   a view or a decision to 1, any other to 2 ("stale": every write preconditioned on it fails),
   0 (not read / no object) stays 0. */
#define RSTALE(x, s) x = ((x) == 0 -> 0 : (((x) == (s) && (s) != 0) -> 1 : 2))
inline canonR() {
	for (ci : 0 .. NR - 1) {
		cn = (rq[ci].ex == LIVE -> rq[ci].rv : 0);
		RSTALE(vrq[ci].rv, cn); RSTALE(vrq[NR + ci].rv, cn); RSTALE(prv[ci], cn); RSTALE(prv[NR + ci], cn);
		rq[ci].rv = (cn != 0 -> 1 : 0)
	};
	ci = 0
}

/* A ProjectLock rv in a view or a decision that is not the store's PL(k) rv any more can never
   be again (rvs grow; a re-created PL(k) gets a new one): it only makes writes fail. Replace it
   by 0 ("stale"; a view with ex=1 and rv=0 is a stale view of an existing PL(k)). A decision
   whose ProjectLock write is doomed so keeps only the writes before it (its token, new H and
   grants can never be written). Views carry no tokens: a decision takes the store's, which
   are the view's whenever one of its writes that depends on them lands (the request's or
   PL(k)'s rv is unchanged since the view, so its status is too). */
inline stale() {
#if !VIEWTOK
	for (ci : 0 .. NM * NK - 1) {
		cj = ci % NK;
		if
		:: vpl[ci].ex == 1 && !(pl[cj].ex == 1 && vpl[ci].rv == pl[cj].rv) -> vpl[ci].rv = 0
		:: else
		fi
	}
	for (ci : 0 .. NM - 1) {
		cj = pk[ci];
		if
		:: pb[ci] && pplrv[ci] != 0 && !(pl[cj].ex == 1 && pplrv[ci] == pl[cj].rv) ->
			pplrv[ci] = 0
		:: else
		fi;
		if
		:: pb[ci] && pplrv[ci] == 0 && pplw[ci] ->
			ptok[ci] = 0; pnewH[ci] = 0; pgr[ci] = 0; pfc[ci] = 0;
			prv[ci * NR] = (HAS(pfin[ci] | pdem[ci], 0) -> prv[ci * NR] : 0);
			prv[ci * NR + 1] = (HAS(pfin[ci] | pdem[ci], 1) -> prv[ci * NR + 1] : 0);
			prv[ci * NR + 2] = (HAS(pfin[ci] | pdem[ci], 2) -> prv[ci * NR + 2] : 0)
		:: else
		fi
	}
	ci = 0; cj = 0
#else
	skip
#endif
}

/* A final or deleted request that no ProjectLock lists: forget its tokens, in the store and in
   the views. Exact: they are read only as T_leave by a decision whose view of PL(k) lists the
   request; if the store's PL(k) does not list it, that decision's ProjectLock write fails its
   precondition, or the store lists it again only after a write that made it final, gone or
   re-listed -- every later rv(PL(k)) read is above its tokens (docs/protocol.md "Why TM
   holds"), so T_leave + 1 never decides the max. The counter-token mutation reads the tokens
   of all requests in view, so it keeps them (ZERO_DEAD=0). */
inline dead() {
#if ZERO_DEAD
	for (ci : 0 .. NR - 1) {
		if
		:: (rq[ci].ex == GONE || (rq[ci].ex == LIVE && rq[ci].ph == FINAL)) &&
		   !(pl[0].ex == 1 && HAS(pl[0].H, ci)) && !(pl[1].ex == 1 && HAS(pl[1].H, ci)) ->
			rq[ci].tok[0] = 0; rq[ci].tok[1] = 0;
			for (cj : 0 .. NM - 1) { vrq[cj * NR + ci].tok[0] = 0; vrq[cj * NR + ci].tok[1] = 0 }
		:: else
		fi
	};
	ci = 0; cj = 0
#else
	skip
#endif
}

/* ------------------------------------------------------------------ symmetry ------------- */
/* The managers run the same code on their own slots of every array, and every Manager process
   is always at the top of its loop between two steps, so swapping the two slots maps a state
   to an equivalent one. Swap when manager 1's slot is "smaller" (the order only needs to be a
   function of the state for the reduction to be sound; a finer one reduces more). */
#define CMPF(a, b) \
	if \
	:: cmpc == 0 && (a) < (b) -> cmpc = 1 \
	:: cmpc == 0 && (a) > (b) -> cmpc = 2 \
	:: else \
	fi
#define SWP(a, b) tmp = a; a = b; b = tmp
inline symm() {
#if SYMM && NMGR == 2
	cmpc = 0;
	CMPF(pb[0], pb[1]); CMPF(pk[0], pk[1]); CMPF(pcr[0], pcr[1]); CMPF(pfin[0], pfin[1]);
	CMPF(pdem[0], pdem[1]); CMPF(prem[0], prem[1]); CMPF(pplw[0], pplw[1]); CMPF(pnewH[0], pnewH[1]);
	CMPF(ptok[0], ptok[1]); CMPF(pplrv[0], pplrv[1]); CMPF(pfc[0], pfc[1]); CMPF(pgr[0], pgr[1]);
	CMPF(plive[0], plive[1]); CMPF(vcl[0].frozen, vcl[1].frozen); CMPF(vcl[0].rv, vcl[1].rv);
	for (ci : 0 .. NK - 1) {
		CMPF(vpl[ci].ex, vpl[NK + ci].ex); CMPF(vpl[ci].del, vpl[NK + ci].del); CMPF(vpl[ci].rv, vpl[NK + ci].rv);
		CMPF(vpl[ci].H, vpl[NK + ci].H); CMPF(vpl[ci].tok, vpl[NK + ci].tok)
	}
	for (ci : 0 .. NR - 1) {
		CMPF(vrq[ci].ex, vrq[NR + ci].ex); CMPF(vrq[ci].ph, vrq[NR + ci].ph); CMPF(vrq[ci].held, vrq[NR + ci].held);
		CMPF(vrq[ci].rel, vrq[NR + ci].rel); CMPF(vrq[ci].tok[0], vrq[NR + ci].tok[0]); CMPF(vrq[ci].tok[1], vrq[NR + ci].tok[1]);
		CMPF(vrq[ci].rv == rq[ci].rv, vrq[NR + ci].rv == rq[ci].rv); CMPF(prv[ci] == rq[ci].rv, prv[NR + ci] == rq[ci].rv);
		CMPF(prv[ci] == 0, prv[NR + ci] == 0)
	}
	if
	:: cmpc == 2 ->
		SWP(pb[0], pb[1]); SWP(pk[0], pk[1]); SWP(pcr[0], pcr[1]); SWP(pfin[0], pfin[1]);
		SWP(pdem[0], pdem[1]); SWP(prem[0], prem[1]); SWP(pplw[0], pplw[1]); SWP(pnewH[0], pnewH[1]);
		SWP(ptok[0], ptok[1]); SWP(pplrv[0], pplrv[1]); SWP(pfc[0], pfc[1]); SWP(pgr[0], pgr[1]);
		SWP(plive[0], plive[1]); SWP(vcl[0].frozen, vcl[1].frozen); SWP(vcl[0].drained, vcl[1].drained);
		SWP(vcl[0].rv, vcl[1].rv);
		for (ci : 0 .. NK - 1) {
			SWP(vpl[ci].ex, vpl[NK + ci].ex); SWP(vpl[ci].del, vpl[NK + ci].del); SWP(vpl[ci].rv, vpl[NK + ci].rv);
			SWP(vpl[ci].H, vpl[NK + ci].H); SWP(vpl[ci].tok, vpl[NK + ci].tok)
		}
		for (ci : 0 .. NR - 1) {
			SWP(vrq[ci].ex, vrq[NR + ci].ex); SWP(vrq[ci].rv, vrq[NR + ci].rv); SWP(vrq[ci].ph, vrq[NR + ci].ph);
			SWP(vrq[ci].held, vrq[NR + ci].held); SWP(vrq[ci].rel, vrq[NR + ci].rel);
			SWP(vrq[ci].tok[0], vrq[NR + ci].tok[0]); SWP(vrq[ci].tok[1], vrq[NR + ci].tok[1]);
			SWP(prv[ci], prv[NR + ci])
		}
		canonR()
	:: else
	fi;
	ci = 0
#else
	skip
#endif
}

/* ------------------------------------------------------------------ the monitor ---------- */
/* A reader sees a request (or PL(k)) of identity idn holding k with per-key token t and
   request-level token T. */
inline observe(k, idn, t, T) {
#if CHECK_TM
	if
	:: curId[k] != idn + 1 ->
		prevMax[k] = MAX(tenMax[k], prevMax[k]);
		tenMax[k] = 0;
		curId[k] = idn + 1
	:: else
	fi;
	if
	:: !(t > prevMax[k] && T > prevMax[k]) ->
		printf("@@ VIOLATION TM on k%d: identity %c shows token %d (request-level %d), an earlier identity showed %d\n",
			k + 1, 97 + idn, RT(t), RT(T), RT(prevMax[k]));
		assert(false)
	:: else
	fi;
	tenMax[k] = MAX(t, tenMax[k]);
	tenMax[k] = MAX(T, tenMax[k])
#else
	skip
#endif
}

/* TM in shared mode: checked when request r is first seen holding k (obs) */
inline observeS(k, r, t, T) {
#if SHR_REQS && CHECK_TM
	if
	:: !HAS(obs[k], r) ->
		if
		:: SHR(r) && !(t > exMax[k] && t >= shMax[k]) ->
			printf("@@ VIOLATION TM on k%d: shared %c shows token %d, not above %d an exclusive or counted holder showed or below %d a shared one did\n",
				k + 1, RN(r), RT(t), RT(exMax[k]), RT(shMax[k]));
			assert(false)
		:: SHR(r) && LIMITED(r) && !(t > shMax[k]) ->
			printf("@@ VIOLATION TM on k%d: counted %c shows token %d, not above %d an earlier shared holder showed\n",
				k + 1, RN(r), RT(t), RT(shMax[k]));
			assert(false)
		:: !SHR(r) && !(t > anyMax[k] && T > anyMax[k]) ->
			printf("@@ VIOLATION TM on k%d: exclusive %c shows token %d (request-level %d), an earlier holder showed %d\n",
				k + 1, RN(r), RT(t), RT(T), RT(anyMax[k]));
			assert(false)
		:: else
		fi;
		obs[k] = obs[k] | BIT(r)
	:: else
	fi;
	anyMax[k] = MAX(anyMax[k], t);
	anyMax[k] = MAX(anyMax[k], T);
	if
	:: SHR(r) -> shMax[k] = MAX(shMax[k], t)
	:: else -> exMax[k] = MAX(exMax[k], t); exMax[k] = MAX(exMax[k], T)
	fi;
	/* a counted token is unique: every later holder's is above it, as above an exclusive one */
	if
	:: SHR(r) && LIMITED(r) -> exMax[k] = MAX(exMax[k], t)
	:: else
	fi
#else
	skip
#endif
}

inline monitor() {
	for (kk : 0 .. NK - 1) {
		/* what PL(k) itself reports */
		if
		:: pl[kk].ex == 1 && pl[kk].H != 0 ->
			sel = NONE;
			for (i : 0 .. NR - 1) {
				if
				:: HAS(pl[kk].H, i) && sel == NONE -> sel = i
				:: HAS(pl[kk].H, i) && sel != NONE && ID(i) != ID(sel) && (!SHR(i) || !SHR(sel) || (pl[kk].H & SHR_REQS) != pl[kk].H) ->
#if CHECK_ME
					printf("@@ VIOLATION ME: H(k%d) lists %c and %c of two identities\n", kk + 1, RN(sel), RN(i));
					assert(false)
#else
					skip
#endif
				:: else
				fi
			}
			ot = pl[kk].tok;
#if !SHR_REQS
			observe(kk, ID(sel), ot, ot)
#endif
		:: else
		fi;
		/* who holds k in the store */
		sel = NONE;
		for (i : 0 .. NR - 1) {
			if
			:: ACTIVE(rq[i]) && HELD(rq[i], kk) ->
#if CHECK_ME
				if
				:: sel != NONE && ID(i) != ID(sel) && (!SHR(i) || !SHR(sel)) ->
					printf("@@ VIOLATION ME: %c and %c (two identities, one exclusive) both hold k%d\n", RN(sel), RN(i), kk + 1);
					assert(false)
				:: else
				fi;
#endif
				sel = i;
#if CHECK_J
				if
				:: !(pl[kk].ex == 1 && HAS(pl[kk].H, i)) ->
					printf("@@ VIOLATION J: %c holds k%d but PL(k%d) does not list it (PL exists=%d)\n", RN(i), kk + 1, kk + 1, pl[kk].ex);
					assert(false)
				:: else
				fi;
#endif
				ot = rq[i].tok[kk];
				oT = RTOK(rq[i]);
#if SHR_REQS
				observeS(kk, i, ot, oT)
#else
				observe(kk, ID(i), ot, oT)
#endif
			:: else
#if SHR_REQS
				obs[kk] = obs[kk] & NOT(i)
#else
				skip
#endif
			fi
		}
#if COUNTING && CHECK_CN
		/* CN: the holders of k in the store, and H(k), number at most their lowest limit */
		hc = 0; lm = 0;
		for (i : 0 .. NR - 1) {
			if
			:: ACTIVE(rq[i]) && HELD(rq[i], kk) ->
				hc++;
				if
				:: LIMITED(i) && (lm == 0 || LIM(i) < lm) -> lm = LIM(i)
				:: else
				fi
			:: else
			fi
		}
		if
		:: lm != 0 && hc > lm ->
			printf("@@ VIOLATION CN: %d requests hold k%d, one of them with limit %d\n", hc, kk + 1, lm);
			assert(false)
		:: else
		fi;
		hc = 0; lm = 0;
		for (i : 0 .. NR - 1) {
			if
			:: pl[kk].ex == 1 && HAS(pl[kk].H, i) ->
				hc++;
				if
				:: LIMITED(i) && (lm == 0 || LIM(i) < lm) -> lm = LIM(i)
				:: else
				fi
			:: else
			fi
		}
		if
		:: lm != 0 && hc > lm ->
			printf("@@ VIOLATION CN: H(k%d) lists %d requests, one of them with limit %d\n", kk + 1, hc, lm);
			assert(false)
		:: else
		fi;
		hc = 0; lm = 0;
#endif
	}
#if CHECK_DR
	if
	:: cl.drained ->
		for (i : 0 .. NR - 1) {
			if
			:: CMD(i) && rq[i].ex == LIVE && rq[i].ph == GRANTED ->
				printf("@@ VIOLATION Drained: the CommandLock says Drained while %c (of the command) is Granted\n", RN(i));
				assert(false)
			:: else
			fi
		}
	:: else
	fi;
#endif
#if STARVE
	wB = (ACTIVE(rq[1]) && !HELD(rq[1], 0));
#endif
#if PROGRESS
	/* free: no non-final request holds k; live waiter: a non-final request that names k, has
	   reached it, is not frozen and is not about to be finished */
	for (kk : 0 .. NK - 1) {
		w = 1; mx = 0;
		for (i : 0 .. NR - 1) {
			if
			:: ACTIVE(rq[i]) && HELD(rq[i], kk) -> w = 0
			:: ACTIVE(rq[i]) && !HELD(rq[i], kk) && NAMES(i, kk) && !rq[i].rel && !lost[i] &&
			   !(CMD(i) && cl.frozen) && REACHED(rq[i], i, kk) -> mx = 1
			:: else
			fi
		}
		if
		:: kk == 0 -> fw0 = (w && mx)
		:: else -> fw1 = (w && mx)
		fi
	};
#endif
	kk = 0
}

/* after every step: rename values, forget dead tokens, canonical manager order, check */
inline settle() { dead(); stale(); canon(); canonR(); canonA(); symm(); monitor() }
inline tidy()   { dead(); stale(); canon(); canonR(); canonA(); symm() }

/* ------------------------------------------------------------------ a decision ----------- */
inline clearplan(m) {
	pb[m] = 0; pk[m] = 0; pcr[m] = 0; pfin[m] = 0; pdem[m] = 0; prem[m] = 0;
	pplw[m] = 0; pnewH[m] = 0; ptok[m] = 0; pplrv[m] = 0; pfc[m] = 0; pgr[m] = 0;
	PRV(m, 0) = 0; PRV(m, 1) = 0; PRV(m, 2) = 0
}

/* Decide key k (docs/protocol.md "A decision about key k"): read the inputs (the manager's
   views, and the live reads the protocol makes), then plan the writes, which step() makes one
   by one. pref: the identity a free key goes to when waiters of both identities are grantable
   (queue order is abstracted: either may be first). kn: whether the manager knows the token of
   a gone holder (it saw the delete event) -- nondeterministic; after a restart it knows none. */
inline plan(m, k, pref, kn) {
	cpPL(tpl, VP(m, k));
	for (i : 0 .. NR - 1) { cpRQ(trq[i], VR(m, i)) }
#if !VIEWTOK
	/* tokens: the store's (see stale()) */
	tpl.tok = ((tpl.ex == 1 && pl[k].ex == 1 && tpl.rv == pl[k].rv) -> pl[k].tok : 0);
	for (i : 0 .. NR - 1) { trq[i].tok[0] = rq[i].tok[0]; trq[i].tok[1] = rq[i].tok[1] }
#endif
	frz = (vcl[m].frozen || plive[m]);
	plive[m] = 0;
	/* Live read of PL(k): a request claims k in the view but the viewed PL(k) does not list
	   it (a force-unlock, or the PL view is behind our own grant). */
	w = 0;
	for (i : 0 .. NR - 1) {
		if
		:: ACTIVE(trq[i]) && HELD(trq[i], k) && !(tpl.ex == 1 && HAS(tpl.H, i)) -> w = 1
		:: else
		fi
	}
	if
	:: w -> cpPL(tpl, pl[k])
	:: else
	fi;
	/* Live read of a holder listed in H(k) that the view does not show (deleted, or created
	   after the view): NotFound means gone. These reads are the decision's, not the cache's. */
	if
	:: tpl.ex == 1 ->
		for (i : 0 .. NR - 1) {
			if
			:: HAS(tpl.H, i) && trq[i].ex != LIVE -> cpRQ(trq[i], rq[i])
			:: else
			fi
		}
	:: else
	fi;
	pk[m] = k;
	pplrv[m] = tpl.rv;
	fin = 0; dem = 0; joiners = 0; unconf = 0;
	if
	:: tpl.ex == 0 ->
		/* 1. Create PL(k) if someone waits for k (and decide again on it: the manager's next
		   decision, see README). No waiter: only finish claimants (force-unlocked) and
		   released waiters. */
		w = 0;
		for (i : 0 .. NR - 1) {
			if
			:: ACTIVE(trq[i]) && NAMES(i, k) && (HELD(trq[i], k) || trq[i].rel || lost[i]) -> fin = fin | BIT(i)
			:: ACTIVE(trq[i]) && NAMES(i, k) && !(HELD(trq[i], k) || trq[i].rel || lost[i]) -> w = 1
			:: else
			fi
		}
		pcr[m] = w;
		pfin[m] = (w -> 0 : fin)
	:: tpl.ex == 1 && tpl.del ->
		/* 2. Force-unlock: every member of H(k) final (unless final or gone), then remove the
		   finalizer with the rv read. Nobody is granted on it. */
		for (i : 0 .. NR - 1) {
			if
			:: HAS(tpl.H, i) && ACTIVE(trq[i]) -> fin = fin | BIT(i)
			:: else
			fi
		}
		pfin[m] = fin;
		prem[m] = 1
	:: else ->
		/* 3. Who leaves H(k): final and gone members drop out; released, Lease-lost and
		   expired ones are written final; unconfirmed ones now frozen are demoted. The rest
		   stay; a staying member that does not show holding k is an unconfirmed grant
		   (re-issued below). */
		H = tpl.H; stays = 0; cand = 0;
		for (i : 0 .. NR - 1) {
			if
			:: HAS(H, i) ->
				if
				:: !ACTIVE(trq[i]) -> skip
				:: ACTIVE(trq[i]) && (trq[i].rel || lost[i] || expired[i]) -> fin = fin | BIT(i)
				:: ACTIVE(trq[i]) && !(trq[i].rel || lost[i] || expired[i]) && !HELD(trq[i], k) && FROZEN(i) ->
					dem = dem | BIT(i)
				:: else ->
					stays = stays | BIT(i);
					if
					:: !HELD(trq[i], k) -> unconf = unconf | BIT(i)
					:: else
					fi
				fi
			:: !HAS(H, i) && ACTIVE(trq[i]) && NAMES(i, k) ->
				if
				:: HELD(trq[i], k) || trq[i].rel || lost[i] ->
					/* a claimant even the live PL(k) does not list (force-unlocked), or a
					   waiter released / Lease lost before its grant: finished */
					fin = fin | BIT(i)
				:: else ->
					if
					:: !FROZEN(i) && REACHED(trq[i], i, k) -> cand = cand | BIT(i)
					:: else
					fi
				fi
			:: else
			fi
		}
#if SHR_REQS
		/* Shared mode (internal/queue admit): in arrival order, a candidate of the one identity
		   that holds the whole set joins at once (re-entrant); any other joins if compatible (a
		   free key; a shared request beside shared holders), until the first exclusive
		   candidate that cannot: nobody behind it passes (writer preference).
		   Counting (issue #45): a candidate joins only with room (rm): the holders with it
		   number at most the lowest limit among them and itself; one the limit keeps out stops
		   everyone behind it. A counted grant has the write to itself (stp, ng): it is granted
		   only if nothing else is granted or re-issued in this write, and nothing is after it;
		   a counted holder re-issued now goes alone. */
		newH = stays; blk = 0;
#if COUNTING && MUTATION != 14
		stp = ((unconf & LIM_REQS) != 0);
		ng = (unconf != 0);
#else
		stp = 0; ng = 0;
#endif
		for (rk : 1 .. NR) {
			for (i : 0 .. NR - 1) {
				if
				:: HAS(cand, i) && arr[i] == rk ->
					nid = (newH != 0); exm = 0; hc = 0; lm = LIM(i);
					for (j : 0 .. NR - 1) {
						if
						:: HAS(newH, j) && ID(j) != ID(i) -> nid = 0
						:: else
						fi;
						if
						:: HAS(newH, j) && !SHR(j) -> exm = 1
						:: else
						fi;
						if
						:: HAS(newH, j) ->
							hc++;
#if MUTATION != 13
							if
							:: LIMITED(j) && (lm == 0 || LIM(j) < lm) -> lm = LIM(j)
							:: else
							fi
#else
							skip
#endif
						:: else
						fi
					}
#if COUNTING && MUTATION != 12
					rm = (lm == 0 || hc < lm);
#else
					rm = 1;
#endif
#if MUTATION == 10
					cmp = 1;
#else
					cmp = (newH == 0 || (SHR(i) && !exm));
#endif
					if
					:: stp -> skip
					:: !stp && (nid || (!blk && cmp)) && rm ->
						if
						:: LIMITED(i) && ng -> stp = 1   /* it waits for a write of its own */
						:: else -> newH = newH | BIT(i); ng = 1; stp = (LIMITED(i) && COUNTING && MUTATION != 14)
						fi
					:: !stp && (nid || (!blk && cmp)) && !rm -> blk = 1
					:: !stp && !nid && blk -> skip
#if MUTATION == 11
					:: !stp && !nid && !blk && !cmp -> skip
#else
					:: !stp && !nid && !blk && !cmp -> blk = !SHR(i)
#endif
					fi
				:: else
				fi
			}
		}
		joiners = newH & (255 - stays);
		/* requests joining shared holders that stay get a new token too */
		sjoin = (stays != 0 && joiners != 0 && (stays & SHR_REQS) == stays);
		j = 0; rk = 0; nid = 0; exm = 0; blk = 0; stp = 0; ng = 0; rm = 0; lm = 0; hc = 0; cmp = 0;
#else
		/* The holder identity: the staying members', else a grantable waiter's. Re-entrancy:
		   every grantable waiter of that identity joins H(k) at once. */
		hid = NONE;
		if
		:: stays != 0 ->
			for (i : 0 .. NR - 1) {
				if
				:: HAS(stays, i) -> hid = ID(i)
				:: else
				fi
			}
		:: else ->
			for (i : 0 .. NR - 1) {
				if
				:: HAS(cand, i) && ID(i) == pref -> hid = pref
				:: else
				fi
			}
			if
			:: hid == NONE ->
				for (i : 0 .. NR - 1) {
					if
					:: HAS(cand, i) -> hid = ID(i)
					:: else
					fi
				}
			:: else
			fi
		fi;
		if
		:: hid != NONE ->
			for (i : 0 .. NR - 1) {
				if
				:: HAS(cand, i) && ID(i) == hid -> joiners = joiners | BIT(i)
				:: else
				fi
			}
		:: else
		fi;
		newH = stays | joiners;
		sjoin = 0;
#endif
		/* 4. The token, when a new identity gets k or an unconfirmed grant is re-issued:
		   t = max(token + 1, rv(PL(k)) read, 1 + T_leave), T_leave the highest token (per key
		   or request-level) the holders leaving H(k) in this write showed: from their
		   statuses (final, or written final now), or a gone one's from its delete event -- if
		   this manager saw it (kn). A gone leaver with an unknown token: the write only takes
		   the leavers out, grants nobody, and the key is decided again on it (Again). */
		newid = (stays == 0 && joiners != 0);
#if MUTATION == 3
		w = newid;
#else
		w = (newid || unconf != 0 || sjoin);
#endif
		again = 0;
		tk = tpl.tok;
		if
		:: w ->
			tl = 0; unk = 0;
			for (i : 0 .. NR - 1) {
				if
				:: HAS(H, i) && !HAS(stays, i) && !HAS(dem, i) ->
					if
					:: trq[i].ex == LIVE -> tl = MAX(tl, RTOK(trq[i]))
					:: trq[i].ex != LIVE && kn -> tl = MAX(tl, RTOK(trq[i]))
					:: else -> unk = 1
					fi
				:: else
				fi
			}
#if MUTATION == 2
			/* the old per-ProjectLock counter: one above the ProjectLock's token and every
			   token of a request in view that names k */
			mx = tpl.tok;
			for (i : 0 .. NR - 1) {
				if
				:: trq[i].ex == LIVE && NAMES(i, k) -> mx = MAX(mx, RTOK(trq[i]))
				:: else
				fi
			}
			plus1(tk, mx)
#elif MUTATION == 6
			/* the Again split kept, T_leave left out of the token */
			again = (unk && (newid || sjoin || AGAIN_REISSUE));
			if
			:: again -> skip
			:: else ->
				plus1(tk, tpl.tok);
				tk = MAX(tk, tpl.rv)
			fi
#else
#if MUTATION != 7
			again = (unk && (newid || sjoin || AGAIN_REISSUE));
#endif
			if
			:: again -> skip
			:: else ->
				plus1(tk, tpl.tok);
				tk = MAX(tk, tpl.rv);
				plus1(mx, tl);
				tk = MAX(tk, mx)
			fi
#endif
		:: else
		fi;
		if
		:: again ->
			/* the Again split: only the leavers go; the grant is the next decision's */
			newH = stays;
			joiners = 0; unconf = 0;
#if MUTATION == 8
			dem = 0;
#endif
		:: else
		fi;
		pfin[m] = fin;
		pdem[m] = dem;
		pnewH[m] = newH;
		ptok[m] = tk;
		pplw[m] = (newH != H || tk != tpl.tok);
		pgr[m] = joiners | unconf;
		/* 5. A live freeze check before a commanded request is written newly holding. */
#if MUTATION != 4
		pfc[m] = (((joiners | unconf) & CMD_REQS) != 0);
#endif
	fi;
	/* the rv read of every request the decision writes: the precondition of its write */
	for (i : 0 .. NR - 1) {
		PRV(m, i) = (HAS(pfin[m] | pdem[m] | pgr[m], i) -> trq[i].rv : 0)
	}
	pb[m] = (pcr[m] || pfin[m] != 0 || pdem[m] != 0 || prem[m] || pplw[m] || pgr[m] != 0);
	if
	:: pb[m] ->
		printf("@@ M%d decides k%d: create=%d final={%d%d%d} demote={%d%d%d} removeFinalizer=%d PLwrite=%d H={%d%d%d} token=%d grant={%d%d%d}\n",
			m, k + 1, pcr[m], HAS(pfin[m], 0), HAS(pfin[m], 1), HAS(pfin[m], 2),
			HAS(pdem[m], 0), HAS(pdem[m], 1), HAS(pdem[m], 2), prem[m], pplw[m],
			HAS(pnewH[m], 0), HAS(pnewH[m], 1), HAS(pnewH[m], 2), RT(ptok[m]),
			HAS(pgr[m], 0), HAS(pgr[m], 1), HAS(pgr[m], 2));
		if
		:: again -> printf("@@ M%d: a gone holder of k%d has a token nobody knows: this write only takes the leavers out (Again)\n", m, k + 1)
		:: else
		fi
	:: else -> clearplan(m)
	fi
}

/* The next write of manager m's decision, in the protocol's order; ov: apply the overlay (the
   manager's view takes the object it wrote). A failed precondition ends the decision. */
inline step(m, ov) {
	sk = pk[m];
#if MUTATION == 5
	what = (pcr[m] -> 1 : (pplw[m] -> 4 : ((pfin[m] | pdem[m]) != 0 -> 2 : (prem[m] -> 3 : (pfc[m] -> 5 : (pgr[m] != 0 -> 6 : 0))))));
#else
	what = (pcr[m] -> 1 : ((pfin[m] | pdem[m]) != 0 -> 2 : (prem[m] -> 3 : (pplw[m] -> 4 : (pfc[m] -> 5 : (pgr[m] != 0 -> 6 : 0))))));
#endif
	if
	:: what == 1 ->                                  /* 1. create PL(k) with the finalizer */
		if
		:: pl[sk].ex == 0 ->
			pl[sk].ex = 1; pl[sk].del = 0; pl[sk].H = 0; pl[sk].tok = 0;
			newrv(pl[sk].rv);
			printf("@@ M%d creates PL(k%d) rv=%d\n", m, sk + 1, RT(pl[sk].rv));
			if
			:: ov -> cpPLv(VP(m, sk), pl[sk])
			:: else
			fi;
			pcr[m] = 0
		:: else ->
			printf("@@ M%d create PL(k%d) fails: it exists\n", m, sk + 1);
			clearplan(m)
		fi
	:: what == 2 ->                                  /* 2/3. final (or demote) before the PL write */
		sel = NONE;
		for (i : 0 .. NR - 1) {
			if
			:: sel == NONE && HAS(pfin[m], i) -> sel = i
			:: else
			fi
		}
		w = 0;
		if
		:: sel == NONE ->
			w = 1;
			for (i : 0 .. NR - 1) {
				if
				:: sel == NONE && HAS(pdem[m], i) -> sel = i
				:: else
				fi
			}
		:: else
		fi;
		if
		:: rq[sel].ex == LIVE && rq[sel].rv == PRV(m, sel) ->
			ot = rq[sel].ph; oT = rq[sel].held; tl = rq[sel].tok[0]; unk = rq[sel].tok[1];
			if
			:: w ->
				rq[sel].ph = PENDING;
				pdem[m] = pdem[m] & NOT(sel);
				printf("@@ M%d demotes %c (frozen, unconfirmed on k%d): back to waiting\n", m, RN(sel), sk + 1)
			:: else ->
				/* final: no key held any more; the tokens stay (T_leave reads them) */
				rq[sel].ph = FINAL; rq[sel].held = 0; rq[sel].rel = 0;
				expired[sel] = 0; lost[sel] = 0;
				pfin[m] = pfin[m] & NOT(sel);
				printf("@@ M%d writes %c final (tokens k1=%d k2=%d)\n", m, RN(sel), RT(rq[sel].tok[0]), RT(rq[sel].tok[1]))
			fi;
			/* a demotion raises status.fences: it changes the object (not under MUTATION 9) */
			WRV(rq[sel], ot, oT, tl, unk, w && MUTATION != 9);
			tl = 0; unk = 0; ot = 0; oT = 0;
			PRV(m, sel) = 0;
			if
			:: ov -> cpRQv(VR(m, sel), rq[sel])
			:: else
			fi
		:: else ->
			printf("@@ M%d write of %c fails (conflict or NotFound): decision ends\n", m, RN(sel));
			clearplan(m)
		fi
	:: what == 3 ->                                  /* 2. remove the finalizer: PL(k) is gone */
		if
		:: pl[sk].ex == 1 && pl[sk].rv == pplrv[m] ->
			clrPL(pl[sk]);
			prem[m] = 0;
			printf("@@ M%d removes the finalizer: PL(k%d) is gone\n", m, sk + 1);
			if
			:: ov -> clrPL(VP(m, sk))
			:: else
			fi
		:: else ->
			printf("@@ M%d finalizer removal on PL(k%d) fails: decision ends\n", m, sk + 1);
			clearplan(m)
		fi
	:: what == 4 ->                                  /* 4. PL(k).status with the rv read */
		if
		:: pl[sk].ex == 1 && pl[sk].rv == pplrv[m] ->
			/* the no-op rule: an unchanged status keeps the rv (Decide writes none such) */
			w = (pl[sk].H != pnewH[m] || pl[sk].tok != ptok[m]);
			pl[sk].H = pnewH[m];
			pl[sk].tok = ptok[m];
			if
			:: w -> newrv(pl[sk].rv)
			:: else -> printf("@@ the API server answers the PL(k%d) write as a no-op: its rv stays\n", sk + 1)
			fi;
			w = 0;
			pplw[m] = 0;
			pplrv[m] = 0;
			printf("@@ M%d writes PL(k%d): H={%d%d%d} token=%d (now rv=%d)\n", m, sk + 1,
				HAS(pl[sk].H, 0), HAS(pl[sk].H, 1), HAS(pl[sk].H, 2), RT(pl[sk].tok), RT(pl[sk].rv));
			if
			:: ov -> cpPLv(VP(m, sk), pl[sk])
			:: else
			fi
		:: else ->
			printf("@@ M%d PL(k%d) write fails (conflict): decision ends\n", m, sk + 1);
			clearplan(m)
		fi
	:: what == 5 ->                                  /* 5. live freeze check */
		if
		:: cl.frozen && (pgr[m] & CMD_REQS) != 0 ->
			printf("@@ M%d live freeze check: frozen, decides again\n", m);
			clearplan(m);
			plive[m] = 1
		:: else ->
			pfc[m] = 0
		fi
	:: what == 6 ->                                  /* 6. grant: held[k], token[k] */
		sel = NONE;
		for (i : 0 .. NR - 1) {
			if
			:: sel == NONE && HAS(pgr[m], i) -> sel = i
			:: else
			fi
		}
		if
		:: rq[sel].ex == LIVE && rq[sel].rv == PRV(m, sel) ->
			ot = rq[sel].ph; oT = rq[sel].held; tl = rq[sel].tok[0]; unk = rq[sel].tok[1];
			rq[sel].held = rq[sel].held | BIT(sk);
			rq[sel].tok[sk] = ptok[m];
			rq[sel].ph = (rq[sel].held == KEYS(sel) -> GRANTED : PENDING);
			WRV(rq[sel], ot, oT, tl, unk, 0);
			tl = 0; unk = 0; ot = 0; oT = 0;
			pgr[m] = pgr[m] & NOT(sel);
			PRV(m, sel) = 0;
			printf("@@ M%d writes %c holding k%d token=%d (request token %d, Granted=%d)\n", m, RN(sel), sk + 1,
				RT(rq[sel].tok[sk]), RT(RTOK(rq[sel])), rq[sel].ph == GRANTED);
			if
			:: ov -> cpRQv(VR(m, sel), rq[sel])
			:: else
			fi
		:: else ->
			printf("@@ M%d grant write of %c fails (conflict or NotFound): decision ends\n", m, RN(sel));
			clearplan(m)
		fi
	:: else -> clearplan(m)
	fi;
	if
	:: pb[m] && !pcr[m] && pfin[m] == 0 && pdem[m] == 0 && !prem[m] && !pplw[m] && !pfc[m] && pgr[m] == 0 ->
		clearplan(m)
	:: else
	fi;
	settle()
}

/* ------------------------------------------------------------------ processes ------------ */
inline refreshR(m) {
	for (j : 0 .. NR - 1) { cpRQv(VR(m, j), rq[j]) };
	j = 0
}
inline refreshP(m) {
	for (j : 0 .. NK - 1) { cpPLv(VP(m, j), pl[j]) };
	j = 0
}
#if MIDREFRESH
#define IDLE(m) 1
#else
#define IDLE(m) (!pb[m])
#endif
/* k2 is decided only if some request names it; pref 1 only matters for a key both
   identities want */
#define K2USED (((KA | KB | KC) & 2) != 0)
#define BOTH(k) ((NAMES(0, k) || NAMES(2, k)) && NAMES(1, k))
/* kn 1 only matters while a request is gone */
#define SOMEGONE (rq[0].ex == GONE || rq[1].ex == GONE || rq[2].ex == GONE)

proctype Manager(byte m) {
	do
#if STARVE
	/* calm, forever: refresh every view, decide k1, write the decision */
	:: d_step { !pb[m] -> refreshR(m); refreshP(m); cpCL(vcl[m], cl); plive[m] = 0; plan(m, 0, 0, 0); tidy() }
	:: d_step { pb[m] -> step(m, 1) }
#else
	/* chaos: the view of each kind moves to the store's present state whenever the manager
	   likes (or not at all); it decides either key; it may crash between any two writes */
	:: d_step { IDLE(m) && CHAOS -> refreshR(m); tidy() }
	:: d_step { IDLE(m) && CHAOS -> refreshP(m); tidy() }
	:: d_step { IDLE(m) && CHAOS -> cpCL(vcl[m], cl); plive[m] = 0; tidy() }
	:: d_step { !pb[m] && CHAOS -> plan(m, 0, 0, 0); tidy() }
	:: d_step { !pb[m] && CHAOS && BOTH(0) -> plan(m, 0, 1, 0); tidy() }
	:: d_step { !pb[m] && CHAOS && SOMEGONE -> plan(m, 0, 0, 1); tidy() }
	:: d_step { !pb[m] && CHAOS && SOMEGONE && BOTH(0) -> plan(m, 0, 1, 1); tidy() }
	:: d_step { !pb[m] && CHAOS && K2USED -> plan(m, 1, 0, 0); tidy() }
	:: d_step { !pb[m] && CHAOS && BOTH(1) -> plan(m, 1, 1, 0); tidy() }
	:: d_step { !pb[m] && CHAOS && K2USED && SOMEGONE -> plan(m, 1, 0, 1); tidy() }
	:: d_step { !pb[m] && CHAOS && BOTH(1) && SOMEGONE -> plan(m, 1, 1, 1); tidy() }
	:: d_step { pb[m] -> step(m, OVDEF) }
#if OVERLAY == 2
	:: d_step { pb[m] && CHAOS -> step(m, 0) }
#endif
	:: d_step { pb[m] && CHAOS && CRASH -> printf("@@ M%d crashes: the rest of its decision is abandoned\n", m); clearplan(m); plive[m] = 0; tidy() }
#if DIE
	/* dies for good: its process ends, so fairness never asks it to act again */
	:: d_step { m == NMGR - 1 && CHAOS -> printf("@@ M%d dies for good\n", m); clearplan(m); plive[m] = 0; tidy() }; break
#endif
#if PROGRESS
	/* calm (after the environment is done): refresh every view, decide the next key, repeat */
	:: d_step { !pb[m] && !CHAOS -> refreshR(m); refreshP(m); cpCL(vcl[m], cl); plive[m] = 0; plan(m, nk[m], 0, 0); nk[m] = 1 - nk[m]; tidy() }
#endif
#endif
	od
}

#if STARVE
/* A reader that releases what it holds and asks again, as a new request arriving last, forever
   (weak fairness: it does not hold forever). */
proctype Reader(byte r) {
	do
	:: d_step { ACTIVE(rq[r]) && HELD(rq[r], 0) && !rq[r].rel -> rq[r].rel = 1; rq[r].rv = NEWR; printf("@@ reader %c releases\n", RN(r)); settle() }
	:: d_step { rq[r].ex == LIVE && rq[r].ph == FINAL ->
		rq[r].ph = PENDING; rq[r].held = 0; rq[r].tok[0] = 0; rq[r].tok[1] = 0; rq[r].rel = 0; rq[r].rv = NEWR;
		arr[r] = NR + 1; printf("@@ reader %c asks again (a new request, last in the queue)\n", RN(r)); settle() }
	od
}
#endif

/* The CommandLock reconciler (in manager M0, so its LockRequest view is M0's): after it sees
   the freeze, a live list of ProjectLocks; if no request of the command in any H(k) is Granted
   or unconfirmed on k (by its view; a member missing from the view counts), it writes Drained
   with the CommandLock rv it saw ("Freezes and Drained"). */
proctype CLR() {
	do
	:: d_step {
		clst == 0 && cl.frozen && !cl.drained ->
		w = 1;
		for (kk : 0 .. NK - 1) {
			if
			:: pl[kk].ex == 1 ->
				for (i : 0 .. NR - 1) {
					if
					:: HAS(pl[kk].H, i) && CMD(i) ->
						if
						:: VR(0, i).ex == ABSENT -> w = 0
						:: VR(0, i).ex == LIVE && VR(0, i).ph == GRANTED -> w = 0
						:: VR(0, i).ex == LIVE && VR(0, i).ph == PENDING && !HELD(VR(0, i), kk) -> w = 0
						:: else
						fi
					:: else
					fi
				}
			:: else
			fi
		}
		if
		:: w -> clst = 1; clc = cl.rv; printf("@@ CommandLock reconciler: live PL list shows nothing of the command in flight\n")
		:: else
		fi;
		kk = 0; i = 0
	   }
	:: d_step {
		clst == 1 ->
		if
		:: cl.rv == clc -> cl.drained = 1; cl.rv++; printf("@@ CommandLock reconciler writes Drained=True\n"); monitor()
		/* (the write changes drained from 0 to 1: never a no-op) */
		:: else -> printf("@@ CommandLock reconciler: Drained write fails (conflict)\n")
		fi;
		clst = 0; clc = 0
	   }
	od
}

#if SHR_REQS
#define ARRIVE(r) arr[r] = NR + 1
#else
#define ARRIVE(r) skip
#endif
#define ENV_REQ(r) \
	:: d_step { HAS(ecr, r) -> ecr = ecr & NOT(r); rq[r].ex = LIVE; rq[r].rv = NEWR; ARRIVE(r); printf("@@ client creates %c\n", RN(r)); settle() } \
	:: d_step { HAS(erel, r) && ACTIVE(rq[r]) -> erel = erel & NOT(r); rq[r].rel = 1; rq[r].rv = NEWR; printf("@@ client releases %c (spec.release)\n", RN(r)); settle() } \
	:: d_step { HAS(edel, r) && rq[r].ex == LIVE -> edel = edel & NOT(r); rq[r].ex = GONE; rq[r].rv = 0; rq[r].ph = 0; rq[r].held = 0; \
	            rq[r].rel = 0; expired[r] = 0; lost[r] = 0; \
	            printf("@@ client deletes %c (its delete event carries tokens k1=%d k2=%d)\n", RN(r), RT(rq[r].tok[0]), RT(rq[r].tok[1])); settle() } \
	:: d_step { HAS(eexp, r) && rq[r].ex == LIVE && rq[r].ph == GRANTED -> eexp = eexp & NOT(r); expired[r] = 1; printf("@@ %c's grant expires\n", RN(r)); monitor() } \
	:: d_step { HAS(elost, r) && ACTIVE(rq[r]) -> elost = elost & NOT(r); lost[r] = 1; printf("@@ %c's holder Lease lapses\n", RN(r)); monitor() }

#if MUTATION == 1
#define FORCE_UNLOCK(k) clrPL(pl[k]); printf("@@ admin deletes PL(k%d): no finalizer, it is gone at once\n", k + 1)
#else
#define FORCE_UNLOCK(k) pl[k].del = 1; newrv(pl[k].rv); printf("@@ admin deletes PL(k%d): deletionTimestamp set, rv=%d\n", k + 1, RT(pl[k].rv))
#endif

#if SHR_REQS
#define ARRIVE2(r) arr[r] = r + 1
#else
#define ARRIVE2(r) skip
#endif
#define ENV_KEY(k) \
	:: d_step { efu > 0 && pl[k].ex == 1 && !pl[k].del -> efu--; FORCE_UNLOCK(k); settle() }

proctype Env() {
	do
	ENV_REQ(0)
	ENV_REQ(1)
	ENV_REQ(2)
	ENV_KEY(0)
	ENV_KEY(1)
	:: d_step { efrz == 1 -> efrz = (THAW -> 2 : 0); cl.frozen = 1; cl.drained = 0; cl.rv++; printf("@@ admin freezes the command\n"); monitor() }
	:: d_step { efrz == 2 -> efrz = 0; cl.frozen = 0; cl.drained = 0; cl.rv++; printf("@@ admin thaws the command\n"); monitor() }
#if GAPS
	:: d_step { CHAOS -> gc++; canon() }
#endif
#if PROGRESS
	:: d_step { !envDone -> envDone = 1; printf("@@ environment done\n") }; break
#endif
	od
}

init {
	d_step {
		for (j : 0 .. NR - 1) {
			if
			:: HAS(INIT_REQS, j) -> rq[j].ex = LIVE; rq[j].rv = NEWR; ARRIVE2(j)
			:: else
			fi
		}
		ecr = CREATE_REQS & (255 - INIT_REQS);
		erel = REL_REQS; edel = DEL_REQS; eexp = EXP_REQS; elost = LOST_REQS;
		efu = FU_BUDGET; efrz = FREEZE;
		cl.rv = 1;
#if !VIEWS_EMPTY
		/* the managers start with views of the initial store */
		for (j : 0 .. NM - 1) {
			for (i : 0 .. NR - 1) { cpRQv(VR(j, i), rq[i]) };
			cpCL(vcl[j], cl)
		};
#endif
		canonR();
		monitor()
	}
	atomic {
		run Manager(0);
#if NMGR == 2
		run Manager(1);
#endif
		run Env();
#if STARVE
		run Reader(0);
		run Reader(2);
#endif
#if FREEZE
		run CLR()
#endif
	}
}

#if STARVE
/* a waiting writer is granted: readers that keep coming do not starve it */
ltl starve { [] (wB -> <> !wB) }
#elif PROGRESS
ltl progress { [] ((fw0 -> <> !fw0) && (fw1 -> <> !fw1)) }
#endif
