#!/bin/sh
# SPDX-License-Identifier: ISC
# Quick start (2): install what is missing, build, and run the whole test
# suite: make check, the same under ASan and UBSan (both built with
# --enable-fault-injection), make distcheck (which also runs make
# installcheck), a default build's refusal of the fault-injection
# variables, and, where clang is installed, the fuzz smoke run.  Then
# the skipped tests with their reasons (a skip is never silent), and the
# check that no test left a shared-memory segment in /dev/shm.  Ends
# with one line: "tests: N passed, N failed, N skipped".
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
sh "$top/contrib/scripts/install-deps.sh"
passed=0 failed=0 skipped=0
work=$(mktemp -d "${TMPDIR:-/tmp}/idem-run-tests.XXXXXX")
trap 'rm -rf "$work"' EXIT
: >"$work/skips"
sh "$top/tests/shm_leftovers.sh" snapshot "$work/shm-before"

# note_skips DIR LABEL: each skipped test of the make check in DIR, with
# the reasons its log gives ("SKIP: ..." lines).
note_skips() {
	for trs in $(find "$1" -name '*.trs' | sort); do
		grep -q '^:test-result: SKIP' "$trs" || continue
		log=${trs%.trs}.log
		name=${trs#"$1"/}
		reasons=$(sed -n 's/^SKIP: //p' "$log" | sort -u |
		    tr '\n' ';' | sed 's/;$//; s/;/; /g')
		echo "$2: ${name%.trs}: ${reasons:-no reason given}" \
		    >>"$work/skips"
	done
}

# finish STATUS: the skip list, the /dev/shm check and the last line.
finish() {
	if [ -s "$work/skips" ]; then
		echo "== skipped tests and why"
		cat "$work/skips"
	fi
	echo "== shared-memory segments left"
	sh "$top/tests/shm_leftovers.sh" check "$work/shm-before" ||
	    failed=$((failed + 1))
	echo "tests: $passed passed, $failed failed, $skipped skipped"
	[ "$failed" -eq 0 ] && [ "$1" -eq 0 ]
	exit
}

count() {
	log=$1
	[ -f "$log" ] || return 0
	p=$(sed -n 's/^# PASS: *//p' "$log" | head -n 1)
	f=$(sed -n 's/^# FAIL: *//p' "$log" | head -n 1)
	e=$(sed -n 's/^# ERROR: *//p' "$log" | head -n 1)
	s=$(sed -n 's/^# SKIP: *//p' "$log" | head -n 1)
	passed=$((passed + ${p:-0}))
	failed=$((failed + ${f:-0} + ${e:-0}))
	skipped=$((skipped + ${s:-0}))
}

# run_check DIR JOBS CONFIGURE-ARGS...
run_check() {
	dir=$1
	jobs=$2
	shift 2
	# Configured earlier without one of these flags: configure again.
	if [ -f "$top/$dir/config.status" ]; then
		for flag in "$@"; do
			"$top/$dir/config.status" --config | tr -d "'" |
			    tr ' ' '\n' | grep -qxF -- "$flag" ||
			    rm -f "$top/$dir/Makefile"
		done
	fi
	sh "$top/contrib/scripts/build.sh" "$dir" "$@"
	status=0
	make -C "$top/$dir" -j"$jobs" check >"$top/$dir/check.out" 2>&1 ||
	    status=$?
	grep -E '^(PASS|FAIL|SKIP|ERROR|XFAIL|XPASS):' "$top/$dir/check.out" || true
	count "$top/$dir/test-suite.log"
	note_skips "$top/$dir" "$dir"
	if [ $status -ne 0 ]; then
		cat "$top/$dir/test-suite.log"
		finish 1
	fi
}

echo "== make check"
run_check build "$(nproc)" --enable-fault-injection
# One suite at a time: sanitized brokers are several times slower, and the
# timing tests (stop, respawn) should not also compete with the chaos test.
echo "== make check under ASan and UBSan"
run_check build-sanitize 1 --enable-sanitizers --enable-fault-injection
echo "== make distcheck (and installcheck)"
if ! make -C "$top/build" -j"$(nproc)" distcheck >"$top/build/distcheck.log" 2>&1; then
	tail -60 "$top/build/distcheck.log"
	failed=$((failed + 1))
	finish 1
fi
passed=$((passed + 1))
echo "distcheck: passed"
# Its build tree is gone: the names of its skipped tests, from its output.
sed -n 's/^SKIP: /distcheck: /p' "$top/build/distcheck.log" |
    sed 's/$/: see its log (the distcheck tree is removed)/' >>"$work/skips"
skipped=$((skipped + $(grep -c '^SKIP: ' "$top/build/distcheck.log" || true)))
echo "== a default build: no fault injection, IDEM_CRASH_* refused"
if sh "$top/contrib/scripts/build.sh" build-default &&
    IDEMD="$top/build-default/broker/idemd" IDEM_FAULT_INJECTION=no \
    sh "$top/tests/fault_injection.sh" >"$top/build-default/fault.log" 2>&1
then
	grep -E '^(PASS|FAIL):' "$top/build-default/fault.log" || true
	passed=$((passed + 1))
else
	cat "$top/build-default/fault.log" 2>/dev/null || true
	failed=$((failed + 1))
fi
echo "== make fuzz-smoke (each fuzz target 60 s under ASan and UBSan)"
if command -v clang >/dev/null 2>&1; then
	if sh "$top/contrib/scripts/build.sh" build-fuzz CC=clang \
	    --enable-fuzzing &&
	    make -C "$top/build-fuzz" fuzz-smoke >"$top/build-fuzz/fuzz.log" 2>&1
	then
		grep -E '^fuzz_' "$top/build-fuzz/fuzz.log" || true
		passed=$((passed + 1))
	else
		tail -40 "$top/build-fuzz/fuzz.log"
		failed=$((failed + 1))
	fi
else
	echo "fuzz-smoke: skipped (no clang)"
	echo "fuzz-smoke: no clang (install-deps.sh installs it)" \
	    >>"$work/skips"
	skipped=$((skipped + 1))
fi
finish 0
