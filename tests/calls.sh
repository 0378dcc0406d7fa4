#!/bin/sh
# SPDX-License-Identifier: ISC
# The calls (doc/architecture.md, "Layers"): what tests/layers.sh checks
# for includes, checked for the symbols the objects of a build need
# (nm).  Fails listing each object, the symbol it needs and the object
# that defines it:
#
#   - the operation layer (write_task, write_report, submission, effect,
#     ops, diagnose and their *_check) calls nothing that broker/local/,
#     broker/pg/, history.c, fileio.c or journaler.c define: it reaches a
#     backend only through backend.h's table (d->be), whose function
#     pointers are the seam, not calls;
#   - the local and the PostgreSQL backend call nothing of each other;
#   - libidemshm (shm/) needs nothing the store or the broker defines,
#     libidemstore (broker/store/, broker/pg/store/) nothing the broker
#     defines;
#   - outside backend.c, main.c's option, master.c's hand-over to a
#     worker, idemd.h's field and broker/pg/, nothing in broker/ reads
#     --store's text (store_arg) or asks whether PostgreSQL was built;
#   - broker/'s files (broker/local/ and broker/pg/ too, not the store's)
#     call each other without a cycle: a call is a relocation of a call
#     or jump instruction (readelf) into another file's definition; a
#     function's address taken (a backend's table, a done function
#     passed, w->dispatch) is not one.
#
# Run in the build directory (make check); skipped without its objects.
set -eu
src=${IDEM_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
build=${IDEM_BUILDDIR:-$(pwd)}
: "${NM:=nm}"
: "${READELF:=readelf}"

# The object a source file was compiled to, if this build has one.
object() {
	dir=${1%/*}
	base=${1##*/}
	base=${base%.c}
	case $1 in
	shm/*)	lib=libidemshm_la ;;
	broker/store/* | broker/pg/store/*)	lib=libidemstore_la ;;
	broker/*)	lib=idemd ;;
	esac
	for o in "$build/$dir/$lib-$base.o" "$build/$dir/.libs/$lib-$base.o"; do
		if [ -f "$o" ]; then
			echo "$o"
			return
		fi
	done
}

cd "$src"
sources=$(find shm broker -name '*.c' | sort)
table=$(for f in $sources; do
	o=$(object "$f")
	[ -n "$o" ] || continue
	$NM -g --defined-only "$o" | awk -v f="$f" 'NF >= 3 { print "D", $3, f }'
	$NM -u "$o" | awk -v f="$f" '{ print "U", $NF, f }'
done)
if [ -z "$table" ]; then
	echo "calls: no objects in $build (run it in a build directory)"
	exit 77
fi

bad=0
grep -rln 'store_arg\|HAVE_POSTGRESQL' broker --include='*.c' --include='*.h' |
    grep -v -e '^broker/backend\.c$' -e '^broker/main\.c$' \
    -e '^broker/master\.c$' -e '^broker/idemd\.h$' -e '^broker/pg/' |
    sed 's/^/calls: reads --store'\''s text or HAVE_POSTGRESQL: /' |
    grep . && bad=1

echo "$table" | awk '
function group(f, b) {
	b = f; sub(".*/", "", b); sub("\\.c$", "", b)
	if (f ~ /^shm\//) return "shm"
	if (f ~ /^broker\/(pg\/)?store\//) return "store"
	if (f ~ /^broker\/local\//) return "local"
	if (f ~ /^broker\/pg\//) return "pg"
	if (b ~ /^(write_task|write_report|submission|effect|ops|diagnose)$/ ||
	    b ~ /_check$/)
		return "op"
	if (b ~ /^(history|fileio|journaler)$/) return "storage"
	return "broker"
}
BEGIN {
	# caller group, then the groups it may not call
	forbid["op"] = " local pg storage "
	forbid["local"] = " pg "
	forbid["pg"] = " local "
	forbid["shm"] = " store local pg op storage broker "
	forbid["store"] = " local pg op storage broker "
}
$1 == "D" { def[$2] = $3; next }
{ use[++n] = $2; user[n] = $3 }
END {
	for (i = 1; i <= n; i++) {
		if (!(use[i] in def))
			continue
		to = def[use[i]]
		from = user[i]
		if (index(forbid[group(from)], " " group(to) " ") != 0) {
			print "calls: " from " (" group(from) ") calls " use[i] \
			    ", defined in " to " (" group(to) ")"
			bad = 1
		}
	}
	exit bad
}' || bad=1

# The calls between broker/'s files, "caller callee" once each.
edges=$(for f in $sources; do
	case $f in shm/* | broker/store/* | broker/pg/store/*) continue ;; esac
	o=$(object "$f")
	[ -n "$o" ] || continue
	$READELF -rW "$o" | awk -v f="$f" '
	    /^Relocation section/ { text = index($3, ".rela.text") == 2 }
	    text && $3 ~ /_(PLT32|CALL26|JUMP26)$/ {
		print "C", $5, f
	    }'
done | { echo "$table" | grep '^D '; cat; } | awk '
$1 == "D" { def[$2] = $3; next }
($2 in def) && def[$2] != $3 { print $3, def[$2] }' | sort -u)
if [ -z "$edges" ]; then
	echo "calls: no calls between broker/'s files found (readelf)"
	bad=1
elif ! loops=$(echo "$edges" | tsort 2>&1 >/dev/null); then
	echo "calls: broker/'s files call each other in a cycle:"
	echo "$loops" | sed -n 's/^tsort: \(broker\/.*\)/	\1/p'
	bad=1
fi

if [ $bad -eq 0 ]; then
	echo "calls: every call within its layer; broker/'s files without a cycle"
fi
exit $bad
