#!/bin/sh
# SPDX-License-Identifier: ISC
# idem-mcp driven by the official MCP TypeScript SDK's client
# (@modelcontextprotocol/sdk, over its stdio transport) against a real
# idemd: tests/mcp/sdk.test.mjs under node's test runner, or the test
# file named by $1 (tests/mcp/proxy.sh runs proxy.test.mjs so).
#
# The SDK (and the real MCP servers the proxy's tests wrap) is installed
# into the BUILD tree (tests/mcp/node_modules there,
# never globally) with `npm ci` from the committed package.json and
# package-lock.json (exact versions), once: later runs reuse it while the
# lock file is unchanged.  Exit 77 (skip) with the reason when node or
# npm is missing or too old or the SDK cannot be installed, but 1 (fail)
# in CI (CI=true), which must run it (contrib/scripts/install-deps.sh
# installs node and npm; npm ci needs the registry).
# make check sets IDEMD, IDEM_MCP and IDEM_SRCDIR.
set -u

# not_run REASON: skip (77) with the reason; in CI, fail.
not_run() {
	if [ "${CI:-}" = true ]; then
		echo "FAIL: $1 (CI=true: CI must run the MCP SDK's tests)"
		exit 1
	fi
	echo "SKIP: $1"
	exit 77
}
IDEMD=${IDEMD:?set IDEMD to the idemd binary}
IDEM_MCP=${IDEM_MCP:?set IDEM_MCP to the idem-mcp binary}
src=${IDEM_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/mcp
# make check runs us from the build tree's top.
dir=$(pwd)/tests/mcp

for tool in node npm; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		not_run "$tool not found (contrib/scripts/install-deps.sh installs it)"
	fi
done
major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null) || major=0
if [ "$major" -lt 18 ]; then
	not_run "node $(node --version) is older than 18 (the SDK needs 18)"
fi

test_file=${1:-sdk.test.mjs}
mkdir -p "$dir" || exit 99
# One installation at a time (make check -j runs sdk.sh and proxy.sh).
exec 9>"$dir/.npm-ci.lock" || exit 99
flock 9 || exit 99
if ! cmp -s "$src/package-lock.json" "$dir/package-lock.json" ||
    [ ! -f "$dir/node_modules/@modelcontextprotocol/sdk/package.json" ] ||
    [ ! -f "$dir/node_modules/@modelcontextprotocol/server-filesystem/package.json" ] ||
    [ ! -f "$dir/node_modules/@modelcontextprotocol/server-everything/package.json" ]; then
	if [ "$src" != "$dir" ]; then
		rm -rf "$dir/node_modules" "$dir/package-lock.json"
		cp "$src/package.json" "$src/package-lock.json" "$dir/" ||
		    exit 99
	fi
	echo "installing the MCP SDK into $dir (npm ci)"
	if ! npm ci --prefix "$dir" --no-audit --no-fund \
	    >"$dir/npm-ci.out" 2>&1; then
		sed 's/^/	npm: /' "$dir/npm-ci.out" | tail -20
		# A partial tree must not pass for an installed one next time.
		rm -rf "$dir/node_modules"
		[ "$src" != "$dir" ] && rm -f "$dir/package-lock.json"
		not_run "npm ci could not install @modelcontextprotocol/sdk and the servers (no registry?)"
	fi
fi
exec 9>&-

IDEM_MCP_NODE_PREFIX=$dir
export IDEMD IDEM_MCP IDEM_MCP_NODE_PREFIX
exec node --test "$src/$test_file"
