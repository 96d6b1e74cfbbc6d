/*
 * detector.pml -- two deadlock detectors, one cycle, one victim (docs/protocol.md, "One victim
 * per deadlock"; hole D of issue #26).
 *
 * A wait-for cycle of two waiting requests: a (index 0, queued first) and b (index 1). Every
 * replica runs a detector; here two, D0 and D1, each with its own cache (a snapshot of the
 * store taken whenever it likes, so possibly stale) and its own clock. The store holds, per
 * request, its phase (waiting / failed), its resourceVersion and its stored priority (the spec's,
 * aged to the newest queuedAt of the cycle: a function of stored fields only). Under the
 * protocol a detector
 *   1. finds the cycle in its cache,
 *   2. re-reads both members live: if either is failed (or otherwise moved on), writes nothing,
 *   3. picks the victim from the live, stored fields (lower priority; among equals the newest,
 *      b), and
 *   4. writes it Failed, preconditioned on the rv read live in 2.
 * The monitor asserts that at most one request of the cycle is ever failed.
 *
 * A priority change (a user edits spec.priority: the stored rank and the rv move) may happen
 * once (CHG=1): with WINDOW=0 only while no detector is between its live read and its write,
 * with WINDOW=1 at any moment. WINDOW=1 is the residual window the protocol leaves open: a
 * change landing between two detectors' live reads lets each fail a different member
 * (configuration D-window; expected to be refuted).
 *
 * ANYOF=1 adds an any-of wait (issue 41): b waits on a full shared key held by a and by c, and is
 * let in by either leaving. c is blocked in the deadlock (CST 0) or free (CST 1), and may leave at
 * any moment (its place released by its owner, an admin, its ttl); the manager then grants b
 * some time later. A detector may fail a victim only if, at its live read, the deadlock was real:
 * c blocked and still holding.
 *
 * Mutations (-DMUTATION=n):
 *   1 (D0)  the old detector: the victim from the cache, ranked by the detector's own clock
 *           (a clock past a's aging step lifts a level with b), written with the cached rv
 *   2 (D1)  no live re-read: the victim from the cache's stored fields, with the cached rv
 *   3 (D2)  the live re-read kept, but the victim ranked by the detector's clock
 *   4 (Y0)  with ANYOF: the old graph, b waits for every holder (a cycle through a whatever c does)
 *   5 (Y1)  with ANYOF: the live re-read checks the cycle's members, not the any-of hop's c
 */

#ifndef MUTATION
#define MUTATION 0
#endif
#ifndef CHG
#define CHG 1
#endif
#ifndef WINDOW
#define WINDOW 0
#endif

#ifndef ANYOF
#define ANYOF 0
#endif
#ifndef CST
#define CST 0
#endif

#define WAITING 0
#define FAILED  1
#define GRANTED 2
/* c's states (ANYOF) */
#define BLOCKED 0
#define FREE    1
#define LEFT    2

byte cst;                    /* c, in the store */
byte vc[2];                  /* c, in each detector's cache */
bit  real[2];                /* at the detector's live read, the deadlock was real */

/* the store */
byte ph[2], rv[2], pr[2];
byte chg;
/* each detector's cache: vph[d*2+i] ... */
byte vph[4], vrv[4], vpr[4];
bit  clk[2];                 /* the detector's clock is past a's aging step */
byte st[2];                  /* 0 idle, 1 victim chosen (write pending), 2 done */
byte vic[2], prv[2];
byte victims;

#define V(a, d, i) a[(d) * 2 + (i)]
/* rank of i by the stored fields s[], lifted by one for a (i == 0) when tilt */
#define RANK(s, i, tilt) ((s)[i] + (((i) == 0 && (tilt)) -> 1 : 0))

inline refresh(d) {
	vc[d] = cst;
	V(vph, d, 0) = ph[0]; V(vrv, d, 0) = rv[0]; V(vpr, d, 0) = pr[0];
	V(vph, d, 1) = ph[1]; V(vrv, d, 1) = rv[1]; V(vpr, d, 1) = pr[1]
}

byte ra, rb;
inline choose(d, pa, pb) {
	ra = pa; rb = pb;
	/* lower rank fails; among equals the newest (b) */
	vic[d] = (ra < rb -> 0 : 1);
	ra = 0; rb = 0
}

