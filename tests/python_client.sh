#!/bin/sh
# The Python client (contrib/python/idem.py) against a real idemd:
# tests/python/test_client.py.  make check sets IDEMD, IDEM_VECTORS and
# IDEM_SRCDIR.  Exit 77 (skip) without python3.
set -u
if ! command -v python3 >/dev/null 2>&1; then
	echo "SKIP: python3 not found"
	exit 77
fi
src=${IDEM_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
PYTHONPATH="$src/contrib/python${PYTHONPATH:+:$PYTHONPATH}"
PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH PYTHONDONTWRITEBYTECODE
python3 "$src/tests/python/test_client.py" -v
exit $?
