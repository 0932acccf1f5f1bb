#!/usr/bin/env bash
# test-loaded.sh runs `make test` RUNS times in a row (default 3) while
# BUSY_LOOPS busy loops (default 2) compete for the CPUs, stopping at the
# first failure: the suite must hold on a busy machine, where a test that
# sleeps and hopes, or races an exit, fails.
#
# The loops and each `make test` are this script's: an EXIT trap kills them
# however the script ends (make test in its own process group, so the go
# test processes under it go too), and each loop also ends by itself once
# this script's process is gone (a SIGKILL runs no trap), so none outlives
# a run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

runs=${RUNS:-3}
loops=${BUSY_LOOPS:-2}
make=${MAKE:-make}

pids=()
test_pgid=
cleanup() {
	if [[ -n $test_pgid ]]; then
		kill -TERM -- "-$test_pgid" 2>/dev/null || true
		wait "$test_pgid" 2>/dev/null || true
	fi
	((${#pids[@]})) || return 0
	kill "${pids[@]}" 2>/dev/null || true
	wait "${pids[@]}" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# kill -0 is a shell builtin: the loop spins without forking, and ends
# when the pid it watches (this script) no longer exists.
for ((i = 0; i < loops; i++)); do
	sh -c 'while kill -0 "$1" 2>/dev/null; do :; done' busy-loop $$ &
	pids+=($!)
done

for ((run = 1; run <= runs; run++)); do
	echo "test-loaded: run $run of $runs, with $loops busy loops (pids ${pids[*]}) on $(nproc) CPUs"
	start=$SECONDS
	# setsid: make test leads its own process group (a background child of
	# this non-interactive shell is no group leader, so setsid execs in
	# place and $! is that group's id).
	setsid "$make" --no-print-directory test &
	test_pgid=$!
	rc=0
	wait "$test_pgid" || rc=$?
	test_pgid=
	if ((rc != 0)); then
		echo "test-loaded: run $run of $runs FAILED after $((SECONDS - start))s"
		exit 1
	fi
	echo "test-loaded: run $run of $runs passed in $((SECONDS - start))s"
done
echo "test-loaded: $runs runs passed under load"
