# SPDX-License-Identifier: ISC
"""idem.replies: the broker's replies as small typed objects.

Each object is built from a Reply (idem.wire) and keeps it as .reply, so
nothing the broker said is lost, and receipts keep .raw, the exact bytes
of the receipt object as the broker sent it (SPEC.md: a reused receipt
is byte for byte the first one; compare .raw, not the parsed fields).

For code written against the dict replies of earlier versions, the
reply objects also answer reply["member"], reply.get("member") and
"member" in reply from the underlying reply.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Literal, Optional, Union, cast

from .errors import IdemProtocolError
from .wire import Reply

__all__ = ["Fence", "Receipt", "WriteResult", "ReportResult", "ConflictExisting",
           "Conflict", "Submission", "SubmissionLookup", "Hello",
           "EffectReceipt", "EffectBegin", "EffectSettled", "EffectExtended",
           "Disposition"]


def _req_str(data: Dict[str, Any], key: str, what: str) -> str:
    v = data.get(key)
    if not isinstance(v, str):
        raise IdemProtocolError("%s without a string %s" % (what, key))
    return v


def _opt_str(data: Dict[str, Any], key: str) -> Optional[str]:
    v = data.get(key)
    return v if isinstance(v, str) else None


def _opt_bool(data: Dict[str, Any], key: str) -> Optional[bool]:
    v = data.get(key)
    return v if isinstance(v, bool) else None


def _opt_int(data: Dict[str, Any], key: str) -> Optional[int]:
    v = data.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


# An effect's fence: a token the broker hands out with proceed, sent back
# as it came in effect_complete (SPEC.md does not fix its JSON type).
Fence = Union[str, int]


def _fence(data: Dict[str, Any]) -> Optional[Fence]:
    v = data.get("fence")
    if isinstance(v, bool):
        return None
    return v if isinstance(v, (str, int)) else None


def _object(data: Dict[str, Any], key: str) -> Optional[Dict[str, Any]]:
    v = data.get(key)
    return v if isinstance(v, dict) else None


class _ReplyAccess:
    """Dict-style access to the whole reply (the API of version 0.1)."""

    reply: Reply

    def __getitem__(self, key: str) -> Any:
        return self.reply[key]

    def __contains__(self, key: object) -> bool:
        return key in self.reply

    def get(self, key: str, default: Any = None) -> Any:
        return self.reply.get(key, default)

    def raw_value(self, *path: str) -> Optional[bytes]:
        """The exact bytes of a member of the reply (see Reply)."""
        return self.reply.raw_value(*path)


@dataclass(frozen=True)
class Receipt:
    """A write_task receipt.  raw: its bytes as the broker sent them;
    data: every member, decoded (a later broker may add some)."""

    client_submission_id: Optional[str]     # None for a legacy call
    task_id: str
    task_path: str                          # where it was created
    digest_schema: Optional[str]            # None for a legacy call
    request_digest: Optional[str]
    file_digest: Optional[str]
    state: str
    created_at: Optional[str]
    raw: bytes = field(repr=False)
    data: Dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def parse(cls, data: Dict[str, Any], raw: bytes) -> Receipt:
        return cls(_opt_str(data, "client_submission_id"),
                   _req_str(data, "task_id", "a receipt"),
                   _req_str(data, "task_path", "a receipt"),
                   _opt_str(data, "digest_schema"),
                   _opt_str(data, "request_digest"),
                   _opt_str(data, "file_digest"),
                   _req_str(data, "state", "a receipt"),
                   _opt_str(data, "created_at"), raw, data)

    def __getitem__(self, key: str) -> Any:
        return self.data[key]


def _receipt_of(reply: Reply, *path: str) -> Receipt:
    obj: Any = reply
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    raw = reply.raw_value(*path)
    if not isinstance(obj, dict) or raw is None:
        raise IdemProtocolError("a reply without %s" % ".".join(path))
    return Receipt.parse(obj, raw)


@dataclass(frozen=True)
class WriteResult(_ReplyAccess):
    """write_task's answer: created (this call made the task) or reused
    (it existed: the receipt is the first call's, byte for byte).

    recovered: this call finished a creation an earlier one interrupted;
    current_path: where FCoP tools have moved the task since (None while
    it is still at receipt.task_path).  path: where the task is now."""

    disposition: str
    action_taken: bool
    idempotent: bool
    receipt: Receipt
    recovered: bool
    current_path: Optional[str]
    reply: Reply = field(repr=False, compare=False)

    @classmethod
    def parse(cls, reply: Reply) -> WriteResult:
        disposition = _req_str(reply, "disposition", "a write_task reply")
        if disposition not in ("created", "reused"):
            raise IdemProtocolError("write_task answered ok with "
                                    "disposition %r" % disposition)
        return cls(disposition,
                   reply.get("action_taken") is True,
                   reply.get("idempotent") is True,
                   _receipt_of(reply, "receipt"),
                   reply.get("recovered") is True,
                   _opt_str(reply, "current_path"), reply)

    @property
    def created(self) -> bool:
        return self.disposition == "created"

    @property
    def reused(self) -> bool:
        return self.disposition == "reused"

    @property
    def path(self) -> str:
        return self.current_path or self.receipt.task_path


@dataclass(frozen=True)
class ReportResult(_ReplyAccess):
    """write_report's answer: deduplicated (a repeat: the first report's
    id and path), report_id, report_path."""

    deduplicated: bool
    report_id: str
    report_path: str
    reply: Reply = field(repr=False, compare=False)

    @classmethod
    def parse(cls, reply: Reply) -> ReportResult:
        return cls(reply.get("deduplicated") is True,
                   _req_str(reply, "report_id", "a write_report reply"),
                   _req_str(reply, "report_path", "a write_report reply"),
                   reply)


@dataclass(frozen=True)
class ConflictExisting:
    """The binding a conflicting id already has (a conflict's
    "existing"); data holds every member."""

    client_submission_id: Optional[str]
    state: Optional[str]
    digest_schema: Optional[str]
    request_digest: Optional[str]
    task_id: Optional[str]
    effect_kind: Optional[str]
    data: Dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def parse(cls, data: Dict[str, Any]) -> ConflictExisting:
        return cls(_opt_str(data, "client_submission_id"),
                   _opt_str(data, "state"), _opt_str(data, "digest_schema"),
                   _opt_str(data, "request_digest"),
                   _opt_str(data, "task_id"), _opt_str(data, "effect_kind"),
                   data)


@dataclass(frozen=True)
class Conflict:
    """A conflict's facts: reason (digest_mismatch, schema_mismatch,
    target_mismatch, task_missing, stale_fence, no_reservation,
    already_committed), message, field, and what the id is bound to."""

    reason: Optional[str]
    message: str
    field: Optional[str]
    existing: Optional[Dict[str, Any]]
    bound: Optional[ConflictExisting]

    @classmethod
    def from_reply(cls, reply: Reply) -> Conflict:
        error = _object(reply, "error") or {}
        existing = _object(reply, "existing")
        return cls(_opt_str(error, "reason"),
                   _opt_str(error, "message") or "",
                   _opt_str(error, "field"), existing,
                   None if existing is None
                   else ConflictExisting.parse(existing))


@dataclass(frozen=True)
class EffectReceipt:
    """An effect's committed receipt (effect_complete "applied", or
    effect_resolve with evidence "applied"): result is what the caller
    reported, and raw the receipt's bytes, the same on every reuse."""

    client_submission_id: Optional[str]
    effect_kind: Optional[str]
    request_digest: Optional[str]
    attempt: Optional[int]
    result: Any
    committed_at: Optional[str]
    raw: bytes = field(repr=False)
    data: Dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def parse(cls, data: Dict[str, Any], raw: bytes) -> EffectReceipt:
        return cls(_opt_str(data, "client_submission_id"),
                   _opt_str(data, "effect_kind"),
                   _opt_str(data, "request_digest"),
                   _opt_int(data, "attempt"), data.get("result"),
                   _opt_str(data, "committed_at"), raw, data)

    def __getitem__(self, key: str) -> Any:
        return self.data[key]


