#!/bin/sh
# SPDX-License-Identifier: ISC
# The model-based test on the PostgreSQL store (doc/testing.md, "The
# model"): two brokers (--store, --host-id A and B) on one workspace and
# a private PostgreSQL server, against the model of SPEC.md, the
# database's backends terminated and the database restarted among the
# steps (tests/model/test_model_pg.py).  The same variables as run.sh
# (IDEM_MODEL_BUDGET, default 120 s; IDEM_MODEL_SEED), and
# IDEM_PG_BINDIR.  Without /usr/bin/python3's hypothesis, PostgreSQL's
# server programs or psql: exit 77 (skip) with the reason, but 1 (fail)
# in CI (CI=true).
set -u
src=${IDEM_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$src/tests/model/model_env.sh"
pgbin=${IDEM_PG_BINDIR:-}
if [ -z "$pgbin" ]; then
	for d in /usr/lib/postgresql/*/bin; do
		[ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && pgbin=$d
	done
fi
[ -n "$pgbin" ] || not_proved "PostgreSQL's server programs (initdb," \
    "pg_ctl) are not installed (apt-get install postgresql-15)"
command -v psql >/dev/null 2>&1 || not_proved "psql is not installed"
"$IDEMD" --help 2>&1 | grep -e '--store' >/dev/null ||
    not_proved "this idemd has no PostgreSQL store (configure found no libpq)"
IDEM_PG_BINDIR=$pgbin
IDEM_MODEL_BUDGET=${IDEM_MODEL_BUDGET:-120}
IDEM_MODEL_DB=${IDEM_MODEL_DB:-$(pwd)/tests/model/.hypothesis-pg}
mkdir -p "$IDEM_MODEL_DB" || exit 99
export IDEM_PG_BINDIR IDEM_MODEL_BUDGET IDEM_MODEL_DB
exec "$py" "$src/tests/model/test_model_pg.py"
