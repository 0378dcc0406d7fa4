#!/bin/sh
# SPDX-License-Identifier: ISC
# idem-bench --scenario cluster at a tiny count (doc/performance.md,
# "Several brokers on PostgreSQL"): the scenario runs end to end on a
# private server beside pgbench, every reply is the one expected and the
# inbox holds one file per creation (the bench fails otherwise), the
# statements, transactions, WAL flushes and the server's CPU of a
# creation are counted beside the local store's rate, and a cached retry on a cluster
# broker costs no PostgreSQL round trip and takes the fast path.  Skips
# (77) where idem has no PostgreSQL or PostgreSQL is not installed,
# except in CI (CI=true), which must run it.
set -u
IDEMD=${IDEMD:?set IDEMD to the idemd binary}
BENCH=${IDEM_BENCH:-$(dirname "$IDEMD")/../tests/bench/idem-bench}

. "$(dirname "$0")/../lib.sh"
make_tmp clsmoke

skip() {
	if [ "${CI:-}" = true ]; then
		fail "$1 (CI must run the PostgreSQL tests)"
		finish
	fi
	echo "SKIP: $1"
	exit 77
}

run "$BENCH" --scenario cluster --clients 2 --count 40 --dir "$tmp"
# Absent, not broken: anything else that stops the scenario fails below.
if grep 'pg-cluster.*not run: ' "$tmp/out" | grep -q \
    -e 'built without PostgreSQL' -e 'are not installed' \
    -e 'pgbench not found'; then
	skip "$(sed -n 's/.*not run: //p' "$tmp/out" | head -n 1)"
fi
expect 0 "idem-bench --scenario cluster --clients 2 --count 40"
for row in pgbench-insert pg-create-b1 pg-create-b3 local-reuse \
    pg-reuse-b1 pg-reuse-b3; do
	if ! grep -q "^$row  *2  *[1-9]" "$tmp/out"; then
		fail "$row: no row with operations"
	elif grep "^$row " "$tmp/out" | grep -q FAILED; then
		fail "$row: $(grep "^$row " "$tmp/out" | grep FAILED)"
	else
		pass "$row ran"
	fi
done
for row in pg-create-b1 pg-create-b3; do
	if grep "^$row " "$tmp/out" | grep -q \
	    'statements (libpq calls) per creation, [0-9.]* ms of '\
'execution on the server: [0-9.]* [A-Z]'; then
		pass "$row: statements per creation counted"
	else
		fail "$row: no statements per creation counted"
	fi
done
# The server's side beside the broker's (doc/performance.md): a
# creation commits at least one transaction and flushes WAL, the local
# store's rate of the same run is set beside it, and the server's and
# the brokers' CPU are read from /proc (their processes are ours).
if [ "$(grep -c '^PostgreSQL per operation' "$tmp/out")" -ne 1 ]; then
	fail "no table of the server's side"
fi
for row in pg-create-b1 pg-create-b3; do
	line=$(sed -n '/^PostgreSQL per operation/,$p' "$tmp/out" |
	    grep "^$row ")
	# scenario K ops/s xlocal stmts sendto xacts wal_sync wal_writ srv brk
	if echo "$line" | awk '{ exit !($4 ~ /^[0-9.]+x$/ && $5 + 0 >= 1 &&
	    $7 + 0 >= 1 && $8 + 0 > 0 && $10 ~ /^[0-9]+$/ &&
	    $11 ~ /^[0-9]+$/) }'; then
		pass "$row: server side counted: $line"
	else
		fail "$row: server side missing: $line"
	fi
done
for row in pg-reuse-b1 pg-reuse-b3; do
	line=$(grep "^$row " "$tmp/out")
	case $line in
	*"0.00 statements (libpq calls) per retry"*) pass "$row: no round trip" ;;
	*) fail "$row: cached retries made round trips: $line" ;;
	esac
	case $line in
	*"100% of reused by the fast path"*) pass "$row: fast path" ;;
	*) fail "$row: not all retries took the fast path: $line" ;;
	esac
done
# --syscalls: the brokers' sendto (libpq's sends) counted by strace; a
# creation sends at least its statements, a cached retry nothing.  Where
# strace cannot attach (ptrace restricted), the bench says so and the
# count is not checked.
run "$BENCH" --scenario cluster --clients 2 --count 40 --syscalls \
    --dir "$tmp"
expect 0 "idem-bench --scenario cluster --clients 2 --count 40 --syscalls"
if grep -q 'strace failed' "$tmp/out"; then
	echo "NOTE: strace could not attach: sendto not counted here"
else
	for row in pg-create-b1 pg-reuse-b1; do
		line=$(sed -n '/^PostgreSQL per operation/,$p' "$tmp/out" |
		    grep "^$row ")
		case $row in
		pg-create-*) rule='$6 + 0 >= 1' ;;
		*) rule='$6 == "0.00"' ;;
		esac
		if echo "$line" | awk "{ exit !($rule) }"; then
			pass "$row: sendto counted: $line"
		else
			fail "$row: sendto: $line"
		fi
	done
fi
finish
