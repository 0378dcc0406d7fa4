# SPDX-License-Identifier: ISC
"""idem.client: one connection to idemd and its ops.

The wire protocol (SPEC.md): newline-delimited JSON over a Unix stream
socket, one request line and one response line, at most 1 MiB each with
the newline; responses come back in request order.  A Client is not
thread-safe: use one per thread.
"""

from __future__ import annotations

import json
import os
import socket
from types import TracebackType
from typing import (TYPE_CHECKING, Any, Callable, Dict, List, Mapping,
                    Optional, Sequence, Tuple, Type, TypeVar)

from .digest import task_digest
from .errors import (IdemError, IdemProtocolError, IdemTransportError,
                     error_from_reply)
from .replies import (EffectBegin, EffectSettled, Fence, Hello,
                      ReportResult, SubmissionLookup, WriteResult)
from .wire import MAX_LINE_BYTES, Reply

if TYPE_CHECKING:
    from .effects import Effect, Probe

__all__ = ["Client", "default_socket_path", "DEFAULT_ROOT", "SOCKET_NAME"]

DEFAULT_ROOT = "./fcop"
SOCKET_NAME = ".idem/idemd.sock"
_READ_BYTES = 65536

_T = TypeVar("_T")


def default_socket_path() -> str:
    """$IDEM_SOCKET, else $IDEM_ROOT/.idem/idemd.sock, else
    ./fcop/.idem/idemd.sock (empty variables count as unset)."""
    path = os.environ.get("IDEM_SOCKET")
    if path:
        return path
    root = os.environ.get("IDEM_ROOT") or DEFAULT_ROOT
    return os.path.join(root, SOCKET_NAME)


