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
. "$src/tests/model/model_env.sh"
budget=${IDEM_MODEL_BUDGET:-120}
# The example database (shrunk failures, replayed first) in the build
# tree: make check runs in it.
IDEM_MODEL_DB=${IDEM_MODEL_DB:-$(pwd)/tests/model/.hypothesis}
mkdir -p "$IDEM_MODEL_DB" || exit 99
IDEM_MODEL_BUDGET=$budget
export IDEM_MODEL_DB IDEM_MODEL_BUDGET
exec "$py" "$src/tests/model/test_model.py"
