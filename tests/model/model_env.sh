# SPDX-License-Identifier: ISC
# tests/model/model_env.sh: what the two model runners (run.sh, run_pg.sh)
# share, sourced after `set -u` with $src set to the source tree: the
# programs the model drives (IDEMD, IDEMCTL and IDEM_VECTORS, exported,
# the build tree's unless make check set them), not_proved, and the
# Python that runs the model, $py, with its Hypothesis, or a skip.
IDEMD=${IDEMD:-$src/build/broker/idemd}
IDEMCTL=${IDEMCTL:-$src/build/contrib/idemctl}
IDEM_VECTORS=${IDEM_VECTORS:-$src/tests/vectors}
PYTHONDONTWRITEBYTECODE=1
export IDEMD IDEMCTL IDEM_VECTORS PYTHONDONTWRITEBYTECODE

. "$src/tests/lib.sh"

# not_proved REASON: exit 77 (skip) saying why, but 1 (fail) in CI.
not_proved() {
	skip_or_fail_in_ci "$1" "the model must run"
}

# Debian's python3-hypothesis is installed for the system's python3,
# not for another python3 earlier on PATH (pyenv).
py=/usr/bin/python3
[ -x "$py" ] || not_proved "$py not found"
"$py" -c 'import hypothesis' 2>/dev/null ||
    not_proved "$py has no hypothesis (apt-get install python3-hypothesis)"
