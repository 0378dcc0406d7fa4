# SPDX-License-Identifier: ISC
"""idem.effects: any side effect, performed at most once per id.

SPEC.md "Effects": the caller asks before acting (effect_begin) and
reports after (effect_complete).  This module wraps the two in a context
manager and a decorator:

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

A block that raises after proceed, without complete() or not_applied(),
reports NOTHING: the exception may have come after the effect happened
(the mail went out, then the connection to the mail server broke), and
reporting not_applied would let a retry perform it a second time.  The
lease lapses and the key becomes outcome_unknown, which only evidence
settles.  Raise idem.NotApplied where the block knows better.  A block
that ends normally after proceed without either call is a bug in the
caller: IdemEffectIncomplete, and the lease lapses the same way.

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
import time
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Optional, Type

from .errors import (IdemEffectIncomplete, IdemError, IdemOutcomeUnknown,
                     IdemTransportError)
from .replies import EffectBegin, EffectReceipt, EffectSettled, Fence

if TYPE_CHECKING:
    from .client import Client

__all__ = ["Effect", "Evidence", "NotApplied", "effectful", "Probe"]

# complete() and not_applied() resend the same report (same fence, same
# result: the broker answers a repeat as it answered the first) this many
# times when the connection fails, the n-th after REPORT_DELAY_S * 2 ** n.
REPORT_ATTEMPTS = 5
REPORT_DELAY_S = 0.05


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
    acting): the reservation is released, and the exception goes on."""


class Effect:
    """One effect under one (effect_kind, client_submission_id): see the
    module's documentation.  Made by Client.effect."""

    def __init__(self, client: Client, client_submission_id: str,
                 effect_kind: str, request: Any,
                 lease_ms: Optional[int] = None,
                 probe: Optional[Probe] = None) -> None:
        if not client_submission_id:
            raise ValueError("an effect needs a client_submission_id")
        self.client = client
        self.client_submission_id = client_submission_id
        self.effect_kind = effect_kind
        self.request = request
        self.lease_ms = lease_ms
        self.probe = probe
        self.begin: Optional[EffectBegin] = None
        self.evidence: Optional[Evidence] = None
        self._receipt: Optional[EffectReceipt] = None
        self._settled = False

    # -- begin --

    def _begin(self) -> EffectBegin:
        return self.client.effect_begin(self.client_submission_id,
                                        self.effect_kind, self.request,
                                        lease_ms=self.lease_ms)

    def __enter__(self) -> Effect:
        try:
            self.begin = self._begin()
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
            self.begin = self._begin()
        if self.begin.reused:
            self._receipt = self.begin.receipt
            self._settled = True
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]],
                 exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        if self._settled or not self.proceed:
            return
        if isinstance(exc, NotApplied):
            self.not_applied()
            return
        if exc is None:
            raise IdemEffectIncomplete(
                "effect %s %r proceeded and the block ended without "
                "complete() or not_applied(): its lease will lapse into "
                "outcome_unknown" % (self.effect_kind,
                                     self.client_submission_id))
        # An exception after proceed: report nothing (module doc).

    # -- what begin said --

    def _began(self) -> EffectBegin:
        if self.begin is None:
            raise IdemError("effect_state", "use the effect in a with "
                            "statement first")
        return self.begin

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

    # -- report --

    def _proceeded(self, what: str) -> Fence:
        begin = self._began()
        if not begin.proceed or begin.fence is None:
            raise IdemError("effect_state", "%s: effect_begin did not "
                            "answer proceed" % what)
        if self._settled:
            raise IdemError("effect_state", "%s: the effect is already "
                            "reported" % what)
        return begin.fence

    def _report(self, fence: Fence, outcome: str,
                result: Any) -> EffectSettled:
        """effect_complete, resent on a new connection when the answer is
        lost: a lost report would leave the lease to lapse into
        outcome_unknown although the caller knows the outcome.  The
        fence is the same each time (never a new begin)."""
        from .client import Client
        try:
            return self.client.effect_complete(
                self.client_submission_id, self.effect_kind, fence,
                outcome, result)
        except IdemTransportError:
            if REPORT_ATTEMPTS <= 1:
                raise
        attempt = 1
        while True:
            time.sleep(REPORT_DELAY_S * 2 ** attempt)
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
        settled = self._report(fence, "applied", result)
        if settled.receipt is None:
            raise IdemError("protocol", "effect_complete applied answered "
                            "without a receipt", reply=settled.reply)
        self._receipt = settled.receipt
        self._settled = True
        return settled.receipt

    def not_applied(self) -> None:
        """The effect certainly did not happen: release the reservation
        (the next begin proceeds, attempt + 1, same external_key)."""
        fence = self._proceeded("not_applied")
        self._report(fence, "not_applied", None)
        self._settled = True


def effectful(effect_kind: str, client: Optional[Client] = None,
              path: Optional[str] = None, timeout: Optional[float] = None,
              lease_ms: Optional[int] = None, probe: Optional[Probe] = None
              ) -> Callable[[Callable[[Any, Effect], Any]],
                            Callable[[str, Any], Any]]:
    """A decorator: fn(request, effect) performs the effect and returns
    its result (JSON); the decorated function takes
    (client_submission_id, request), calls fn only on proceed, and
    returns the committed result, the first one on every later call.

        @idem.effectful("mail.send/v1")
        def send(msg, e):
            return smtp_send(msg, message_id=e.external_key)
        send("run-42/mail-1", {"to": "a@example.com"})

    client: a Client to use (not closed); otherwise each call connects
    to path (default_socket_path()) and closes after.  An exception from
    fn reports nothing (idem.NotApplied releases): see idem.effects."""

    def wrap(fn: Callable[[Any, Effect], Any]) -> Callable[[str, Any], Any]:
        @functools.wraps(fn)
        def run(client_submission_id: str, request: Any) -> Any:
            from .client import Client
            c = client if client is not None else Client(path, timeout)
            try:
                with c.effect(client_submission_id, effect_kind, request,
                              lease_ms=lease_ms, probe=probe) as e:
                    if e.proceed:
                        e.complete(fn(request, e))
                return e.result
            finally:
                if client is None:
                    c.close()
        return run
    return wrap
