#!/bin/sh
# Quick start (2): install what is missing, build, and run the whole test
# suite: make check, the same under ASan and UBSan, and make distcheck.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
sh "$top/contrib/scripts/install-deps.sh"
run_check() {
	dir=$1
	shift
	sh "$top/contrib/scripts/build.sh" "$dir" "$@"
	make -C "$top/$dir" -j"$(nproc)" check ||
	    { cat "$top/$dir/test-suite.log"; exit 1; }
}
echo "== make check"
run_check build
echo "== make check under ASan and UBSan"
run_check build-sanitize --enable-sanitizers
echo "== make distcheck"
make -C "$top/build" -j"$(nproc)" distcheck >"$top/build/distcheck.log" 2>&1 ||
    { tail -60 "$top/build/distcheck.log"; exit 1; }
echo "all test suites passed"
