#!/usr/bin/env bash
# cluster-demo.sh shows agenthost on several machines, on one: a 3-member
# etcd cluster on loopback (internal/etcdmember, embedded etcd) and two
# hosts, "host-a" and "host-b", each with its own state directory, sharing
# the store on etcd. It runs a turn on host A, shows both hosts' view of
# the session (its owner host), shows what host B tells a client that asks
# it for host A's session, SIGKILLs host A, waits for host B to take the
# session over (the liveness TTL plus the drift margin) and continues the
# conversation on host B.
#
# Everything lives in a private temporary directory (mode 0700), binaries
# included: an EXIT trap kills every process whose executable is one of
# those copies (the members, the hosts, and the plugins, which outlive
# their host by design), by pid, and removes the directory, however the
# script ends. Usage: scripts/cluster-demo.sh BIN_DIR (with agenthost and
# etcdmember built in it; make cluster-demo does). LIVENESS_TTL (default
# 5s) is passed to both hosts.
set -euo pipefail

bin=${1:?usage: cluster-demo.sh BIN_DIR}
ttl=${LIVENESS_TTL:-5s}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/agenthost-cluster-demo.XXXXXX")
chmod 0700 "$tmp"
AH=$tmp/bin/agenthost
MEMBER=$tmp/bin/etcdmember

