# SPDX-License-Identifier: ISC
"""idem.effects: any side effect, performed at most once per id.

SPEC.md "Effects": the caller asks before acting (effect_begin) and
reports after (effect_complete).  This module wraps the two in a context
manager and a decorator (idem.aio has the same for coroutines):

    with client.effect(sid, "mail.send/v1", msg) as e:
        if e.proceed:                          # only then perform it
            e.complete(send(msg, idempotency_key=e.external_key))
    print(e.result)                            # the first result, always

What happens to each disposition of effect_begin:

* proceed: e.proceed is true; the block performs the effect and calls
  e.complete(result) (committed: e.receipt) or, when it KNOWS the effect
  did not happen, e.not_applied() (or raises idem.NotApplied): released,
  the next begin proceeds with attempt + 1 and the same external_key.
* reused: e.proceed is false, e.reused true, e.receipt the first receipt
  (byte for byte: e.receipt.raw) and e.result its result.
* conflict: IdemConflict from the with statement, before the block: the
  key is bound to another request and nothing may be performed.
* in_progress: IdemInProgress (retryable): another caller holds a live
  lease; try again later with the same id.
* outcome_unknown: a lease lapsed without effect_complete.  With a probe
  (probe(error) -> Evidence: ask the downstream system, by the
  external_key, whether the effect happened) the evidence is reported
  with effect_resolve and begin is asked again: applied -> reused,
  not_applied -> proceed.  Without a probe, or with evidence "unknown",
  IdemOutcomeUnknown is raised: an operator or a later probe settles it.

e.disposition is what begin answered ("proceed" or "reused"); e.state
is where the effect is now (EffectState): "pending" before the with
statement, "running" in a block told to proceed and not reported yet,
"committed" (complete(), or reused), "released" (not_applied() or
NotApplied), "abandoned" (the block ended after proceed without a
report: its lease lapses into outcome_unknown).

The lease.  effect_begin grants the caller a lease (lease_ms, 30 s by
default); a lease that ends before the report makes the key
outcome_unknown.  While a block told to proceed runs, a thread extends
the lease (effect_extend) every third of lease_ms on a connection of its
own, so a block may run for as long as it needs; it stops before the
report and on every way out of the block (an exception included).  A
transport failure is retried at the next tick on a new connection; any
other answer (the lease lapsed already, another caller was let in:
stale_fence, the broker has no effect_extend) stops it, and e.lease_error
holds that error (e.lease_expires_at: the last extension's expiry).
extend=False leaves the lease as begin set it.

NotApplied in a with block.  Raising idem.NotApplied (or a subclass) in
a block told to proceed reports not_applied (the reservation is
released: the next begin proceeds with attempt + 1 and the same
external_key) and the exception goes on out of the with statement: catch
it outside.  Raise it only when the effect certainly did not happen
(the downstream system refused before acting).  In a block whose begin
answered reused, or after complete(), it reports nothing.

A block that raises after proceed, without complete() or not_applied(),
reports NOTHING: the exception may have come after the effect happened
(the mail went out, then the connection to the mail server broke), and
reporting not_applied would let a retry perform it a second time.  The
extension stops, the lease lapses and the key becomes outcome_unknown,
which only evidence settles.  Raise idem.NotApplied where the block knows
better.  A block that ends normally after proceed without either call is
a bug in the caller: IdemEffectIncomplete, and the lease lapses the same
way.

Lost answers.  complete() and not_applied() resend their report on a new
connection when the answer is lost (the same fence: the broker answers a
repeat as it answered the first).  A lost answer to effect_begin is not
retried here: the broker may have granted a lease that this caller never
saw, so a retry answers in_progress until the lease lapses, then
outcome_unknown.  If no other process uses the same id, this caller
knows the effect was not performed and may settle it with
effect_resolve(..., "not_applied") (or a probe that says so).
"""

from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import (TYPE_CHECKING, Any, Callable, Literal, Optional, Type,
                    TypeVar)

from .errors import (IdemEffectIncomplete, IdemError, IdemOutcomeUnknown,
                     IdemTransportError)
from .ops import DEFAULT_LEASE_MS
from .replies import (Disposition, EffectBegin, EffectExtended,
                      EffectReceipt, EffectSettled, Fence)