class Client:
    """One connection to idemd.

    Client(path=None, timeout=None): path defaults to default_socket_path();
    timeout (seconds, None: block) bounds each connect, send and receive.
    A write_task can legitimately wait for an identical submission in
    flight (idemd --inflight-wait-ms, 10 s by default): keep timeout above
    it.  Use as a context manager, or call close().

    After an IdemTransportError or IdemProtocolError the connection is
    closed and every later call raises IdemTransportError: an unread
    answer could otherwise be taken for the reply to a later request.
    """

    def __init__(self, path: Optional[str] = None,
                 timeout: Optional[float] = None,
                 sock: Optional[socket.socket] = None) -> None:
        self.path = path if path is not None else default_socket_path()
        self.timeout = timeout
        self._buf = bytearray()
        self._next_id = 1
        self._sock: Optional[socket.socket]
        if sock is not None:        # an already connected stream (tests)
            self._sock = sock
            return
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(timeout)
            s.connect(self.path)
        except OSError as e:
            s.close()
            self._sock = None
            raise IdemTransportError("connect %s: %s" % (
                self.path, e.strerror or e), e) from e
        self._sock = s

    def __enter__(self) -> Client:
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]],
                 exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._buf = bytearray()

    @property
    def closed(self) -> bool:
        return self._sock is None

    def _lost(self, error: IdemError) -> IdemError:
        self.close()
        return error

    # -- lines --

    def _encode(self, request: Mapping[str, Any]) -> Tuple[Any, bytes]:
        if "id" not in request:
            request = dict(request, id=self._next_id)
            self._next_id += 1
        try:
            line = json.dumps(request, ensure_ascii=False,
                              separators=(",", ":"),
                              allow_nan=False).encode("utf-8") + b"\n"
        except UnicodeEncodeError as e:
            raise IdemError("invalid_utf8", "the request holds a string "
                            "that is not valid Unicode: %s" % e) from e
        except (TypeError, ValueError) as e:
            raise IdemError("invalid_request", str(e)) from e
        if len(line) > MAX_LINE_BYTES:
            raise IdemError("too_large", "the request is %d bytes; a line "
                            "is at most %d, newline included" % (
                                len(line), MAX_LINE_BYTES))
        return request.get("id"), line

    def _send(self, data: bytes) -> None:
        if self._sock is None:
            raise IdemTransportError("the connection is closed")
        try:
            self._sock.sendall(data)
        except OSError as e:
            raise self._lost(IdemTransportError(
                "send: %s" % (e.strerror or e), e)) from e

    def _read_line(self) -> bytes:
        """One response line without its newline; partial reads are
        joined, bytes past the line are kept for the next call."""
        if self._sock is None:
            raise IdemTransportError("the connection is closed")
        scanned = 0
        while True:
            nl = self._buf.find(b"\n", scanned)
            if nl != -1:
                break
            scanned = len(self._buf)
            if scanned >= MAX_LINE_BYTES:
                raise self._lost(IdemProtocolError(
                    "a response line over %d bytes" % MAX_LINE_BYTES))
            try:
                chunk = self._sock.recv(_READ_BYTES)
            except InterruptedError:
                continue
            except OSError as e:
                raise self._lost(IdemTransportError(
                    "receive: %s" % (e.strerror or e), e)) from e
            if not chunk:
                raise self._lost(IdemTransportError(
                    "receive: the broker closed the connection"))
            self._buf += chunk
        if nl + 1 > MAX_LINE_BYTES:
            raise self._lost(IdemProtocolError(
                "a response line over %d bytes" % MAX_LINE_BYTES))
        line = bytes(self._buf[:nl])
        del self._buf[:nl + 1]
        return line

    def _decode(self, line: bytes, request_id: Any) -> Reply:
        try:
            data = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise self._lost(IdemProtocolError(
                "the response is not JSON: %s" % e)) from e
        if not isinstance(data, dict) or not isinstance(data.get("ok"), bool):
            raise self._lost(IdemProtocolError(
                "the response is not an object with a boolean ok"))
        # Error replies to unparseable lines carry no id; ours always parse.
        if "id" in data and data["id"] != request_id:
            raise self._lost(IdemProtocolError(
                "the response answers request %r, not %r" % (
                    data["id"], request_id)))
        reply = Reply(data, line)
        if not data["ok"]:
            error = reply.get("error")
            if isinstance(error, dict) and error.get("code") == "too_large":
                self.close()    # the broker closes the connection
        return reply

    # -- requests --

    def call(self, request: Mapping[str, Any]) -> Reply:
        """Send one request (a mapping with "op") and return its Reply,
        whatever its "ok".  An "id" is added unless the request has one.
        Raises IdemTransportError / IdemProtocolError only (and IdemError
        for a request it refuses to send: too_large, invalid_utf8)."""
        request_id, line = self._encode(request)
        self._send(line)
        return self._decode(self._read_line(), request_id)

    def pipeline(self, requests: Sequence[Mapping[str, Any]]) -> List[Reply]:
        """Send every request, then read every reply (in request order)."""
        encoded = [self._encode(r) for r in requests]
        self._send(b"".join(line for _, line in encoded))
        return [self._decode(self._read_line(), rid) for rid, _ in encoded]

    def _ok(self, request: Mapping[str, Any],
            parse: Callable[[Reply], _T]) -> _T:
        reply = self.call(request)
        if not reply["ok"]:
            raise error_from_reply(reply)
        return parse(reply)

    def hello(self) -> Hello:
        """Who is there: server, version, protocol, digest_schemas, ops."""
        return self._ok({"op": "hello"}, Hello.parse)

    def write_task(self, task: Mapping[str, Any],
                   client_submission_id: Optional[str] = None,
                   request_digest: Any = None,
                   meta: Optional[Mapping[str, Any]] = None,
                   digest_schema: Optional[str] = None) -> WriteResult:
        """Create a task.  task: sender, recipient, subject and the optional
        fields of SPEC.md.  Without client_submission_id the call is legacy
        (a new task each time, result.idempotent false).  request_digest:
        a digest for the broker to check (True: task_digest(task)); meta:
        a free-form mapping, never digested.  Returns a WriteResult
        (created or reused); raises IdemConflict on a conflict, IdemError
        on any other error."""
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
        return self._ok(request, WriteResult.parse)

    def write_report(self, task_id: str, report: Mapping[str, Any],
                     client_submission_id: Optional[str] = None,
                     meta: Optional[Mapping[str, Any]] = None
                     ) -> ReportResult:
        """Write a REPORT for task_id.  report: sender, and optionally
        recipient, status, body.  Returns a ReportResult (deduplicated,
        report_id, report_path); raises IdemConflict when the id is bound
        to other content, IdemError (task_not_found, ...) otherwise."""
        request: Dict[str, Any] = {"op": "write_report", "task_id": task_id,
                                   "report": report}
        if client_submission_id is not None:
            request["client_submission_id"] = client_submission_id
        if meta is not None:
            request["meta"] = meta
        return self._ok(request, ReportResult.parse)

    def get_submission(self, client_submission_id: str,
                       effect_kind: Optional[str] = None
                       ) -> SubmissionLookup:
        """The record of an id: found, submission (state, receipt once
        committed, ...).  effect_kind: look the id up among that kind's
        effects rather than the tasks.  Read-only."""
        request: Dict[str, Any] = {
            "op": "get_submission",
            "client_submission_id": client_submission_id}
        if effect_kind is not None:
            request["effect_kind"] = effect_kind
        return self._ok(request, SubmissionLookup.parse)

    def diagnose(self, stale_after_ms: Optional[int] = None) -> Reply:
        """The unfinished submissions: {"entries": [...], "counts": {...}}."""
        request: Dict[str, Any] = {"op": "diagnose"}
        if stale_after_ms is not None:
            request["stale_after_ms"] = stale_after_ms
        return self._ok(request, lambda r: r)

    def stats(self) -> Reply:
        """The broker's counters."""
        return self._ok({"op": "stats"}, lambda r: r)

    # -- effects (SPEC.md, "Effects") --

    def effect_begin(self, client_submission_id: str, effect_kind: str,
                     request: Any, lease_ms: Optional[int] = None,
                     request_digest: Optional[str] = None) -> EffectBegin:
        """Ask before performing an effect.  Returns an EffectBegin whose
        disposition is proceed (perform it now: attempt, fence,
        external_key) or reused (done already: receipt).  Raises
        IdemConflict (the key is bound to another request),
        IdemInProgress (another caller's lease is live; retryable) and
        IdemOutcomeUnknown (a lease lapsed: settle it with
        effect_resolve), IdemError otherwise."""
        req: Dict[str, Any] = {"op": "effect_begin",
                               "client_submission_id": client_submission_id,
                               "effect_kind": effect_kind,
                               "request": request}
        if request_digest is not None:
            req["request_digest"] = request_digest
        if lease_ms is not None:
            req["lease_ms"] = lease_ms
        return self._ok(req, EffectBegin.parse)

    def effect_complete(self, client_submission_id: str, effect_kind: str,
                        fence: Fence, outcome: str = "applied",
                        result: Any = None) -> EffectSettled:
        """Report a proceeded effect: outcome "applied" commits result in
        the receipt (returned as .receipt); "not_applied" releases the
        reservation (the next begin proceeds, attempt + 1, same
        external_key).  Raises IdemConflict (stale_fence: another begin
        was let in since; no_reservation)."""
        req: Dict[str, Any] = {"op": "effect_complete",
                               "client_submission_id": client_submission_id,
                               "effect_kind": effect_kind, "fence": fence,
                               "outcome": outcome}
        if outcome == "applied" or result is not None:
            req["result"] = result
        return self._ok(req, EffectSettled.parse)

    def effect_resolve(self, client_submission_id: str, effect_kind: str,
                       observed: str, result: Any = None,
                       source: Optional[str] = None) -> EffectSettled:
        """Settle an outcome_unknown effect with evidence: observed
        "applied" commits result (later begins: reused, recovered),
        "not_applied" releases, "unknown" leaves it for diagnose.  Raises
        IdemConflict (already_committed) when the evidence contradicts a
        committed receipt."""
        evidence: Dict[str, Any] = {"observed": observed}
        if result is not None:
            evidence["result"] = result
        if source is not None:
            evidence["source"] = source
        return self._ok({"op": "effect_resolve",
                         "client_submission_id": client_submission_id,
                         "effect_kind": effect_kind, "evidence": evidence},
                        EffectSettled.parse)

    def effect(self, client_submission_id: str, effect_kind: str,
               request: Any, lease_ms: Optional[int] = None,
               probe: Optional[Probe] = None) -> Effect:
        """A context manager around one effect (see idem.Effect):

            with client.effect(sid, "mail.send/v1", msg) as e:
                if e.proceed:
                    e.complete(send(msg, idempotency_key=e.external_key))
            print(e.result)         # the first result, on every retry
        """
        from .effects import Effect
        return Effect(self, client_submission_id, effect_kind, request,
                      lease_ms=lease_ms, probe=probe)