def _effect_receipt_of(reply: Reply, *path: str) -> Optional[EffectReceipt]:
    obj: Any = reply
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    raw = reply.raw_value(*path)
    if not isinstance(obj, dict) or raw is None:
        return None
    return EffectReceipt.parse(obj, raw)


@dataclass(frozen=True)
class Submission:
    """get_submission's record of one id (a task, or an effect when
    effect_kind is set).  receipt (tasks) / effect_receipt (effects) and
    raw_receipt once committed; current_path when FCoP tools moved the
    task.  An effect's: external_key, age_ms, and while it is reserved
    its lease (lease_expires_at, lease_live, lease_ms_left: what
    effect_extend moves; 0 once lapsed); recovered (settled by
    evidence), receipt_pruned (compacted: a tombstone).  data holds
    every member."""

    client_submission_id: str
    state: str
    effect_kind: Optional[str]
    digest_schema: Optional[str]
    request_digest: Optional[str]
    task_id: Optional[str]
    task_path: Optional[str]
    current_path: Optional[str]
    reserved_at: Optional[str]
    updated_at: Optional[str]
    attempt: Optional[int]
    receipt: Optional[Receipt]
    effect_receipt: Optional[EffectReceipt]
    external_key: Optional[str]
    age_ms: Optional[int]
    lease_expires_at: Optional[str]
    lease_live: Optional[bool]
    lease_ms_left: Optional[int]
    recovered: bool
    receipt_pruned: bool
    raw_receipt: Optional[bytes] = field(repr=False)
    data: Dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def parse(cls, reply: Reply) -> Submission:
        data = _object(reply, "submission")
        if data is None:
            raise IdemProtocolError("found, but no submission object")
        kind = _opt_str(data, "effect_kind")
        receipt = None
        effect_receipt = None
        raw = reply.raw_value("submission", "receipt")
        if isinstance(data.get("receipt"), dict) and raw is not None:
            if kind is None or kind == "write_task":
                receipt = _receipt_of(reply, "submission", "receipt")
            else:
                effect_receipt = _effect_receipt_of(reply, "submission",
                                                    "receipt")
        return cls(_req_str(data, "client_submission_id", "a submission"),
                   _req_str(data, "state", "a submission"), kind,
                   _opt_str(data, "digest_schema"),
                   _opt_str(data, "request_digest"),
                   _opt_str(data, "task_id"), _opt_str(data, "task_path"),
                   _opt_str(data, "current_path"),
                   _opt_str(data, "reserved_at"),
                   _opt_str(data, "updated_at"), _opt_int(data, "attempt"),
                   receipt, effect_receipt, _opt_str(data, "external_key"),
                   _opt_int(data, "age_ms"),
                   _opt_str(data, "lease_expires_at"),
                   _opt_bool(data, "lease_live"),
                   _opt_int(data, "lease_ms_left"),
                   data.get("recovered") is True,
                   data.get("receipt_pruned") is True, raw, data)

    def __getitem__(self, key: str) -> Any:
        return self.data[key]


