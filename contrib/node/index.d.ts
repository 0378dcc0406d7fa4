// SPDX-License-Identifier: ISC
// idemd-client's types, written by hand (no compiler at install time).
// Wire names are snake_case in .reply and .data; the typed fields are
// camelCase.  SPEC.md (in the idem source tree) is the contract.  The
// globals AbortSignal and Uint8Array come from @types/node (or the DOM
// library); canonical bytes are Buffers, typed as the Uint8Array they are.

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
/** An effect's fence: sent back as effect_begin's proceed gave it. */
export type Fence = string | number;

/** A decoded reply, whatever its ok; raw: the response line. */
export interface Reply {
  ok: boolean;
  readonly raw: string;
  [member: string]: unknown;
}

export interface CallOptions {
  /** Aborts waiting for the answer (the request may still take effect). */
  signal?: AbortSignal;
}

export interface WriteTaskOptions extends CallOptions {
  /** A digest for the broker to check; true: computed here. */
  requestDigest?: string | true | null;
  /** Free-form, never digested. */
  meta?: Record<string, unknown> | null;
  /** 'write-task-v1' (the default) or 'fcop-create-task-v1'. */
  digestSchema?: string | null;
  /** fcop-create-task-v1: the workspace's id (fcop.json's), checked by the broker. */
  workspaceId?: string | null;
}

export interface ClientOptions {
  /** Default: defaultSocketPath(). */
  socket?: string;
  /** Bounds the connect and each answer; none by default. */
  timeoutMs?: number | null;
}

export const MAX_LINE_BYTES: number;
export const DEFAULT_ROOT: string;
export const SOCKET_NAME: string;
export const VERSION: string;
/** $IDEM_SOCKET, else $IDEM_ROOT/.idem/idemd.sock, else ./fcop/.idem/idemd.sock. */
export function defaultSocketPath(env?: Record<string, string | undefined>): string;

// ---- requests ----------------------------------------------------------

export type Priority = 'P0' | 'P1' | 'P2' | 'P3';
export type RiskLevel = 'low' | 'medium' | 'high' | 'irreversible';

export interface Task {
  sender: string;
  recipient: string;
  subject: string;
  body?: string | null;
  priority?: Priority | null;
  risk_level?: RiskLevel | null;
  thread_key?: string | null;
  parent?: string | null;
  references?: string[] | null;
  depends_on?: string[] | null;
}

export type ReportStatus = 'done' | 'blocked' | 'in_progress' | 'aborted';

export interface Report {
  sender: string;
  recipient?: string | null;
  status?: ReportStatus | null;
  body?: string | null;
}

export type Outcome = 'applied' | 'not_applied';
export type Observed = 'applied' | 'not_applied' | 'unknown';

// ---- replies -----------------------------------------------------------

export interface Hello {
  server: string;
  version: string | null;
  protocol: number | null;
  digestSchemas: string[];
  ops: string[] | null;
  pid: number | null;
  root: string | null;
  /** Whether the broker lists op in hello's ops. */
  serves(op: string): boolean;
  reply: Reply;
}

export interface Receipt {
  /** null for a legacy call. */
  clientSubmissionId: string | null;
  taskId: string;
  /** Where it was created (relative to the root). */
  taskPath: string;
  digestSchema: string | null;
  requestDigest: string | null;
  fileDigest: string | null;
  state: string;
  createdAt: string | null;
  /** The receipt's exact text as the broker sent it: a reused receipt's
   * raw equals the first one's. */
  raw: string;
  data: Record<string, Json>;
}

export interface WriteResult {
  disposition: 'created' | 'reused';
  created: boolean;
  reused: boolean;
  actionTaken: boolean;
  idempotent: boolean;
  /** This call finished a creation an earlier one interrupted. */
  recovered: boolean;
  receipt: Receipt;
  /** Where FCoP tools have moved the task since (null: not moved). */
  currentPath: string | null;
  /** Where the task is now. */
  path: string;
  reply: Reply;
}

export interface ReportResult {
  deduplicated: boolean;
  reportId: string;
  reportPath: string;
  reply: Reply;
}

export interface EffectReceipt {
  clientSubmissionId: string | null;
  effectKind: string | null;
  digestSchema: string | null;
  requestDigest: string | null;
  externalKey: string | null;
  attempt: number | null;
  result: Json;
  state: string;
  committedAt: string | null;
  raw: string;
  data: Record<string, Json>;
}

export interface Submission {
  clientSubmissionId: string | null;
  /** null for a task's submission. */
  effectKind: string | null;
  state: string;
  digestSchema: string | null;
  requestDigest: string | null;
  taskId: string | null;
  taskPath: string | null;
  currentPath: string | null;
  attempt: number | null;
  externalKey: string | null;
  reservedAt: string | null;
  updatedAt: string | null;
  /** Once committed: a Receipt for a task, an EffectReceipt for an effect. */
  receipt: Receipt | EffectReceipt | null;
  data: Record<string, Json>;
}

export interface SubmissionLookup {
  found: boolean;
  submission: Submission | null;
  reply: Reply;
}