if TYPE_CHECKING:
    from .client import Client

__all__ = ["Effect", "EffectState", "Evidence", "NotApplied", "effectful",
           "Probe"]

# complete() and not_applied() resend the same report (same fence, same
# result: the broker answers a repeat as it answered the first) this many
# times when the connection fails, the n-th after report_delay(n).
REPORT_ATTEMPTS = 5
REPORT_DELAY_S = 0.05

# Where an effect is (module documentation).
EffectState = Literal["pending", "running", "committed", "released",
                      "abandoned"]

_T = TypeVar("_T")


def report_delay(n: int) -> float:
    """The pause before the n-th resend of a report (n >= 1)."""
    return float(REPORT_DELAY_S * 2 ** n)


@dataclass(frozen=True)
class Evidence:
    """What a probe found out about an outcome_unknown effect: observed
    is "applied" (then result is what the effect produced), "not_applied"
    or "unknown"; source says where the evidence comes from."""

    observed: str
    result: Any = None
    source: Optional[str] = None


Probe = Callable[[IdemOutcomeUnknown], Evidence]


class NotApplied(Exception):
    """Raised in an effect block (or an @effectful function) that knows
    the effect did not happen (the downstream system refused it before
    acting).  In a block told to proceed and not yet reported, leaving
    the with (or async with) statement reports not_applied (the
    reservation is released: the next begin proceeds with attempt + 1
    and the same external_key, e.state "released") and the exception
    goes on out of the statement: catch it outside.  After reused or
    complete() nothing is reported.  A subclass does the same."""


class EffectCore:
    """What an effect knows and decides, whichever client runs it: the
    begin's answer, the state, the lease.  idem.Effect (threads) and
    idem.aio.Effect (asyncio) add the I/O."""

    def __init__(self, client_submission_id: str, effect_kind: str,
                 request: Any, lease_ms: Optional[int], extend: bool
                 ) -> None:
        if not client_submission_id:
            raise ValueError("an effect needs a client_submission_id")
        self.client_submission_id = client_submission_id
        self.effect_kind = effect_kind
        self.request = request
        self.lease_ms = lease_ms
        self.extend = extend
        self.begin: Optional[EffectBegin] = None
        self.evidence: Optional[Evidence] = None
        # The lease: the last extension's expiry, how many there were,
        # and the error that stopped them (None while they go on).
        self.lease_expires_at: Optional[str] = None
        self.extensions = 0
        self.lease_error: Optional[IdemError] = None
        self._receipt: Optional[EffectReceipt] = None
        self._state: EffectState = "pending"

    # -- what begin said --

    def _began(self) -> EffectBegin:
        if self.begin is None:
            raise IdemError("effect_state", "use the effect in a with "
                            "statement first")
        return self.begin

    def _set_begin(self, begin: EffectBegin) -> None:
        self.begin = begin
        if begin.reused:
            self._receipt = begin.receipt
            self._state = "committed"
        else:
            self._state = "running"

    @property
    def disposition(self) -> Disposition:
        """What effect_begin answered: "proceed" or "reused"."""
        return self._began().disposition

    @property
    def state(self) -> EffectState:
        """Where the effect is now: pending, running, committed,
        released or abandoned (module documentation)."""
        return self._state

    @property
    def proceed(self) -> bool:
        """Perform the effect now (and only then)."""
        return self._began().proceed

    @property
    def reused(self) -> bool:
        """It was applied before: receipt and result are the first ones."""
        return self._began().reused

    @property
    def recovered(self) -> bool:
        """The receipt comes from effect_resolve's evidence."""
        return self._began().recovered or self.evidence is not None

    @property
    def attempt(self) -> Optional[int]:
        return self._began().attempt

    @property
    def fence(self) -> Optional[Fence]:
        return self._began().fence

    @property
    def external_key(self) -> Optional[str]:
        """The downstream system's idempotency key: the same on every
        attempt under this id (None on reused)."""
        return self._began().external_key

    @property
    def receipt(self) -> Optional[EffectReceipt]:
        """The committed receipt (reused, or after complete())."""
        return self._receipt

    @property
    def result(self) -> Any:
        """The committed receipt's result (None before it exists)."""
        return None if self._receipt is None else self._receipt.result

    @property
    def lease_lost(self) -> bool:
        """The extensions stopped on an answer that was not a lease
        (lease_error says which): the block should finish soon."""
        return self.lease_error is not None

    # -- the lease --

    def _lease(self) -> int:
        return self.lease_ms if self.lease_ms is not None \
            else DEFAULT_LEASE_MS

    def _extend_every(self) -> float:
        """Seconds between extensions: a third of the lease, so that two
        may fail (a broker restart) before it lapses."""
        return self._lease() / 3000.0

    def _wants_lease_kept(self) -> bool:
        return self.extend and self._state == "running"

    def _extended(self, reply: EffectExtended) -> None:
        self.lease_expires_at = reply.lease_expires_at
        self.extensions += 1

    def _lease_stopped(self, error: IdemError) -> None:
        self.lease_error = error

    # -- report --

    def _proceeded(self, what: str) -> Fence:
        begin = self._began()
        if not begin.proceed or begin.fence is None:
            raise IdemError("effect_state", "%s: effect_begin did not "
                            "answer proceed" % what)
        if self._state != "running":
            raise IdemError("effect_state", "%s: the effect is already "
                            "reported" % what)
        return begin.fence

    def _committed(self, settled: EffectSettled) -> EffectReceipt:
        if settled.receipt is None:
            raise IdemError("protocol", "effect_complete applied answered "
                            "without a receipt", reply=settled.reply)
        self._receipt = settled.receipt
        self._state = "committed"
        return settled.receipt

    def _released(self) -> None:
        self._state = "released"

    def _exit_report(self, exc: Optional[BaseException]) -> Optional[str]:
        """What leaving the block reports: "not_applied" for NotApplied
        after proceed, None otherwise (an exception after proceed
        abandons the effect; see the module).  Raises
        IdemEffectIncomplete for a block that ended normally without a
        report."""
        if self._state != "running":
            return None
        if isinstance(exc, NotApplied):
            return "not_applied"
        self._state = "abandoned"
        if exc is None:
            raise IdemEffectIncomplete(
                "effect %s %r proceeded and the block ended without "
                "complete() or not_applied(): its lease will lapse into "
                "outcome_unknown" % (self.effect_kind,
                                     self.client_submission_id))
        return None


