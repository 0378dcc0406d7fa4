#!/bin/sh
# SPDX-License-Identifier: ISC
# capacity.sh [N]: what one submission id costs, measured on this
# machine with this build (doc/operations.md, "Capacity"):
#  - shared memory per --capacity slot: two brokers' segments in /dev/shm
#    (--capacity 131072 and 262144), the difference over the slots;
#  - disk per id: N tasks created (idem-bench's create scenario) on a
#    broker whose --segment-bytes (1 MiB) makes checkpoints move them
#    into the index as a long-running broker does, then stopped; the
#    index's bytes, the TASK files' (apparent and allocated) and the
#    journal's (bounded by --segment-bytes and the table, not by N);
#    then every receipt compacted to its tombstone (idemctl compact
#    --older-than 0) and the index copied by idemctl backup (LMDB's
#    compacted copy: the file itself keeps its free pages for reuse).
# Run from the source tree after a build (build/): IDEMD and IDEM_BENCH
# name other binaries.
set -eu
n=${1:-20000}
here=$(cd "$(dirname "$0")/../.." && pwd)
IDEMD=${IDEMD:-$here/build/broker/idemd}
IDEM_BENCH=${IDEM_BENCH:-$here/build/tests/bench/idem-bench}
IDEMCTL=${IDEMCTL:-$here/build/contrib/idemctl}
dir=$(mktemp -d "${TMPDIR:-/tmp}/idem-capacity.XXXXXX")
pid=
trap 'if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; fi; rm -rf "$dir"' EXIT
trap 'exit 1' HUP INT TERM

# start ROOT ARGS...: idemd on ROOT, returns once it serves; pid in $pid.
start() {
	root=$1
	shift
	rm -f "$dir/ready"
	mkfifo "$dir/ready"
	"$IDEMD" --root "$root" --ready-fd 3 "$@" 3>"$dir/ready" \
	    2>>"$dir/idemd.log" &
	pid=$!
	read -r _ <"$dir/ready"
}
stop() {
	kill -TERM "$pid"
	wait "$pid" || true
	pid=
}
# The size of ROOT's segment: /dev/shm/idem- and the first 16 hex
# digits of the SHA-256 of the root's real path (shm/segment.c).
segment_bytes() {
	stat -c %s "/dev/shm/idem-$(printf %s "$(realpath "$1")" |
	    sha256sum | cut -c1-16)"
}

start "$dir/a" --capacity 131072
small=$(segment_bytes "$dir/a")
stop
start "$dir/b" --capacity 262144
large=$(segment_bytes "$dir/b")
stop
echo "shared memory: --capacity 262144 (the default) $large bytes;" \
    "$(( (large - small) / 131072 )) bytes per slot"

# Six digits: more than FCoP's 999 tasks a day.
start "$dir/root" --capacity 65536 --segment-bytes 1048576 \
    --sequence-digits 6
"$IDEM_BENCH" --socket "$dir/root/.idem/idemd.sock" --scenario create \
    --clients 8 --count "$n" >"$dir/bench.out" 2>&1
stop
index=$(stat -c %s "$dir/root/.idem/index/data.mdb")
journal=$(du -sb "$dir/root/.idem/journal" | cut -f1)
files=$(find "$dir/root/_lifecycle" -name 'TASK-*.md' | wc -l)
[ "$files" -gt 0 ] || { cat "$dir/bench.out"; exit 1; }
apparent=$(find "$dir/root/_lifecycle" -name 'TASK-*.md' -printf '%s\n' |
    awk '{ s += $1 } END { print s + 0 }')
allocated=$(find "$dir/root/_lifecycle" -name 'TASK-*.md' -printf '%b\n' |
    awk '{ s += $1 } END { print s * 512 }')
echo "ids created: $files (idem-bench create, $n requests)"
# The receipts the checkpoints put into the index (the last segment's
# are still only in the journal).
indexed=$("$IDEMCTL" --root "$dir/root" verify --json |
    sed -n 's/.*"index":{"entries":\([0-9]*\).*/\1/p')
echo "index: $index bytes for $indexed receipts," \
    "$(( index / indexed )) bytes per id"
echo "TASK files: $(( apparent / files )) bytes per id," \
    "$(( allocated / files )) allocated"
echo "journal: $journal bytes (bounded by --segment-bytes and the table," \
    "not by the ids)"
"$IDEMCTL" --root "$dir/root" compact --older-than 0 >/dev/null
"$IDEMCTL" --root "$dir/root" backup "$dir/copy" >/dev/null
tombstones=$(stat -c %s "$dir/copy/.idem/index/data.mdb")
echo "index compacted to tombstones (copied by idemctl backup):" \
    "$tombstones bytes, $(( tombstones / indexed )) bytes per id"