@dataclass(frozen=True)
class SubmissionLookup(_ReplyAccess):
    """get_submission's answer: found, and the submission when found."""

    found: bool
    submission: Optional[Submission]
    reply: Reply = field(repr=False, compare=False)

    @classmethod
    def parse(cls, reply: Reply) -> SubmissionLookup:
        found = reply.get("found") is True
        return cls(found, Submission.parse(reply) if found else None, reply)


@dataclass(frozen=True)
class Hello(_ReplyAccess):
    """hello's answer.  ops: the ops this broker serves (None from a
    broker that does not list them: assume the write_task family only)."""

    server: str
    version: str
    protocol: Optional[int]
    digest_schemas: List[str]
    ops: Optional[List[str]]
    pid: Optional[int]
    root: Optional[str]
    reply: Reply = field(repr=False, compare=False)

    @classmethod
    def parse(cls, reply: Reply) -> Hello:
        schemas = reply.get("digest_schemas")
        ops = reply.get("ops")
        return cls(_req_str(reply, "server", "hello"),
                   _req_str(reply, "version", "hello"),
                   _opt_int(reply, "protocol"),
                   [s for s in schemas if isinstance(s, str)]
                   if isinstance(schemas, list) else [],
                   [s for s in ops if isinstance(s, str)]
                   if isinstance(ops, list) else None,
                   _opt_int(reply, "pid"), _opt_str(reply, "root"), reply)

    def serves(self, op: str) -> bool:
        """Whether the broker lists op in hello's ops."""
        return self.ops is not None and op in self.ops


