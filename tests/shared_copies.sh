#!/bin/sh
# The contract and its vectors are copied into tests/vectors so that the
# suite runs from a tarball; where the shared originals are present (a
# development tree or CI), the copies must not have drifted from them.
set -eu
src=${IDEM_SRCDIR:?}
shared="$src/../shared"
if [ ! -f "$shared/SPEC.md" ]; then
	echo "SKIP: no shared/ beside the source tree"
	exit 77
fi
status=0
for pair in "SPEC.md:SPEC.md" "vectors/write-task-v1.json:write-task-v1.json"; do
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
