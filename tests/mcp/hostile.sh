#!/bin/sh
# SPDX-License-Identifier: ISC
# idem-mcp proxy against a hostile downstream (tests/mcp/hostile_server.mjs)
# and a hostile or vanishing client: tests/mcp/hostile.test.mjs, run by
# sdk.sh (node's test runner; it skips, or in CI fails, without node).
exec sh "$(dirname "$0")/sdk.sh" hostile.test.mjs
