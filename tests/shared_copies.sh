#!/bin/sh
# SPDX-License-Identifier: ISC
# The contract and its vectors are copied into tests/vectors so that the
# suite runs from a tarball; where the shared originals are present (a
# development tree or CI), the copies must not have drifted from them.
# The originals: $IDEM_SHARED_DIR (.ci/run sets it), else shared/ beside
# the source tree.  Without them: skip, but fail in CI (CI=true).
set -eu
src=${IDEM_SRCDIR:?}
shared=${IDEM_SHARED_DIR:-$src/../shared}
. "$src/tests/lib.sh"
[ -f "$shared/SPEC.md" ] ||
    skip_or_fail_in_ci "no $shared/SPEC.md" "set IDEM_SHARED_DIR"
status=0
for pair in "SPEC.md:SPEC.md" "vectors/write-task-v1.json:write-task-v1.json" \
    "vectors/write-task-v1-fcop.json:write-task-v1-fcop.json"; do
	original="$shared/${pair%%:*}"
	copy="$src/tests/vectors/${pair#*:}"
	if cmp -s "$original" "$copy"; then
		echo "PASS: $copy matches $original"
	else
		echo "FAIL: $copy differs from $original: copy it again"
		status=1
	fi
done
exit $status
