/*
 * turnstile.pml -- a Promela model of Turnstile's lock hand-off protocol (docs/protocol.md).
 *
 * Two managers decide lock keys from their own lagging views of the store, may crash between
 * any two writes, and race each other; clients create, release and delete LockRequests; an admin
 * force-unlocks ProjectLocks and freezes / thaws a command; grants expire and holder Leases lapse.
 * After every change of the store a monitor checks
 *   ME  mutual exclusion: the non-final requests holding k belong to one identity, and H(k) too;
 *   J   every non-final request holding k is listed in H(k) of the existing PL(k);
 *   TM  tokens: a holder of k shows (per key and request-level) tokens above every token an
 *       earlier holder identity of k showed (its requests, or PL(k) itself);
 *   DR  Drained: while the CommandLock says Drained, no request of the command is Granted;
 * and, with -DPROGRESS=1, an LTL property (checked with pan -a -f) says that a free key with a
 * live waiter is eventually not free-with-a-waiter.
 *
 * One file holds the protocol and its mutations: -DMUTATION=n (see model/README.md).
 *   1  no finalizer: an admin's delete removes the ProjectLock at once (hole 1 of issue #12)
 *   2  counter tokens: max(ProjectLock token, tokens of the requests in view) + 1, as the old code
 *   3  an unconfirmed grant is re-issued without the decision's own ProjectLock write
 *   4  no live freeze check before a commanded request is written holding (step 5 skipped)
 *   5  the outgoing holders are written final AFTER the ProjectLock write (steps 3 and 4 swapped)
 * -DTOKEN_FIX=1 is a candidate repair of the token flaw the model found (see model/README.md).
 *
 * Modelling conventions
 *  - Every manager step, every client/admin action and every CommandLock-reconciler step is one
 *    d_step: one API call (a write, a list into a view, or the live reads of one decision).
 *  - ProjectLock resourceVersions come from ONE global counter `gc` (etcd's revision), so they
 *    increase across keys and across deletion and re-creation; tokens ARE such rvs. Since the
 *    model only compares them (==, <) the values are renamed after every step to 1..n keeping
 *    their order (canon()): this is exact and keeps the state space finite however many writes
 *    happen. LockRequest rvs are per object and only compared for equality; canonR() renames
 *    them the same way. CommandLock rvs are a small counter.
 */

/* ------------------------------------------------------------------ configuration -------- */
#ifndef MUTATION
#define MUTATION 0
#endif
#ifndef TOKEN_FIX
#define TOKEN_FIX 0
#endif
/* overlay of a manager's own writes on its view: 0 never, 1 always, 2 either (nondeterministic) */
#ifndef OVERLAY
#define OVERLAY 2
#endif
#ifndef PROGRESS
#define PROGRESS 0
#endif
/* 0: managers never crash (abandon a decision between writes) */
#ifndef CRASH
#define CRASH 1
#endif
/* 1: the managers start with empty views (nothing seen yet) instead of the initial store */
#ifndef VIEWS_EMPTY
#define VIEWS_EMPTY 0
#endif
/* requests (bit r = request r): which exist from the start, which a client creates later */
#ifndef INIT_REQS
#define INIT_REQS 3
#endif
#ifndef CREATE_REQS
#define CREATE_REQS 4
#endif
/* which requests a client may release (spec.release) / delete, which grants may expire,
   whose holder Lease may lapse: each at most once */
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
#define FU_BUDGET 1
#endif
/* which requests name the command; FREEZE=1: one freeze of it (THAW=1: and one thaw) */
#ifndef CMD_REQS
#define CMD_REQS 1
#endif
#ifndef FREEZE
#define FREEZE 0
#endif
#ifndef THAW
#define THAW 1
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

#if MUTATION == 2
#define CANON_TOK 0   /* counter tokens are not rvs: +1 arithmetic, so they are not renamed */
#define TOKCAP 12     /* and bounded (a path that would go past is cut) */
#else
#define CANON_TOK 1
#endif

/* ------------------------------------------------------------------ the world ------------ */
#define NK 2          /* keys k1 (index 0), k2 (index 1); canonical order k1 < k2 */
#define NR 3          /* requests A (0), B (1), C (2) */
#define NM 2          /* managers M0, M1 */

