#!/bin/sh
# SPDX-License-Identifier: ISC
# installcheck.sh: prove the installed libidem is usable the way a user
# uses it.  Build create_task.c outside the build system with nothing but
# pkg-config and the installed idem.h, start the installed idemd on a
# temporary root, and run the example twice with one submission id: the
# first run must create the task, the second reuse it, and only one TASK
# file may exist.  Then once with a fresh id: a second task.
#
# make installcheck passes: DESTDIR (may be empty), libdir, sbindir, CC,
# PKG_CONFIG, CFLAGS (the sanitizer flags the library was built with);
# the argument is create_task.c.
set -eu

example=$1
dest=${DESTDIR:-}
: "${CC:=cc}" "${PKG_CONFIG:=pkg-config}" "${CFLAGS:=}"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/idem-installcheck.XXXXXX")
pid= watchdog=

fail() {
	echo "installcheck: $*" >&2
	if [ -f "$tmp/idemd.log" ]; then
		sed 's/^/installcheck: idemd: /' "$tmp/idemd.log" >&2
	fi
	exit 1
}
cleanup() {
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null || :
		wait "$pid" 2>/dev/null || :
	fi
	if [ -n "$watchdog" ]; then
		kill "$watchdog" 2>/dev/null || :
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' HUP INT TERM

# A DESTDIR install keeps the configured prefix inside DESTDIR: the
# sysroot puts DESTDIR in front of the -I and -L that libidem.pc gives.
PKG_CONFIG_PATH="$dest$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export PKG_CONFIG_PATH
if [ -n "$dest" ]; then
	PKG_CONFIG_SYSROOT_DIR=$dest
	export PKG_CONFIG_SYSROOT_DIR
fi
flags=$($PKG_CONFIG --cflags --libs libidem) ||
    fail "pkg-config does not find libidem in $dest$libdir/pkgconfig"
# shellcheck disable=SC2086 # the flags are words
$CC $CFLAGS -Wall -Wextra -o "$tmp/create_task" "$example" $flags ||
    fail "$example does not build with: $flags"
LD_LIBRARY_PATH="$dest$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH

# The broker says "ready" on fd 3 once it serves; a broker that dies
# first closes the pipe, and the watchdog turns a hang into that.
mkdir "$tmp/root"
mkfifo "$tmp/ready"
"$dest$sbindir/idemd" --root "$tmp/root" --ready-fd 3 \
    3>"$tmp/ready" 2>"$tmp/idemd.log" &
pid=$!
(sleep 60; kill "$pid") >/dev/null 2>&1 &
watchdog=$!
ready=
read -r ready <"$tmp/ready" || :
[ "$ready" = ready ] || fail "idemd did not start"

IDEM_SOCKET="$tmp/root/.idem/idemd.sock"
export IDEM_SOCKET
id="installcheck/$$"
out=$("$tmp/create_task" "$id") || fail "first run failed"
set -- $out
[ "${1:-}" = created ] || fail "first run: '$*', expected created"
first=${2:-}
out=$("$tmp/create_task" "$id") || fail "second run failed"
set -- $out
[ "${1:-}" = reused ] || fail "second run: '$*', expected reused"
[ "${2:-}" = "$first" ] || fail "second run: task ${2:-}, expected $first"
n=$(find "$tmp/root/_lifecycle" -name 'TASK-*.md' | wc -l)
[ "$n" -eq 1 ] || fail "$n TASK files after one intent, expected 1"

out=$("$tmp/create_task") || fail "run with a fresh id failed"
set -- $out
[ "${1:-}" = created ] || fail "fresh id: '$*', expected created"
[ "${2:-}" != "$first" ] || fail "fresh id reused $first"
n=$(find "$tmp/root/_lifecycle" -name 'TASK-*.md' | wc -l)
[ "$n" -eq 2 ] || fail "$n TASK files after two intents, expected 2"

kill "$pid"
status=0
wait "$pid" || status=$?
pid=
[ "$status" -eq 0 ] || fail "idemd exited with $status on SIGTERM"
echo "installcheck: create_task: created, reused $first; fresh id created"
