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
from .errors import IdemConflict, IdemError
from .replies import ReportResult, WriteResult

__all__ = ["write_task_retry", "write_report_retry", "RETRYABLE_CODES"]

RETRYABLE_CODES = ("in_progress", "storage_unavailable", "shutting_down",
                   "too_many_connections")

_T = TypeVar("_T")
OnRetry = Callable[[int, IdemError, float], None]


def _check_id(client_submission_id: Optional[str], what: str) -> str:
    if not client_submission_id:
        raise ValueError("%s needs a client_submission_id: a call without "
                         "one is not idempotent, and a retry must never "
                         "make one up" % what)
    return client_submission_id


def _retrying(call: Callable[[Client], _T], attempts: int,
              base_delay: float, max_delay: float,
              deadline: Optional[float], path: Optional[str],
              timeout: Optional[float], on_retry: Optional[OnRetry],
              sleep: Callable[[float], None]) -> _T:
    """call(client) on a fresh connection until it answers, fails for
    good, or attempts / time run out (see write_task_retry)."""
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    end = None if deadline is None else time.monotonic() + deadline
    attempt = 0
    while True:
        attempt += 1
        t = timeout
        if end is not None:
            left = max(end - time.monotonic(), 0.001)
            t = left if t is None else min(t, left)
        try:
            with Client(path, timeout=t) as c:
                return call(c)
        except IdemConflict:
            raise
        except IdemError as e:
            if not (e.retryable or e.code in RETRYABLE_CODES):
                raise
            if attempt >= attempts:
                raise
            delay = random.uniform(0, min(max_delay,
                                          base_delay * 2 ** (attempt - 1)))
            if end is not None and time.monotonic() + delay >= end:
                raise
            if on_retry is not None:
                on_retry(attempt, e, delay)
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