/* Requests (spec, immutable):
 *   A: identity a, locks {k1}, names the command when CMD_REQS has bit 0
 *   B: identity b, locks {k1, k2} (multi-lock: k1 first, then k2)
 *   C: identity a, locks {k1}: re-entrant with A (same holder identity) */
#define ID(r)       ((r) == 1 -> 1 : 0)
#define KEYS(r)     ((r) == 1 -> 3 : 1)
#define BIT(x)      (1 << (x))
#define HAS(m, x)   (((m) >> (x)) & 1)
#define NAMES(r, k) HAS(KEYS(r), k)
#define CMD(r)      HAS(CMD_REQS, r)
#define NOT(x)      (255 - BIT(x))

/* request phases; request existence */
#define PENDING 0
#define GRANTED 1
#define FINAL   2
#define ABSENT  0   /* not created yet (or: not in this view) */
#define LIVE    1
#define GONE    2   /* deleted: a live read says NotFound */

#define MAXV 60     /* bound of the renamed rv/token domain */
#define NEWR 7      /* a fresh request rv before canonR() renames it */
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
	byte tok[NK];        /* status.locks[k].fencingToken; the request token is their max */
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
byte  gc;                /* the global ProjectLock rv counter (renamed by canon()) */

/* the managers' views: per kind a snapshot of the store taken at a moment the manager chose,
   plus (overlay) its own writes, plus what its live reads returned */
PLock vpl[NM * NK];
Req   vrq[NM * NR];
CLock vcl[NM];
#define VP(m, k) vpl[(m) * NK + (k)]
#define VR(m, r) vrq[(m) * NR + (r)]

/* a manager's decision in flight (its reconciler memory): the writes still to make */
bool pb[NM];             /* busy deciding */
byte pk[NM];             /* the key decided */
bool pcr[NM];            /* step 1: create PL(k) */
byte pfin[NM];           /* steps 2/3: requests to write final */
byte pdem[NM];           /* step 3: requests to demote (unconfirmed, now frozen) */
bool prem[NM];           /* step 2: remove the finalizer */
bool pplw[NM];           /* step 4: write PL(k).status */
byte pnewH[NM];          /*   with this H(k) */
byte ptok[NM];           /*   and this token (also the token of the grants) */
bool pfc[NM];            /* step 5: live freeze check */
byte pgr[NM];            /* step 6: requests to write holding k */
bit  nk[NM];             /* PROGRESS: the key the calm loop decides next */

/* environment budgets (bit r = may still happen to request r) and ghost clock/Lease facts */
byte ecr, erel, edel, eexp, elost, efu, efrz;
bool expired[NR];        /* the grant's expiresAt has passed (any manager's clock says so) */
bool lost[NR];           /* the holder's Lease lapsed (a live read of the Lease says so) */
bool envDone;            /* PROGRESS: the environment has finished */

/* the CommandLock reconciler */
byte clst, clc;

/* monitor ghosts (TM): per key, the identity of the current tenure (+1), the highest token the
   earlier identities showed, and the highest the current one showed */
byte curId[NK], prevMax[NK], tenMax[NK];
bool fw0, fw1;           /* PROGRESS: key k1 / k2 is free and has a live waiter */

/* temporaries (not part of the state) */
hidden byte i, j, sk, kk, sel, w, what, H, stays, unconf, fin, dem, cand, hid, joiners, newH, tk, mx;
hidden byte ci, cj, cn, s0, a0, b0, na, ot, oT;
hidden byte cu[MAXV + 1];
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
/* a view of a request: its tokens only matter to the counter-token mutation (the protocol's
   decision never reads a request's token), so other runs keep them out of views */
#if MUTATION == 2
inline cpRQ(d, s) { d.ex = s.ex; d.rv = s.rv; d.ph = s.ph; d.held = s.held; d.tok[0] = s.tok[0]; d.tok[1] = s.tok[1]; d.rel = s.rel }
#else
inline cpRQ(d, s) { d.ex = s.ex; d.rv = s.rv; d.ph = s.ph; d.held = s.held; d.rel = s.rel }
#endif
inline cpCL(d, s) { d.frozen = s.frozen; d.drained = s.drained; d.rv = s.rv }