export interface Diagnosis {
  entries: Array<Record<string, Json>>;
  counts: { reserved?: number; task_created?: number; committed?: number; [k: string]: number | undefined };
  effectCounts: Record<string, number> | null;
  reply: Reply;
}

export interface Stats {
  created: number;
  reused: number;
  conflict: number;
  legacy_created: number;
  errors: number;
  journal_records: number;
  journal_fsyncs: number;
  table_used: number;
  table_capacity: number;
  history_entries: number;
  workers: number;
  worker_restarts: number;
  uptime_ms: number;
  [counter: string]: number;
}

export interface EffectBegin {
  disposition: 'proceed' | 'reused';
  proceed: boolean;
  reused: boolean;
  /** proceed: 1, 2, ... */
  attempt: number | null;
  /** proceed: the token for effectComplete / effectExtend. */
  fence: Fence | null;
  /** proceed: the downstream system's idempotency key, stable across attempts. */
  externalKey: string | null;
  leaseMs: number | null;
  leaseExpiresAt: string | null;
  requestDigest: string | null;
  /** reused after effectResolve's evidence. */
  recovered: boolean;
  /** reused: the first receipt, byte for byte. */
  receipt: EffectReceipt | null;
  reply: Reply;
}

export interface EffectSettled {
  state: string | null;
  /** Committed (applied): the receipt; released or left unknown: null. */
  receipt: EffectReceipt | null;
  reply: Reply;
}

export interface EffectExtended {
  leaseExpiresAt: string | null;
  reply: Reply;
}

// ---- the client --------------------------------------------------------

export class Client {
  constructor(options?: ClientOptions);
  readonly socket: string;
  readonly timeoutMs: number | null;
  readonly closed: boolean;
  readonly connected: boolean;
  /** Connect now rather than on first use. */
  connect(): Promise<void>;
  /** Close the connection; later calls throw IdemError "closed". */
  close(): void;
  call(request: { op: string; [member: string]: unknown }, options?: CallOptions): Promise<Reply>;
  pipeline(requests: Array<{ op: string; [member: string]: unknown }>,
    options?: CallOptions): Promise<Reply[]>;

  hello(options?: CallOptions): Promise<Hello>;
  writeTask(task: Task | FcopTask, clientSubmissionId?: string | null,
    options?: WriteTaskOptions): Promise<WriteResult>;
  writeReport(taskId: string, report: Report, clientSubmissionId?: string | null,
    options?: CallOptions & { meta?: Record<string, unknown> | null }): Promise<ReportResult>;
  getSubmission(clientSubmissionId: string,
    options?: CallOptions & { effectKind?: string | null }): Promise<SubmissionLookup>;
  diagnose(options?: CallOptions & { staleAfterMs?: number | null }): Promise<Diagnosis>;
  stats(options?: CallOptions): Promise<Stats>;
  effectBegin(clientSubmissionId: string, effectKind: string, request: unknown,
    options?: CallOptions & { leaseMs?: number | null; requestDigest?: string | true | null }
  ): Promise<EffectBegin>;
  effectComplete(clientSubmissionId: string, effectKind: string, fence: Fence,
    outcome?: Outcome, result?: unknown, options?: CallOptions): Promise<EffectSettled>;
  effectExtend(clientSubmissionId: string, effectKind: string, fence: Fence, leaseMs: number,
    options?: CallOptions): Promise<EffectExtended>;
  effectResolve(clientSubmissionId: string, effectKind: string, observed: Observed,
    options?: CallOptions & { result?: unknown; source?: string | null }): Promise<EffectSettled>;
}

// ---- errors ------------------------------------------------------------

export type ErrorCode =
  | 'invalid_json' | 'invalid_utf8' | 'too_large' | 'invalid_request' | 'unknown_op'
  | 'unsupported_schema' | 'digest_disagrees' | 'task_not_found' | 'conflict'
  | 'sequence_exhausted' | 'outcome_unknown' | 'table_full' | 'storage_unavailable'
  | 'in_progress' | 'shutting_down' | 'too_many_connections' | 'internal'
  | 'transport' | 'protocol' | 'closed';

export type ConflictReason =
  | 'digest_mismatch' | 'schema_mismatch' | 'target_mismatch' | 'task_missing'
  | 'stale_fence' | 'no_reservation' | 'already_committed';

