# SPDX-License-Identifier: ISC
"""idem.ops: every op of SPEC.md as a request and the parser of its reply,
shared by the synchronous client (idem.Client) and the asyncio one
(idem.aio.Client), so that the two send the same bytes and return the
same typed replies.  No I/O here.

An Op holds the request (a dict with "op"; the client adds "id") and
result(reply): the typed reply when the broker says "ok": true, else the
typed error (error_from_reply) raised.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Generic, Mapping, Optional, TypeVar

from .digest import task_digest
from .errors import IdemProtocolError, error_from_reply
from .replies import (EffectBegin, EffectExtended, EffectSettled, Fence,
                      Hello, ReportResult, SubmissionLookup, WriteResult)
from .views import Diagnosis, Stats
from .wire import Reply

__all__ = ["Op", "DEFAULT_LEASE_MS", "hello", "write_task", "write_report",
           "get_submission", "diagnose", "stats", "effect_begin",
           "effect_complete", "effect_extend", "effect_resolve"]

# SPEC.md, "Effects": lease_ms is 100..86400000, 30000 when absent.
DEFAULT_LEASE_MS = 30000

_T = TypeVar("_T")


class Op(Generic[_T]):
    """One request and how its reply becomes a _T."""

    __slots__ = ("request", "_parse")

    def __init__(self, request: Dict[str, Any],
                 parse: Callable[[Reply], _T]) -> None:
        self.request = request
        self._parse = parse

    def result(self, reply: Reply) -> _T:
        """The typed reply; raises the typed error of an error reply."""
        if not reply["ok"]:
            raise error_from_reply(reply)
        return self._parse(reply)


def _same(what: str, sent: Optional[str], answered: Any,
          required: bool = False) -> None:
    """A key the answer names must be the request's (an answer is about
    the request's key: one about another is an answer to another
    request); required: it must name it."""
    if answered is None and not required:
        return
    if answered != sent:
        raise IdemProtocolError("the answer's %s is %r, the request's %r"
                                % (what, answered, sent))


def _effect_keys(data: Any, sid: str, kind: str) -> None:
    if isinstance(data, dict):
        _same("client_submission_id", sid, data.get("client_submission_id"))
        _same("effect_kind", kind, data.get("effect_kind"))


def _write_result(sid: Optional[str]) -> Callable[[Reply], WriteResult]:
    def parse(reply: Reply) -> WriteResult:
        result = WriteResult.parse(reply)
        if sid is not None:     # a legacy call's receipt names no id
            _same("receipt's client_submission_id", sid,
                  result.receipt.data.get("client_submission_id"))
        return result
    return parse


def _lookup(sid: str) -> Callable[[Reply], SubmissionLookup]:
    def parse(reply: Reply) -> SubmissionLookup:
        found = SubmissionLookup.parse(reply)
        if found.submission is not None:
            _same("client_submission_id", sid,
                  found.submission.client_submission_id, True)
        return found
    return parse


def _begun(sid: str, kind: str) -> Callable[[Reply], EffectBegin]:
    def parse(reply: Reply) -> EffectBegin:
        _effect_keys(reply, sid, kind)
        begin = EffectBegin.parse(reply)
        _effect_keys(reply.get("receipt"), sid, kind)
        return begin
    return parse


def _settled(sid: str, kind: str, applied: bool
             ) -> Callable[[Reply], EffectSettled]:
    def parse(reply: Reply) -> EffectSettled:
        _effect_keys(reply, sid, kind)
        settled = EffectSettled.parse(reply)
        if applied and settled.receipt is None:
            raise IdemProtocolError("an effect applied without a receipt")
        _effect_keys(reply.get("receipt"), sid, kind)
        return settled
    return parse


def hello() -> Op[Hello]:
    return Op({"op": "hello"}, Hello.parse)


def write_task(task: Mapping[str, Any],
               client_submission_id: Optional[str] = None,
               request_digest: Any = None,
               meta: Optional[Mapping[str, Any]] = None,
               digest_schema: Optional[str] = None) -> Op[WriteResult]:
    request: Dict[str, Any] = {"op": "write_task", "task": task}
    if client_submission_id is not None:
        request["client_submission_id"] = client_submission_id
    if digest_schema is not None:
        request["digest_schema"] = digest_schema
    if request_digest is True:
        request_digest = task_digest(task)
    if request_digest is not None:
        request["request_digest"] = request_digest
    if meta is not None:
        request["meta"] = meta
    return Op(request, _write_result(client_submission_id))


def write_report(task_id: str, report: Mapping[str, Any],
                 client_submission_id: Optional[str] = None,
                 meta: Optional[Mapping[str, Any]] = None
                 ) -> Op[ReportResult]:
    request: Dict[str, Any] = {"op": "write_report", "task_id": task_id,
                               "report": report}
    if client_submission_id is not None:
        request["client_submission_id"] = client_submission_id
    if meta is not None:
        request["meta"] = meta
    return Op(request, ReportResult.parse)


def get_submission(client_submission_id: str,
                   effect_kind: Optional[str] = None
                   ) -> Op[SubmissionLookup]:
    request: Dict[str, Any] = {"op": "get_submission",
                               "client_submission_id": client_submission_id}
    if effect_kind is not None:
        request["effect_kind"] = effect_kind
    return Op(request, _lookup(client_submission_id))


def diagnose(stale_after_ms: Optional[int] = None) -> Op[Diagnosis]:
    request: Dict[str, Any] = {"op": "diagnose"}
    if stale_after_ms is not None:
        request["stale_after_ms"] = stale_after_ms
    return Op(request, Diagnosis.parse)


def stats() -> Op[Stats]:
    return Op({"op": "stats"}, Stats.parse)


def effect_begin(client_submission_id: str, effect_kind: str, request: Any,
                 lease_ms: Optional[int] = None,
                 request_digest: Optional[str] = None) -> Op[EffectBegin]:
    req: Dict[str, Any] = {"op": "effect_begin",
                           "client_submission_id": client_submission_id,
                           "effect_kind": effect_kind, "request": request}
    if request_digest is not None:
        req["request_digest"] = request_digest
    if lease_ms is not None:
        req["lease_ms"] = lease_ms
    return Op(req, _begun(client_submission_id, effect_kind))


def effect_complete(client_submission_id: str, effect_kind: str,
                    fence: Fence, outcome: str = "applied",
                    result: Any = None) -> Op[EffectSettled]:
    req: Dict[str, Any] = {"op": "effect_complete",
                           "client_submission_id": client_submission_id,
                           "effect_kind": effect_kind, "fence": fence,
                           "outcome": outcome}
    if outcome == "applied" or result is not None:
        req["result"] = result
    return Op(req, _settled(client_submission_id, effect_kind,
                            outcome == "applied"))


def effect_extend(client_submission_id: str, effect_kind: str, fence: Fence,
                  lease_ms: int = DEFAULT_LEASE_MS) -> Op[EffectExtended]:
    return Op({"op": "effect_extend",
               "client_submission_id": client_submission_id,
               "effect_kind": effect_kind, "fence": fence,
               "lease_ms": lease_ms}, EffectExtended.parse)


def effect_resolve(client_submission_id: str, effect_kind: str,
                   observed: str, result: Any = None,
                   source: Optional[str] = None) -> Op[EffectSettled]:
    evidence: Dict[str, Any] = {"observed": observed}
    if result is not None:
        evidence["result"] = result
    if source is not None:
        evidence["source"] = source
    return Op({"op": "effect_resolve",
               "client_submission_id": client_submission_id,
               "effect_kind": effect_kind, "evidence": evidence},
              _settled(client_submission_id, effect_kind,
                       observed == "applied"))
