#!/bin/sh
# SPDX-License-Identifier: ISC
# Build idem out of tree: build/ (or $1 with the configure flags after it).
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
dir=${1:-build}
[ $# -gt 0 ] && shift
cd "$top"
[ -x configure ] || autoreconf -fi >/dev/null 2>&1 || autoreconf -fi
mkdir -p "$dir"
cd "$dir"
[ -f Makefile ] || "$top/configure" -q "$@"
make -j"$(nproc)" >/dev/null
