#!/bin/sh
# SPDX-License-Identifier: ISC
# The Node.js client (contrib/node, npm package idemd-client) as a user
# gets it, against a real idemd:
#
#  1. `npm install ./contrib/node` into a fresh project with no registry
#     at all (npm's registry pointed at a closed port, --offline): the
#     package has no dependencies, so the README's command works on a
#     machine with no network;
#  2. tests/node/client.test.mjs under node's test runner in that
#     project, importing 'idemd-client' through its package exports, and
#     tests/node/hostile.test.mjs there (the client against a broker
#     that breaks the protocol: a net.Server of its own);
#  3. contrib/examples/mcp_notify.mjs (an MCP server of the official SDK
#     whose tool uses runEffect) driven by tests/node/example.test.mjs
#     with the SDK's client: the SDK and zod installed into the BUILD
#     tree (tests/node/app) with `npm ci` from tests/node's committed
#     package.json and package-lock.json, once (reused while the lock is
#     unchanged), idemd-client next to them from contrib/node, offline;
#  4. there too, contrib/node/index.d.ts checked by TypeScript's tsc
#     --strict (pinned in the same lock) against tests/node/typed_usage.ts,
#     a caller's code.
#
# Exit 77 (skip) with the reason without node or npm or with node older
# than 18; the example alone is skipped (a "SKIP:" line) when npm ci
# cannot reach the registry.  In CI (CI=true) each of these fails
# instead: contrib/scripts/install-deps.sh installs node and npm.
# make check sets IDEMD, IDEM_VECTORS, IDEM_SRCDIR, IDEM_VERSION and
# IDEM_FAULT_INJECTION.
set -u

in_ci() { [ "${CI:-}" = true ]; }

# not_run REASON: skip (77) with the reason; in CI, fail.
not_run() {
	if in_ci; then
		echo "FAIL: $1 (CI=true: CI must run the Node client's tests)"
		exit 1
	fi
	echo "SKIP: $1"
	exit 77
}

IDEMD=${IDEMD:?set IDEMD to the idemd binary}
src=${IDEM_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
IDEM_VECTORS=${IDEM_VECTORS:-$src/tests/vectors}
IDEM_FAULT_INJECTION=${IDEM_FAULT_INJECTION:-}
export IDEMD IDEM_VECTORS IDEM_FAULT_INJECTION

for tool in node npm; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		not_run "$tool not found (contrib/scripts/install-deps.sh installs it)"
	fi
done
major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null) || major=0
if [ "$major" -lt 18 ]; then
	not_run "node $(node --version) is older than 18 (idemd-client needs 18)"
fi

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "PASS: $*"; }

# The package's version is idem's (configure.ac), in both places.
pkg=$src/contrib/node
v_json=$(node -p "require('$pkg/package.json').version")
v_js=$(sed -n "s/^export const VERSION = '\(.*\)';$/\1/p" "$pkg/index.js")
if [ -n "${IDEM_VERSION:-}" ] && { [ "$v_json" != "$IDEM_VERSION" ] ||
    [ "$v_js" != "$IDEM_VERSION" ]; }; then
	fail "idemd-client's version (package.json $v_json, index.js $v_js)" \
	    "is not idem's ($IDEM_VERSION)"
else
	pass "idemd-client $v_json, idem's version"
fi
deps=$(node -p "Object.keys(Object.assign({}, require('$pkg/package.json').dependencies, require('$pkg/package.json').peerDependencies)).length")
if [ "$deps" = 0 ]; then
	pass "no runtime dependencies"
else
	fail "package.json lists $deps dependencies; idemd-client has none"
fi

# make check runs us from the build tree's top.
dir=$(pwd)/tests/node
mkdir -p "$dir" && work=$(mktemp -d "$dir/run.XXXXXX") || exit 99
trap 'rm -rf "$work"' EXIT
trap 'exit 1' HUP INT TERM

# npm's own state for this run: no user configuration, no cache of the
# machine's (an offline install must not be served from it).
npm_config_userconfig=/dev/null npm_config_cache=$work/npm-cache
npm_config_update_notifier=false npm_config_audit=false npm_config_fund=false
export npm_config_userconfig npm_config_cache npm_config_update_notifier
export npm_config_audit npm_config_fund

# 1. The README's command, offline, in a fresh project.
fresh=$work/fresh
mkdir -p "$fresh" &&
    printf '{"name":"fresh","version":"0.0.0","private":true}\n' \
    >"$fresh/package.json" || exit 99
if (cd "$fresh" && npm install --offline --registry=http://127.0.0.1:9/ \
    "$pkg") >"$work/install.log" 2>&1 &&
    [ -f "$fresh/node_modules/idemd-client/package.json" ]; then
	pass "npm install ./contrib/node, offline, into a fresh project"
else
	sed 's/^/	npm: /' "$work/install.log"
	fail "npm install $pkg (offline, fresh project)"
	echo "$failures failure(s)"
	exit 1
