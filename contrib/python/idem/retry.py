# SPDX-License-Identifier: ISC
"""idem.retry: retrying a submission under the id the caller chose.

The helpers take the client_submission_id and never make one: a retry
that invented a new id would be a new intent, and could create twice.
"""

from __future__ import annotations

import random
import time
from typing import Any, Callable, Mapping, Optional, TypeVar

from .client import Client
from .digest import task_digest
from .errors import IdemConflict, IdemError, IdemTransportError
from .replies import ReportResult, WriteResult

__all__ = ["write_task_retry", "write_report_retry", "RETRYABLE_CODES",
           "RETRYABLE_WHEN_MARKED",
           "Backoff", "OnRetry"]

# Retried whatever the broker's "retryable" says; RETRYABLE_WHEN_MARKED
# only when it says true; every other code never (outcome_unknown,
# conflict, invalid_request ...: a broker marking one retryable is not
# believed, as libidem and idemd-client do not believe it).
RETRYABLE_CODES = ("in_progress", "storage_unavailable", "shutting_down",
                   "too_many_connections")
RETRYABLE_WHEN_MARKED = ("internal", "table_full")

_T = TypeVar("_T")
OnRetry = Callable[[int, IdemError, float], None]


def _check_id(client_submission_id: Optional[str], what: str) -> str:
    if not client_submission_id:
        raise ValueError("%s needs a client_submission_id: a call without "
                         "one is not idempotent, and a retry must never "
                         "make one up" % what)
    return client_submission_id


class Backoff:
    """The retry policy of the helpers here and of idem.aio's: which
    failures are retried, how long to wait, when to give up.  No I/O:
    the caller connects, calls and sleeps.

    timeout(t): the socket timeout of the next attempt (t, bounded by
    what is left of deadline).  failed(error): call it in the except
    clause of a failed attempt; it raises error when it is not to be
    retried (a conflict, a code that is not retryable, attempts or time
    run out), else returns the delay to sleep before the next attempt
    (full jitter: uniform(0, min(max_delay, base_delay * 2 ** (n - 1)))
    after the n-th failure).  attempt: the attempts made so far."""

    def __init__(self, attempts: int, base_delay: float, max_delay: float,
                 deadline: Optional[float]) -> None:
        if attempts < 1:
            raise ValueError("attempts must be at least 1")
        self.attempts = attempts
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.end = None if deadline is None else time.monotonic() + deadline
        self.attempt = 0

    def timeout(self, timeout: Optional[float]) -> Optional[float]:
        self.attempt += 1
        if self.end is None:
            return timeout
        left = max(self.end - time.monotonic(), 0.001)
        return left if timeout is None else min(timeout, left)

    def failed(self, error: IdemError) -> float:
        if isinstance(error, IdemConflict):
            raise error
        if not (isinstance(error, IdemTransportError)
                or error.code in RETRYABLE_CODES
                or (error.code in RETRYABLE_WHEN_MARKED
                    and error.retryable)):
            raise error
        if self.attempt >= self.attempts:
            raise error
        delay = random.uniform(0, min(self.max_delay, self.base_delay
                                      * 2 ** (self.attempt - 1)))
        if self.end is not None and time.monotonic() + delay >= self.end:
            raise error
        return delay


def _retrying(call: Callable[[Client], _T], attempts: int,
              base_delay: float, max_delay: float,
              deadline: Optional[float], path: Optional[str],
              timeout: Optional[float], on_retry: Optional[OnRetry],
              sleep: Callable[[float], None]) -> _T:
    """call(client) on a fresh connection until it answers, fails for
    good, or attempts / time run out (see write_task_retry)."""
    backoff = Backoff(attempts, base_delay, max_delay, deadline)
    while True:
        try:
            with Client(path, timeout=backoff.timeout(timeout)) as c:
                return call(c)
        except IdemError as e:
            delay = backoff.failed(e)
            if on_retry is not None:
                on_retry(backoff.attempt, e, delay)
            sleep(delay)


def write_task_retry(task: Mapping[str, Any], client_submission_id: str,
                     attempts: int = 8, base_delay: float = 0.05,
                     max_delay: float = 5.0, deadline: Optional[float] = None,
                     path: Optional[str] = None,
                     timeout: Optional[float] = None,
                     request_digest: Any = None,
                     meta: Optional[Mapping[str, Any]] = None,
                     on_retry: Optional[OnRetry] = None,
                     sleep: Callable[[float], None] = time.sleep
                     ) -> WriteResult:
    """Create a task, surviving broker restarts and lost answers.

    Each attempt connects afresh and sends write_task with the SAME
    client_submission_id and task, so however many attempts reach the
    broker at most one task is created.  A transport failure or a
    retryable error (in_progress, storage_unavailable, shutting_down, an
    internal error marked retryable) is retried after a full-jitter
    backoff: random.uniform(0, min(max_delay, base_delay * 2 ** (n - 1)))
    seconds after the n-th failed attempt, at most attempts attempts in
    all, and, if deadline (seconds) is given, never sleeping past
    deadline seconds from the call (which also bounds each attempt's
    socket timeout).

    Returns the final WriteResult: created or reused, with recovered
    true when it finished a creation an earlier attempt (or process) had
    interrupted; all are success.  Raises IdemConflict at once, any other
    IdemError at once when it is not retryable, and the last error when
    attempts or time run out (then the outcome is unknown: calling again
    later with the same id is safe).

    on_retry(attempt, error, delay), if given, is called before each
    backoff sleep (attempt counts from 1: the attempt that failed).
    """
    sid = _check_id(client_submission_id, "write_task_retry")
    if request_digest is True:
        request_digest = task_digest(task)
    return _retrying(
        lambda c: c.write_task(task, sid, request_digest=request_digest,
                               meta=meta),
        attempts, base_delay, max_delay, deadline, path, timeout, on_retry,
        sleep)


def write_report_retry(task_id: str, report: Mapping[str, Any],
                       client_submission_id: str, attempts: int = 8,
                       base_delay: float = 0.05, max_delay: float = 5.0,
                       deadline: Optional[float] = None,
                       path: Optional[str] = None,
                       timeout: Optional[float] = None,
                       meta: Optional[Mapping[str, Any]] = None,
                       on_retry: Optional[OnRetry] = None,
                       sleep: Callable[[float], None] = time.sleep
                       ) -> ReportResult:
    """write_report with write_task_retry's retries: one REPORT however
    many attempts reach the broker (deduplicated by task, id and
    content)."""
    sid = _check_id(client_submission_id, "write_report_retry")
    return _retrying(
        lambda c: c.write_report(task_id, report, sid, meta=meta),
        attempts, base_delay, max_delay, deadline, path, timeout, on_retry,
        sleep)
