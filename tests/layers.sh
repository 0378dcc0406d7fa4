#!/bin/sh
# SPDX-License-Identifier: ISC
# The layers (doc/architecture.md, "Layers"): every #include "..." of a
# C file names a header of its own directory or of a layer it may use.
# Fails listing each file, the header it includes and the header's layer.
#
# The table: which files (a directory, all its .c and .h; or one file),
# then what they may include (directories: every header in them; or one
# header).  The first row a file matches is its layer; a file with an
# include that matches no row fails, so that a new directory finds its
# place here.  A header is found by its name alone: names are unique.
set -eu
src=${IDEM_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$src"

table() {
	cat <<'EOF'
shm			shm
libclient		libclient
broker/pg/store		broker/store shm libclient
broker/store		shm libclient
broker/pg		broker/pg/store broker/backend.h broker/idemd.h broker/log.h broker/fastpath.h broker/dirsync.h broker/store shm libclient
broker/local		broker/backend.h broker/idemd.h broker/log.h broker/fastpath.h broker/store shm libclient
broker/backend.c	broker broker/local broker/pg broker/store shm libclient
broker			broker/store shm libclient
contrib/idemctl.c	contrib/ctl libclient/idem.h broker/store/store.h
contrib/idemctl_store.c	broker/pg/store broker/store libclient
contrib/idemctl_import.c	broker/pg/store broker/store libclient
contrib/idemctl_store.h
contrib/ctl		libclient/idem.h libclient/stats.h broker/store/store.h contrib/idemctl_store.h
contrib/mcp		libclient/idem.h libclient/protocol.h
contrib/examples	libclient/idem.h
tests/unit/test_subtab.c	shm tests/integration/filter.h
tests/unit/test_peers.c		shm tests/integration/filter.h
tests/unit/test_digest.c	libclient tests/integration/filter.h
tests/unit/test_fastscan.c	libclient tests/integration/filter.h
tests/unit/test_replyscan.c	libclient tests/integration/filter.h
tests/unit/test_log.c		broker tests/integration/filter.h
tests/unit/test_replytext.c	broker tests/integration/filter.h
tests/unit/test_fastpath_begun.c	broker shm libclient tests/integration/filter.h
tests/unit/test_fslocal.c	broker tests/integration/filter.h
tests/unit/test_dirsync.c	broker tests/integration/filter.h
tests/unit/test_pg_group.c	broker/pg broker/pg/store broker broker/store shm libclient tests/integration/filter.h
tests/unit/test_request.c	broker libclient/replyscan.h tests/integration/filter.h
tests/unit		broker/store shm libclient tests/integration/filter.h
tests/fuzz/fuzz_canonical.c	libclient
tests/fuzz/fuzz_journal.c	broker/store shm libclient
tests/fuzz		broker broker/store shm libclient
tests/bench		broker/store shm libclient tests/cluster/pgserver.h
tests/faults
tests/integration	broker/store shm libclient
tests/chaos		tests/integration libclient
tests/cluster		tests/integration broker/pg/store broker/store shm libclient
tests/mcp		tests/integration libclient
EOF
}

dirs="shm libclient broker contrib tests"
{
	table
	echo %%
	find $dirs -type f -name '*.h'
	echo %%
	find $dirs -type f \( -name '*.c' -o -name '*.h' \) -exec \
	    grep -H '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' {} +
} | awk '
function dir(p) { sub("/[^/]*$", "", p); return p }
function base(p) { sub(".*/", "", p); return p }
part == 0 && $0 == "%%" { part = 1; next }
part == 1 && $0 == "%%" { part = 2; next }
part == 0 { rows[++nrows] = $1; $1 = ""; sub(/^ +/, ""); allowed[nrows] = $0; next }
part == 1 { header[$0] = 1; byname[base($0)] = $0; next }
{
	file = $0; sub(":.*", "", file)
	name = $0; sub("^[^\"]*\"", "", name); sub("\".*", "", name)
	if (name == "config.h")
		next
	for (r = 1; r <= nrows; r++)
		if (file == rows[r] || index(file, rows[r] "/") == 1)
			break
	if (r > nrows) {
		print "layers: " file ": in no layer (add it to tests/layers.sh)"
		bad = 1
		next
	}
	if ((dir(file) "/" name) in header)
		h = dir(file) "/" name	# its own directory first, as cc does
	else if (name ~ /^\.\.\// && (dir(dir(file)) "/" substr(name, 4)) in header)
		h = dir(dir(file)) "/" substr(name, 4)	# "../idemctl_store.h"
	else if (name ~ /\//)
		h = "tests/" name	# "integration/harness.h"
	else
		h = byname[name]
	if (h == "") {
		print "layers: " file ": includes \"" name "\", which is nowhere"
		bad = 1
		next
	}
	if (dir(h) == dir(file))
		next
	n = split(allowed[r], a, " ")
	for (i = 1; i <= n; i++)
		if (h == a[i] || dir(h) == a[i])
			next
	print "layers: " file ": includes " h ", which its layer may not" \
	    " (allowed: " (allowed[r] ~ /[^ ]/ ? allowed[r] : "nothing") ")"
	bad = 1
}
END {
	if (!bad)
		print "layers: every include within its layer"
	exit bad
}'
