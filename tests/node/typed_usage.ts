// SPDX-License-Identifier: ISC
// typed_usage.ts: a caller's code against idemd-client's declarations
// (contrib/node/index.d.ts), checked by tests/node_client.sh with
// `tsc --noEmit --strict`: it compiles only if the types say what the
// client does.  Never run.

import {
  Client, IdemConflict, IdemError, IdemInProgress, IdemOutcomeUnknown, NotApplied,
  effectDigest, FCOP_DIGEST_SCHEMA, fcopTaskDigest, runEffect, submissionIdNew, taskDigest,
  writeTaskRetry,
} from 'idemd-client';
import type {
  EffectBegin, EffectReceipt, Receipt, Stats, Task, WriteResult,
} from 'idemd-client';

async function main(): Promise<void> {
  const client = new Client({ socket: '/srv/fcop/.idem/idemd.sock', timeoutMs: 30000 });
  const task: Task = { sender: 'PM', recipient: 'DEV', subject: 'Fix login', priority: 'P1' };
  const sid: string = submissionIdNew('run-42/');
  const r: WriteResult = await client.writeTask(task, sid, { requestDigest: true });
  const receipt: Receipt = r.receipt;
  const id: string = receipt.taskId;
  const raw: string = receipt.raw;
  const again = await writeTaskRetry(task, sid, { attempts: 5, deadlineMs: 10000 });
  const same: boolean = again.receipt.raw === raw && again.reused;
  const digest: string = taskDigest(task);
  const fcop = await client.writeTask({ sender: 'PM', recipient: 'DEV', subject: 'x',
    branch_of: null }, 'op-1', { digestSchema: FCOP_DIGEST_SCHEMA,
    workspaceId: 'urn:uuid:00000000-0000-4000-8000-000000000000', requestDigest: true });
  const fd: string = fcopTaskDigest({ sender: 'PM', recipient: 'DEV', subject: 'x' }, 'op-1',
      'urn:uuid:00000000-0000-4000-8000-000000000000');
  void fcop; void fd;

  const report = await client.writeReport(id, { sender: 'DEV', status: 'done' }, 'r-1');
  const reportId: string = report.reportId;

  const result: { sent: string } = await runEffect(client, 'mail.send/v1', 'mail-1',
      { to: 'a@example.com' }, async (externalKey, ctx) => {
        const attempt: number | null = ctx.attempt;
        if (attempt === null)
          throw new NotApplied('no attempt');
        return { sent: externalKey };
      }, { leaseMs: 30000, signal: AbortSignal.timeout(60000) });

  const begin: EffectBegin = await client.effectBegin('m-2', 'mail.send/v1', {}, { leaseMs: 300 });
  if (begin.proceed && begin.fence !== null) {
    const ext = await client.effectExtend('m-2', 'mail.send/v1', begin.fence, 300);
    const until: string | null = ext.leaseExpiresAt;
    const done = await client.effectComplete('m-2', 'mail.send/v1', begin.fence, 'applied', { ok: 1 });
    const er: EffectReceipt | null = done.receipt;
    void until; void er;
  }
  await client.effectResolve('m-3', 'k/v1', 'not_applied', { source: 'operator' });
  const lookup = await client.getSubmission(sid, { effectKind: null });
  const state: string | undefined = lookup.submission?.state;
  const d = await client.diagnose({ staleAfterMs: 1000 });
  const n: number = d.entries.length;
  const s: Stats = await client.stats();
  const created: number = s.created;
  const h = await client.hello();
  const extendable: boolean = h.serves('effect_extend');
  const e2: string = effectDigest('k/v1', { a: [1, 'x', null] });

  try {
    await client.writeTask(task, sid);
  } catch (e) {
    if (e instanceof IdemConflict) {
      const reason: string | null = e.reason;
      const bound: string | null | undefined = e.bound?.taskId;
      void reason; void bound;
    } else if (e instanceof IdemInProgress || e instanceof IdemOutcomeUnknown) {
      const k: string | null = e.externalKey;
      void k;
    } else if (e instanceof IdemError) {
      const retry: boolean = e.retryable;
      const code: string = e.code;
      void retry; void code;
    }
  }
  const replies = await client.pipeline([{ op: 'hello' }, { op: 'stats' }]);
  const ok: boolean = replies[0].ok;
  client.close();
  void [id, same, digest, reportId, result, state, n, created, extendable, e2, ok];
}

void main;
