#!/usr/bin/env bash
# model-check.sh — check model/turnstile.pml, and the other models in model/ (other_models),
# with spin. Every configuration must verify with no error, exhaustively (no bitstate hashing: every reachable state is stored and checked), and
# every mutation (a rule of the protocol taken out, -DMUTATION=n) must be refuted by a trail.
# See model/README.md for what each configuration covers and what the model abstracts.
#
#   hack/model-check.sh            the configurations and mutations `make model-check` runs (CI)
#   MODEL_FULL=1 hack/model-check.sh   also the larger configurations (minutes each)
#   hack/model-check.sh NAME       one configuration, or one mutation (M1 ... M9, D0 ..., F1 ..., A1 ...)
#   MODEL_TRAILS=1 ...             print each refuted mutation's trail (the writes, in order)
#
# Needs spin and a C compiler (`make spin` installs spin from Debian when it is missing).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
SPIN=${SPIN:-spin}
CC=${CC:-cc}
CFLAGS_PAN=${MODEL_CFLAGS:--O1}
work=${MODEL_WORK:-$root/bin/model}
jobs=${MODEL_JOBS:-2}
mkdir -p "$work"

# Views may move in the middle of a decision (MIDREFRESH), a manager's own write may or may not
# be in its view yet (OVERLAY=2), and managers may crash between any two writes (CRASH), unless a
# configuration says otherwise to stay small; a restriction only removes behaviours, so a
# mutation refuted under one is refuted in the full model too.
two="-DNMGR=2"
calm="-DCRASH=0 -DOVERLAY=1 -DMIDREFRESH=0"