#define HELD(v, k)    HAS(v.held, k)
#define RTOK(v)       (v.tok[0] > v.tok[1] -> v.tok[0] : v.tok[1])
/* a multi-lock request tries k2 only once it holds k1 (canonical order) */
#define REACHED(v, r, k) ((k) == 0 || !NAMES(r, 0) || HELD(v, 0))
#define FROZEN(m, r)  (CMD(r) && vcl[m].frozen)
#define ACTIVE(v)     (v.ex == LIVE && v.ph != FINAL)
#define RN(r)         (65 + (r))          /* 'A' + r, for printf %c */
#if CANON_TOK
#define RT(x)         realOf[x]
#else
#define RT(x)         (x)
#endif

/* a fresh ProjectLock rv: above every rv (and token) in the state */
inline newrv(x) {
	gc++;
	assert(gc < MAXV);
	realgc++;
	realOf[gc] = realgc;
	x = gc
}

/* Rename the rv/token domain to 1..n, keeping order. Exact: the model only compares these values
   and only ever makes a new one above all of them. */
inline canon() {
	for (ci : 0 .. MAXV) { cu[ci] = 0 }
	for (ci : 0 .. NK - 1) {
		cu[pl[ci].rv] = 1;
#if CANON_TOK
		cu[pl[ci].tok] = 1; cu[prevMax[ci]] = 1; cu[tenMax[ci]] = 1;
#endif
	}
	for (ci : 0 .. NM * NK - 1) {
		cu[vpl[ci].rv] = 1;
#if CANON_TOK
		cu[vpl[ci].tok] = 1;
#endif
	}
#if CANON_TOK
	for (ci : 0 .. NR - 1) { cu[rq[ci].tok[0]] = 1; cu[rq[ci].tok[1]] = 1 }
	for (ci : 0 .. NM - 1) { cu[ptok[ci]] = 1 }
#endif
	cu[0] = 0;
	cn = 0;
	for (ci : 1 .. MAXV) {
		if
		:: cu[ci] -> cn++; cu[ci] = cn; realTmp[cn] = realOf[ci]
		:: else
		fi
	}
	for (ci : 1 .. MAXV) { realOf[ci] = (ci <= cn -> realTmp[ci] : 0) }
	for (ci : 0 .. NK - 1) {
		pl[ci].rv = cu[pl[ci].rv];
#if CANON_TOK
		pl[ci].tok = cu[pl[ci].tok]; prevMax[ci] = cu[prevMax[ci]]; tenMax[ci] = cu[tenMax[ci]];
#endif
	}
	for (ci : 0 .. NM * NK - 1) {
		vpl[ci].rv = cu[vpl[ci].rv];
#if CANON_TOK
		vpl[ci].tok = cu[vpl[ci].tok];
#endif
	}
#if CANON_TOK
	for (ci : 0 .. NR - 1) { rq[ci].tok[0] = cu[rq[ci].tok[0]]; rq[ci].tok[1] = cu[rq[ci].tok[1]] }
	for (ci : 0 .. NM - 1) { ptok[ci] = cu[ptok[ci]] }
#endif
	gc = cn
}

/* Rename each request's rvs: the store's is 1, a view's is 1 when equal to it, else 2 or 3.
   A request that does not exist (yet / any more) has rv 0; a view of it that still shows it
   keeps rv 1 (no write to it can succeed anyway). */
inline canonR() {
	for (ci : 0 .. NR - 1) {
		if
		:: rq[ci].ex != LIVE ->
			rq[ci].rv = 0;
			for (cj : 0 .. NM - 1) { vrq[cj * NR + ci].rv = (vrq[cj * NR + ci].ex == LIVE -> 1 : 0) }
		:: else ->
			s0 = rq[ci].rv; a0 = vrq[ci].rv; b0 = vrq[NR + ci].rv;
			rq[ci].rv = 1;
			na = (a0 == 0 -> 0 : (a0 == s0 -> 1 : 2));
			vrq[ci].rv = na;
			vrq[NR + ci].rv = (b0 == 0 -> 0 : (b0 == s0 -> 1 : (b0 == a0 -> na : (na == 2 -> 3 : 2))))
		fi
	};
	ci = 0   /* (a d_step may not end in a loop) */
}

/* ------------------------------------------------------------------ the monitor ---------- */
/* A reader sees request/ProjectLock of identity idn holding k with per-key token t and
   request-level token T. */
