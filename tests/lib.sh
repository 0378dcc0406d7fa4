# SPDX-License-Identifier: ISC
# tests/lib.sh: what the shell tests share, sourced (after `set -u`)
# with `. "$(dirname "$0")/lib.sh"`.  It owns the count of results
# (pass, fail, finish), the temporary directory removed at exit
# (make_tmp), commands whose output and status are kept for the checks
# (run, expect, contains), and a real idemd on $root, awaited through
# --ready-fd and stopped with SIGTERM at exit so that it leaves no
# segment in /dev/shm (start_broker, stop_broker), and the skip that is a
# failure in CI (skip_or_fail_in_ci).  It runs nothing by itself.

failures=0
pid=

pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# skip_or_fail_in_ci REASON CI_NOTE: a test that cannot run here exits
# 77 (skip) saying REASON; but in CI (CI=true), where it must run, 1
# (fail), saying REASON and CI_NOTE.
skip_or_fail_in_ci() {
	case ${CI:-} in
	true|TRUE|True|1|yes)
		echo "FAIL: $1 (CI=true: $2)"
		exit 1 ;;
	esac
	echo "SKIP: $1"
	exit 77
}

# finish: print the count of failures, exit 0 if there were none.
finish() {
	echo "$failures failure(s)"
	[ "$failures" -eq 0 ] || exit 1
	exit 0
}

# shellcheck disable=SC2317	# called by the trap
lib_cleanup() {
	if [ -n "$pid" ]; then
		kill -TERM "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	fi
	rm -rf "$tmp"
}

# make_tmp NAME: $tmp, a fresh directory under $TMPDIR named NAME.*,
# removed at exit (after the broker, if one runs, is stopped).
make_tmp() {
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX") || exit 99
	trap lib_cleanup EXIT
	trap 'exit 99' HUP INT TERM
}

# run COMMAND...: its stdout in $tmp/out, stderr in $tmp/err, status in
# $rc.
run() {
	"$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
}

# expect STATUS WHAT: the last run exited STATUS.
expect() {
	if [ "$rc" -eq "$1" ]; then
		pass "$2 (exit $rc)"
	else
		fail "$2: exit $rc, wanted $1"
		sed 's/^/	out: /' "$tmp/out"
		sed 's/^/	err: /' "$tmp/err"
	fi
}

# contains FILE TEXT WHAT: FILE holds TEXT.
contains() {
	if grep -F -e "$2" "$1" >/dev/null; then
		pass "$3"
	else
		fail "$3: no \"$2\" in $(basename "$1")"
		sed 's/^/	| /' "$1"
	fi
}

# start_broker ARGS...: $IDEMD on $root with two workers and ARGS, its
# log in $tmp/idemd.log; returns once it said ready, its pid in $pid.
start_broker() {
	[ -p "$tmp/ready" ] || mkfifo "$tmp/ready" || exit 99
	"$IDEMD" --root "$root" --workers 2 --ready-fd 3 "$@" \
	    3>"$tmp/ready" 2>>"$tmp/idemd.log" &
	pid=$!
	# A broker that hangs before it is ready must not hang the test:
	# the watchdog kills it, which closes the fifo and ends the read.
	(sleep 30; kill -KILL "$pid" 2>/dev/null) &
	watchdog=$!
	ready=
	read -r ready <"$tmp/ready"
	kill "$watchdog" 2>/dev/null
	wait "$watchdog" 2>/dev/null
	if [ "$ready" != ready ]; then
		fail "idemd did not become ready"
		sed 's/^/	idemd: /' "$tmp/idemd.log"
		exit 1
	fi
	pass "idemd ready on $root"
}

# stop_broker: SIGTERM, and it exits 0.
stop_broker() {
	kill -TERM "$pid"
	wait "$pid"
	status=$?
	pid=
	if [ "$status" -eq 0 ]; then
		pass "idemd stopped on SIGTERM"
	else
		fail "idemd exited $status on SIGTERM"
	fi
}
