#!/bin/sh
# SPDX-License-Identifier: ISC
# The model-based test (doc/testing.md, "The model"): a real idemd and
# the executable model of SPEC.md (tests/model/model.py) driven side by
# side by Hypothesis (tests/model/test_model.py): the kept regression
# sequences, fixed seeds and a fresh one (printed), for a time budget.
# make check sets IDEMD, IDEMCTL, IDEM_VECTORS and IDEM_SRCDIR.
#   IDEM_MODEL_BUDGET  seconds of random search (default 120; scaled by
#                      5 on a sanitizer build, IDEM_SANITIZER_FLAGS)
#   IDEM_MODEL_SEED    replay one seed;  IDEM_MODEL_KNOWN  see the file
# Without /usr/bin/python3 or its Hypothesis (python3-hypothesis): exit
# 77 (skip) with the reason, but 1 (fail) in CI (CI=true).
set -u
src=${IDEM_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
IDEMD=${IDEMD:-$src/build/broker/idemd}
IDEMCTL=${IDEMCTL:-$src/build/contrib/idemctl}
IDEM_VECTORS=${IDEM_VECTORS:-$src/tests/vectors}
export IDEMD IDEMCTL IDEM_VECTORS
not_proved() {
	case ${CI:-} in
	true|TRUE|True|1|yes)
		echo "FAIL: $1 (CI=true: the model must run)"
		exit 1 ;;
	esac
	echo "SKIP: $1"
	exit 77
}
# Debian's python3-hypothesis is installed for the system's python3,
# not for another python3 earlier on PATH (pyenv).
py=/usr/bin/python3
[ -x "$py" ] || not_proved "$py not found"
"$py" -c 'import hypothesis' 2>/dev/null ||
    not_proved "$py has no hypothesis (apt-get install python3-hypothesis)"
budget=${IDEM_MODEL_BUDGET:-120}
# The example database (shrunk failures, replayed first) in the build
# tree: make check runs in it.
IDEM_MODEL_DB=${IDEM_MODEL_DB:-$(pwd)/tests/model/.hypothesis}
mkdir -p "$IDEM_MODEL_DB" || exit 99
IDEM_MODEL_BUDGET=$budget
PYTHONDONTWRITEBYTECODE=1
export IDEM_MODEL_DB IDEM_MODEL_BUDGET PYTHONDONTWRITEBYTECODE
exec "$py" "$src/tests/model/test_model.py"
