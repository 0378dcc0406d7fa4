/* SPDX-License-Identifier: ISC */
// broker.mjs: a real idemd for the Node client's tests (client.test.mjs,
// example.test.mjs): started on a fresh root and known to serve (it says
// "ready" on --ready-fd 3), stopped, killed, restarted on the same root.
// IDEMD names the binary (make check sets it).

import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const READY_MS = 30000;

export function idemdPath() {
  const p = process.env.IDEMD;
  if (!p)
    throw new Error('set IDEMD to the idemd binary (make check does)');
  return p;
}

/** A fresh directory under $TMPDIR, removed by cleanup(). */
export function tempDir(prefix) {
  return fs.mkdtempSync(path.join(process.env.TMPDIR ?? os.tmpdir(), prefix));
}

/** Files named PREFIX-*.md anywhere in the workspace but .idem/ (FCoP
 * tools move tasks between stages; idem's temporaries start with a dot). */
export function countFiles(dir, prefix) {
  let n = 0;
  if (!fs.existsSync(dir))
    return 0;
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    if (entry.isDirectory()) {
      if (entry.name !== '.idem')
        n += countFiles(path.join(dir, entry.name), prefix);
    } else if (entry.name.startsWith(prefix + '-') && entry.name.endsWith('.md')) {
      n++;
    }
  }
  return n;
}

export class Broker {
  constructor(root) {
    this.root = root;
    this.socket = path.join(root, '.idem', 'idemd.sock');
    this.logPath = root + '.log';
    this.child = null;
  }

  /** Start idemd on the root; resolves once it is ready.  env: added to
   * the environment (IDEM_CRASH_AT, ...); args: more options. */
  async start(env = {}, args = []) {
    const full = { ...process.env };
    for (const k of ['IDEM_CRASH_AT', 'IDEM_CRASH_WORKER_AT', 'IDEM_ROOT', 'IDEM_SOCKET'])
      delete full[k];
    Object.assign(full, env);
    const log = fs.openSync(this.logPath, 'a');
    const child = spawn(idemdPath(), ['--root', this.root, '--workers', '2',
      '--ready-fd', '3', ...args], { stdio: ['ignore', log, log, 'pipe'], env: full });
    fs.closeSync(log);
    let said = '';
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(new Error(`idemd not ready in ${READY_MS} ms; see ${this.logPath}`));
      }, READY_MS);
      child.stdio[3].on('data', (chunk) => {
        said += chunk;
        if (said.includes('ready')) {
          clearTimeout(timer);
          resolve();
        }
      });
      child.on('exit', (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`idemd exited (${code ?? signal}) before ready: ${this.log()}`));
      });
    });
    child.removeAllListeners('exit');
    this.child = child;
    this.exited = once(child, 'exit');
    return this;
  }

  log() {
    try {
      return fs.readFileSync(this.logPath, 'utf8');
    } catch {
      return '';
    }
  }

  /** Resolves when the master has exited and its workers, which die with
   * it, have let go of the root's lock (flock(1) waits for it). */
  async dead() {
    if (this.child === null)
      return null;
    const [code, signal] = await this.exited;
    this.child = null;
    const flock = spawn('flock', [path.join(this.root, '.idem', 'idemd.lock'), 'true'],
        { stdio: 'ignore' });
    const [status] = await once(flock, 'exit');
    if (status !== 0)
      throw new Error(`flock on the root's lock exited ${status}`);
    if (code !== 0)
      this.removeSegment();
    return { code, signal };
  }

  /** SIGTERM: a clean stop. */
  async stop() {
    if (this.child === null)
      return;
    if (this.child.exitCode === null && this.child.signalCode === null)
      this.child.kill('SIGTERM');
    const { code } = await this.dead();
    if (code !== 0)
      throw new Error(`idemd exited ${code} on SIGTERM: ${this.log()}`);
  }

  /** SIGKILL the master (its workers follow it). */
  async kill() {
    if (this.child === null)
      return;
    this.child.kill('SIGKILL');
    await this.dead();
  }

  /** A broker that did not stop cleanly leaves its shared segment,
   * /dev/shm/idem-<16 hex of SHA-256 of the root's real path>. */
  removeSegment() {
    const digest = createHash('sha256').update(fs.realpathSync(this.root)).digest('hex');
    fs.rmSync('/dev/shm/idem-' + digest.slice(0, 16), { force: true });
  }
}
