#!/bin/sh
# SPDX-License-Identifier: ISC
# Shared-memory segments left in /dev/shm by the test suite: a broker
# that was SIGKILLed leaves its segment (64 MiB of table and an 8 MiB
# journal ring at the default --capacity), and every test that kills one
# must remove it (harness.c's remove_segment, explore.py's).
#
#   shm_leftovers.sh snapshot FILE   before the suite: the segments there
#   shm_leftovers.sh check FILE      after everything: fail listing each
#                                    idem segment that is new since the
#                                    snapshot and that no process maps
#
# Segments of brokers still running (mapped) are not leftovers: on a
# machine shared with other test runs they are someone else's.  Run the
# check only after every suite has finished (make check -j runs suites in
# parallel, each with live brokers until its end).  Leftovers are removed
# after they are listed, so that one failing run does not fail the next.
set -eu
mode=${1:?snapshot or check}
file=${2:?a file for the snapshot}
shm=${IDEM_SHM_DIR:-/dev/shm}

# Segments only: regular files named idem-<16 hex> (segment.c), not
# other runs' directories (a fuzz smoke run with TMPDIR=/dev/shm).
segments() {
	for f in "$shm"/idem-*; do
		[ -f "$f" ] || continue
		echo "${f##*/}" | grep -Eq '^idem-[0-9a-f]{16}$' && echo "$f"
	done
	return 0
}

mapped() {
	# /proc/*/maps of every process we may read; a segment maps as
	# /dev/shm/idem-<hex> (deleted or not).
	cat /proc/[0-9]*/maps 2>/dev/null | grep -F -- "$1" >/dev/null
}

case $mode in
snapshot)
	segments >"$file"
	;;
check)
	# Candidates first; then, after a grace second, those still there
	# and unmapped: another run's broker just killed (its harness
	# removes the segment once the broker's processes are reaped) or
	# just starting is not ours.
	candidates=
	for f in $(segments); do
		if grep -Fx -- "$f" "$file" >/dev/null 2>&1 || mapped "$f"; then
			continue
		fi
		candidates="$candidates $f"
	done
	[ -n "$candidates" ] && sleep 2
	left=0
	for f in $candidates; do
		[ -e "$f" ] && ! mapped "$f" || continue
		size=$(stat -c %s "$f" 2>/dev/null) || continue
		echo "FAIL: $f ($size bytes) left in $shm by the test suite"
		rm -f "$f"
		left=$((left + 1))
	done
	if [ $left -ne 0 ]; then
		echo "FAIL: $left shared-memory segment(s) left (removed now)"
		exit 1
	fi
	echo "PASS: no idem segment left in $shm"
	;;
*)
	echo "usage: $0 snapshot|check FILE" >&2
	exit 2
	;;
esac
