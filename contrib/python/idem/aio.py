# SPDX-License-Identifier: ISC
"""idem.aio: the asyncio client of idemd.

The same ops, typed replies and typed errors as idem.Client (the
requests, the parsing and the errors are idem.ops', idem.wire's and
idem.errors', shared by both), awaited:

    import idem, idem.aio

    async def main() -> None:
        async with idem.aio.Client() as c:          # $IDEM_SOCKET or $IDEM_ROOT
            async with c.effect("run-42/mail-1", "mail.send/v1", msg) as e:
                if e.proceed:                       # only then perform it
                    await e.complete(await send_mail(key=e.external_key))
            print(e.result)                         # the first result, always

    @idem.aio.effectful("mail.send/v1")
    async def send(msg, e):
        return await send_mail(msg, key=e.external_key)

Client(path=None, timeout=None) connects on first use (or in async with,
or await client.connect()); timeout (seconds, None: wait) bounds each
request's exchange.  One Client may serve many coroutines of one event
loop at once: their requests take turns on the connection (responses
come in request order).  After an IdemTransportError or
IdemProtocolError, a timeout, or a request cancelled while it was on the
wire, the connection is closed and every later call raises
IdemTransportError (an unread answer could otherwise be taken for the
reply to a later request): go on with a new Client.

write_task_retry and write_report_retry are idem's, awaited (the same
policy: idem.retry.Backoff).

Effects (idem.effects says what each disposition means; Effect here has
the same properties: disposition, state, proceed, receipt, result,
lease_expires_at, lease_error ...).  While a block told to proceed runs,
an asyncio task extends the lease every third of lease_ms on a
connection of its own; it stops before the report and on every way out
of the block.  The task runs on the block's event loop: a block that
blocks the loop (time.sleep, long CPU work) starves it and the lease may
lapse; run such work in an executor (loop.run_in_executor).

Cancellation.  A block (or an @effectful coroutine) cancelled after
proceed reports nothing, like any exception after proceed: the effect
may have happened before the cancellation reached it.  The extension
stops, the lease lapses, and the next begin under that id answers
outcome_unknown, which only evidence settles (effect_resolve, or a
probe): never a proceed that could perform it twice, never a commit of
a result the block did not report.  A cancellation while complete() is
on the wire leaves the effect committed or, if the report never
arrived, outcome_unknown once the lease lapses; a later begin says
which.  Shield a report that must not be cancelled
(asyncio.shield(e.complete(result))).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import socket
from types import TracebackType
from typing import (Any, Awaitable, Callable, List, Mapping, Optional,
                    Sequence, Tuple, Type, TypeVar, Union)

from . import ops
from .client import default_socket_path
from .digest import task_digest
from .effects import (REPORT_ATTEMPTS, EffectCore, Evidence, NotApplied,
                      report_delay)
from .errors import (IdemError, IdemOutcomeUnknown, IdemProtocolError,
                     IdemTransportError)
from .replies import (EffectBegin, EffectExtended, EffectReceipt,
                      EffectSettled, Fence, Hello, ReportResult,
                      SubmissionLookup, WriteResult)
from .retry import Backoff, OnRetry, _check_id
from .views import Diagnosis, Stats
from .wire import (READ_BYTES, LineBuffer, Reply, closes_connection,
                   decode_reply, encode_request)

__all__ = ["Client", "Effect", "AsyncProbe", "connect", "effectful",
           "write_task_retry", "write_report_retry", "NotApplied",
           "Evidence"]

_T = TypeVar("_T")

# A probe for an outcome_unknown effect: a function or a coroutine
# function returning idem.Evidence (idem.effects).
AsyncProbe = Callable[[IdemOutcomeUnknown],
                      Union[Evidence, Awaitable[Evidence]]]


class Client:
    """One connection to idemd, for asyncio (module documentation)."""

    def __init__(self, path: Optional[str] = None,
                 timeout: Optional[float] = None) -> None:
        self.path = path if path is not None else default_socket_path()
        self.timeout = timeout
        self._reader: Optional[asyncio.StreamReader] = None
        self._writer: Optional[asyncio.StreamWriter] = None
        self._lines = LineBuffer()
        self._next_id = 1
        self._turn: Optional[asyncio.Lock] = None   # made in the loop
        self._closed = False
        self._answered = False      # a reply was read on this connection

    async def __aenter__(self) -> Client:
        await self.connect()
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]],
                        exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        await self.close()

    async def connect(self) -> Client:
        """Connect now rather than on first use; raises
        IdemTransportError when the broker cannot be reached."""
        async with self._lock():
            await self._bounded(self._connect())
        return self

    def abort(self) -> None:
        """Close at once, without waiting for the transport."""
        self._closed = True
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            writer.close()
        self._lines.clear()

    async def close(self) -> None:
        writer = self._writer
        self.abort()
        if writer is not None:
            try:
                await writer.wait_closed()
            except OSError:
                pass

    @property
    def closed(self) -> bool:
        return self._closed

    # -- the connection (idem.wire decides, this reads and writes) --

    def _lock(self) -> asyncio.Lock:
        # Made on first use, inside the running loop (Python 3.8 and 3.9
        # bind a lock to the loop current when it is made).
        if self._turn is None:
            self._turn = asyncio.Lock()
        return self._turn

    async def _connect(self) -> None:
        if self._writer is not None:
            return
        if self._closed:
            raise IdemTransportError("the connection is closed")
        try:
            self._reader, self._writer = await asyncio.open_unix_connection(
                self.path)
        except OSError as e:
            self._closed = True
            raise IdemTransportError("connect %s: %s" % (
                self.path, e.strerror or e), e) from e

    async def _bounded(self, aw: Awaitable[_T]) -> _T:
        """await aw, cancelled after self.timeout seconds (then the
        connection is closed: IdemTransportError).  Not asyncio.wait_for:
        before Python 3.12 it can swallow a cancellation of the caller
        that comes as aw finishes, and a cancelled effect must stop."""
        if self.timeout is None:
            return await aw
        current = asyncio.current_task()
        assert current is not None
        task = current
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            task.cancel()
        timer = asyncio.get_running_loop().call_later(self.timeout, expire)
        try:
            return await aw
        except asyncio.CancelledError:
            if not expired:
                raise
            uncancel = getattr(task, "uncancel", None)     # 3.11+
            if uncancel is not None:
                uncancel()
            self.abort()
            raise IdemTransportError("no answer within %g s"
                                     % self.timeout) from None
        finally:
            timer.cancel()

    async def _read_line(self) -> bytes:
        while True:
            line = self._lines.next_line()
            if line is not None:
                return line
            if self._reader is None:
                raise IdemTransportError("the connection is closed")
            chunk = await self._reader.read(READ_BYTES)
            if not chunk:
                raise IdemTransportError(
                    "receive: the broker closed the connection")
            self._lines.feed(chunk)

    async def _refusal(self) -> None:
        """After a send that failed at once on a connection that has not
        answered: what the broker sent before it closed, into the lines,
        read without waiting: the bytes the transport had read, then
        those still on the socket (a duplicate of it: the transport
        closes its own on the next turn of the loop).  _read_line then
        takes a whole line there as the answer, or fails as the send
        did."""
        writer, reader = self._writer, self._reader
        if writer is None or reader is None:
            return
        transport_sock = writer.get_extra_info("socket")
        spare = transport_sock.dup() if transport_sock is not None else None
        try:
            # Returns at once what the transport read, or raises as the
            # loop turns and the transport's connection_lost fails it.
            self._lines.feed(await reader.read(READ_BYTES))
        except OSError:
            pass
        if spare is None:
            return
        with spare:
            try:
                while not self._lines.has_line():
                    chunk = spare.recv(READ_BYTES, socket.MSG_DONTWAIT)
                    if not chunk:
                        break
                    self._lines.feed(chunk)
            except OSError:
                pass

    async def _exchange_now(self, encoded: Sequence[Tuple[Any, bytes]]
                            ) -> List[Reply]:
        await self._connect()
        done = False
        try:
            if self._writer is None:
                raise IdemTransportError("the connection is closed")
            if self._lines.pending():
                # Bytes past the last answer: one nobody asked for (two
                # answers to one request), which would answer this one.
                raise IdemProtocolError("the broker sent a line nobody "
                                        "asked for")
            self._writer.write(b"".join(line for _, line in encoded))
            if not self._answered and self._writer.transport.is_closing():
                # The send failed at once: the broker may have refused
                # the connection before reading (too_many_connections,
                # then closed); its line is then the answer.
                await self._refusal()
            else:
                await self._writer.drain()
            replies = []
            for request_id, _ in encoded:
                reply = decode_reply(await self._read_line(), request_id,
                                     self._answered)
                self._answered = True
                replies.append(reply)
                if closes_connection(reply):
                    self.abort()    # the broker closes it (too_large)
            done = True
            return replies
        except OSError as e:
            raise IdemTransportError("%s" % (e.strerror or e), e) from e
        finally:
            # An error, a protocol break, a cancellation: whatever was
            # not read would answer the next request.
            if not done:
                self.abort()

    async def _exchange(self, requests: Sequence[Mapping[str, Any]]
                        ) -> List[Reply]:
        encoded = []
        for request in requests:
            if "id" not in request:
                request = dict(request, id=self._next_id)
                self._next_id += 1
            encoded.append((request.get("id"), encode_request(request)))
        async with self._lock():
            return await self._bounded(self._exchange_now(encoded))

    # -- requests --

    async def call(self, request: Mapping[str, Any]) -> Reply:
        """Send one request and return its Reply, whatever its "ok" (as
        idem.Client.call)."""
        return (await self._exchange([request]))[0]

    async def pipeline(self, requests: Sequence[Mapping[str, Any]]
                       ) -> List[Reply]:
        """Send every request, then read every reply (in request order)."""
        return await self._exchange(requests)

    async def _run(self, op: ops.Op[_T]) -> _T:
        reply = await self.call(op.request)
        try:
            return op.result(reply)
        except IdemProtocolError:
            # An answer without what its op promises: nothing more this
            # broker says on the connection is trusted.
            self.abort()
            raise

    async def hello(self) -> Hello:
        """As idem.Client.hello."""
        return await self._run(ops.hello())

    async def write_task(self, task: Mapping[str, Any],
                         client_submission_id: Optional[str] = None,
                         request_digest: Any = None,
                         meta: Optional[Mapping[str, Any]] = None,
                         digest_schema: Optional[str] = None) -> WriteResult:
        """As idem.Client.write_task (IdemConflict on a conflict)."""
        return await self._run(ops.write_task(
            task, client_submission_id, request_digest, meta, digest_schema))

    async def write_report(self, task_id: str, report: Mapping[str, Any],
                           client_submission_id: Optional[str] = None,
                           meta: Optional[Mapping[str, Any]] = None
                           ) -> ReportResult:
        """As idem.Client.write_report."""
        return await self._run(ops.write_report(
            task_id, report, client_submission_id, meta))

    async def get_submission(self, client_submission_id: str,
                             effect_kind: Optional[str] = None
                             ) -> SubmissionLookup:
        """As idem.Client.get_submission."""
        return await self._run(ops.get_submission(client_submission_id,
                                                  effect_kind))

    async def diagnose(self, stale_after_ms: Optional[int] = None
                       ) -> Diagnosis:
        """As idem.Client.diagnose."""
        return await self._run(ops.diagnose(stale_after_ms))

    async def stats(self) -> Stats:
        """As idem.Client.stats."""
        return await self._run(ops.stats())

    async def effect_begin(self, client_submission_id: str,
                           effect_kind: str, request: Any,
                           lease_ms: Optional[int] = None,
                           request_digest: Optional[str] = None
                           ) -> EffectBegin:
        """As idem.Client.effect_begin."""
        return await self._run(ops.effect_begin(
            client_submission_id, effect_kind, request, lease_ms,
            request_digest))

    async def effect_complete(self, client_submission_id: str,
                              effect_kind: str, fence: Fence,
                              outcome: str = "applied",
                              result: Any = None) -> EffectSettled:
        """As idem.Client.effect_complete."""
        return await self._run(ops.effect_complete(
            client_submission_id, effect_kind, fence, outcome, result))

    async def effect_extend(self, client_submission_id: str,
                            effect_kind: str, fence: Fence,
                            lease_ms: int = ops.DEFAULT_LEASE_MS
                            ) -> EffectExtended:
        """As idem.Client.effect_extend."""
        return await self._run(ops.effect_extend(
            client_submission_id, effect_kind, fence, lease_ms))

    async def effect_resolve(self, client_submission_id: str,
                             effect_kind: str, observed: str,
                             result: Any = None,
                             source: Optional[str] = None) -> EffectSettled:
        """As idem.Client.effect_resolve."""
        return await self._run(ops.effect_resolve(
            client_submission_id, effect_kind, observed, result, source))

    def effect(self, client_submission_id: str, effect_kind: str,
               request: Any, lease_ms: Optional[int] = None,
               probe: Optional[AsyncProbe] = None,
               extend: bool = True) -> Effect:
        """An async context manager around one effect (module
        documentation, and idem.effects):

            async with client.effect(sid, "mail.send/v1", msg) as e:
                if e.proceed:
                    await e.complete(await send(msg, key=e.external_key))
        """
        return Effect(self, client_submission_id, effect_kind, request,
                      lease_ms=lease_ms, probe=probe, extend=extend)


async def connect(path: Optional[str] = None,
                  timeout: Optional[float] = None) -> Client:
    """A connected Client (raises IdemTransportError if it cannot)."""
    return await Client(path, timeout).connect()


class Effect(EffectCore):
    """One effect, for asyncio: async with client.effect(...) as e.
    The properties are idem.Effect's; complete() and not_applied() are
    coroutines.  Made by idem.aio.Client.effect."""

    def __init__(self, client: Client, client_submission_id: str,
                 effect_kind: str, request: Any,
                 lease_ms: Optional[int] = None,
                 probe: Optional[AsyncProbe] = None,
                 extend: bool = True) -> None:
        super().__init__(client_submission_id, effect_kind, request,
                         lease_ms, extend)
        self.client = client
        self.probe = probe
        self._keeper: Optional[asyncio.Future[None]] = None
        self._keeper_stopped = False

    # -- begin --

    async def _begin(self) -> EffectBegin:
        return await self.client.effect_begin(
            self.client_submission_id, self.effect_kind, self.request,
            lease_ms=self.lease_ms)

    async def __aenter__(self) -> Effect:
        try:
            begin = await self._begin()
        except IdemOutcomeUnknown as unknown:
            if self.probe is None:
                raise
            found = self.probe(unknown)
            evidence = await found if inspect.isawaitable(found) else found
            assert isinstance(evidence, Evidence)
            self.evidence = evidence
            await self.client.effect_resolve(
                self.client_submission_id, self.effect_kind,
                evidence.observed, evidence.result, evidence.source)
            if evidence.observed == "unknown":
                raise
            begin = await self._begin()
        self._set_begin(begin)
        if self._wants_lease_kept():
            self._keeper = asyncio.ensure_future(self._keep_lease())
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]],
                        exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        await self._stop_keeper()
        if self._exit_report(exc) == "not_applied":
            await self.not_applied()

    # -- the lease --

    async def _keep_lease(self) -> None:
        """Extend the lease every third of it, on a connection of its
        own, until cancelled or told no (module documentation)."""
        fence = self._began().fence
        assert fence is not None
        keeper: Optional[Client] = None
        try:
            # The flag as well as the cancellation: a stop must hold even
            # if a cancellation were lost on the way.
            while not self._keeper_stopped:
                await asyncio.sleep(self._extend_every())
                if keeper is None:
                    # The block's client's timeout (as idem.Effect's).
                    keeper = Client(self.client.path, self.client.timeout)
                try:
                    self._extended(await keeper.effect_extend(
                        self.client_submission_id, self.effect_kind, fence,
                        self._lease()))
                except IdemTransportError:
                    keeper.abort()
                    keeper = None       # the next tick reconnects
                except IdemError as error:
                    self._lease_stopped(error)
                    return
        finally:
            if keeper is not None:
                keeper.abort()

    async def _stop_keeper(self) -> None:
        keeper, self._keeper = self._keeper, None
        if keeper is None:
            return
        self._keeper_stopped = True
        keeper.cancel()
        await asyncio.wait([keeper])
        if not keeper.cancelled():
            keeper.exception()      # retrieved: an IdemError is recorded

    # -- report --

    async def _report(self, fence: Fence, outcome: str,
                      result: Any) -> EffectSettled:
        """As idem.Effect's: resent on a new connection when the answer
        is lost, with the same fence."""
        await self._stop_keeper()
        try:
            return await self.client.effect_complete(
                self.client_submission_id, self.effect_kind, fence,
                outcome, result)
        except IdemTransportError:
            if REPORT_ATTEMPTS <= 1:
                raise
        attempt = 1
        while True:
            await asyncio.sleep(report_delay(attempt))
            attempt += 1
            try:
                async with Client(self.client.path, self.client.timeout) as c:
                    return await c.effect_complete(
                        self.client_submission_id, self.effect_kind, fence,
                        outcome, result)
            except IdemTransportError:
                if attempt >= REPORT_ATTEMPTS:
                    raise

    async def complete(self, result: Any = None) -> EffectReceipt:
        """The effect happened: commit result (JSON) in the receipt."""
        fence = self._proceeded("complete")
        return self._committed(await self._report(fence, "applied", result))

    async def not_applied(self) -> None:
        """The effect certainly did not happen: release the reservation
        (the next begin proceeds, attempt + 1, same external_key)."""
        fence = self._proceeded("not_applied")
        await self._report(fence, "not_applied", None)
        self._released()


def effectful(effect_kind: str, client: Optional[Client] = None,
              path: Optional[str] = None, timeout: Optional[float] = None,
              lease_ms: Optional[int] = None,
              probe: Optional[AsyncProbe] = None, extend: bool = True
              ) -> Callable[[Callable[[Any, Effect], Awaitable[Any]]],
                            Callable[[str, Any], Awaitable[Any]]]:
    """idem.effectful for coroutines: await fn(request, effect) performs
    the effect and returns its result (JSON); the decorated coroutine
    function takes (client_submission_id, request), awaits fn only on
    proceed (the lease extended while it runs), and returns the committed
    result, the first one on every later call.

        @idem.aio.effectful("mail.send/v1")
        async def send(msg, e):
            return await smtp_send(msg, message_id=e.external_key)
        await send("run-42/mail-1", {"to": "a@example.com"})

    client: an idem.aio.Client to use (not closed); otherwise each call
    connects to path and closes after.  An exception from fn, or its
    cancellation, reports nothing (module documentation); NotApplied
    releases."""

    def wrap(fn: Callable[[Any, Effect], Awaitable[Any]]
             ) -> Callable[[str, Any], Awaitable[Any]]:
        @functools.wraps(fn)
        async def run(client_submission_id: str, request: Any) -> Any:
            c = client if client is not None else Client(path, timeout)
            try:
                async with c.effect(client_submission_id, effect_kind,
                                    request, lease_ms=lease_ms, probe=probe,
                                    extend=extend) as e:
                    if e.proceed:
                        await e.complete(await fn(request, e))
                return e.result
            finally:
                if client is None:
                    await c.close()
        return run
    return wrap


async def _retrying(call: Callable[[Client], Awaitable[_T]], attempts: int,
                    base_delay: float, max_delay: float,
                    deadline: Optional[float], path: Optional[str],
                    timeout: Optional[float],
                    on_retry: Optional[OnRetry]) -> _T:
    """await call(client) on a fresh connection until it answers, fails
    for good, or attempts / time run out (idem.write_task_retry)."""
    backoff = Backoff(attempts, base_delay, max_delay, deadline)
    while True:
        try:
            async with Client(path, backoff.timeout(timeout)) as c:
                return await call(c)
        except IdemError as e:
            delay = backoff.failed(e)
            if on_retry is not None:
                on_retry(backoff.attempt, e, delay)
            await asyncio.sleep(delay)


async def write_task_retry(task: Mapping[str, Any],
                           client_submission_id: str, attempts: int = 8,
                           base_delay: float = 0.05, max_delay: float = 5.0,
                           deadline: Optional[float] = None,
                           path: Optional[str] = None,
                           timeout: Optional[float] = None,
                           request_digest: Any = None,
                           meta: Optional[Mapping[str, Any]] = None,
                           on_retry: Optional[OnRetry] = None
                           ) -> WriteResult:
    """idem.write_task_retry, awaited: the same id on every attempt, so
    at most one task however many reach the broker."""
    sid = _check_id(client_submission_id, "write_task_retry")
    if request_digest is True:
        request_digest = task_digest(task)
    return await _retrying(
        lambda c: c.write_task(task, sid, request_digest=request_digest,
                               meta=meta),
        attempts, base_delay, max_delay, deadline, path, timeout, on_retry)


async def write_report_retry(task_id: str, report: Mapping[str, Any],
                             client_submission_id: str, attempts: int = 8,
                             base_delay: float = 0.05,
                             max_delay: float = 5.0,
                             deadline: Optional[float] = None,
                             path: Optional[str] = None,
                             timeout: Optional[float] = None,
                             meta: Optional[Mapping[str, Any]] = None,
                             on_retry: Optional[OnRetry] = None
                             ) -> ReportResult:
    """idem.write_report_retry, awaited."""
    sid = _check_id(client_submission_id, "write_report_retry")
    return await _retrying(
        lambda c: c.write_report(task_id, report, sid, meta=meta),
        attempts, base_delay, max_delay, deadline, path, timeout, on_retry)
