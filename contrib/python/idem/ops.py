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
from .errors import error_from_reply
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
    return Op(request, WriteResult.parse)


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
    return Op(request, SubmissionLookup.parse)


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
    return Op(req, EffectBegin.parse)


def effect_complete(client_submission_id: str, effect_kind: str,
                    fence: Fence, outcome: str = "applied",
                    result: Any = None) -> Op[EffectSettled]:
    req: Dict[str, Any] = {"op": "effect_complete",
                           "client_submission_id": client_submission_id,
                           "effect_kind": effect_kind, "fence": fence,
                           "outcome": outcome}
    if outcome == "applied" or result is not None:
        req["result"] = result
    return Op(req, EffectSettled.parse)


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
              EffectSettled.parse)
