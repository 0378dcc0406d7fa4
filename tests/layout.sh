#!/bin/sh
# SPDX-License-Identifier: ISC
# The layout map in doc/architecture.md ("Layers and source layout")
# names every source file of broker/, shm/, libclient/, contrib/ and
# tests/bench/, one line each, and names no file that is not there: the
# map is read back into paths (a folder line opens a folder, "├─"/"└─"
# lines name what is in it, "│" nests) and compared with the tree.
# Fails naming each file missing from the map and each map line without
# its file.
set -u
src=${IDEM_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$src" || exit 99
map=doc/architecture.md
[ -f "$map" ] || { echo "FAIL: no $map"; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/idem-layout.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT

# The map: from the first line that is a top folder ("    libclient/")
# to the end of its code block (the first line not indented).
# The box-drawing characters are several bytes each: made ASCII first.
sed 's/├─ /+- /; s/└─ /+- /; s/│  /|  /g' "$map" | awk '
/^    [a-z][a-z\/]*\/ / && !inmap { inmap = 1 }
inmap && !/^    / { exit }
inmap {
	line = substr($0, 5)
	if (line ~ /^[a-z]/) {		# a top folder: "broker/store/"
		split(line, w, " "); top = w[1]; sub1 = ""; next
	}
	depth = 0
	while (substr(line, 1, 3) == "|  " || substr(line, 1, 3) == "   ") {
		line = substr(line, 4); depth++
	}
	if (substr(line, 1, 3) != "+- ") next
	split(substr(line, 4), w, " "); name = w[1]
	if (depth == 0) {
		if (name ~ /\/$/) { sub1 = name; next }
		sub1 = ""
		print top name
	} else
		print top sub1 name
}' | LC_ALL=C sort >"$tmp/map"

find broker shm libclient contrib tests/bench -type f \( -name '*.c' -o -name '*.h' \) \
    ! -path 'contrib/python/*' ! -path '*/node_modules/*' |
    LC_ALL=C sort >"$tmp/tree"

bad=0
for f in $(LC_ALL=C comm -13 "$tmp/map" "$tmp/tree"); do
	echo "FAIL: $f has no line in $map's layout map"
	bad=1
done
for f in $(LC_ALL=C comm -23 "$tmp/map" "$tmp/tree"); do
	echo "FAIL: $map's layout map names $f, which is not there"
	bad=1
done
[ $bad -eq 0 ] && echo "PASS: the layout map names all $(wc -l <"$tmp/tree") source files"
exit $bad
