/*
 * fleet.pml -- a fleet spoke's partition rule (docs/fleet.md, "Partition: the rule, with
 * numbers"; internal/fleet/skew), in discrete time: one tick is a second.
 *
 * The hub granted a key to a holder of the spoke, tied to the spoke's hub Lease. The spoke's
 * agent renews the Lease: a renewal carries renewTime = the spoke's clock when it is sent; the
 * hub applies it some time later, or never; its answer reaches the spoke some time after that,
 * or never. Any renewal may fail, so a partition may begin at any moment, and from RMAX on
 * nothing is sent any more (the partition has begun by then at the latest). The hub lapses the
 * Lease when its clock reaches renewTime + L of the last renewal it applied, and hands the key
 * on at once: another holder runs from that tick. The hub's clock is the spoke's plus a skew s,
 * chosen at the start within the bound B the spoke measured (|s| <= B: internal/fleet/skew
 * measures the bound from the renewals' round trips; its tables check that the measurement
 * covers the truth). Real time is the spoke's clock.
 *
 * The spoke, each tick:
 *   - lets its holder go (at most once) only if a renewal's answer showed the grant held and
 *     now + MINRUN < the stop deadline;
 *   - stops a running holder once now >= the stop deadline: SIGTERM, after which the holder is
 *     gone within G (its grace) and M more (the kill and the deletion's confirmation: the
 *     margin), at any tick in that time;
 *   - never starts a stopped holder again.
 *
 *   stop deadline = lastAnswered + L - M - B - G     (lastAnswered: the renewTime of the last
 *                                                    renewal whose answer came back)
 *
 * Checked at every tick (after the hub's move):
 *   NOOVERLAP  no holder of the spoke runs (let go, not yet gone) at or after the tick the hub
 *              hands the key to another.
 *
 * Mutations (-DMUTATION=n), each refuted by a trail:
 *   1  the deadline without the skew term (a hub clock ahead lapses the Lease early)
 *   2  the deadline without the grace term (the stop begins when it should be over)
 *   3  the deadline without the margin (the kill and its confirmation take time too)
 *   4  the deadline counted from the last renewal sent, answered or not
 */
#ifndef MUTATION
#define MUTATION 0
#endif
#ifndef L
#define L 12        /* --hub-lease-duration */
#endif
#ifndef G
#define G 3         /* --fleet-grace */
#endif
#ifndef M
#define M 1         /* the margin */
#endif
#ifndef B
#define B 1         /* the skew bound */
#endif
#ifndef RMAX
#define RMAX 8      /* renewals are sent up to this tick */
#endif
#define MINRUN (L/4)
#define TMAX (RMAX + L + B + G + M + 2)

#define SKEWTERM   (MUTATION == 1 -> 0 : B)
#define GRACETERM  (MUTATION == 2 -> 0 : G)
#define MARGINTERM (MUTATION == 3 -> 0 : M)
#define DEADLINE   (lastAnswered + L - MARGINTERM - SKEWTERM - GRACETERM)

/* the holder */
#define IDLE     0
#define RUNNING  1
#define STOPPING 2
#define GONE     3
/* the renewal in flight */
#define NONE     0
#define SENT     1   /* on its way to the hub */
#define APPLIED  2   /* applied; the answer on its way back */

short t = 0;
short s;                  /* the hub's clock minus the spoke's */
short hubRenew = 0;       /* renewTime of the last renewal the hub applied */
short lastAnswered = 0;   /* renewTime of the last renewal whose answer the spoke read */
short sent;               /* renewTime of the renewal in flight */
byte flight = NONE;
bool appliedHeld;         /* the hub still held the grant when it applied the renewal in flight */
bool seenHeld = 1;        /* the last answer showed the grant held */
bool handedOn = 0;        /* the hub lapsed the Lease and gave the key to another */
byte h = IDLE;
short stoppedAt;          /* the tick of the SIGTERM */

#define ALIVE (h == RUNNING || h == STOPPING)

active proctype world() {
	bool sentNow;
	/* the skew: anything within the bound */
	if
	:: s = -B
	:: s = 0
	:: s = B
	:: B > 1 -> s = B - 1
	:: B > 1 -> s = 1 - B
	fi;
	printf("@@ the hub's clock is the spoke's %d s\n", s);
	do
	:: t > TMAX -> break
	:: else ->
		/* the holder's stop ends at any tick of its grace and margin, at the last at the end */
		if
		:: h == STOPPING && t > stoppedAt ->
			if
			:: t == stoppedAt + G + M -> h = GONE
			:: t < stoppedAt + G + M -> h = GONE
			:: t < stoppedAt + G + M -> skip
			fi;
			if :: h == GONE -> printf("@@ t=%d: the holder is gone\n", t) :: else -> skip fi
		:: else -> skip
		fi;
		/* renewals: sent, applied, answered, each maybe never; any of them in one tick */
		sentNow = 0;
		do
		:: flight == NONE && !sentNow && t <= RMAX ->
			sent = t; flight = SENT; sentNow = 1;
			if :: MUTATION == 4 -> lastAnswered = sent :: else -> skip fi;
			printf("@@ t=%d: the spoke sends a renewal (renewTime %d)\n", t, sent)
		:: flight == SENT ->
			if
			:: !handedOn ->
				hubRenew = (sent > hubRenew -> sent : hubRenew);
				appliedHeld = 1;
				printf("@@ t=%d: the hub applies it: the Lease lapses at %d by its clock\n", t, hubRenew + L)
			:: handedOn ->
				appliedHeld = 0;
				printf("@@ t=%d: the hub applies it, too late: the key is handed on\n", t)
			fi;
			flight = APPLIED
		:: flight == SENT -> flight = NONE; printf("@@ t=%d: the renewal is lost on its way\n", t)
		:: flight == APPLIED ->
			lastAnswered = sent; seenHeld = appliedHeld; flight = NONE;
			printf("@@ t=%d: the answer comes back: stop deadline %d\n", t, DEADLINE)
		:: flight == APPLIED -> flight = NONE; printf("@@ t=%d: the answer is lost\n", t)
		:: break
		od;
		/* the spoke's agent */
		if
		:: h == RUNNING && t >= DEADLINE ->
			h = STOPPING; stoppedAt = t;
			printf("@@ t=%d: the spoke stops its holder (SIGTERM; gone by %d)\n", t, t + G + M)
		:: h == IDLE && seenHeld && t + MINRUN < DEADLINE ->
			if
			:: h = RUNNING; printf("@@ t=%d: the spoke lets its holder go (stop deadline %d)\n", t, DEADLINE)
			:: skip
			fi
		:: else -> skip
		fi;
		/* the hub: the Lease lapses by its clock, and the key is handed on */
		if
		:: !handedOn && t + s >= hubRenew + L ->
			handedOn = 1;
			printf("@@ t=%d: the hub's clock shows %d: the Lease lapsed, the key is handed on\n", t, t + s)
		:: else -> skip
		fi;
		if
		:: handedOn && ALIVE -> printf("@@ VIOLATION NOOVERLAP: the spoke's holder still runs at t=%d, after the hub handed the key on\n", t)
		:: else -> skip
		fi;
		assert(!(handedOn && ALIVE));   /* NOOVERLAP */
		t++
	od
}
