#!/bin/sh
# SPDX-License-Identifier: ISC
# IDEM_TEST_FILTER (tests/integration/filter.h, doc/testing.md, its
# introduction): a filter that matches no test fails the program, naming
# the filter, instead of passing it with "Running 0 test(s)"; a plain
# word runs the tests whose names contain it; a glob is cmocka's.  On
# every unit program, test_peers in detail, and an integration one
# (test_zerotail, whose no-match exit comes before any broker starts).
set -u
builddir=${IDEM_BUILDDIR:?set IDEM_BUILDDIR to the build directory}
peers=$builddir/tests/unit/test_peers
zerotail=$builddir/tests/integration/test_zerotail

. "$(dirname "$0")/lib.sh"
make_tmp filter

IDEM_TEST_FILTER=no_such_case run "$peers"
[ "$rc" -ne 0 ] && pass "a filter matching nothing fails test_peers (exit $rc)" ||
	fail "a filter matching nothing: test_peers exited 0"
contains "$tmp/err" "IDEM_TEST_FILTER=no_such_case matches none" \
	"the failure names the filter"

IDEM_TEST_FILTER=no_such_case run "$zerotail"
[ "$rc" -ne 0 ] && pass "a filter matching nothing fails test_zerotail (exit $rc)" ||
	fail "a filter matching nothing: test_zerotail exited 0"
contains "$tmp/err" "IDEM_TEST_FILTER=no_such_case matches none" \
	"the failure names the filter (integration)"

# Every unit program reads the filter: one that ignored it would run
# all its tests and pass.
units=0
for program in "$builddir"/tests/unit/test_*; do
	[ -f "$program" ] && [ -x "$program" ] || continue
	units=$((units + 1))
	name=${program##*/}
	IDEM_TEST_FILTER=no_such_case run "$program"
	[ "$rc" -eq 1 ] && pass "a filter matching nothing fails $name" ||
		fail "a filter matching nothing: $name exited $rc"
done
[ "$units" -ge 16 ] && pass "$units unit programs tried" ||
	fail "only $units unit programs found under $builddir/tests/unit"

# A plain word: a substring of one test's name.
IDEM_TEST_FILTER=full_table run "$peers"
expect 0 "a plain word runs its tests"
contains "$tmp/out" "Running 1 test(s)" "the word selects one test"
contains "$tmp/out" "OK ] test_full_table_refuses" "the word's test ran"

# A glob is taken as it is: anchored at both ends.
IDEM_TEST_FILTER='test_*_refuses' run "$peers"
expect 0 "a glob runs its tests"
contains "$tmp/out" "OK ] test_full_table_refuses" "the glob's test ran"
IDEM_TEST_FILTER='full_table*' run "$peers"
[ "$rc" -ne 0 ] && pass "a glob is anchored: full_table* matches nothing" ||
	fail "full_table* (anchored glob) exited 0"

finish
