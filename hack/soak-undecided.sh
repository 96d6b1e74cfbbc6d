#!/usr/bin/env bash
# make soak-undecided: the liveness soak (issue #47). For SOAK_MINUTES it runs, in turns, one
# churn spec of internal/controller (50 requesters on one key, on ten keys, on 1000 keys with two
# managers, in rotation) and one fault class of test/faults (each class in rotation, with the
# turn's number as its seed), all nice'd, beside SOAK_HOGS nice'd busy loops for CPU pressure.
# Each spec measures, from its own watch, how long every piece of work of a key went undecided
# (framework.UndecidedMeter: a request without a status, a release asked for, a grant past its
# expiry, a free key with a waiter queued behind nobody); the soak reports the longest, where,
# and what failed.
#
# Needs KUBEBUILDER_ASSETS (the Makefile sets it) and bin/manager (make build) for the fault
# classes that run the manager binary. Logs and the report go to SOAK_OUT (bin/soak-undecided).
set -u
minutes=${SOAK_MINUTES:-60}
hogs=${SOAK_HOGS:-2}
out=${SOAK_OUT:-bin/soak-undecided}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out"/*.log "$out"/report.txt

echo "soak-undecided: building the test binaries (-race, as make test runs them)"
go test -race -c -o "$out/controller.test" ./internal/controller/ || exit 1
go test -race -c -o "$out/faults.test" ./test/faults/ || exit 1
export TURNSTILE_MANAGER=${TURNSTILE_MANAGER:-$root/bin/manager}
# A control plane takes longer than envtest's 20 s to start beside the busy loops.
export KUBEBUILDER_CONTROLPLANE_START_TIMEOUT=${KUBEBUILDER_CONTROLPLANE_START_TIMEOUT:-120s}

pids=()
stop() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
}
trap stop EXIT
trap 'stop; exit 130' INT TERM
for _ in $(seq 1 "$hogs"); do
	nice -n 10 sh -c 'while :; do :; done' &
	pids+=($!)
done

# The fault classes, as the faults suite names them (its entries with the default seed).
mapfile -t classes < <(cd test/faults && "$out/faults.test" -ginkgo.dry-run -ginkgo.v -ginkgo.no-color 2>/dev/null |
	sed -n 's/.*a fault class \(.*\), [0-9]* replica(s), seed [0-9]*$/\1/p' | sort -u)
[ "${#classes[@]}" -gt 0 ] || { echo "soak-undecided: found no fault classes"; exit 1; }
churns=("churning on one key" "churning on many keys" "two managers running at once")
echo "soak-undecided: ${#churns[@]} churn specs and ${#classes[@]} fault classes in rotation"

end=$((SECONDS + minutes * 60))
turn=0
failed=()
while [ "$SECONDS" -lt "$end" ]; do
	turn=$((turn + 1))
	spec=${churns[$(((turn - 1) % ${#churns[@]}))]}
	log="$out/controller-$turn.log"
	echo "soak-undecided: turn $turn: $spec ($(((end - SECONDS) / 60)) min left)"
	(cd internal/controller && nice -n 10 "$out/controller.test" -test.run TestControllers -test.timeout 60m \
		-ginkgo.focus "$spec" -ginkgo.v -ginkgo.no-color) >"$log" 2>&1 || failed+=("$log")
	[ "$SECONDS" -lt "$end" ] || break
	class=${classes[$(((turn - 1) % ${#classes[@]}))]}
	log="$out/faults-$turn.log"
	echo "soak-undecided: turn $turn: the fault class $class, seed $turn"
	(cd test/faults && TURNSTILE_FAULTS_SEEDS=$turn nice -n 10 "$out/faults.test" -test.timeout 60m \
		-ginkgo.focus "a fault class $(printf '%s' "$class" | sed 's/[][\.*^$()+?{}|]/\\&/g'), " -ginkgo.v -ginkgo.no-color) >"$log" 2>&1 || failed+=("$log")
done

# The report: every meter's line, the longest first (Go durations read as seconds).
grep -h "undecided meter on" "$out"/*.log | awk '
function secs(d,   s, n, u) {
	s = 0
	while (match(d, /^[0-9.]+(h|ms|µs|us|ns|m|s)/)) {
		n = substr(d, 1, RLENGTH); d = substr(d, RLENGTH + 1)
		u = n; sub(/^[0-9.]+/, "", u); sub(/[a-zµ]+$/, "", n)
		if (u == "h") s += n * 3600; else if (u == "m") s += n * 60; else if (u == "s") s += n
		else if (u == "ms") s += n / 1000; else if (u == "µs" || u == "us") s += n / 1e6; else s += n / 1e9
	}
	return s
}
{ for (i = 1; i < NF - 1; i++) if ($i == "longest" && $(i + 1) == "undecided") { printf "%.3f\t%s\n", secs($(i + 2)), $0; break } }' |
	sort -rn >"$out/report.txt"

runs=$(wc -l <"$out/report.txt")
{
	echo "soak-undecided: $turn turn(s) in $((SECONDS / 60)) min with $hogs busy loop(s); $runs namespaces measured"
	if [ "$runs" -gt 0 ]; then
		echo "the longest time a key with work went undecided: $(head -1 "$out/report.txt" | cut -f1) s"
		echo "the five longest:"
		head -5 "$out/report.txt" | cut -f2 | sed 's/^/  /'
	fi
	if [ "${#failed[@]}" -gt 0 ]; then
		echo "failed: ${failed[*]}"
		grep -h -E "^\s*\[FAIL\]" "${failed[@]}" | sort | uniq -c | sed 's/^/  /'
	fi
} | tee "$out/summary.txt"
[ "${#failed[@]}" -eq 0 ]