fi

# The tarball npm pack makes of it (what "files" in package.json lets
# through) installs offline too, and every module of it loads.
packed=$work/packed
mkdir -p "$packed" &&
    printf '{"name":"packed","version":"0.0.0","private":true}\n' \
    >"$packed/package.json" || exit 99
if (cd "$work" && npm pack --pack-destination "$work" "$pkg") \
    >"$work/pack.log" 2>&1 &&
    (cd "$packed" && npm install --offline --registry=http://127.0.0.1:9/ \
    "$work/idemd-client-$v_json.tgz") >>"$work/pack.log" 2>&1 &&
    (cd "$packed" && node --input-type=module -e "
	import * as idem from 'idemd-client';
	const d = idem.taskDigest({ sender: 'PM', recipient: 'DEV', subject: 'Fix login' });
	if (d !== 'ecf0a65e053f6bce1619f40faa166a35c85ea531076af05ede106ed777cb105f')
		throw new Error('digest ' + d);
	for (const f of ['Client', 'runEffect', 'writeTaskRetry', 'effectDigest'])
		if (typeof idem[f] !== 'function') throw new Error(f);
	") >>"$work/pack.log" 2>&1 &&
    [ -f "$packed/node_modules/idemd-client/index.d.ts" ]; then
	pass "npm pack's tarball installs offline and loads (with index.d.ts)"
else
	sed 's/^/	npm: /' "$work/pack.log"
	fail "npm pack $pkg, installed offline"
fi

# 2. The client's tests, importing the installed package: against a
# real idemd (client.test.mjs) and against a broker that breaks the
# protocol on purpose (hostile.test.mjs, no idemd).
cp "$src/tests/node/client.test.mjs" "$src/tests/node/broker.mjs" \
    "$src/tests/node/hostile.test.mjs" "$fresh/" || exit 99
if (cd "$fresh" && IDEM_NODE_DOC=$src/doc/node.md node --test client.test.mjs); then
	pass "tests/node/client.test.mjs"
else
	fail "tests/node/client.test.mjs"
fi
if (cd "$fresh" && node --test hostile.test.mjs); then
	pass "tests/node/hostile.test.mjs"
else
	fail "tests/node/hostile.test.mjs"
fi

# 3. The example, with the SDK from the registry (npm ci, pinned).
app=$dir/app
mkdir -p "$app" || exit 99
sdk_ready=yes
if ! cmp -s "$src/tests/node/package-lock.json" "$app/package-lock.json" ||
    [ ! -f "$app/node_modules/@modelcontextprotocol/sdk/package.json" ]; then
	rm -rf "$app/node_modules" "$app/package-lock.json"
	cp "$src/tests/node/package.json" "$src/tests/node/package-lock.json" \
	    "$app/" || exit 99
	echo "installing the MCP SDK into $app (npm ci)"
	if ! (unset npm_config_cache; npm ci --prefix "$app") \
	    >"$app/npm-ci.out" 2>&1; then
		sed 's/^/	npm: /' "$app/npm-ci.out" | tail -20
		# A partial tree must not pass for an installed one next time.
		rm -rf "$app/node_modules" "$app/package-lock.json"
		sdk_ready=no
	fi
fi
if [ $sdk_ready = no ]; then
	if in_ci; then
		fail "npm ci could not install @modelcontextprotocol/sdk (CI=true: CI must run the example)"
	else
		echo "SKIP: the MCP example and the typecheck: npm ci could not install the SDK and TypeScript (no registry?)"
	fi
elif ! npm install --prefix "$app" --no-save --offline "$pkg" \
    >"$work/app-install.log" 2>&1; then
	sed 's/^/	npm: /' "$work/app-install.log"
	fail "npm install $pkg next to the SDK (offline)"
else
	cp "$src/contrib/examples/mcp_notify.mjs" \
	    "$src/tests/node/example.test.mjs" "$src/tests/node/broker.mjs" \
	    "$src/tests/node/typed_usage.ts" "$app/" || exit 99
	# The hand-written declarations against a caller's code, strictly.
	if (cd "$app" && node_modules/.bin/tsc --noEmit --strict \
	    --target es2022 --module nodenext --moduleResolution nodenext \
	    --types node typed_usage.ts); then
		pass "contrib/node/index.d.ts: tsc --strict on tests/node/typed_usage.ts"
	else
		fail "contrib/node/index.d.ts: tsc --strict on tests/node/typed_usage.ts"
	fi
	if (cd "$app" && IDEM_NODE_EXAMPLE=$app/mcp_notify.mjs \
	    node --test example.test.mjs); then
		pass "contrib/examples/mcp_notify.mjs (tests/node/example.test.mjs)"
	else
		fail "contrib/examples/mcp_notify.mjs (tests/node/example.test.mjs)"
	fi
fi

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