class _LeaseKeeper(threading.Thread):
    """The thread that extends a running effect's lease (Effect): every
    effect._extend_every() seconds, on a connection of its own (a Client
    is not thread-safe, and the block may use its own).  stop() wakes it
    and a call it has in flight, and waits for it."""

    def __init__(self, effect: Effect) -> None:
        super().__init__(name="idem-lease %s" % effect.client_submission_id,
                         daemon=True)
        self._effect = effect
        self._wake = threading.Event()
        self._lock = threading.Lock()   # guards _client and _stopping
        self._client: Optional[Client] = None
        self._stopping = False

    def _extend(self, fence: Fence) -> None:
        from .client import Client
        e = self._effect
        with self._lock:
            if self._stopping:
                return
            if self._client is None:
                # The block's client's timeout, not the lease: a late
                # answer only delays the next extension, and a reconnect
                # costs more (stop() wakes a call in flight anyway).
                self._client = Client(e.client.path, e.client.timeout)
            c = self._client
        e._extended(c.effect_extend(e.client_submission_id, e.effect_kind,
                                    fence, e._lease()))

    def _drop_client(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def run(self) -> None:
        e = self._effect
        fence = e._began().fence
        assert fence is not None
        try:
            while not self._wake.wait(e._extend_every()):
                try:
                    self._extend(fence)
                except IdemTransportError:
                    self._drop_client()     # the next tick reconnects
                except IdemError as error:
                    if not self._stopping:
                        e._lease_stopped(error)
                    return
        finally:
            self._drop_client()

    def stop(self) -> None:
        self._wake.set()
        with self._lock:
            self._stopping = True
            if self._client is not None:
                self._client._interrupt()
        self.join()


class Effect(EffectCore):
    """One effect under one (effect_kind, client_submission_id): see the
    module's documentation.  Made by Client.effect."""

    def __init__(self, client: Client, client_submission_id: str,
                 effect_kind: str, request: Any,
                 lease_ms: Optional[int] = None,
                 probe: Optional[Probe] = None, extend: bool = True) -> None:
        super().__init__(client_submission_id, effect_kind, request,
                         lease_ms, extend)
        self.client = client
        self.probe = probe
        self._keeper: Optional[_LeaseKeeper] = None

    # -- begin --

    def _begin(self) -> EffectBegin:
        return self.client.effect_begin(self.client_submission_id,
                                        self.effect_kind, self.request,
                                        lease_ms=self.lease_ms)

    def __enter__(self) -> Effect:
        try:
            begin = self._begin()
        except IdemOutcomeUnknown as unknown:
            if self.probe is None:
                raise
            self.evidence = self.probe(unknown)
            self.client.effect_resolve(
                self.client_submission_id, self.effect_kind,
                self.evidence.observed, self.evidence.result,
                self.evidence.source)
            if self.evidence.observed == "unknown":
                raise
            begin = self._begin()
        self._set_begin(begin)
        if self._wants_lease_kept():
            self._keeper = _LeaseKeeper(self)
            self._keeper.start()
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]],
                 exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self._stop_keeper()
        if self._exit_report(exc) == "not_applied":
            self.not_applied()

    def _stop_keeper(self) -> None:
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            keeper.stop()

    # -- report --

    def _report(self, fence: Fence, outcome: str,
                result: Any) -> EffectSettled:
        """effect_complete, resent on a new connection when the answer is
        lost: a lost report would leave the lease to lapse into
        outcome_unknown although the caller knows the outcome.  The
        fence is the same each time (never a new begin)."""
        from .client import Client
        self._stop_keeper()
        try:
            return self.client.effect_complete(
                self.client_submission_id, self.effect_kind, fence,
                outcome, result)
        except IdemTransportError:
            if REPORT_ATTEMPTS <= 1:
                raise
        attempt = 1
        while True:
            time.sleep(report_delay(attempt))
            attempt += 1
            try:
                with Client(self.client.path, self.client.timeout) as c:
                    return c.effect_complete(
                        self.client_submission_id, self.effect_kind, fence,
                        outcome, result)
            except IdemTransportError:
                if attempt >= REPORT_ATTEMPTS:
                    raise

    def complete(self, result: Any = None) -> EffectReceipt:
        """The effect happened: commit result (JSON) in the receipt."""
        fence = self._proceeded("complete")
        return self._committed(self._report(fence, "applied", result))

    def not_applied(self) -> None:
        """The effect certainly did not happen: release the reservation
        (the next begin proceeds, attempt + 1, same external_key)."""
        fence = self._proceeded("not_applied")
        self._report(fence, "not_applied", None)
        self._released()