inline observe(k, idn, t, T) {
#if CHECK_TM
	if
	:: curId[k] != idn + 1 ->
		prevMax[k] = (tenMax[k] > prevMax[k] -> tenMax[k] : prevMax[k]);
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
	tenMax[k] = (t > tenMax[k] -> t : tenMax[k]);
	tenMax[k] = (T > tenMax[k] -> T : tenMax[k])
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
				:: HAS(pl[kk].H, i) && sel != NONE && ID(i) != ID(sel) ->
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
			observe(kk, ID(sel), ot, ot)
		:: else
		fi;
		/* who holds k in the store */
		sel = NONE;
		for (i : 0 .. NR - 1) {
			if
			:: ACTIVE(rq[i]) && HELD(rq[i], kk) ->
#if CHECK_ME
				if
				:: sel != NONE && ID(i) != ID(sel) ->
					printf("@@ VIOLATION ME: %c and %c (two identities) both hold k%d\n", RN(sel), RN(i), kk + 1);
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
				observe(kk, ID(i), ot, oT)
			:: else
			fi
		}
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

inline settle() { canon(); canonR(); monitor() }

/* ------------------------------------------------------------------ a decision ----------- */
inline clearplan(m) {
	pb[m] = 0; pk[m] = 0; pcr[m] = 0; pfin[m] = 0; pdem[m] = 0; prem[m] = 0;
	pplw[m] = 0; pnewH[m] = 0; ptok[m] = 0; pfc[m] = 0; pgr[m] = 0
}

/* Decide key k from manager m's view (steps 1-6 of docs/protocol.md): the live reads, then the
   plan of writes, which step() then makes one by one. pref: the identity to grant a free key to
   when waiters of both identities are grantable (queue order is abstracted: either may be first). */
inline plan(m, k, pref) {
	/* Live read: a request claims k in the view but the viewed PL(k) does not list it
	   (force-unlocked, or the PL view is behind our grant?): read PL(k) live. */
	w = 0;
	for (i : 0 .. NR - 1) {
		if
		:: ACTIVE(VR(m, i)) && HELD(VR(m, i), k) && !(VP(m, k).ex == 1 && HAS(VP(m, k).H, i)) -> w = 1
		:: else
		fi
	}
	if
	:: w -> cpPL(VP(m, k), pl[k])
	:: else
	fi;
	/* Live read: a holder listed in H(k) missing from the request view (deleted, or created
	   after the view): read it live; NotFound means gone. */
	if
	:: VP(m, k).ex == 1 ->
		for (i : 0 .. NR - 1) {
			if
			:: HAS(VP(m, k).H, i) && VR(m, i).ex != LIVE -> cpRQ(VR(m, i), rq[i])
			:: else
			fi
		}
	:: else
	fi;
	pk[m] = k;
	if
	:: VP(m, k).ex == 0 ->
		/* 1. Create PL(k) if someone waits for k. */
		w = 0;
		for (i : 0 .. NR - 1) {
			if
			:: ACTIVE(VR(m, i)) && NAMES(i, k) -> w = 1
			:: else
			fi
		}
		pcr[m] = w
	:: VP(m, k).ex == 1 && VP(m, k).del ->
		/* 2. Force-unlock: every member of H(k) final (unless final or gone), then remove the
		   finalizer with the rv read. */
		fin = 0;
		for (i : 0 .. NR - 1) {
			if
			:: HAS(VP(m, k).H, i) && ACTIVE(VR(m, i)) -> fin = fin | BIT(i)
			:: else
			fi
		}
		pfin[m] = fin;
		prem[m] = 1
	:: else ->
		/* 3. Who leaves H(k): final/gone members drop out; released, Lease-lost and expired ones
		   are written final; unconfirmed ones now frozen are demoted. The rest stay; a staying
		   member the view does not show holding k is an unconfirmed grant (re-issued below). */
		H = VP(m, k).H; stays = 0; unconf = 0; fin = 0; dem = 0; cand = 0;
		for (i : 0 .. NR - 1) {
			if
			:: HAS(H, i) ->
				if
				:: !ACTIVE(VR(m, i)) -> skip
				:: ACTIVE(VR(m, i)) && (VR(m, i).rel || lost[i] || expired[i]) -> fin = fin | BIT(i)
				:: ACTIVE(VR(m, i)) && !(VR(m, i).rel || lost[i] || expired[i]) && !HELD(VR(m, i), k) && FROZEN(m, i) ->
					dem = dem | BIT(i)
				:: else ->
					stays = stays | BIT(i);
					if
					:: !HELD(VR(m, i), k) -> unconf = unconf | BIT(i)
					:: else
					fi
				fi
			:: !HAS(H, i) && ACTIVE(VR(m, i)) && NAMES(i, k) ->
				if
				:: HELD(VR(m, i), k) || VR(m, i).rel || lost[i] ->
					/* a claimant even the live PL(k) does not list (ForceUnlocked), or a waiter
					   released / Lease lost before its grant: finished */
					fin = fin | BIT(i)
				:: else ->
					if
					:: !FROZEN(m, i) && REACHED(VR(m, i), i, k) -> cand = cand | BIT(i)
					:: else
					fi
				fi
			:: else
			fi
		}
		/* The holder identity: the staying members', else a grantable waiter's. Re-entrancy: every
		   grantable waiter of that identity joins H(k) at once. */
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
#if TOKEN_FIX
		/* candidate repair: a new identity is granted only on a PL(k) whose H(k) was empty in the
		   rv read, so the hand-off first writes PL(k) with the outgoing holders removed */
		if
		:: stays == 0 && H != 0 -> hid = NONE
		:: else
		fi;
#endif
		joiners = 0;
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
		/* 4. The token: new when a new identity gets k, or an unconfirmed grant is re-issued:
		   t = rv(PL(k)), the rv the ProjectLock write is preconditioned on. */
#if MUTATION == 3
		w = (stays == 0 && joiners != 0);
#else
		w = ((stays == 0 && joiners != 0) || unconf != 0);
#endif
		if
		:: w ->
#if MUTATION == 2
			mx = VP(m, k).tok;
			for (i : 0 .. NR - 1) {
				if
				:: VR(m, i).ex == LIVE && NAMES(i, k) && RTOK(VR(m, i)) > mx -> mx = RTOK(VR(m, i))
				:: else
				fi
			}
			tk = mx + 1
#else
			tk = VP(m, k).rv
#endif
		:: else -> tk = VP(m, k).tok
		fi;
		pfin[m] = fin;
		pdem[m] = dem;
		pnewH[m] = newH;
		ptok[m] = tk;
		pplw[m] = (newH != H || tk != VP(m, k).tok);
		pgr[m] = joiners | unconf;
#if MUTATION != 4
		pfc[m] = (((joiners | unconf) & CMD_REQS) != 0);
#endif
#if MUTATION == 2
		if
		:: tk > TOKCAP -> clearplan(m)
		:: else
		fi;
#endif
	fi;
	pb[m] = (pcr[m] || pfin[m] != 0 || pdem[m] != 0 || prem[m] || pplw[m] || pgr[m] != 0);
	if
	:: pb[m] ->
		printf("@@ M%d decides k%d: create=%d final={%d%d%d} demote={%d%d%d} removeFinalizer=%d PLwrite=%d H={%d%d%d} token=%d grant={%d%d%d}\n",
			m, k + 1, pcr[m], HAS(pfin[m], 0), HAS(pfin[m], 1), HAS(pfin[m], 2),
			HAS(pdem[m], 0), HAS(pdem[m], 1), HAS(pdem[m], 2), prem[m], pplw[m],
			HAS(pnewH[m], 0), HAS(pnewH[m], 1), HAS(pnewH[m], 2), RT(ptok[m]),
			HAS(pgr[m], 0), HAS(pgr[m], 1), HAS(pgr[m], 2))
	:: else -> clearplan(m)
	fi
}

inline abortplan(m) { clearplan(m) }

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
			:: ov -> cpPL(VP(m, sk), pl[sk])
			:: else
			fi;
			pcr[m] = 0
		:: else ->
			printf("@@ M%d create PL(k%d) fails: it exists\n", m, sk + 1);
			abortplan(m)
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
		:: rq[sel].ex == LIVE && rq[sel].rv == VR(m, sel).rv ->
			if
			:: w ->
				rq[sel].ph = PENDING;
				pdem[m] = pdem[m] & NOT(sel);
				printf("@@ M%d demotes %c (frozen, unconfirmed on k%d): back to waiting\n", m, RN(sel), sk + 1)
			:: else ->
				rq[sel].ph = FINAL;
#if MUTATION != 2
				/* nothing reads a final request's locks any more (the monitor observed its
				   tokens while it held): forget them, fewer states */
				rq[sel].held = 0; rq[sel].tok[0] = 0; rq[sel].tok[1] = 0; rq[sel].rel = 0;
#endif
				expired[sel] = 0; lost[sel] = 0;
				pfin[m] = pfin[m] & NOT(sel);
				printf("@@ M%d writes %c final\n", m, RN(sel))
			fi;
			rq[sel].rv = NEWR;
			if
			:: ov -> cpRQ(VR(m, sel), rq[sel])
			:: else
			fi
		:: else ->
			printf("@@ M%d write of %c fails (conflict or NotFound): decision ends\n", m, RN(sel));
			abortplan(m)
		fi
	:: what == 3 ->                                  /* 2. remove the finalizer: PL(k) is gone */
		if
		:: pl[sk].ex == 1 && pl[sk].rv == VP(m, sk).rv ->
			clrPL(pl[sk]);
			prem[m] = 0;
			printf("@@ M%d removes the finalizer: PL(k%d) is gone\n", m, sk + 1);
			if
			:: ov -> clrPL(VP(m, sk))
			:: else
			fi
		:: else ->
			printf("@@ M%d finalizer removal on PL(k%d) fails: decision ends\n", m, sk + 1);
			abortplan(m)
		fi
	:: what == 4 ->                                  /* 4. PL(k).status with the rv read */
		if
		:: pl[sk].ex == 1 && pl[sk].rv == VP(m, sk).rv ->
			pl[sk].H = pnewH[m];
			pl[sk].tok = ptok[m];
			newrv(pl[sk].rv);
			pplw[m] = 0;
			printf("@@ M%d writes PL(k%d): H={%d%d%d} token=%d (now rv=%d)\n", m, sk + 1,
				HAS(pl[sk].H, 0), HAS(pl[sk].H, 1), HAS(pl[sk].H, 2), RT(pl[sk].tok), RT(pl[sk].rv));
			if
			:: ov -> cpPL(VP(m, sk), pl[sk])
			:: else
			fi
		:: else ->
			printf("@@ M%d PL(k%d) write fails (conflict): decision ends\n", m, sk + 1);
			abortplan(m)
		fi
	:: what == 5 ->                                  /* 5. live freeze check */
		cpCL(vcl[m], cl);
		if
		:: cl.frozen && (pgr[m] & CMD_REQS) != 0 ->
			printf("@@ M%d live freeze check: frozen, decides again\n", m);
			abortplan(m)
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
		:: rq[sel].ex == LIVE && rq[sel].rv == VR(m, sel).rv ->
			rq[sel].held = rq[sel].held | BIT(sk);
			rq[sel].tok[sk] = ptok[m];
			rq[sel].ph = (rq[sel].held == KEYS(sel) -> GRANTED : PENDING);
			rq[sel].rv = NEWR;
			pgr[m] = pgr[m] & NOT(sel);
			printf("@@ M%d writes %c holding k%d token=%d (request token %d, Granted=%d)\n", m, RN(sel), sk + 1,
				RT(rq[sel].tok[sk]), RT(RTOK(rq[sel])), rq[sel].ph == GRANTED);
			if
			:: ov -> cpRQ(VR(m, sel), rq[sel])
			:: else
			fi
		:: else ->
			printf("@@ M%d grant write of %c fails (conflict or NotFound): decision ends\n", m, RN(sel));
			abortplan(m)
		fi
	:: else -> abortplan(m)
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
	for (j : 0 .. NR - 1) { cpRQ(VR(m, j), rq[j]) };
	j = 0
}
inline refreshP(m) {
	for (j : 0 .. NK - 1) { cpPL(VP(m, j), pl[j]) };
	j = 0
}

