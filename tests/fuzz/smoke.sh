#!/bin/sh
# SPDX-License-Identifier: ISC
# smoke.sh SECONDS FUZZDIR TARGET...: make fuzz-smoke.  Runs each libFuzzer
# target for SECONDS on a copy of its seed corpus FUZZDIR/corpus_<name>
# (the checked-in corpus is never modified), with FUZZDIR/<name>.dict if
# there is one, and prints the executions.  Scratch files go under
# $TMPDIR, else /dev/shm if writable, else /tmp.  Any crash, leak, sanitizer
# report or failed invariant fails; its log and reproducer are kept in
# fuzz-smoke-failures/ under the current directory.
set -u
[ $# -ge 3 ] || { echo "usage: $0 SECONDS FUZZDIR TARGET..." >&2; exit 2; }
seconds=$1
fuzzdir=$2
shift 2

# fuzz_journal writes files for every input: a tmpfs is several times faster.
tmp=${TMPDIR:-}
if [ -z "$tmp" ]; then
	tmp=/tmp
	[ -d /dev/shm ] && [ -w /dev/shm ] && tmp=/dev/shm
fi
work=$(mktemp -d "$tmp/idem-fuzz-smoke.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
trap 'exit 1' HUP INT TERM
keep=$(pwd)/fuzz-smoke-failures
rm -rf "$keep"
failed=0

for target in "$@"; do
	name=$(basename "$target")
	name=${name%.exe}
	short=${name#fuzz_}
	corpus=$work/corpus_$short
	mkdir -p "$corpus" "$work/artifacts_$short" "$work/tmp_$short"
	cp -R "$fuzzdir/corpus_$short/." "$corpus/" || exit 1
	seeds=$(ls "$corpus" | wc -l)
	set -- -max_total_time="$seconds" -timeout=25 -rss_limit_mb=2048 \
	    -print_final_stats=1 -artifact_prefix="$work/artifacts_$short/"
	[ -f "$fuzzdir/$short.dict" ] && set -- "$@" -dict="$fuzzdir/$short.dict"
	log=$work/$name.log
	TMPDIR=$work/tmp_$short "$target" "$@" "$corpus" >"$log" 2>&1
	rc=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
	rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
	units=$(ls "$corpus" | wc -l)
	if [ $rc -eq 0 ]; then
		echo "$name: ok: ${execs:-?} executions in ${seconds}s" \
		    "(${rate:-?} exec/s), corpus $seeds -> $units inputs"
		continue
	fi
	failed=1
	mkdir -p "$keep"
	cp "$log" "$keep/"
	cp "$work/artifacts_$short/"* "$keep/" 2>/dev/null
	echo "$name: FAILED (exit $rc) after ${execs:-?} executions;" \
	    "log and reproducer in $keep:"
	grep -v -E '^(INFO|#[0-9]+|	|    #|"|Dictionary|MS:|stat::)' "$log" |
	    tail -25 | sed 's/^/  | /'
	for a in "$work/artifacts_$short/"*; do
		[ -f "$a" ] && echo "  reproduce: $target $keep/$(basename "$a")"
	done
done
exit $failed