# What effect_begin answers with "ok": true (the other dispositions are
# raised as errors).
Disposition = Literal["proceed", "reused"]


@dataclass(frozen=True)
class EffectBegin(_ReplyAccess):
    """effect_begin's answer, one of SPEC.md's dispositions:

    proceed: perform the effect now, passing external_key to the
      downstream system as its idempotency key; report it with
      effect_complete(fence=fence, ...).  attempt counts from 1.
    reused: it was applied already; receipt is the first one, byte for
      byte (recovered: settled by effect_resolve).
    conflict, in_progress, outcome_unknown: Client.effect_begin raises
      (IdemConflict, IdemInProgress, IdemOutcomeUnknown) rather than
      return them, so that nobody mistakes them for a go-ahead."""

    disposition: Disposition
    attempt: Optional[int]
    fence: Optional[Fence]
    external_key: Optional[str]
    receipt: Optional[EffectReceipt]
    recovered: bool
    reply: Reply = field(repr=False, compare=False)

    @classmethod
    def parse(cls, reply: Reply) -> EffectBegin:
        disposition = _req_str(reply, "disposition", "an effect_begin reply")
        if disposition not in ("proceed", "reused"):
            raise IdemProtocolError("effect_begin answered ok with "
                                    "disposition %r" % disposition)
        begin = cls(cast(Disposition, disposition),
                    _opt_int(reply, "attempt"),
                    _fence(reply), _opt_str(reply, "external_key"),
                    _effect_receipt_of(reply, "receipt"),
                    reply.get("recovered") is True, reply)
        if disposition == "proceed" and (begin.fence is None
                                         or begin.external_key is None):
            raise IdemProtocolError("proceed without fence or external_key")
        if disposition == "proceed" and (begin.attempt is None
                                         or begin.attempt < 1):
            raise IdemProtocolError("proceed without an attempt (an "
                                    "integer from 1)")
        if disposition == "reused" and begin.receipt is None:
            raise IdemProtocolError("reused without a receipt")
        return begin

    @property
    def proceed(self) -> bool:
        return self.disposition == "proceed"

    @property
    def reused(self) -> bool:
        return self.disposition == "reused"


@dataclass(frozen=True)
class EffectSettled(_ReplyAccess):
    """effect_complete's or effect_resolve's answer: receipt when the
    effect is now committed (applied), None when the reservation was
    released (not_applied) or left outcome_unknown (evidence unknown)."""

    receipt: Optional[EffectReceipt]
    reply: Reply = field(repr=False, compare=False)

    @classmethod
    def parse(cls, reply: Reply) -> EffectSettled:
        return cls(_effect_receipt_of(reply, "receipt"), reply)


@dataclass(frozen=True)
class EffectExtended(_ReplyAccess):
    """effect_extend's answer: the live lease now ends at
    lease_expires_at (the broker's clock, RFC 3339 UTC)."""

    lease_expires_at: str
    reply: Reply = field(repr=False, compare=False)

    @classmethod
    def parse(cls, reply: Reply) -> EffectExtended:
        return cls(_req_str(reply, "lease_expires_at",
                            "an effect_extend reply"), reply)
