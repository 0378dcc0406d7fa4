#!/bin/sh
# Crash-state exploration (issue "Prove it", item 3; doc/testing.md,
# "Crash-state exploration"): idemd is recorded under strace serving one
# write_task (new id), one legacy write_task, one write_report and one
# write_task that starts a journal segment and a checkpoint, one
# effect_begin and one effect_complete (applied, with a result); every crash
# state the recorded fsync order allows is restarted, the request retried
# and the answers and files checked (tests/crashstates/explore.py).
# make check sets IDEMD and IDEM_SRCDIR.  Exit 77 (skip) without python3
# or strace, 1 if a crash state fails.  Arguments go to explore.py
# (--verbose, --keep, --kinds task, --depth 1...).  Zero-filled states
# (a file system that keeps a size but not the data) are always explored.
set -u
src=${IDEM_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
idemd=${IDEMD:-$src/broker/idemd}
if ! command -v python3 >/dev/null 2>&1; then
	echo "SKIP: python3 not found"
	exit 77
fi
if ! command -v strace >/dev/null 2>&1; then
	echo "SKIP: strace not found (apt-get install strace)"
	exit 77
fi
PYTHONDONTWRITEBYTECODE=1
export PYTHONDONTWRITEBYTECODE
exec python3 "$src/tests/crashstates/explore.py" --idemd "$idemd" \
    --budget 90 --zero-fill "$@"
