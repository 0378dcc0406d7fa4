/* SPDX-License-Identifier: ISC */
// sdk_run.mjs: what the two tests driven by the MCP SDK's client
// (sdk.test.mjs, proxy.test.mjs) share: a fresh directory under $TMPDIR
// holding the workspace (root) and the broker's log (root.log), the
// real idemd on it (tests/node/broker.mjs's Broker: start, stop),
// check(), a test counted so that the directory is removed at the end
// only if every test ran to its end, and kept for a look otherwise, and
// noSanitizerReports() (also used by hostile.test.mjs).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

import { Broker, tempDir } from '../node/broker.mjs';

export class SdkRun {
  /** prefix: the directory's name before its random part. */
  constructor(prefix) {
    this.tmp = tempDir(prefix);
    this.root = path.join(this.tmp, 'root');
    this.broker = new Broker(this.root);
    this.defined = 0;
    this.completed = 0;
  }

  /** A test, counted: defined now, completed if fn returns; skipped
   * (and not counted) when skip is a reason. */
  check(name, fn, skip = false) {
    if (skip) {
      test(name, { skip }, fn);
      return;
    }
    this.defined++;
    test(name, async () => {
      await fn();
      this.completed++;
    });
  }

  /** Under ASan and UBSan (run-tests.sh), a report in any of the
   * programs' stderr texts is a failure. */
  noSanitizerReports(stderrs, who) {
    for (const text of stderrs)
      assert.doesNotMatch(text, /ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:/,
          `a sanitizer report from ${who}`);
  }

  /** At the end: the directory removed if every test completed. */
  finish() {
    if (this.completed === this.defined)
      fs.rmSync(this.tmp, { recursive: true, force: true });
    else
      console.log(`# kept ${this.tmp} (the broker's log: root.log)`);
  }
}