proctype Manager(byte m) {
	do
	/* chaos: the view of each kind moves to the store's present state whenever the manager
	   likes (or not at all); it decides either key; it may crash before any write */
	:: d_step { !pb[m] && CHAOS -> refreshR(m); canon(); canonR() }
	:: d_step { !pb[m] && CHAOS -> refreshP(m); canon() }
	:: d_step { !pb[m] && CHAOS -> cpCL(vcl[m], cl) }
	:: d_step { !pb[m] && CHAOS -> plan(m, 0, 0); canon(); canonR() }
	:: d_step { !pb[m] && CHAOS -> plan(m, 0, 1); canon(); canonR() }
	:: d_step { !pb[m] && CHAOS -> plan(m, 1, 1); canon(); canonR() }
	:: d_step { pb[m] -> step(m, OVDEF) }
#if OVERLAY == 2
	:: d_step { pb[m] && CHAOS -> step(m, 0) }
#endif
	:: d_step { pb[m] && CHAOS && CRASH -> printf("@@ M%d crashes: the rest of its decision is abandoned\n", m); clearplan(m); canon() }
#if PROGRESS
	/* calm (after the environment is done): refresh every view, decide the next key, repeat */
	:: d_step { !pb[m] && !CHAOS -> refreshR(m); refreshP(m); cpCL(vcl[m], cl); plan(m, nk[m], 0); nk[m] = 1 - nk[m]; canon(); canonR() }
#endif
	od
}

