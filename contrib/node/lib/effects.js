// SPDX-License-Identifier: ISC
// effects.js: runEffect, any side effect performed at most once per key
// (SPEC.md, "Effects"): ask before acting (effect_begin), keep the lease
// alive while acting (effect_extend), report after (effect_complete).
//
//   proceed          fn(externalKey, ctx) runs once; every leaseMs/3 the
//                    lease is extended in the background while it runs;
//                    its result is committed and returned
//   reused           fn does not run; the stored result is returned
//   conflict         IdemConflict (the key is bound to another request)
//   in_progress      IdemInProgress (another caller's live lease)
//   outcome_unknown  IdemOutcomeUnknown (a lease lapsed unreported)
//
// What is reported when fn does not return: fn throwing NotApplied
// (it KNOWS nothing happened) releases the key; any other error, and an
// abort while fn runs, report NOTHING, because the effect may have
// happened before the failure (the mail went out, then the connection
// broke): reporting not_applied could let a retry perform it twice.
// The extensions stop, the lease lapses, and the key becomes
// outcome_unknown, which only evidence settles (effectResolve).

import { setTimeout as sleep } from 'node:timers/promises';
import {
  IdemError, IdemTransportError, NotApplied,
} from './errors.js';

/** The broker's lease when effect_begin names none (SPEC.md). */
export const DEFAULT_LEASE_MS = 30000;
// A report (effect_complete) is resent this many times when its answer
// is lost, the n-th after REPORT_DELAY_MS * 2^n: the same fence each
// time, and the broker answers a repeat as it answered the first.
const REPORT_ATTEMPTS = 5;
const REPORT_DELAY_MS = 50;

async function report(client, id, kind, fence, outcome, result) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await client.effectComplete(id, kind, fence, outcome, result);
    } catch (e) {
      if (!(e instanceof IdemTransportError) || attempt >= REPORT_ATTEMPTS)
        throw e;
    }
    await sleep(REPORT_DELAY_MS * 2 ** attempt);
  }
}

/** The background extension of one lease: effect_extend every
 * everyMs until stop().  A lapse (outcome_unknown), a conflict or a
 * broker without effect_extend (unknown_op) ends it; a lost connection
 * is retried at the next tick. */
class Extender {
  constructor(client, id, kind, fence, leaseMs, everyMs, firstMs) {
    Object.assign(this, { client, id, kind, fence, leaseMs, everyMs });
    this.extensions = 0;
    this.error = null;
    this.stopped = false;
    this.inflight = null;
    this.timer = null;
    this.schedule(firstMs);
  }

  schedule(ms = this.everyMs) {
    if (!this.stopped)
      this.timer = setTimeout(() => this.tick(), ms);
  }

  async tick() {
    this.inflight = this.client.effectExtend(this.id, this.kind, this.fence, this.leaseMs)
      .then(() => {
        this.extensions++;
      }, (e) => {
        if (e instanceof IdemTransportError)
          return;
        this.error = e;
        this.stopped = true;
      });
    await this.inflight;
    this.inflight = null;
    this.schedule();
  }

  async stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.inflight;
  }
}

/** fn's outcome, or signal.reason as soon as signal aborts. */
function untilAborted(promise, signal) {
  if (!signal)
    return promise;
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then((v) => {
      signal.removeEventListener('abort', onAbort);
      resolve(v);
    }, (e) => {
      signal.removeEventListener('abort', onAbort);
      reject(e);
    });
  });
}

/**
 * Perform the effect of kind `kind` under key `id` at most once, and
 * resolve to its result (the committed receipt's: the first one, on
 * every later call with the same key and request).
 *
 * fn(externalKey, ctx) performs it: pass externalKey to the downstream
 * system as its own idempotency key (the same on every attempt under
 * this key); ctx holds attempt, fence and signal (options.signal).  Its
 * return value (JSON) is committed as the result.
 *
 * options.leaseMs: the lease (100..86400000; the broker's default,
 * 30000, when absent), extended every leaseMs/3 (options.extendEveryMs)
 * while fn runs; options.signal: an AbortSignal that aborts the call
 * (before fn: nothing performed, and a lease the begin got is released;
 * while fn runs: rejects at once with signal.reason and reports nothing,
 * see above); options.requestDigest:
 * true to have the broker check effectDigest(kind, request).
 *
 * Rejects with IdemConflict, IdemInProgress, IdemOutcomeUnknown (the
 * begin's dispositions), fn's own error (NotApplied released the key),
 * or IdemError from the report.
 */
export async function runEffect(client, kind, id, request, fn, options = {}) {
  const { leaseMs, signal, requestDigest, extendEveryMs } = options;
  if (typeof fn !== 'function')
    throw new TypeError('runEffect needs fn, the function that performs the effect');
  signal?.throwIfAborted();
  // The begin is not abandoned on an abort: its answer may be a lease
  // that nobody would report, which would lapse into outcome_unknown
  // though nothing was performed.  It is awaited (the broker answers a
  // begin at once), and a proceed that came after an abort is released.
  const asked = Date.now();
  const begin = await client.effectBegin(id, kind, request, { leaseMs, requestDigest });
  // The lease runs from the reservation, before the begin's answer: the
  // answer's time is already spent of the first interval.
  const spent = Date.now() - asked;
  if (signal?.aborted) {
    if (begin.proceed)
      await report(client, id, kind, begin.fence, 'not_applied');
    throw signal.reason;
  }
  if (begin.reused)
    return begin.receipt.result;
  const { fence, externalKey, attempt } = begin;
  const lease = leaseMs ?? begin.leaseMs ?? DEFAULT_LEASE_MS;
  const every = extendEveryMs ?? Math.max(Math.floor(lease / 3), 1);
  const extender = new Extender(client, id, kind, fence, lease, every,
      Math.max(every - spent, 0));
  const running = (async () => fn(externalKey, { attempt, fence, signal }))();
  let result;
  try {
    result = await untilAborted(running, signal);
  } catch (e) {
    running.catch(() => {});      // fn may still end after an abort
    await extender.stop();
    if (e instanceof NotApplied)
      await report(client, id, kind, fence, 'not_applied');
    throw e;
  }
  await extender.stop();
  const settled = await report(client, id, kind, fence, 'applied',
      result === undefined ? null : result);
  if (settled.receipt === null) {
    throw new IdemError('protocol', 'effect_complete applied answered without a receipt',
        { reply: settled.reply });
  }
  return settled.receipt.result;
}
