#!/bin/sh
# SPDX-License-Identifier: ISC
# count-cases.sh DIR LABEL [ALLOW-LIST]: the test cases of the make check
# that ran in DIR, not its programs, read from each program's log (the
# .log beside each .trs), and every skipped case with its reason.
# run-tests.sh prints what it says; tests/count_cases.sh checks it on
# logs written for the purpose.
#
# A log is read as what wrote it prints:
#   cmocka (1.1.x)  each case's result: "[       OK ] name", "[  FAILED  ]
#                   name" or "[  SKIPPED ] name" right after its "[ RUN
#                   ] name" (the summaries at the end of a group are
#                   missing when a program dies); a skipped case's
#                   reason is the "SKIP: ..." lines printed in between
#                   (harness_skip, and every other skip site, prints one)
#   unittest (-v)   "Ran N tests", then "OK (skipped=N)" or "FAILED
#                   (failures=N, errors=N, skipped=N)"; a skipped case is
#                   "name (module.Class.name) ... skipped 'reason'"
#   node --test     TAP's "# pass N", "# fail N", "# cancelled N",
#                   "# skipped N", "# todo N"; "ok N - name # SKIP reason"
#   tests/lib.sh    "PASS: ..." and "FAIL: ..." lines, each one case,
#                   when none of the above printed anything
# and, whatever wrote it, a "SKIP: reason" line outside a case is one
# skipped case named by the program (a script that skips a part, or all
# of it).  A program whose log shows no case counts as one, by its
# result; one that failed (a crash, a leak, exit 1) counts as at least
# one failed case; one that skipped as at least one skipped case.
#
# Output, one line each:
#   skip TAB LABEL TAB NAME TAB allowed|refused TAB REASON
#   counts TAB PASSED TAB FAILED TAB SKIPPED
# NAME is the program's path in DIR without .trs (tests/unit/test_subtab),
# then ":case" for a case.  With ALLOW-LIST (tests/skips-allowed), a skip
# is "allowed" when "NAME: REASON" matches one of its patterns (sh
# globs); each pattern must be followed on its line by "# why"
# (otherwise: exit 2).  Without one, every skip is "refused".
set -eu
dir=$1
label=$2
allow=${3:-}

# The allow-list's patterns, one a line, after checking each has its why.
patterns=
if [ -n "$allow" ]; then
	if [ ! -r "$allow" ]; then
		echo "count-cases.sh: cannot read $allow" >&2
		exit 2
	fi
	bad=$(sed -e '/^[[:space:]]*#/d' -e '/^[[:space:]]*$/d' "$allow" |
	    grep -v '[^[:space:]][[:space:]][[:space:]]*# *[^[:space:]]' ||
	    true)
	if [ -n "$bad" ]; then
		echo "count-cases.sh: $allow: an entry without its reason" \
		    "(\"PATTERN  # why\"): $bad" >&2
		exit 2
	fi
	patterns=$(sed -e '/^[[:space:]]*#/d' -e '/^[[:space:]]*$/d' \
	    -e 's/[[:space:]][[:space:]]*#.*$//' "$allow")
fi

# allowed TEXT: TEXT matches a pattern of the allow-list.
allowed() {
	[ -n "$patterns" ] || return 1
	while IFS= read -r p; do
		# shellcheck disable=SC2254	# a glob, on purpose
		case $1 in
		$p) return 0 ;;
		esac
	done <<EOF
$patterns
EOF
	return 1
}