/* The CommandLock reconciler (in manager M0, so its LockRequest view is M0's): after it sees the
   freeze, a live list of ProjectLocks; if no request of the command in any H(k) is Granted or
   unconfirmed on k (by its view; a member missing from the view counts), it writes Drained with
   the CommandLock rv it saw. */
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
		fi
	   }
	:: d_step {
		clst == 1 ->
		if
		:: cl.rv == clc -> cl.drained = 1; cl.rv++; printf("@@ CommandLock reconciler writes Drained=True\n"); monitor()
		:: else -> printf("@@ CommandLock reconciler: Drained write fails (conflict)\n")
		fi;
		clst = 0; clc = 0
	   }
	od
}

#define ENV_REQ(r) \
	:: d_step { HAS(ecr, r) -> ecr = ecr & NOT(r); rq[r].ex = LIVE; rq[r].rv = NEWR; printf("@@ client creates %c\n", RN(r)); settle() } \
	:: d_step { HAS(erel, r) && ACTIVE(rq[r]) -> erel = erel & NOT(r); rq[r].rel = 1; rq[r].rv = NEWR; printf("@@ client releases %c (spec.release)\n", RN(r)); settle() } \
	:: d_step { HAS(edel, r) && rq[r].ex == LIVE -> edel = edel & NOT(r); rq[r].ex = GONE; rq[r].rv = 0; rq[r].ph = 0; rq[r].held = 0; \
	            rq[r].tok[0] = 0; rq[r].tok[1] = 0; rq[r].rel = 0; expired[r] = 0; lost[r] = 0; printf("@@ client deletes %c\n", RN(r)); settle() } \
	:: d_step { HAS(eexp, r) && rq[r].ex == LIVE && rq[r].ph == GRANTED -> eexp = eexp & NOT(r); expired[r] = 1; printf("@@ %c's grant expires\n", RN(r)); monitor() } \
	:: d_step { HAS(elost, r) && ACTIVE(rq[r]) -> elost = elost & NOT(r); lost[r] = 1; printf("@@ %c's holder Lease lapses\n", RN(r)); monitor() }

#if MUTATION == 1
#define FORCE_UNLOCK(k) clrPL(pl[k]); printf("@@ admin deletes PL(k%d): no finalizer, it is gone at once\n", k + 1)
#else
#define FORCE_UNLOCK(k) pl[k].del = 1; newrv(pl[k].rv); printf("@@ admin deletes PL(k%d): deletionTimestamp set, rv=%d\n", k + 1, RT(pl[k].rv))
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
#if PROGRESS
	:: d_step { !envDone -> envDone = 1; printf("@@ environment done\n") }; break
#endif
	od
}

init {
	d_step {
		for (j : 0 .. NR - 1) {
			if
			:: HAS(INIT_REQS, j) -> rq[j].ex = LIVE; rq[j].rv = NEWR
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
			for (i : 0 .. NR - 1) { cpRQ(VR(j, i), rq[i]) };
			cpCL(vcl[j], cl)
		};
#endif
		canonR();
		monitor()
	}
	atomic {
		run Manager(0);
		run Manager(1);
		run Env();
#if FREEZE
		run CLR()
#endif
	}
}

#if PROGRESS
ltl progress { [] ((fw0 -> <> !fw0) && (fw1 -> <> !fw1)) }
#endif
