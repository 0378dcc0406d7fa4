#!/bin/sh
# SPDX-License-Identifier: ISC
# Install what idem needs to build and test on Debian 12, if missing.
set -eu
packages="build-essential autoconf automake libtool pkg-config libevent-dev
libjansson-dev libsodium-dev libutf8proc-dev libcmocka-dev libsqlite3-dev liblmdb-dev
python3 strace clang libclang-rt-dev libsystemd-dev
python3-venv python3-mypy python3-hypothesis postgresql-15 libpq-dev
systemd zsh fish
redis-server"
# redis-server: only idem-bench's effects scenario and its smoke test
# (the reference store, started privately); idem itself never needs it.
missing=""
for p in $packages; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
	    missing="$missing $p"
done
# node (18 or later) and npm for tests/mcp/sdk.sh and tests/node_client.sh
# (the MCP SDK and TypeScript go into the build tree); by command, since a
# node from elsewhere may bring its own npm.
command -v node >/dev/null 2>&1 || missing="$missing nodejs"
command -v npm >/dev/null 2>&1 || missing="$missing npm"
if [ -n "$missing" ]; then
	echo "installing:$missing"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	# shellcheck disable=SC2086
	apt-get install -y -qq $missing >/dev/null
fi