# name|-D flags|what it covers
configs=(
	"forceunlock|$two -DSYMM=1 -DKA=1 -DKB=1 -DINIT_REQS=3 -DREL_REQS=1 -DFU_BUDGET=1 -DCMD_REQS=0|2 managers (crashes, views moving mid-decision, overlay or not), A then B on k1, A released, an admin force-unlock (holes 1, 2)"
	"tokens|-DNMGR=1 -DKA=1 -DKB=3 -DINIT_REQS=3 -DREL_REQS=0 -DDEL_REQS=2 -DCMD_REQS=0|1 manager (crashes, stale views), B locks k1 and k2 against A on k1; B deleted, its token known or not (hole 3 at its smallest)"
	"multilock|-DNMGR=1 -DKA=1 -DKB=3 -DKC=2 -DINIT_REQS=7 -DREL_REQS=0 -DDEL_REQS=2 -DCMD_REQS=0|1 manager (crashes, stale views), B locks k1 and k2 against A on k1 and C on k2; B deleted, its token known or not (hole 3, T_leave, the Again split)"
	"multilock-2|$two -DSYMM=1 $calm -DKA=1 -DKB=3 -DKC=2 -DINIT_REQS=3 -DREL_REQS=0 -DDEL_REQS=2 -DCMD_REQS=0|2 managers racing, B locks k1 and k2 against A; B deleted (hole 3 across managers)"
	"reentrant|-DNMGR=1 -DKA=1 -DKB=1 -DKC=1 -DINIT_REQS=1 -DCREATE_REQS=6 -DREL_REQS=3 -DEXP_REQS=1 -DLOST_REQS=4 -DCMD_REQS=0|1 manager (crashes, stale views), A and C of one identity share k1 against B; creations, releases, an expiry, a lapsed Lease (re-entrancy, hole 4)"
	"freeze|$two -DKA=1 -DKB=1 -DINIT_REQS=3 -DREL_REQS=2 -DCMD_REQS=1 -DFREEZE=1 -DTHAW=1 -DOVERLAY=1 -DMIDREFRESH=0|2 managers (crashes) and the CommandLock reconciler: A (commanded) against B, a freeze and a thaw (holes 5, 6: Drained, demotion, re-issue)"
	"progress-tokens|-DPROGRESS=1 -DNMGR=1 -DKA=1 -DKB=3 -DINIT_REQS=3 -DREL_REQS=0 -DDEL_REQS=2 -DCMD_REQS=0|progress (LTL, weak fairness): once the environment stops, a free key with a live waiter is not left so; 1 manager, multi-lock B deleted"
	"progress-forceunlock|-DPROGRESS=1 $two -DOVERLAY=1 -DMIDREFRESH=0 -DKA=1 -DKB=1 -DINIT_REQS=3 -DREL_REQS=1 -DFU_BUDGET=1 -DCMD_REQS=0|progress: 2 managers (crashes), A released, a force-unlock"
	"freeze-gone|$two $calm -DKA=1 -DKB=1 -DKC=1 -DINIT_REQS=7 -DREL_REQS=0 -DDEL_REQS=4 -DCMD_REQS=1 -DFREEZE=1 -DTHAW=0|2 managers and the CommandLock reconciler: A (commanded) joins C's hold of k1 as B waits; a freeze; C deleted, its token known or not (demotion inside the Again split)"
	# a manager dies for good mid-decision (issue #18: membership changes)
	# shared mode (issue #31): A and C read k1 (identities a and c), B writes it
	"shared|-DNMGR=1 -DSHR_REQS=5 -DIDC=2 -DKA=1 -DKB=1 -DKC=1 -DINIT_REQS=3 -DCREATE_REQS=4 -DREL_REQS=7 -DCMD_REQS=0|1 manager (crashes, stale views), shared mode: A reads k1, B waits to write it, C arrives to read it; any of them released: no exclusive holder beside another holder, tokens increase from readers to the writer and back (issue #31)"
	"shared-2|$two -DSYMM=1 $calm -DSHR_REQS=5 -DIDC=2 -DKA=1 -DKB=1 -DKC=1 -DINIT_REQS=3 -DCREATE_REQS=4 -DREL_REQS=7 -DCMD_REQS=0|2 managers racing (no crashes, overlay always on), shared mode as in shared"
	"shared-starve|-DPROGRESS=1 -DSTARVE=1 -DNMGR=1 -DCRASH=0 -DOVERLAY=1 -DMIDREFRESH=0 -DSHR_REQS=5 -DIDC=2 -DKA=1 -DKB=1 -DKC=1 -DINIT_REQS=7 -DREL_REQS=0 -DCMD_REQS=0|writer preference (LTL, weak fairness): readers A and C release and ask again forever; the writer B waiting behind A is granted (no starvation)"
	# counting locks (issue #45): A, B and C of three identities, Shared with a limit
	"counting|-DNMGR=1 -DSHR_REQS=7 -DIDC=2 -DLIMA=2 -DLIMB=2 -DLIMC=2 -DKA=1 -DKB=1 -DKC=1 -DINIT_REQS=3 -DCREATE_REQS=4 -DREL_REQS=7 -DCMD_REQS=0|1 manager (crashes, stale views), counting: A and B of two identities hold k1 with limit 2, C of a third arrives; any of them released: at most 2 hold, each counted grant's token above every token before it (issue #45)"
	"counting-2|$two -DSYMM=1 $calm -DSHR_REQS=7 -DIDC=2 -DLIMA=2 -DLIMB=2 -DLIMC=2 -DKA=1 -DKB=1 -DKC=1 -DINIT_REQS=7 -DREL_REQS=3 -DCMD_REQS=0|2 managers racing (no crashes, overlay always on), counting: A, B and C wait for k1 with limit 2 from the start, A or B released"
	"counting-mixed|-DNMGR=1 -DSHR_REQS=7 -DIDC=2 -DLIMA=1 -DLIMB=2 -DLIMC=0 -DKA=1 -DKB=1 -DKC=1 -DINIT_REQS=3 -DCREATE_REQS=4 -DREL_REQS=7 -DCMD_REQS=0|1 manager (crashes, stale views), limits that disagree on one key: A with limit 1, B with limit 2, C a reader with none; any of them released: every holder's limit holds, readers' tokens above counted ones"
	"progress-membership|-DPROGRESS=1 $two -DDIE=1 -DOVERLAY=1 -DMIDREFRESH=0 -DKA=1 -DKB=1 -DINIT_REQS=3 -DREL_REQS=1 -DFU_BUDGET=1 -DCMD_REQS=0|progress: 2 managers (crashes), one may die for good mid-decision: the survivor alone still hands A's release to B"
)
full_configs=(
	"forceunlock-full|$two -DSYMM=1 -DKA=1 -DKB=1 -DINIT_REQS=3 -DREL_REQS=3 -DFU_BUDGET=1 -DCMD_REQS=0|forceunlock, with both requests released"
	"progress-freeze|-DPROGRESS=1 $two $calm -DKA=1 -DKB=1 -DINIT_REQS=3 -DREL_REQS=2 -DCMD_REQS=1 -DFREEZE=1 -DTHAW=1|progress: 2 managers and the CommandLock reconciler, a freeze and a thaw"
	"freeze-gone-full|$two -DKA=1 -DKB=1 -DKC=1 -DINIT_REQS=7 -DREL_REQS=0 -DDEL_REQS=4 -DCMD_REQS=1 -DFREEZE=1 -DTHAW=0 -DOVERLAY=1 -DMIDREFRESH=0|freeze-gone, with crashes"
	"counting-2-full|$two -DSYMM=1 $calm -DSHR_REQS=7 -DIDC=2 -DLIMA=2 -DLIMB=2 -DLIMC=2 -DKA=1 -DKB=1 -DKC=1 -DINIT_REQS=3 -DCREATE_REQS=4 -DREL_REQS=7 -DCMD_REQS=0|counting-2 with C created later and any of them released"
	# membership changes (issue #18): crashes, restarts on stale views, one manager dying for good
	"membership|$two -DDIE=1 -DKA=1 -DKB=1 -DINIT_REQS=3 -DREL_REQS=1 -DFU_BUDGET=1 -DCMD_REQS=0|2 managers (crashes, restarts on stale views, views moving mid-decision, overlay or not), one of which may die for good; A then B on k1, A released, a force-unlock"
)
# mutation|configuration that refutes it
mutations=(
	"1|forceunlock"
	"2|tokens"
	"3|freeze"
	"4|freeze-gone"
	"5|freeze-gone"
	"6|tokens"
	"7|tokens"
	"8|freeze-gone"
	"9|freeze"
	"10|shared"
	"11|shared-starve"
	"12|counting"
	"13|counting-mixed"
	"14|counting"
)