export class IdemError extends Error {
  constructor(code: string, message: string, options?: {
    field?: string | null; retryable?: boolean; reply?: Reply | null; cause?: unknown;
  });
  /** The wire code, or the client's own: transport, protocol, closed. */
  readonly code: ErrorCode | (string & {});
  /** The broker's message. */
  readonly detail: string;
  /** invalid_request: the dotted path of the offending field. */
  readonly field: string | null;
  /** A retry with the same client_submission_id may succeed. */
  readonly retryable: boolean;
  readonly reply: Reply | null;
  /** The facts the reply gives about the key ("existing"), or null. */
  readonly existing: Record<string, Json> | null;
  readonly disposition: string | null;
}
export class IdemTransportError extends IdemError {
  constructor(message: string, cause?: unknown);
  readonly code: 'transport';
}
export class IdemProtocolError extends IdemError {
  constructor(message: string, reply?: Reply | null);
  readonly code: 'protocol';
}
export class IdemRequestError extends IdemError {}
export class IdemNotFound extends IdemError {}
export interface ConflictBound {
  clientSubmissionId: string | null;
  effectKind: string | null;
  state: string | null;
  digestSchema: string | null;
  requestDigest: string | null;
  taskId: string | null;
  attempt: number | null;
  externalKey: string | null;
}
export class IdemConflict extends IdemError {
  readonly code: 'conflict';
  readonly reason: ConflictReason | (string & {}) | null;
  /** What the key is bound to (null when nothing is: no_reservation). */
  readonly bound: ConflictBound | null;
}
export class IdemInProgress extends IdemError {
  readonly attempt: number | null;
  readonly externalKey: string | null;
  readonly leaseExpiresAt: string | null;
}
export class IdemOutcomeUnknown extends IdemError {
  readonly attempt: number | null;
  readonly externalKey: string | null;
}
export class IdemUnavailable extends IdemError {
  /** too_many_connections: which limit. */
  readonly reason: string | null;
}
export class IdemExhausted extends IdemError {}
export class IdemInternal extends IdemError {}
/** Thrown by runEffect's fn when the effect certainly did not happen. */
export class NotApplied extends Error {
  constructor(message?: string, options?: { cause?: unknown });
}
export const ERROR_CLASSES: Readonly<Record<string, typeof IdemError>>;
export function errorFromReply(reply: Reply): IdemError;

// ---- digests -----------------------------------------------------------

export const DIGEST_SCHEMA: 'write-task-v1';
export const EFFECT_DIGEST_SCHEMA: 'generic-json-v1';
export const FCOP_DIGEST_SCHEMA: 'fcop-create-task-v1';
export function submissionIdNew(prefix?: string): string;
/** CRLF and lone CR become LF, then NFC. */
export function normalizeString(s: string): string;
export function taskCanonical(task: Task): Uint8Array;
export function taskDigest(task: Task): string;
/** bigint: an integer held exactly (refused past 2**53, as the broker does). */
export function effectCanonical(effectKind: string, request: unknown): Uint8Array;
export function effectDigest(effectKind: string, request: unknown): string;
/** A task under fcop-create-task-v1 (doc/protocol.md): no thread_key,
 * risk_level or depends_on; branch_of besides parent. */
export interface FcopTask {
  sender: string;
  recipient: string;
  subject: string;
  body?: string | null;
  priority?: Priority | null;
  parent?: string | null;
  branch_of?: string | null;
  references?: string[] | null;
}
/** operationId: the client_submission_id; workspaceId: fcop.json's. */
export function fcopTaskCanonical(task: FcopTask, operationId: string, workspaceId: string): Uint8Array;
export function fcopTaskDigest(task: FcopTask, operationId: string, workspaceId: string): string;
/** The exact text of the member at path of a JSON object's text. */
export function rawMember(text: string, ...path: string[]): string | null;

// ---- retries -----------------------------------------------------------

export const RETRYABLE_CODES: readonly string[];
/** Codes retried only when the broker marks them retryable (internal,
 * table_full); every other code never is, however it is marked. */
export const RETRYABLE_WHEN_MARKED: readonly string[];
export interface RetryOptions {
  socket?: string;
  /** At most this many attempts (8). */
  attempts?: number;
  baseDelayMs?: number;
  maxDelayMs?: number;
  /** Never sleep past this many ms from the call. */
  deadlineMs?: number | null;
  /** Each attempt's timeout. */
  timeoutMs?: number | null;
  meta?: Record<string, unknown> | null;
  onRetry?: (attempt: number, error: IdemError, delayMs: number) => void;
  signal?: AbortSignal;
}
export function writeTaskRetry(task: Task | FcopTask, clientSubmissionId: string,
  options?: RetryOptions & Omit<WriteTaskOptions, 'signal' | 'meta'>): Promise<WriteResult>;
export function writeReportRetry(taskId: string, report: Report, clientSubmissionId: string,
  options?: RetryOptions): Promise<ReportResult>;

// ---- effects -----------------------------------------------------------

export const DEFAULT_LEASE_MS: number;
export interface EffectContext {
  attempt: number | null;
  fence: Fence;
  /** options.signal, for fn to stop its own work. */
  signal: AbortSignal | undefined;
}
export interface RunEffectOptions {
  /** 100..86400000; the broker's default (30000) when absent. */
  leaseMs?: number;
  /** Extend every this many ms (default leaseMs / 3). */
  extendEveryMs?: number;
  signal?: AbortSignal;
  requestDigest?: string | true | null;
}
/** Perform the effect at most once per (kind, id): fn runs only on
 * proceed, with the lease extended while it runs; resolves to the
 * committed result (the stored one on reused). */
export function runEffect<R>(client: Client, kind: string, id: string, request: unknown,
  fn: (externalKey: string, ctx: EffectContext) => R | Promise<R>,
  options?: RunEffectOptions): Promise<R>;
