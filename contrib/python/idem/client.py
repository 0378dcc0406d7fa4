# SPDX-License-Identifier: ISC
"""idem.client: one connection to idemd and its ops.

The wire protocol (SPEC.md): newline-delimited JSON over a Unix stream
socket, one request line and one response line, at most 1 MiB each with
the newline; responses come back in request order.  A Client is not
thread-safe: use one per thread.
"""

from __future__ import annotations

import os
import socket
import time
from types import TracebackType
from typing import (TYPE_CHECKING, Any, List, Mapping, Optional, Sequence,
                    Tuple, Type, TypeVar)

from . import ops
from .errors import IdemError, IdemProtocolError, IdemTransportError
from .replies import (EffectBegin, EffectExtended, EffectSettled, Fence,
                      Hello, ReportResult, SubmissionLookup, WriteResult)
from .views import Diagnosis, Stats
from .wire import (READ_BYTES, LineBuffer, Reply, closes_connection,
                   decode_reply, encode_request)

if TYPE_CHECKING:
    from .effects import Effect, Probe

__all__ = ["Client", "default_socket_path", "DEFAULT_ROOT", "SOCKET_NAME"]

DEFAULT_ROOT = "./fcop"
SOCKET_NAME = ".idem/idemd.sock"

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
    timeout (seconds, None: block) bounds the connect, each send, and the
    wait for each answer as a whole (an answer that trickles in a byte at
    a time does not restart it).
    A write_task can legitimately wait for an identical submission in
    flight (idemd --inflight-wait-ms, 10 s by default): keep timeout above
    it.  Use as a context manager, or call close().

    After an IdemTransportError or IdemProtocolError the connection is
    closed and every later call raises IdemTransportError: an unread
    answer could otherwise be taken for the reply to a later request.
    So is a connection on which the broker sent a line nobody asked for
    (found before the next request is sent: IdemProtocolError).
    """

    def __init__(self, path: Optional[str] = None,
                 timeout: Optional[float] = None,
                 sock: Optional[socket.socket] = None) -> None:
        self.path = path if path is not None else default_socket_path()
        self.timeout = timeout
        self._lines = LineBuffer()
        self._next_id = 1
        self._answered = False      # a reply was read on this connection
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
        self._lines.clear()
        self._answered = False

    @property
    def closed(self) -> bool:
        return self._sock is None

    def _lost(self, error: IdemError) -> IdemError:
        self.close()
        return error

    def _interrupt(self) -> None:
        """From another thread: wake a call blocked on this connection
        (it fails with IdemTransportError).  The lease keeper's stop."""
        s = self._sock
        if s is not None:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    # -- lines (idem.wire decides, this reads and writes) --

    def _encode(self, request: Mapping[str, Any]) -> Tuple[Any, bytes]:
        if "id" not in request:
            request = dict(request, id=self._next_id)
            self._next_id += 1
        return request.get("id"), encode_request(request)

    def _check_quiet(self) -> None:
        """Before a request: nothing may be waiting on a connection that
        has answered before.  Bytes kept past the last line are an
        answer nobody asked for (two for one request), which would be
        taken for this request's.  A fresh connection may hold the
        broker's refusal (SPEC.md: too_many_connections, sent before it
        reads): that is this request's answer.  Only the bytes already
        read are looked at, never the socket (a system call on every
        call): a stray line that arrives after the last answer was read
        is read as the next answer, and refused there by its id (another
        request's, or none on a connection that has answered)."""
        if self._answered and self._lines.pending():
            raise self._lost(IdemProtocolError(
                "the broker sent a line nobody asked for"))

    def _refusal(self) -> bool:
        """After a send or receive failure on a connection that has not
        answered: the broker may have refused it before reading (SPEC.md:
        too_many_connections, one line, then it closes), and a send
        after its close fails with the refusal still waiting.  What is
        waiting is read without waiting; whether a whole line is there
        (the answer)."""
        s = self._sock
        if s is None or self._answered:
            return False
        try:
            while not self._lines.has_line():
                chunk = s.recv(READ_BYTES, socket.MSG_DONTWAIT)
                if not chunk:
                    break
                self._lines.feed(chunk)
        except OSError:
            pass
        return self._lines.has_line()

    def _send(self, data: bytes) -> None:
        if self._sock is None:
            raise IdemTransportError("the connection is closed")
        self._check_quiet()
        try:
            self._sock.settimeout(self.timeout)
            self._sock.sendall(data)
        except OSError as e:
            if self._refusal():
                return      # _read_line takes it
            raise self._lost(IdemTransportError(
                "send: %s" % (e.strerror or e), e)) from e

    def _read_line(self) -> bytes:
        """One response line without its newline; partial reads are
        joined, bytes past the line are kept for the next call.  The
        timeout bounds the whole wait, not each read."""
        timeout = self.timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._sock is None:
                raise IdemTransportError("the connection is closed")
            try:
                line = self._lines.next_line()
            except IdemProtocolError as e:
                raise self._lost(e) from None
            if line is not None:
                self._answered = True
                return line
            try:
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise socket.timeout("no answer within %g s"
                                             % (timeout or 0))
                    self._sock.settimeout(left)
                chunk = self._sock.recv(READ_BYTES)
            except InterruptedError:
                continue
            except OSError as e:
                if self._refusal():
                    continue
                raise self._lost(IdemTransportError(
                    "receive: %s" % (e.strerror or e), e)) from e
            if not chunk:
                raise self._lost(IdemTransportError(
                    "receive: the broker closed the connection"))
            self._lines.feed(chunk)

    def _decode(self, line: bytes, request_id: Any,
                answered: bool) -> Reply:
        try:
            reply = decode_reply(line, request_id, answered)
        except IdemProtocolError as e:
            raise self._lost(e) from None
        if closes_connection(reply):
            self.close()        # the broker closes the connection
        return reply

    # -- requests --

    def call(self, request: Mapping[str, Any]) -> Reply:
        """Send one request (a mapping with "op") and return its Reply,
        whatever its "ok".  An "id" is added unless the request has one.
        Raises IdemTransportError / IdemProtocolError only (and IdemError
        for a request it refuses to send: too_large, invalid_utf8)."""
        request_id, line = self._encode(request)
        answered = self._answered
        self._send(line)
        return self._decode(self._read_line(), request_id, answered)

    def pipeline(self, requests: Sequence[Mapping[str, Any]]) -> List[Reply]:
        """Send every request, then read every reply (in request order)."""
        encoded = [self._encode(r) for r in requests]
        answered = self._answered
        self._send(b"".join(line for _, line in encoded))
        return [self._decode(self._read_line(), rid, answered or i > 0)
                for i, (rid, _) in enumerate(encoded)]

    def _run(self, op: ops.Op[_T]) -> _T:
        reply = self.call(op.request)
        try:
            return op.result(reply)
        except IdemProtocolError:
            # An answer without what its op promises: nothing more this
            # broker says on the connection is trusted.
            self.close()
            raise

    def hello(self) -> Hello:
        """Who is there: server, version, protocol, digest_schemas, ops."""
        return self._run(ops.hello())

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
        return self._run(ops.write_task(task, client_submission_id,
                                        request_digest, meta, digest_schema))

    def write_report(self, task_id: str, report: Mapping[str, Any],
                     client_submission_id: Optional[str] = None,
                     meta: Optional[Mapping[str, Any]] = None
                     ) -> ReportResult:
        """Write a REPORT for task_id.  report: sender, and optionally
        recipient, status, body.  Returns a ReportResult (deduplicated,
        report_id, report_path); raises IdemConflict when the id is bound
        to other content, IdemError (task_not_found, ...) otherwise."""
        return self._run(ops.write_report(task_id, report,
                                          client_submission_id, meta))

    def get_submission(self, client_submission_id: str,
                       effect_kind: Optional[str] = None
                       ) -> SubmissionLookup:
        """The record of an id: found, submission (state, receipt once
        committed, ...).  effect_kind: look the id up among that kind's
        effects rather than the tasks.  Read-only."""
        return self._run(ops.get_submission(client_submission_id,
                                            effect_kind))

    def diagnose(self, stale_after_ms: Optional[int] = None) -> Diagnosis:
        """The unfinished submissions and effects (Diagnosis: entries,
        outcome_unknown effects first; counts; effect_counts).
        stale_after_ms: the age past which an entry is stalled (the
        broker's default is 30000).  Read-only."""
        return self._run(ops.diagnose(stale_after_ms))

    def stats(self) -> Stats:
        """The broker's counters (Stats)."""
        return self._run(ops.stats())

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
        return self._run(ops.effect_begin(client_submission_id,
                                          effect_kind, request, lease_ms,
                                          request_digest))

    def effect_complete(self, client_submission_id: str, effect_kind: str,
                        fence: Fence, outcome: str = "applied",
                        result: Any = None) -> EffectSettled:
        """Report a proceeded effect: outcome "applied" commits result in
        the receipt (returned as .receipt); "not_applied" releases the
        reservation (the next begin proceeds, attempt + 1, same
        external_key).  Raises IdemConflict (stale_fence: another begin
        was let in since; no_reservation)."""
        return self._run(ops.effect_complete(client_submission_id,
                                             effect_kind, fence, outcome,
                                             result))

    def effect_extend(self, client_submission_id: str, effect_kind: str,
                      fence: Fence, lease_ms: int = ops.DEFAULT_LEASE_MS
                      ) -> EffectExtended:
        """Keep a proceeded effect's lease live: it now ends lease_ms
        from now on the broker's clock (.lease_expires_at).  Raises
        IdemConflict (stale_fence: another begin was let in since;
        no_reservation; already_committed), IdemOutcomeUnknown (the lease
        had lapsed: not extended, but effect_complete with this fence is
        still accepted).  Client.effect calls it for its block."""
        return self._run(ops.effect_extend(client_submission_id,
                                           effect_kind, fence, lease_ms))

    def effect_resolve(self, client_submission_id: str, effect_kind: str,
                       observed: str, result: Any = None,
                       source: Optional[str] = None) -> EffectSettled:
        """Settle an outcome_unknown effect with evidence: observed
        "applied" commits result (later begins: reused, recovered),
        "not_applied" releases, "unknown" leaves it for diagnose.  Raises
        IdemConflict (already_committed) when the evidence contradicts a
        committed receipt."""
        return self._run(ops.effect_resolve(client_submission_id,
                                            effect_kind, observed, result,
                                            source))

    def effect(self, client_submission_id: str, effect_kind: str,
               request: Any, lease_ms: Optional[int] = None,
               probe: Optional[Probe] = None, extend: bool = True) -> Effect:
        """A context manager around one effect (see idem.Effect):

            with client.effect(sid, "mail.send/v1", msg) as e:
                if e.proceed:
                    e.complete(send(msg, idempotency_key=e.external_key))
            print(e.result)         # the first result, on every retry

        While a block that was told to proceed runs, a thread extends the
        lease (effect_extend, on a connection of its own) every third of
        lease_ms (default 30000), so a block may run longer than its
        lease; extend=False leaves the lease as begin set it."""
        from .effects import Effect
        return Effect(self, client_submission_id, effect_kind, request,
                      lease_ms=lease_ms, probe=probe, extend=extend)