# Other models, each checked exhaustively like the configurations above:
# name|model file|-D flags|holds or refuted|what it covers
other_models=(
	"detector|detector.pml|-DCHG=1 -DWINDOW=0|holds|2 deadlock detectors (caches stale or not, clocks either side of an aging step), one priority change outside their live-read-to-write windows: one victim per cycle (hole D of #26)"
	"D0|detector.pml|-DMUTATION=1|refuted|the old detector: victim from the cache by the detector's clock"
	"D1|detector.pml|-DMUTATION=2|refuted|no live re-read of the cycle"
	"D2|detector.pml|-DMUTATION=3|refuted|the live re-read kept, the victim ranked by the detector's clock"
	"D-window|detector.pml|-DCHG=1 -DWINDOW=1|refuted|the residual window: a priority change between two detectors' live reads (documented in docs/protocol.md)"
	# any-of waits (issue #41): b waits on a shared key held by a and by c, c blocked or free
	"detector-anyof|detector.pml|-DANYOF=1 -DCST=0|holds|an any-of hop whose other holder c is blocked in the deadlock and may leave at any moment: a victim only for a deadlock real at the live read"
	"detector-anyof-free|detector.pml|-DANYOF=1 -DCST=1|holds|the same with c free: no victim"
	"Y0|detector.pml|-DANYOF=1 -DCST=1 -DMUTATION=4|refuted|the old graph: a waiter on a full key waits for every holder (a victim while c can leave)"
	"Y1|detector.pml|-DANYOF=1 -DCST=0 -DMUTATION=5|refuted|the live re-read checks the cycle's members, not the any-of hop's other holder (c left after the snapshot)"
	"routing|routing.pml|-DMUTATION=0|holds|a backup and a hung owner (membership renewed), a busy second key, a half-hung owner writing some of k's statuses: k is decided within two backup delays, within one when its owner wrote nothing of k (hole B of #26)"
	"R0|routing.pml|-DMUTATION=1|refuted|the old rule: any status change of a request naming k defers k's backup, again and again"
	"R1|routing.pml|-DMUTATION=2|refuted|progress per key, deferrals unbounded"
	"R2|routing.pml|-DMUTATION=3|refuted|deferred once, progress not per key"
	"R3|routing.pml|-DMUTATION=4|refuted|per key and once, a membership renewal counted as progress"
	# the fleet's partition rule (issue #45): a spoke stops its holder before the hub's Lease lapses
	"fleet|fleet.pml|-DMUTATION=0|holds|a spoke's renewals sent, applied and answered at any tick or never, a skew within the bound (L=12 G=3 M=1 B=1): no holder of the spoke runs once the hub hands its key on"
	"fleet-skew2|fleet.pml|-DB=2 -DG=2|holds|the same with a skew bound of 2 s and a grace of 2 s (L=12 M=1)"
	"F1|fleet.pml|-DMUTATION=1|refuted|the stop deadline without the skew term"
	"F2|fleet.pml|-DMUTATION=2|refuted|the stop deadline without the grace term"
	"F3|fleet.pml|-DMUTATION=3|refuted|the stop deadline without the margin (the kill and its confirmation)"
	"F4|fleet.pml|-DMUTATION=4|refuted|the stop deadline counted from the last renewal sent, answered or not"
	# a spoke's grant ends on the hub only once its spoke has stopped showing it (issue #45: the ack
	# fleet.turnstile.dev/stopped, in place of the agent's live read before a let-go)
	"fleetack|fleetack.pml|-DFRESH=1 -DCRASH=2 -DLOSS=2 -DENDS=2|holds|the agent on a lagging view of G (2 restarts on a fresh list, 2 ack patches given up on and landing later or never), admins releasing or deleting G, clocks passing expiresAt in either order: S never shows the grant once the hub hands k to H"
	"fleetack-remake|fleetack.pml|-DFRESH=1 -DREMAKE=1|holds|the same (1 restart, 1 patch given up on) with S and G made anew under their names after H held k: an old ack landing on the new G"
	"fleetack-progress|fleetack.pml|-DPROGRESS=1 -DFRESH=1 -DCRASH=2 -DLOSS=2 -DENDS=2|holds|progress (LTL, weak fairness): once the environment stops, an ending G is written final and H holds k"
	"fleetack-fix|fleetack.pml|-DFIX=1 -DRENEW=2 -DCRASH=2 -DLOSS=2 -DENDS=2|holds|the ack only once S is final: restarts on lists older than the view before (stale), 2 ttl renewals"
	"fleetack-fix-remake|fleetack.pml|-DFIX=1 -DREMAKE=1|holds|the ack only once S is final, stale restarts, S and G made anew"
	"fleetack-fix-progress|fleetack.pml|-DPROGRESS=1 -DFIX=1 -DRENEW=2 -DCRASH=2 -DLOSS=2 -DENDS=2|holds|progress with the ack only once S is final (stale restarts, renewals)"
	"A1|fleetack.pml|-DFRESH=1 -DCRASH=2 -DLOSS=2 -DENDS=2 -DMUTATION=1|refuted|the hub hands k on once G is ending, no ack (the old protocol without its live read)"
	"A2|fleetack.pml|-DFRESH=1 -DCRASH=2 -DLOSS=2 -DENDS=2 -DMUTATION=2|refuted|the ack before the stop of S"
	"A3|fleetack.pml|-DFRESH=1 -DREMAKE=1 -DMUTATION=3|refuted|the hub takes any ack, not only G's token: the first G's ack lands on the second"
	"A4|fleetack.pml|-DFRESH=1 -DCRASH=2 -DLOSS=2 -DENDS=2 -DMUTATION=4|refuted|the let-go does not look at spec.release"
	"A5|fleetack.pml|-DPROGRESS=1 -DFRESH=1 -DCRASH=2 -DLOSS=2 -DENDS=2 -DMUTATION=5|refuted|progress: the ack only for an S written final, the stop only for an S showing the grant (a waiting S is never acked)"
	"A-stale|fleetack.pml|-DFRESH=0 -DCRASH=1 -DLOSS=1|refuted|the rule as briefed, a restart on a list older than the view before the crash: an ack for a never-shown grant lands, the agent lets go from the old view (FIX closes it)"
	"A-renew|fleetack.pml|-DFRESH=1 -DRENEW=1|refuted|the rule as briefed with a ttl renewal: an ack from a view expired by the agent's clock, then a let-go from the renewed view (FIX closes it)"
)
# Other models' larger configurations (MODEL_FULL=1, or by name), in other_models' format.
other_full_models=(
	"fleet-defaults|fleet.pml|-DL=40 -DG=15 -DM=3 -DB=2 -DRMAX=14|holds|the fleet's defaults (L=40 G=15 M=3 B=2), renewals up to t=14 (the first renewal after the Lease's creation, L/3 later)"
	"fleetack-remake-full|fleetack.pml|-DFRESH=1 -DREMAKE=1 -DCRASH=2 -DLOSS=2 -DENDS=2|holds|fleetack-remake with 2 restarts, 2 patches given up on, 2 admin endings"
	"fleetack-fix-remake-full|fleetack.pml|-DFIX=1 -DRENEW=1 -DREMAKE=1|holds|fleetack-fix-remake with a ttl renewal"
)