# running BIN... lists the pids of every process running one of the
# copies BIN in $tmp/bin (all of them without arguments): only this run's
# processes can. (-ef compares the files /proc/PID/exe leads to, without
# a fork per process.)
running() {
	local p b
	(($#)) || set -- "$AH" "$MEMBER"
	for p in /proc/[0-9]*; do
		for b; do
			if [[ $p/exe -ef $b ]]; then
				echo "${p#/proc/}"
			fi
		done
	done 2>/dev/null
}
# stop BIN: SIGTERM the processes of BIN, and SIGKILL what is left of them
# after 5 s.
stop() {
	local pids
	pids=$(running "$1")
	[[ -n $pids ]] || return 0
	kill -TERM $pids 2>/dev/null || true
	for _ in $(seq 50); do
		[[ -z $(running "$1") ]] && return 0
		sleep 0.1
	done
	pids=$(running "$1")
	[[ -z $pids ]] || kill -KILL $pids 2>/dev/null || true
}
cleanup() {
	local rc=$? left
	trap - EXIT INT TERM HUP
	# The hosts (and their plugins) first, while etcd still answers
	# their leaving; then the members, which close their WALs.
	stop "$AH"
	stop "$MEMBER"
	wait 2>/dev/null || true
	if ((rc != 0)); then
		echo "cluster-demo: FAILED (exit $rc); logs:" >&2
		# The hosts' logs say what failed; the members' end with etcd's
		# own noise about the listeners closed at the stop.
		for f in "$tmp"/host-*.log "$tmp"/m*.log; do
			[[ -s $f ]] && { echo "--- ${f##*/}" >&2; tail -n 10 "$f" >&2; }
		done
	fi
	left=$(running)
	[[ -z $left ]] || echo "cluster-demo: processes left: $left" >&2
	rm -rf "$tmp"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
mkdir -p "$tmp/bin"
cp "$bin/agenthost" "$bin/etcdmember" "$tmp/bin/"

say() { printf '\n\033[1m## %s\033[0m\n' "$*"; }
# show prints a command (as agenthost …, $DEMO for the directory) and
# runs it, its output likewise; its status is the command's.
show() {
	local rc=0
	printf '$ agenthost %s\n' "${*:2}" | sed "s|$tmp|\$DEMO|g"
	"$@" >"$tmp/show.txt" 2>&1 || rc=$?
	sed "s|$tmp|\$DEMO|g" "$tmp/show.txt"
	return "$rc"
}

# wait_ready FILE PID WHAT: wait up to 60s for a ready line in FILE from
# process PID; its exit first is a failure at once.
wait_ready() {
	for _ in $(seq 600); do
		if grep -q '"ready":true' "$1" 2>/dev/null; then
			return 0
		fi
		if ! kill -0 "$2" 2>/dev/null; then
			echo "cluster-demo: $3 exited before it was ready" >&2
			return 1
		fi
		sleep 0.1
	done
	echo "cluster-demo: $3 did not get ready in 60s" >&2
	return 1
}

say "a 3-member etcd cluster on loopback (bin/etcdmember, embedded etcd)"
mapfile -t ports < <("$MEMBER" --free-ports 6)
cluster=m1=http://127.0.0.1:${ports[3]},m2=http://127.0.0.1:${ports[4]},m3=http://127.0.0.1:${ports[5]}
endpoints=http://127.0.0.1:${ports[0]},http://127.0.0.1:${ports[1]},http://127.0.0.1:${ports[2]}
declare -A pid
for i in 1 2 3; do
	"$MEMBER" --name "m$i" --data-dir "$tmp/etcd-m$i" \
		--listen-client "http://127.0.0.1:${ports[i - 1]}" --listen-peer "http://127.0.0.1:${ports[i + 2]}" \
		--initial-cluster "$cluster" >"$tmp/m$i.out" 2>"$tmp/m$i.log" &
	pid[m$i]=$!
done
for i in 1 2 3; do
	wait_ready "$tmp/m$i.out" "${pid[m$i]}" "etcd member m$i"
	cat "$tmp/m$i.out"
done

say "two hosts on the cluster: host-a and host-b, each with its own state directory"
for h in a b; do
	args=(--state-dir "$tmp/$h" serve --store etcd --etcd-endpoints "$endpoints" --host-id "host-$h" --liveness-ttl "$ttl")
	printf '$ agenthost %s &\n' "${args[*]}" | sed "s|$tmp|\$DEMO|g"
	"$AH" "${args[@]}" >"$tmp/host-$h.out" 2>"$tmp/host-$h.log" &
	pid[$h]=$!
	wait_ready "$tmp/host-$h.out" "${pid[$h]}" "host-$h"
	sed "s|$tmp|\$DEMO|g" "$tmp/host-$h.out"
done
# The sessions' workspace.
mkdir -p "$tmp/work"
cd "$tmp/work"
A=(--state-dir "$tmp/a")
B=(--state-dir "$tmp/b")

say "a turn on host A"
show "$AH" "${A[@]}" run --agent scripted "count 3"
session=$(sed -n 's/^session \([^ ]*\) .*/\1/p' "$tmp/show.txt" | head -n 1)
[[ -n $session ]] || { echo "cluster-demo: no session id in agenthost run's output" >&2; exit 1; }

say "both hosts see the session, owned by host-a"
show "$AH" "${A[@]}" sessions list
show "$AH" "${B[@]}" sessions list
show "$AH" "${B[@]}" status

say "a client of host B asking for host A's session is told where it runs"
show "$AH" "${B[@]}" run --session "$session" "count 2" || true

say "SIGKILL host A (pid ${pid[a]}); its plugin fences itself, host B waits the TTL ($ttl) plus the drift margin"
kill -KILL "${pid[a]}"
wait "${pid[a]}" 2>/dev/null || true
killed=$(date +%s.%N)
for _ in $(seq 600); do
	# Taken over: host B no longer says it is owned by host-a.
	if ! "$AH" "${B[@]}" sessions list 2>/dev/null | grep -F "$session" | grep -q 'host-a'; then
		break
	fi
	sleep 0.1
done
echo "host B took the session over $(awk -v a="$killed" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')s after host A was killed"
show "$AH" "${B[@]}" sessions list

say "host B continues the conversation"
show "$AH" "${B[@]}" run --session "$session" "count 2"
show "$AH" "${B[@]}" sessions list
show "$AH" "${B[@]}" journal "$session"

say "done: stopping every process of the demo"
