#!/bin/sh
# SPDX-License-Identifier: ISC
# The Python client as a user gets it: contrib/python installed with pip
# into a fresh venv of Debian's python3 (python3-venv), with no package
# index (PIP_NO_INDEX, no pip configuration), then typechecked (mypy
# --strict, when python3-mypy is installed) and tests/python/test_*.py
# (test_client: the sync client; test_aio: idem.aio; test_lease: the
# lease kept by effect_extend; test_hostile: both clients against a
# broker that breaks the protocol, hostile.py) run with the venv's python
# against a real idemd (tests/python/harness.py starts it).  make check sets IDEMD,
# IDEM_VECTORS, IDEM_SRCDIR and IDEM_VERSION.  Exit 77 (skip) without
# python3 or its venv module, and the typecheck skipped (a "SKIP:" line)
# without mypy, but in CI (CI=true) each of them fails: CI must run it
# all (contrib/scripts/install-deps.sh installs them).  The venv lives in
# the build tree and is removed at exit; nothing is written into the
# source tree.
set -u
python=${IDEM_TEST_PYTHON:-/usr/bin/python3}

# in_ci: CI=true, where what would be a skip is a failure.
in_ci() { [ "${CI:-}" = true ]; }

# not_run REASON: skip (77) with the reason; in CI, fail.
not_run() {
	if in_ci; then
		echo "FAIL: $1 (CI=true: CI must run the Python client's tests)"
		exit 1
	fi
	echo "SKIP: $1"
	exit 77
}

if ! [ -x "$python" ]; then
	not_run "$python not found (apt-get install python3)"
fi
if ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then
	not_run "$python has no venv module (apt-get install python3-venv)"
fi
src=${IDEM_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
mkdir -p tests && work=$(mktemp -d "$PWD/tests/python-venv.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
trap 'exit 1' HUP INT TERM

# No bytecode next to the sources (a read-only tree under distcheck), no
# pip configuration or find-links of this machine, no index, no cache.
unset PYTHONPATH PIP_FIND_LINKS PIP_INDEX_URL PIP_EXTRA_INDEX_URL
PYTHONDONTWRITEBYTECODE=1 PIP_CONFIG_FILE=/dev/null PIP_NO_INDEX=1
PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
export PYTHONDONTWRITEBYTECODE PIP_CONFIG_FILE PIP_NO_INDEX PIP_NO_CACHE_DIR
export PIP_DISABLE_PIP_VERSION_CHECK

venv="$work/venv"
if ! "$python" -m venv "$venv" >"$work/venv.log" 2>&1; then
	cat "$work/venv.log"
	echo "FAIL: $python -m venv"
	exit 1
fi
# The documented install command, from the source tree as it is.
if ! "$venv/bin/python" -m pip install "$src/contrib/python" \
    >"$work/pip.log" 2>&1; then
	cat "$work/pip.log"
	echo "FAIL: pip install $src/contrib/python (offline, fresh venv)"
	exit 1
fi
tail -n 1 "$work/pip.log"

if "$python" -m mypy --version >/dev/null 2>&1; then
	# The package itself, strictly, and a caller's code against the
	# installed copy (its py.typed makes mypy read its hints).
	if ! "$python" -m mypy --strict --python-version 3.8 \
	    --cache-dir "$work/mypy" "$src/contrib/python/idem" \
	    "$src/contrib/python/idem_build.py" ||
	   ! "$python" -m mypy --strict --cache-dir "$work/mypy" \
	    --python-executable "$venv/bin/python" \
	    "$src/tests/python/typed_usage.py"; then
		echo "FAIL: mypy"
		exit 1
	fi
elif in_ci; then
	echo "FAIL: mypy not installed (apt-get install python3-mypy;" \
	    "CI=true: CI must typecheck the package)"
	exit 1
else
	# One skipped case, with its reason (run-tests.sh lists it).
	echo "SKIP: the typecheck: mypy not installed (apt-get install" \
	    "python3-mypy)"
fi

IDEM_VENV=$venv
export IDEM_VENV
# Every test_*.py, from the build tree (discover puts tests/python on
# sys.path for harness.py; PYTHONDONTWRITEBYTECODE keeps the sources
# clean).
cd "$work" && "$venv/bin/python" -m unittest discover -v \
    -s "$src/tests/python" -t "$src/tests/python" -p 'test_*.py'