flags_of() {
	local c
	for c in "${configs[@]}" "${full_configs[@]}"; do
		if [[ ${c%%|*} == "$1" ]]; then
			c=${c#*|}
			echo "${c%%|*}"
			return
		fi
	done
	echo "model-check: no configuration $1" >&2
	exit 2
}

# verify NAME FLAGS MODE: one pan run in bin/model/NAME; MODE is "holds" or "refuted". Writes
# bin/model/NAME/result, one line.
verify() {
	set +e +o pipefail
	local name=$1 flags=$2 mode=$3 what=${4:-} model=${5:-turnstile.pml} dir="$work/$1"
	rm -rf "$dir" && mkdir -p "$dir"
	cp "$root/model/$model" "$dir/"
	cd "$dir"
	# Safety: assertions only. Progress (-DPROGRESS=1): the LTL property's acceptance cycles,
	# under weak fairness (-f; NFAIR for the 3-4 processes).
	local cflags="-DSAFETY" panargs=""
	if [[ $flags == *-DPROGRESS=1* ]]; then
		cflags="-DNFAIR=4" panargs="-a -f"
		if [[ $flags == *-DSTARVE=1* ]]; then
			cflags="-DNFAIR=6" # init, a manager, the environment and two readers
		fi
	fi
	# shellcheck disable=SC2086 # the flags are words
	if ! $SPIN -a $flags "$model" >spin.log 2>&1 || ! $CC $CFLAGS_PAN -w $cflags -DCOLLAPSE -DMEMLIM=4096 -o pan pan.c >cc.log 2>&1; then
		echo "FAIL  $name: spin or cc failed: $(tail -3 spin.log cc.log | tr '\n' ' ')" >result
		return
	fi
	local start end
	start=$(date +%s.%N)
	# shellcheck disable=SC2086
	./pan $panargs -m200000 -w24 -c1 >pan.log 2>&1 || true
	end=$(date +%s.%N)
	local states errors secs
	errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' pan.log | head -1)
	states=$(awk '/states, stored/ {print $1; exit}' pan.log)
	secs=$(awk -v s="$start" -v e="$end" 'BEGIN {printf "%.1f", e - s}')
	local line="${states:-?} states, ${secs}s"
	if grep -q "max search depth too small\|out of memory" pan.log; then
		echo "FAIL  $name: the search was cut short ($line): $(grep -m1 'too small\|memory' pan.log)" >result
	elif [[ $mode == holds && ${errors:-1} == 0 ]]; then
		echo "ok    $name: no violation in $line — $what" >result
	elif [[ $mode == refuted && -f $model.trail ]]; then
		local why
		why=$(grep -m1 "assertion violated\|acceptance cycle" pan.log | sed 's/^pan:[0-9]*: *//')
		local last
		last=$($SPIN -t -k "$model.trail" $flags "$model" 2>/dev/null | grep -a '@@' | tail -1 | sed 's/^ *@@ //')
		echo "ok    $name refuted after $line: $why; the trail ends: $last" >result
		if [[ -n ${MODEL_TRAILS:-} ]]; then
			$SPIN -t -k "$model.trail" $flags "$model" 2>/dev/null | grep -a '@@' | sed 's/^ *@@ /      /' >>result
		fi
	elif [[ $mode == holds ]]; then
		echo "FAIL  $name: ${errors:-?} errors ($line) — $what" >result
		$SPIN -t -k "$model.trail" $flags "$model" 2>/dev/null | grep -a '@@' | sed 's/^ *@@ /      /' >>result || true
	else
		echo "FAIL  $name survived: no violation in $line" >result
	fi
}

only=${1:-}
names=()
run_bg() {
	while (($(jobs -rp | wc -l) >= jobs)); do
		wait -n || true
	done
	(verify "$@") &
	names+=("$1")
}
all=("${configs[@]}")
if [[ -n ${MODEL_FULL:-} || -n $only ]]; then
	all+=("${full_configs[@]}")
fi
for c in "${all[@]}"; do
	name=${c%%|*}; rest=${c#*|}; flags=${rest%%|*}; what=${rest#*|}
	if [[ -z $only || $name == "$only" ]]; then
		run_bg "$name" "$flags" holds "$what"
	fi
done
for mc in "${mutations[@]}"; do
	m=${mc%%|*}; conf=${mc#*|}
	if [[ -z $only || "M$m" == "$only" ]]; then
		run_bg "M$m" "$(flags_of "$conf") -DMUTATION=$m" refuted
	fi
done
others=("${other_models[@]}")
if [[ -n ${MODEL_FULL:-} || -n $only ]]; then
	others+=("${other_full_models[@]}")
fi
for c in "${others[@]}"; do
	IFS='|' read -r name model flags mode what <<<"$c"
	if [[ -z $only || $name == "$only" ]]; then
		run_bg "$name" "$flags" "$mode" "$what" "$model"
	fi
done
wait
fail=0
for n in "${names[@]}"; do
	cat "$work/$n/result"
	grep -q "^FAIL" "$work/$n/result" && fail=1
done
if ((${#names[@]} == 0)); then
	echo "model-check: nothing called $only" >&2
	exit 2
fi
exit $fail