/* the cache shows a deadlock: both wait and, through the any-of hop, c is blocked too */
#if ANYOF && MUTATION != 4
#define CACHED_CYCLE(d) (V(vph, d, 0) == WAITING && V(vph, d, 1) == WAITING && vc[d] == BLOCKED)
#else
#define CACHED_CYCLE(d) (V(vph, d, 0) == WAITING && V(vph, d, 1) == WAITING)
#endif
#if ANYOF && MUTATION != 5 && MUTATION != 4
#define LIVE_ANYOF (cst == BLOCKED)
#else
#define LIVE_ANYOF true
#endif

inline decide(d) {
	real[d] = (ph[0] == WAITING && ph[1] == WAITING && (!ANYOF || cst == BLOCKED));
	if
	:: CACHED_CYCLE(d) ->
#if MUTATION == 1
		choose(d, V(vpr, d, 0) + clk[d], V(vpr, d, 1));
		prv[d] = V(vrv, d, vic[d]);
		st[d] = 1
#elif MUTATION == 2
		choose(d, V(vpr, d, 0), V(vpr, d, 1));
		prv[d] = V(vrv, d, vic[d]);
		st[d] = 1
#else
		/* the live re-read */
		if
		:: ph[0] == WAITING && ph[1] == WAITING && LIVE_ANYOF ->
#if MUTATION == 3
			choose(d, pr[0] + clk[d], pr[1]);
#else
			choose(d, pr[0], pr[1]);
#endif
			prv[d] = rv[vic[d]];
			st[d] = 1
		:: else -> printf("@@ D%d re-reads the cycle live: broken already, writes nothing\n", d); st[d] = 2
		fi
#endif
		;
		if
		:: st[d] == 1 -> printf("@@ D%d picks %c (rv %d)\n", d, 97 + vic[d], prv[d])
		:: else
		fi
	:: else -> st[d] = 2
	fi
}

inline write(d) {
	/* a victim only for a deadlock that was real when the detector read it live */
	assert(real[d]);
	if
	:: rv[vic[d]] == prv[d] ->
		assert(ph[vic[d]] == WAITING);
		ph[vic[d]] = FAILED; rv[vic[d]]++;
		victims++;
		printf("@@ D%d fails %c\n", d, 97 + vic[d]);
		st[d] = 2
	:: else ->
		printf("@@ D%d's write of %c conflicts: it looks again\n", d, 97 + vic[d]);
		st[d] = 0
	fi;
	assert(victims <= 1)
}

proctype Det(byte d) {
	do
	:: d_step { st[d] == 0 -> refresh(d) }
	:: d_step { st[d] == 0 -> decide(d) }
	:: d_step { st[d] == 1 -> write(d) }
	:: st[d] == 2 -> break
	od
}

proctype User() {
	do
	/* b's priority is lowered to a's: level, b (the newest) is now the victim */
	:: d_step { chg > 0 && (WINDOW || (st[0] != 1 && st[1] != 1)) && ph[1] == WAITING ->
		chg--; pr[1] = 0; rv[1]++; printf("@@ b's priority is lowered (its rv moves)\n") }
	:: chg == 0 || ph[1] != WAITING -> break
	od
}

/* c leaves the full key at any moment; the manager grants b some time after */
proctype Carol() {
	do
	:: d_step { cst != LEFT -> cst = LEFT; printf("@@ c leaves the full key\n") }
	:: d_step { cst == LEFT && ph[1] == WAITING -> ph[1] = GRANTED; rv[1]++; printf("@@ b is granted c's place\n") }
	:: cst == LEFT && ph[1] != WAITING -> break
	od
}

init {
	d_step {
		cst = CST;
		pr[0] = 0; pr[1] = 1;     /* a Low, b Normal */
		rv[0] = 1; rv[1] = 1;
		chg = CHG;
		refresh(0); refresh(1)
	}
	/* the clocks: D1's is past a's aging step, D0's is not */
	clk[1] = 1;
#if ANYOF
	atomic { run Det(0); run Det(1); run User(); run Carol() }
#else
	atomic { run Det(0); run Det(1); run User() }
#endif
}