tab=$(printf '\t')
passed=0 failed=0 skipped=0
out=$(mktemp "${TMPDIR:-/tmp}/count-cases.XXXXXX")
trap 'rm -f "$out"' EXIT
for trs in $(find "$dir" -name '*.trs' | sort); do
	log=${trs%.trs}.log
	name=${trs#"$dir"/}
	name=${name%.trs}
	result=$(sed -n 's/^:test-result: *//p' "$trs" | head -n 1)
	[ -f "$log" ] || log=/dev/null
	awk -v prog="$name" -v result="${result:-ERROR}" '
	function note_skip(n, r) {
		nskips++
		skip_name[nskips] = n
		skip_reason[nskips] = r == "" ? "no reason given" : r
	}
	# "failures=1, errors=2, skipped=3": the value of key, or 0.
	function pycount(s, key,	i, n, parts, kv) {
		n = split(s, parts, /, */)
		for (i = 1; i <= n; i++) {
			split(parts[i], kv, "=")
			if (kv[1] == key)
				return kv[2] + 0
		}
		return 0
	}
	BEGIN { incase = ""; why = ""; group = 0; pyran = -1 }

	# cmocka: each case by its result line (a program that dies in the
	# middle prints no summary, but its cases up to there count)
	/^\[==========\] Running [0-9]+ test/ { group++; structured = 1; next }
	/^\[ RUN      \] / { incase = substr($0, 14); why = ""; next }
	/^\[       OK \] / { if (substr($0, 14) == incase) cp++; incase = ""; next }
	/^\[  (FAILED|SKIPPED) \] [0-9]+ test\(s\), listed below:$/ {
		incase = ""; next
	}
	/^\[  SKIPPED \] / {
		n = substr($0, 14)
		if (n == incase && !((group, n) in seen)) {
			seen[group, n] = 1
			cs++
			note_skip(prog ":" n, why)
		}
		incase = ""
		next
	}
	/^\[  (FAILED|ERROR)   ?\] / {
		if (substr($0, 14) == incase) {
			cf++
			incase = ""
		}
		next
	}

	# unittest -v
	/^test[^ ]* \([^)]*\)/ {
		pytest = $0
		sub(/\).*/, "", pytest)
		sub(/^[^(]*\(/, "", pytest)
		sub(/^__main__\./, "", pytest)
	}
	/(^| \.\.\. )skipped ["\047].*["\047]$/ {
		r = $0
		sub(/^.*skipped ["\047]/, "", r)
		sub(/["\047]$/, "", r)
		note_skip(prog ":" pytest, r)
		next
	}
	/^Ran [0-9]+ tests? in / { pyran = $2 + 0; structured = 1; next }
	pyran >= 0 && /^OK( \(.*\))?$/ {
		s = $0; sub(/^OK *\(?/, "", s); sub(/\)$/, "", s)
		ps += pycount(s, "skipped")
		pp += pyran - pycount(s, "skipped")
		pyran = -1
		next
	}
	pyran >= 0 && /^FAILED \(.*\)$/ {
		s = $0; sub(/^FAILED \(/, "", s); sub(/\)$/, "", s)
		f = pycount(s, "failures") + pycount(s, "errors") + \
		    pycount(s, "unexpected successes")
		ps += pycount(s, "skipped")
		pf += f
		pp += pyran - f - pycount(s, "skipped")
		pyran = -1
		next
	}

	# node --test (TAP)
	/^# (pass|fail|cancelled|skipped|todo) [0-9]+$/ {
		structured = 1
		if ($2 == "pass") np += $3
		else if ($2 == "fail" || $2 == "cancelled") nf += $3
		else ns += $3
		next
	}
	/^ *ok [0-9]+ - .* # (SKIP|TODO)/ {
		n = $0
		sub(/^ *ok [0-9]+ - /, "", n)
		r = n
		sub(/ # (SKIP|TODO).*$/, "", n)
		sub(/^.* # (SKIP|TODO) */, "", r)
		note_skip(prog ":" n, r)
		next
	}

	# tests/lib.sh, and a reason wherever it is printed
	/^PASS: / { sp++; next }
	/^FAIL: / { sf++; next }
	/^SKIP: / {
		r = substr($0, 7)
		if (incase != "")
			why = why == "" ? r : why "; " r
		else if (!(r in stray)) {
			stray[r] = 1
			note_skip(prog, r)
			xs++
		}
		next
	}
	END {
		# Ended inside a case that said why (exit 77 from within it).
		if (incase != "" && why != "") {
			note_skip(prog ":" incase, why)
			xs++
		}
		if (structured) {
			p = cp + pp + np
			f = cf + pf + nf
			s = cs + ps + ns + xs
		} else {
			p = sp
			f = sf
			s = xs
		}
		if (p + f + s == 0) {
			if (result == "PASS" || result == "XFAIL")
				p = 1
			else if (result == "SKIP")
				s = 1
			else
				f = 1
		}
		if ((result == "FAIL" || result == "ERROR" ||
		    result == "XPASS") && f == 0)
			f = 1
		if (result == "SKIP" && s == 0)
			s = 1
		# Every skipped case listed, named or not.
		if (nskips > s)
			s = nskips
		while (nskips < s)
			note_skip(prog, "")
		for (i = 1; i <= nskips; i++)
			printf "skip\t%s\t%s\n", skip_name[i], skip_reason[i]
		printf "counts\t%d\t%d\t%d\n", p, f, s
	}' "$log" >"$out"
	while IFS="$tab" read -r kind a b c; do
		case $kind in
		skip)
			if allowed "$a: $b"; then verdict=allowed
			else verdict=refused
			fi
			printf 'skip\t%s\t%s\t%s\t%s\n' "$label" "$a" \
			    "$verdict" "$b" ;;
		counts)
			passed=$((passed + a))
			failed=$((failed + b))
			skipped=$((skipped + c)) ;;
		esac
	done <"$out"
done
printf 'counts\t%d\t%d\t%d\n' "$passed" "$failed" "$skipped"
