#!/bin/sh
# SPDX-License-Identifier: ISC
# Quick start (2): install what is missing, build, and run the whole test
# suite: make check, the same under ASan and UBSan (both built with
# --enable-fault-injection), make distcheck (which also runs make
# installcheck), a default build's refusal of the fault-injection
# variables, and, where clang is installed, the fuzz smoke run.  It
# counts test cases, not programs (contrib/scripts/count-cases.sh reads
# each test's log).  Then every skipped case with its reason (a skip is
# never silent; in CI, CI=true, one that tests/skips-allowed does not
# allow is a failure), and the check that no test left a shared-memory
# segment in /dev/shm.  Ends with one line: "tests: N passed, N failed,
# N skipped", counting cases.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
sh "$top/contrib/scripts/install-deps.sh"
passed=0 failed=0 skipped=0
work=$(mktemp -d "${TMPDIR:-/tmp}/idem-run-tests.XXXXXX")
trap 'rm -rf "$work"' EXIT
: >"$work/skips"
tab=$(printf '\t')
allow="$top/tests/skips-allowed"
sh "$top/tests/shm_leftovers.sh" snapshot "$work/shm-before"

# count_cases DIR LABEL: the cases of the make check run in DIR
# (count-cases.sh reads each program's log: cmocka's, unittest's, node's
# and tests/lib.sh's results), added to the counts, and its skipped
# cases with their reasons, each allowed or refused by the allow-list.
count_cases() {
	sh "$top/contrib/scripts/count-cases.sh" "$1" "$2" "$allow" \
	    >"$work/cases" || {
		failed=$((failed + 1))
		finish 1
	}
	while IFS="$tab" read -r kind a b c d; do
		case $kind in
		skip)
			printf '%s\t%s\t%s\t%s\n' "$a" "$b" "$c" "$d" \
			    >>"$work/skips" ;;
		counts)
			passed=$((passed + a))
			failed=$((failed + b))
			skipped=$((skipped + c)) ;;
		esac
	done <"$work/cases"
}

# finish STATUS: the skipped cases and why, the /dev/shm check and the
# last line.  In CI (CI=true) a skip the allow-list does not name fails.
finish() {
	if [ -s "$work/skips" ]; then
		echo "== skipped test cases and why"
		refused=0
		while IFS="$tab" read -r label name verdict reason; do
			case ${CI:-}:$verdict in
			true:refused)
				note=" (not in tests/skips-allowed: a failure in CI)"
				refused=$((refused + 1)) ;;
			*:allowed)
				note=" (allowed by tests/skips-allowed)" ;;
			*)	note= ;;
			esac
			echo "$label: $name: $reason$note"
		done <"$work/skips"
		failed=$((failed + refused))
	fi
	echo "== shared-memory segments left"
	sh "$top/tests/shm_leftovers.sh" check "$work/shm-before" ||
	    failed=$((failed + 1))
	echo "tests: $passed passed, $failed failed, $skipped skipped"
	[ "$failed" -eq 0 ] && [ "$1" -eq 0 ]
	exit
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
	count_cases "$top/$dir" "$dir"
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
# Its tree is removed at the end: its make check copies each test's log
# and result to $IDEM_CHECK_LOGS (check-local in Makefile.am), whose
# cases are counted like the others'.
mkdir "$work/distcheck"
if ! IDEM_CHECK_LOGS="$work/distcheck" make -C "$top/build" -j"$(nproc)" \
    distcheck >"$top/build/distcheck.log" 2>&1; then
	tail -60 "$top/build/distcheck.log"
	# A failed distcheck leaves its tree: the failing programs' logs
	# are in its test-suite.log (the tail above names none of them).
	grep -E '^(FAIL|ERROR|XPASS):' "$top/build/distcheck.log" || true
	for log in "$top"/build/idem-*/_build/sub/test-suite.log; do
		if [ -f "$log" ]; then cat "$log"; fi
	done
	failed=$((failed + 1))
	count_cases "$work/distcheck" distcheck
	finish 1
fi
# The tarball builds, installs, and its installcheck passes: one case.
passed=$((passed + 1))
echo "distcheck: passed"
if [ -z "$(find "$work/distcheck" -name '*.trs')" ]; then
	echo "distcheck: no test logs kept (check-local): its cases uncounted"
	failed=$((failed + 1))
fi
count_cases "$work/distcheck" distcheck
echo "== a default build: no fault injection, IDEM_CRASH_* refused"
if sh "$top/contrib/scripts/build.sh" build-default &&
    IDEMD="$top/build-default/broker/idemd" IDEM_FAULT_INJECTION=no \
    sh "$top/tests/fault_injection.sh" >"$top/build-default/fault.log" 2>&1
then
	grep -E '^(PASS|FAIL):' "$top/build-default/fault.log" || true
	n=$(grep -c '^PASS:' "$top/build-default/fault.log" || true)
	passed=$((passed + n))
else
	cat "$top/build-default/fault.log" 2>/dev/null || true
	f=$(grep -c '^FAIL:' "$top/build-default/fault.log" 2>/dev/null) || f=0
	failed=$((failed + (f > 0 ? f : 1)))
fi
echo "== make fuzz-smoke (each fuzz target 60 s under ASan and UBSan)"
if command -v clang >/dev/null 2>&1; then
	if sh "$top/contrib/scripts/build.sh" build-fuzz CC=clang \
	    --enable-fuzzing &&
	    make -C "$top/build-fuzz" fuzz-smoke >"$top/build-fuzz/fuzz.log" 2>&1
	then
		grep -E '^fuzz_' "$top/build-fuzz/fuzz.log" || true
		# One case per target ("fuzz_request: ok: ...").
		n=$(grep -c '^fuzz_[a-z_]*: ok:' "$top/build-fuzz/fuzz.log" ||
		    true)
		passed=$((passed + n))
	else
		tail -40 "$top/build-fuzz/fuzz.log"
		failed=$((failed + 1))
	fi
else
	echo "fuzz-smoke: skipped (no clang)"
	printf 'fuzz-smoke\tmake fuzz-smoke\trefused\t%s\n' \
	    "no clang (install-deps.sh installs it)" >>"$work/skips"
	skipped=$((skipped + 1))
fi
finish 0
