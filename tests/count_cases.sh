#!/bin/sh
# SPDX-License-Identifier: ISC
# contrib/scripts/count-cases.sh, which run-tests.sh counts cases and
# lists skips with, on logs written here the way each kind of test
# prints them (cmocka 1.1, unittest -v, node --test, tests/lib.sh, a
# program that exits 77 or crashes): the counts are cases, not
# programs, every skipped case is listed with its reason (or "no reason
# given"), a skip inside a passing program is one, and the allow-list
# allows only what its patterns match and refuses an entry without its
# reason.  Then tests/skips-allowed itself is read the same way.
set -u
. "$(dirname "$0")/lib.sh"
src=${IDEM_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
count="$src/contrib/scripts/count-cases.sh"
make_tmp count-cases
d="$tmp/build"
mkdir -p "$d/tests/unit" "$d/tests/integration" "$d/tests/mcp"

# log NAME RESULT: the log (from stdin) and .trs of a program.
log() {
	cat >"$d/$1.log"
	printf ':test-result: %s\n' "$2" >"$d/$1.trs"
}

# cmocka: one group with a reasoned skip, an unreasoned skip and a
# passing case; exit 0 (a bare skip() passes the program).
log tests/unit/test_a PASS <<'EOF'
[==========] Running 3 test(s).
[ RUN      ] case_ok
[       OK ] case_ok
[ RUN      ] case_madv
SKIP: a kernel without MADV_POPULATE_WRITE (madvise: Invalid argument)
[  SKIPPED ] case_madv
[ RUN      ] case_bare
[  SKIPPED ] case_bare
[==========] 3 test(s) run.
[  PASSED  ] 1 test(s).
[  SKIPPED ] 2 test(s), listed below:
[  SKIPPED ] case_madv
[  SKIPPED ] case_bare

 2 SKIPPED TEST(S)
EOF
# cmocka: two groups, a failure (with a FAIL: line of its own, not a
# second case) and a case that exits 77 from inside.
log tests/integration/test_b FAIL <<'EOF'
[==========] Running 2 test(s).
[ RUN      ] one
[       OK ] one
[ RUN      ] two
FAIL: moved errors by 3
ERROR: boom
[  FAILED  ] two
[==========] 2 test(s) run.
[  PASSED  ] 1 test(s).
[  FAILED  ] 1 test(s), listed below:
[  FAILED  ] two

 1 FAILED TEST(S)
[==========] Running 1 test(s).
[ RUN      ] three
[       OK ] three
[==========] 1 test(s) run.
[  PASSED  ] 1 test(s).
EOF
log tests/integration/test_c SKIP <<'EOF'
[==========] Running 2 test(s).
[ RUN      ] first
[       OK ] first
[ RUN      ] needs_faults
SKIP: this test sets IDEM_CRASH_AT: it needs a build with fault injection
EOF
# A program that crashed: no summary.
log tests/integration/test_d FAIL <<'EOF'
[==========] Running 2 test(s).
[ RUN      ] first
EOF
# A script of tests/lib.sh that skips a part, and one that skips whole.
log tests/python_client.sh PASS <<'EOF'
PASS: the unit has Type=notify
SKIP: mypy not installed (apt-get install python3-mypy)
test_a (__main__.ClientTests.test_a) ... ok
test_b (__main__.ClientTests.test_b) ... skipped 'IDEM_VENV not set'
test_c (__main__.ClientTests.test_c)
Retries forever ... ok
test_d (__main__.ClientTests.test_d) ... skipped "no vectors at '/x'"

----------------------------------------------------------------------
Ran 4 tests in 0.5s

OK (skipped=2)
EOF
log tests/systemd_unit.sh SKIP <<'EOF'
PASS: the unit has Type=notify
PASS: the unit has StateDirectory=idem
SKIP: no systemd-analyze to verify the unit (0 failed above)
EOF
log tests/shared_copies.sh SKIP <<'EOF'
EOF
log tests/layers.sh PASS <<'EOF'
nothing this script counts
EOF
log tests/mcp/sdk.sh PASS <<'EOF'
TAP version 13
# Subtest: negotiates
ok 1 - negotiates
# Subtest: restarts the broker
ok 2 - restarts the broker # SKIP no registry
1..2
# tests 2
# pass 1
# fail 0
# cancelled 0
# skipped 1
# todo 0
EOF
cat >"$tmp/allow" <<'EOF'
# comment lines and blank ones are ignored

tests/unit/test_a:case_madv: a kernel without MADV_POPULATE_WRITE*	# old kernels
tests/mcp/sdk.sh:*: no registry  # a pattern with spaces
EOF

run sh "$count" "$d" build "$tmp/allow"
expect 0 "count-cases.sh on the fixture logs"
# cases: a 1+0+2, b 2+1+0, c 1+0+1, d 0+1+0, python 2+0+3 (PASS line is
# not counted beside unittest), systemd 2+0+1, shared 0+0+1, layers
# 1+0+0, sdk 1+0+1.
contains "$tmp/out" "$(printf 'counts\t10\t2\t9')" \
    "10 cases passed, 2 failed, 9 skipped"
for want in \
    'tests/unit/test_a:case_madv	allowed	a kernel without MADV_POPULATE_WRITE (madvise: Invalid argument)' \
    'tests/unit/test_a:case_bare	refused	no reason given' \
    'tests/integration/test_c:needs_faults	refused	this test sets IDEM_CRASH_AT: it needs a build with fault injection' \
    'tests/python_client.sh	refused	mypy not installed (apt-get install python3-mypy)' \
    'tests/python_client.sh:ClientTests.test_b	refused	IDEM_VENV not set' \
    "tests/python_client.sh:ClientTests.test_d	refused	no vectors at '/x'" \
    'tests/systemd_unit.sh	refused	no systemd-analyze to verify the unit (0 failed above)' \
    'tests/shared_copies.sh	refused	no reason given' \
    'tests/mcp/sdk.sh:restarts the broker	allowed	no registry'; do
	contains "$tmp/out" "$(printf 'skip\tbuild\t%s' "$want")" \
	    "listed: ${want%%	*}"
done
n=$(grep -c '^skip' "$tmp/out")
if [ "$n" -eq 9 ]; then
	pass "one line per skipped case (9)"
else
	fail "$n skip lines, wanted 9"
	sed 's/^/	| /' "$tmp/out"
fi
if grep -q 'tests/integration/test_[bd]\|tests/layers' "$tmp/out"; then
	fail "a program without a skip is listed"
else
	pass "no program without a skip listed"
fi

run sh "$count" "$d" build
contains "$tmp/out" "$(printf 'skip\tbuild\ttests/unit/test_a:case_madv\trefused')" \
    "without an allow-list every skip is refused"

printf 'tests/unit/test_a:*\n' >"$tmp/allow-bare"
run sh "$count" "$d" build "$tmp/allow-bare"
expect 2 "an allow-list entry without its reason"
contains "$tmp/err" "without its reason" "and it says so"

mkdir -p "$tmp/empty-build"
run sh "$count" "$tmp/empty-build" build "$src/tests/skips-allowed"
expect 0 "tests/skips-allowed reads (every entry has its reason)"
finish
