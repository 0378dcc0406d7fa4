#!/bin/sh
# SPDX-License-Identifier: ISC
# Fault injection is a build option (configure --enable-fault-injection).
# A build without it refuses to start when an IDEM_CRASH_* or
# IDEM_SPAWN_DELAY_MS variable is set, naming the variable, before it
# touches the root; a build with it reads them (an unknown crash point
# is refused, and nothing is left in /dev/shm).  make check runs this
# against the build's own idemd; contrib/scripts/run-tests.sh also runs
# it against a default-configured one (IDEM_FAULT_INJECTION=no).
set -u
IDEMD=${IDEMD:?set IDEMD to the idemd binary}
mode=${IDEM_FAULT_INJECTION:?set IDEM_FAULT_INJECTION to yes or no}

. "$(dirname "$0")/lib.sh"
make_tmp faultinj

# refused VAR=VALUE WANTED: idemd with that variable exits non-zero within
# 30 s, its stderr saying WANTED; the root's segment is not left behind.
refused() {
	root=$tmp/root.$#.$(echo "$1" | cut -d= -f1)
	env "$1" timeout 30 "$IDEMD" --root "$root" --socket "$tmp/sock" \
	    >"$tmp/out" 2>"$tmp/err"
	rc=$?
	if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then
		fail "$1: idemd did not refuse (exit $rc)"
	elif ! grep -qF -- "$2" "$tmp/err"; then
		fail "$1: no \"$2\" in: $(cat "$tmp/err")"
	elif [ -e "$tmp/sock" ]; then
		fail "$1: a socket was made"
	else
		pass "$1 refused: $(tail -n 1 "$tmp/err")"
	fi
	if [ "$mode" = no ] && [ -e "$root" ]; then
		fail "$1: the root was created before the refusal"
	fi
	# The segment's name: /idem- and SHA-256(root's real path), 16 hex.
	if [ -d "$root" ]; then
		seg=/dev/shm/idem-$(printf '%s' "$(cd "$root" && pwd -P)" |
		    sha256sum | cut -c1-16)
		if [ -e "$seg" ]; then
			fail "$1: $seg was left behind"
			rm -f "$seg"
		fi
	fi
}

case $mode in
no)
	for v in IDEM_CRASH_AT=after_commit_durable \
	    IDEM_CRASH_WORKER_AT=after_reserve_durable \
	    IDEM_CRASH_WORKER_IN_LOCK=table IDEM_CRASH_LINK_EARLY=1 \
	    IDEM_SPAWN_DELAY_MS=10 IDEM_CRASH_WATCH=off \
	    IDEM_CRASH_DURABLE_WATCH_US=1 IDEM_CRASH_JOURNAL_LINGER_US=1 \
	    IDEM_CRASH_SPIN_MAX_CONNECTIONS=2; do
		name=${v%%=*}
		refused "$v" "$name is set, but this idemd has no fault injection"
	done
	;;
yes)
	refused IDEM_CRASH_AT=no_such_point 'unknown crash point "no_such_point"'
	refused IDEM_CRASH_WORKER_AT=after_task_created_durable \
	    "only a crash of the whole broker can: use IDEM_CRASH_AT"
	refused IDEM_SPAWN_DELAY_MS=soon "IDEM_SPAWN_DELAY_MS must be a number"
	refused IDEM_CRASH_WATCH=maybe \
	    "IDEM_CRASH_WATCH must be off, remote, remote:DIR or die-after-read"
	refused IDEM_CRASH_DURABLE_WATCH_US=-1 \
	    "IDEM_CRASH_DURABLE_WATCH_US must be a number of microseconds"
	refused IDEM_CRASH_JOURNAL_LINGER_US=soon \
	    "IDEM_CRASH_JOURNAL_LINGER_US must be a number of microseconds"
	refused IDEM_CRASH_SPIN_MAX_CONNECTIONS=two \
	    "IDEM_CRASH_SPIN_MAX_CONNECTIONS must be a number of connections"
	refused IDEM_CRASH_ATT=after_commit_durable \
	    "unknown fault-injection variable IDEM_CRASH_ATT"
	;;
*)
	echo "IDEM_FAULT_INJECTION must be yes or no, not $mode"
	exit 99
	;;
esac
finish
