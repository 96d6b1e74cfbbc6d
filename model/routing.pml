/*
 * routing.pml -- a backup's deferral to a key's owner (internal/sharding, hole B of #26).
 *
 * Active-active managers: the owner of key k decides it at once; a backup decides it a backup
 * delay D after it was due for the owner, unless the owner was seen at work on k meanwhile, in
 * which case the item waits once more (internal/sharding/queue.go, deferral). Here the owner is
 * hung, not dead: its membership Lease is renewed (so it stays the owner) but it never writes
 * the decision k's waiter needs. Around it, every tick, in any combination:
 *   - a busy other key k2 refreshes the position of a multi-lock request that names k too
 *     (it waits in k2's queue: its entry for k does not change);
 *   - the owner's membership Lease is renewed;
 *   - if the owner is half hung (chosen at the start), it writes some status of k (another
 *     waiter's position in k's queue) without ever handing k on.
 * The progress rule (internal/controller/progress.go, decidedKeys) judges which of these is
 * progress on k. Checked when the backup decides k (it is a hand-off: the decision a hung owner
 * never writes):
 *   BOUND    the backup decides k within two backup delays of when k was due for its owner;
 *   PERKEY   if the owner wrote nothing of k, the backup decides it after one delay, with no
 *            deferral: nothing another key's owner does, and no renewal, holds k up.
 *
 * Mutations (-DMUTATION=n), each the rule as it was or a part of the fix taken out:
 *   1  R0, the old rule: any status change of a request naming k is progress on k, and an
 *      item is deferred again and again while progress is seen
 *   2  R1: progress judged per key, but deferrals unbounded (a half-hung owner's refreshes of
 *      k hold the hand-off off for ever)
 *   3  R2: deferred at most once, but any status change of a request naming k is progress on k
 *   4  R3: per key and once, but a membership renewal counts as progress
 */
#ifndef MUTATION
#define MUTATION 0
#endif
#define D    2              /* the backup delay, in ticks */
#define TMAX (2*D + 1)      /* past this, BOUND is broken */
#define NONE 255

#define ALLKEYS   (MUTATION == 1 || MUTATION == 3)
#define UNBOUNDED (MUTATION == 1 || MUTATION == 2)
#define RENEWALS  (MUTATION == 4)

byte t = 0;
byte due = 0;          /* when the item was due for k's owner (the event's add) */
byte ready = D;        /* when it comes due at the backup */
bool deferred = 0;     /* deferred once already */
byte decided = NONE;   /* when the backup decided k */
byte lastProgress = NONE;
bool halfHung;         /* the owner writes statuses of k (never the hand-off) */
bool ownerWroteK = 0;

active proctype world() {
	bool k2, renew, kw;
	if
	:: halfHung = 0
	:: halfHung = 1
	fi;
	do
	:: decided == NONE && t <= TMAX ->
		/* this tick's events, in any combination */
		if :: k2 = 1 :: k2 = 0 fi;
		if :: renew = 1 :: renew = 0 fi;
		if :: halfHung -> if :: kw = 1 :: kw = 0 fi
		   :: else -> kw = 0
		fi;
		d_step {
			if :: k2 -> printf("@@ t=%d: k2's owner refreshes a multi-lock request naming k\n", t) :: else -> skip fi;
			if :: renew -> printf("@@ t=%d: k's owner renews its membership Lease\n", t) :: else -> skip fi;
			if :: kw -> printf("@@ t=%d: k's half-hung owner writes a status of k (not the hand-off)\n", t) :: else -> skip fi;
			if
			:: kw || (ALLKEYS && k2) || (RENEWALS && renew) -> lastProgress = t
			:: else -> skip
			fi;
			ownerWroteK = ownerWroteK || kw;
			/* the backup's item comes due */
			if
			:: t == ready ->
				if
				:: lastProgress != NONE && lastProgress > due && (UNBOUNDED || !deferred) ->
					printf("@@ t=%d: the backup defers k to t=%d (progress on k seen at t=%d)\n", t, t + D, lastProgress);
					due = t; ready = t + D; deferred = 1
				:: else ->
					printf("@@ t=%d: the backup decides k\n", t);
					decided = t
				fi
			:: else -> skip
			fi;
			t++
		}
	:: decided == NONE && t > TMAX ->
		printf("@@ t=%d: k is still not decided, more than two backup delays after it was due\n", t);
		assert(false)   /* BOUND: not decided within two backup delays */
	:: decided != NONE -> break
	od;
	assert(decided <= 2*D);                 /* BOUND */
	if
	:: !ownerWroteK && decided != D ->
		printf("@@ k was decided at t=%d, not t=%d, though its owner wrote nothing of k\n", decided, D)
	:: else -> skip
	fi;
	assert(ownerWroteK || decided == D)     /* PERKEY */
}
