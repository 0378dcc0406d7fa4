#!/bin/sh
# SPDX-License-Identifier: ISC
# idem-mcp proxy in front of real MCP servers from the npm registry
# (@modelcontextprotocol/server-filesystem and server-everything, pinned
# in tests/mcp/package-lock.json) and of tests/mcp/proxy_server.mjs,
# driven by the official MCP TypeScript SDK's client against a real
# idemd: tests/mcp/proxy.test.mjs, run by sdk.sh (which installs the
# packages into the build tree and skips, or in CI fails, without node).
exec sh "$(dirname "$0")/sdk.sh" proxy.test.mjs
