#!/bin/sh
# SPDX-License-Identifier: ISC
# idem-bench --scenario effects at a tiny count (doc/performance.md,
# "effects"): a private redis-server (AOF, appendfsync always) starts,
# answers its effects (SET NX PX, SET XX) and GETs, idemd answers every
# effect_begin proceed and every effect_complete committed, and every
# retry of a committed effect reused (the bench fails otherwise); both
# servers' CPU and switches per operation are counted, and the issue's
# targets are judged.  Skips (77) where redis-server is not installed,
# except in CI (CI=true: contrib/scripts/install-deps.sh installs it).
set -u
IDEMD=${IDEMD:?set IDEMD to the idemd binary}
BENCH=${IDEM_BENCH:-$(dirname "$IDEMD")/../tests/bench/idem-bench}

. "$(dirname "$0")/../lib.sh"
make_tmp fxsmoke

run "$BENCH" --scenario effects --clients 2 --count 40 --dir "$tmp"
if grep -q '^effects .*not run: redis-server not found' "$tmp/out"; then
	if [ "${CI:-}" = true ]; then
		fail "redis-server not found (CI must run the effects scenario)"
		finish
	fi
	echo "SKIP: redis-server not found (apt-get install redis-server)"
	exit 77
fi
expect 0 "idem-bench --scenario effects --clients 2 --count 40"
for row in redis-effect effect redis-get effect-reuse; do
	if ! grep -q "^$row  *2  *[1-9]" "$tmp/out"; then
		fail "$row: no row with operations"
	elif grep "^$row " "$tmp/out" | grep -q FAILED; then
		fail "$row: $(grep "^$row " "$tmp/out" | grep FAILED)"
	else
		pass "$row ran"
	fi
done
for row in redis-effect redis-get; do
	if grep "^$row " "$tmp/out" | grep -q \
	    'redis-server per op: [0-9]* us CPU, [0-9.]* context switches'; then
		pass "$row: Redis's costs counted"
	else
		fail "$row: no costs of redis-server"
	fi
done
if grep '^effect ' "$tmp/out" | grep -q \
    'broker per op: .*per effect: [0-9.]* journal records'; then
	pass "effect: the broker's costs and journal records per effect"
else
	fail "effect: no broker costs or journal records per effect"
fi
if grep -q 'effects: effects/s / Redis, K=2  *[0-9.]*x  *>= 1x  *\(MET\|NOT MET\)' \
    "$tmp/out"; then
	pass "the effect rate judged against Redis's"
else
	fail "no verdict on the effect rate against Redis's"
fi
finish
