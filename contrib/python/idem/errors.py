# SPDX-License-Identifier: ISC
"""idem.errors: the exceptions of the idem client.

Every failure is an IdemError with the wire code (or the client's own
"transport" / "protocol"), so one except clause catches them all and
e.retryable says whether a retry with the SAME submission id may succeed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Optional

if TYPE_CHECKING:
    from .replies import Conflict
    from .wire import Reply

__all__ = ["IdemError", "IdemTransportError", "IdemProtocolError",
           "IdemConflict", "IdemInProgress", "IdemOutcomeUnknown",
           "IdemEffectIncomplete", "error_from_reply"]


class IdemError(Exception):
    """An error the broker answered, or one the client found itself.

    code: the wire code ("invalid_request", "in_progress", ...) or
    "transport" / "protocol" for the client's own; message; field (the
    dotted path of the offending field, or None); retryable (a retry with
    the same submission id may succeed); reply (the broker's whole reply,
    or None when there was none).
    """

    def __init__(self, code: str, message: str, field: Optional[str] = None,
                 retryable: bool = False,
                 reply: Optional[Reply] = None) -> None:
        super().__init__("%s: %s%s" % (code, message,
                                       " (field %s)" % field if field else ""))
        self.code = code
        self.message = message
        self.field = field
        self.retryable = bool(retryable)
        self.reply = reply


class IdemTransportError(IdemError):
    """Connect, send or receive failed: the outcome is unknown; retry with
    the same submission id, on a new Client."""

    def __init__(self, message: str, cause: Optional[BaseException] = None
                 ) -> None:
        super().__init__("transport", message, retryable=True)
        self.cause = cause


class IdemProtocolError(IdemError):
    """The broker's answer broke the protocol; the connection is closed."""

    def __init__(self, message: str) -> None:
        super().__init__("protocol", message, retryable=False)


class IdemConflict(IdemError):
    """The submission id is bound to other content (or a recovery fact
    contradicts it, or an effect's fence is stale); nothing was done.

    conflict: the typed facts (idem.Conflict: reason, message, existing);
    reason and existing (the dict of the binding the id already has) are
    kept as attributes too."""

    def __init__(self, reply: Reply) -> None:
        from .replies import Conflict
        facts = Conflict.from_reply(reply)
        super().__init__("conflict", facts.message or "conflict",
                         facts.field, False, reply)
        self.conflict: Conflict = facts
        self.reason: Optional[str] = facts.reason
        self.existing: Optional[Dict[str, Any]] = facts.existing


class IdemInProgress(IdemError):
    """Another call holds the submission (write_task: an identical call
    still in flight past --inflight-wait-ms; effect_begin: another
    caller's live lease).  Retryable with the same id."""


class IdemOutcomeUnknown(IdemError):
    """effect_begin: a lease lapsed without effect_complete, so the effect
    may or may not have happened.  Not retryable: no time turns it into
    proceed.  Settle it with Client.effect_resolve (evidence from the
    downstream system, or an operator's decision).  external_key and
    attempt: the lapsed attempt's, for a probe of the downstream system
    (None if the broker's reply does not carry them)."""

    def _fact(self, key: str) -> Any:
        reply = self.reply
        if reply is None:
            return None
        for where in (reply, reply.get("existing"), reply.get("error")):
            if isinstance(where, dict) and key in where:
                return where[key]
        return None

    @property
    def external_key(self) -> Optional[str]:
        v = self._fact("external_key")
        return v if isinstance(v, str) else None

    @property
    def attempt(self) -> Optional[int]:
        v = self._fact("attempt")
        return v if isinstance(v, int) and not isinstance(v, bool) else None


class IdemEffectIncomplete(IdemError):
    """A Client.effect block was told to proceed and ended without
    complete() or not_applied(): the client cannot know whether the
    effect happened, so its lease will lapse into outcome_unknown."""

    def __init__(self, message: str) -> None:
        super().__init__("effect_incomplete", message, retryable=False)


def error_from_reply(reply: Reply) -> IdemError:
    """The exception for an error reply ("ok": false)."""
    error = reply.get("error")
    if reply.get("disposition") == "conflict" or (
            isinstance(error, dict) and error.get("code") == "conflict"):
        return IdemConflict(reply)
    if not isinstance(error, dict) or not isinstance(error.get("code"), str):
        return IdemProtocolError("an error reply without an error code")
    code: str = error["code"]
    cls = {"in_progress": IdemInProgress,
           "outcome_unknown": IdemOutcomeUnknown}.get(code, IdemError)
    message = error.get("message")
    field = error.get("field")
    return cls(code, message if isinstance(message, str) else "",
               field if isinstance(field, str) else None,
               error.get("retryable") is True, reply)