def effectful(effect_kind: str, client: Optional[Client] = None,
              path: Optional[str] = None, timeout: Optional[float] = None,
              lease_ms: Optional[int] = None, probe: Optional[Probe] = None,
              extend: bool = True
              ) -> Callable[[Callable[[Any, Effect], Any]],
                            Callable[[str, Any], Any]]:
    """A decorator: fn(request, effect) performs the effect and returns
    its result (JSON); the decorated function takes
    (client_submission_id, request), calls fn only on proceed (the lease
    extended while it runs), and returns the committed result, the first
    one on every later call.

        @idem.effectful("mail.send/v1")
        def send(msg, e):
            return smtp_send(msg, message_id=e.external_key)
        send("run-42/mail-1", {"to": "a@example.com"})

    client: a Client to use (not closed); otherwise each call connects
    to path (default_socket_path()) and closes after.  An exception from
    fn reports nothing (idem.NotApplied releases): see idem.effects.
    idem.aio.effectful is the same for coroutines."""

    def wrap(fn: Callable[[Any, Effect], Any]) -> Callable[[str, Any], Any]:
        @functools.wraps(fn)
        def run(client_submission_id: str, request: Any) -> Any:
            from .client import Client
            c = client if client is not None else Client(path, timeout)
            try:
                with c.effect(client_submission_id, effect_kind, request,
                              lease_ms=lease_ms, probe=probe,
                              extend=extend) as e:
                    if e.proceed:
                        e.complete(fn(request, e))
                return e.result
            finally:
                if client is None:
                    c.close()
        return run
    return wrap
