#!/bin/sh
# SPDX-License-Identifier: ISC
# Socket activation, as idemd.socket does it, with systemd's own tool
# systemd-socket-activate: the socket exists before idemd runs, the first
# connection starts idemd, which takes the socket passed to it
# (sd_listen_fds) instead of binding one of its own, hands it to its
# workers (they answer), and leaves it in place when it stops (it is
# systemd's).  Two sockets passed are refused, naming the count.  An
# idemd built without libsystemd refuses a passed socket, saying so.
# Skips only without systemd-socket-activate.
set -u
IDEMD=${IDEMD:?set IDEMD to the idemd binary}
IDEMCTL=${IDEMCTL:?set IDEMCTL to the idemctl binary}
. "$(dirname "$0")/lib.sh"

if ! command -v systemd-socket-activate >/dev/null 2>&1; then
	echo "SKIP: no systemd-socket-activate (Debian: the systemd package)"
	exit 77
fi
make_tmp activate
root=$tmp/root
sock=$tmp/idem.sock

# activate NAME SOCKET... -- ARGS: systemd-socket-activate listening on
# each SOCKET, to start idemd ARGS at the first connection; returns once
# it listens (its first line, read from a fifo that $tmp/NAME.log then
# drains), its pid in $sa.
activate() {
	name=$1
	shift
	set -- "$@"
	listen=
	while [ "$1" != -- ]; do
		listen="$listen -l $1"
		shift
	done
	shift
	mkfifo "$tmp/$name.fifo" || exit 99
	# shellcheck disable=SC2086	# $listen: one word per option
	systemd-socket-activate $listen "$IDEMD" "$@" \
	    2>"$tmp/$name.fifo" >/dev/null &
	sa=$!
	pid=$sa		# lib.sh stops it at exit (idemd, once exec'd)
	exec 4<"$tmp/$name.fifo"
	IFS= read -r first <&4
	echo "$first" >"$tmp/$name.log"
	cat <&4 >>"$tmp/$name.log" &
	exec 4<&-
}

activate one "$sock" -- --root "$root" --workers 2
case $first in
*"Listening on $sock"*) pass "systemd-socket-activate listens on $sock" ;;
*) fail "systemd-socket-activate said: $first" ;;
esac
if [ -e "$root/.idem/idemd.lock" ]; then
	fail "idemd ran before the first connection"
else
	pass "idemd waits for the first connection"
fi

if [ "${IDEM_HAVE_SYSTEMD:-no}" != yes ]; then
	run timeout 30 "$IDEMCTL" --socket "$sock" status
	expect 3 "no broker takes the socket"
	wait "$sa"
	rc=$?
	pid=
	[ "$rc" -eq 1 ] && pass "idemd without libsystemd exits 1" ||
	    fail "idemd without libsystemd: exit $rc"
	contains "$tmp/one.log" "built without libsystemd" \
	    "idemd without libsystemd names why it cannot take the socket"
	finish
fi

# The first connection starts idemd; a worker answers it.
run timeout 30 "$IDEMCTL" --socket "$sock" --json status
expect 0 "idemctl status on the activated socket"
contains "$tmp/out" "\"socket\":\"$sock\"" "status names the socket systemd made"
broker=$(sed -n 's/.*"pid":\([0-9]*\).*/\1/p' "$tmp/out")
run timeout 30 "$IDEMCTL" --socket "$sock" submit --id act-1 --sender PM \
    --recipient DEV --subject "activated"
expect 0 "a task created through the activated socket"
contains "$tmp/out" "created:" "its disposition is created"
run timeout 30 "$IDEMCTL" --socket "$sock" submit --id act-1 --sender PM \
    --recipient DEV --subject "activated"
expect 0 "its retry"
contains "$tmp/out" "reused:" "the retry is reused"
if [ -e "$root/.idem/idemd.sock" ]; then
	fail "idemd bound a socket of its own at $root/.idem/idemd.sock"
else
	pass "idemd bound no socket of its own"
fi
contains "$tmp/one.log" "listening on $sock, the socket systemd passed" \
    "idemd logs the socket it took"

# SIGTERM: idemd drains and exits 0; the socket stays, systemd's.
if [ -n "$broker" ] && kill -TERM "$broker"; then
	wait "$sa"
	rc=$?
	pid=
	[ "$rc" -eq 0 ] && pass "idemd stops on SIGTERM (exit 0)" ||
	    fail "idemd stopped with exit $rc"
else
	fail "no broker pid in status --json"
fi
if [ -S "$sock" ]; then
	pass "the socket stays after idemd stops"
else
	fail "idemd removed systemd's socket"
fi

# Two sockets: refused, naming the count.
activate two "$tmp/a.sock" "$tmp/b.sock" -- --root "$tmp/root2" --workers 1
run timeout 30 "$IDEMCTL" --socket "$tmp/a.sock" status
expect 3 "no broker serves two passed sockets"
wait "$sa"
rc=$?
pid=
[ "$rc" -eq 1 ] && pass "idemd given two sockets exits 1" ||
    fail "idemd given two sockets: exit $rc"
contains "$tmp/two.log" "systemd passed 2 sockets" "the refusal names the count"
finish
