# SPDX-License-Identifier: ISC
"""idem: the Python client of idemd, the broker that makes the side
effects of agent processes idempotent: FCoP task creation, and any tool
call (effects).  Standard library only, Python 3.8+; distribution
idemd-client (pip install ./contrib/python).

Usage (10 lines)::

    import idem
    task = {"sender": "PM", "recipient": "DEV", "subject": "Fix login"}
    sid = idem.submission_id_new()            # one per intent: keep it
    r = idem.write_task_retry(task, sid)      # reconnects, backs off, retries
    print(r.disposition, r.receipt.task_id)   # the same on every retry
    with idem.Client() as c:                  # $IDEM_SOCKET or $IDEM_ROOT
        print(c.get_submission(sid).submission.state)      # committed
        try: c.write_task(dict(task, subject="Other"), sid)  # other text
        except idem.IdemConflict as e:                 # nothing created
            print(e.conflict.reason, e.conflict.bound.task_id)

The wire protocol is SPEC.md's: newline-delimited JSON over a Unix
stream socket.  Modules: client (Client, the ops), aio (the asyncio
client: idem.aio.Client, async with client.effect(...), @effectful for
coroutines; import idem.aio), replies (the typed replies: WriteResult,
Receipt, ...), views (Stats, Diagnosis), errors, digest (write-task-v1
and generic-json-v1), retry (write_task_retry, write_report_retry),
effects (Client.effect, effectful), and what both clients share: ops
(each op's request and reply parser) and wire (lines).

Errors.  An op returns a typed reply when the broker says "ok": true, and
raises otherwise:

* IdemError: the broker answered an error (code, message, field,
  retryable, reply), or the client refused the request before sending it
  (code "too_large", "invalid_utf8", "invalid_request").
* IdemTransportError (code "transport", always retryable): connecting,
  sending or receiving failed.  The connection is closed and the outcome
  of the request is unknown: retry it with the same client_submission_id
  (write_task_retry does), on a new Client.
* IdemProtocolError (code "protocol", not retryable): the answer was not
  a protocol line (not JSON, over 1 MiB, answering another request).
* IdemConflict (code "conflict"): write_task, write_report and the effect
  ops RAISE on a conflict rather than return it, so that a caller who
  only reads the receipt can never take a conflict for a success.
  e.conflict holds the facts (reason, bound: what the id is bound to).
* IdemInProgress (retryable) and IdemOutcomeUnknown (effects: settle it
  with evidence, Client.effect_resolve).

A created or reused reply is a success, with or without recovered.
"""

from .client import DEFAULT_ROOT, SOCKET_NAME, Client, default_socket_path
from .digest import (DIGEST_SCHEMA, EFFECT_DIGEST_SCHEMA, effect_canonical,
                     effect_digest, submission_id_new, task_canonical,
                     task_digest)
from .effects import (Effect, EffectState, Evidence, NotApplied, Probe,
                      effectful)
from .errors import (IdemConflict, IdemEffectIncomplete, IdemError,
                     IdemInProgress, IdemOutcomeUnknown, IdemProtocolError,
                     IdemTransportError)
from .replies import (Conflict, ConflictExisting, Disposition, EffectBegin,
                      EffectExtended, EffectReceipt, EffectSettled, Fence,
                      Hello, Receipt, ReportResult, Submission,
                      SubmissionLookup, WriteResult)
from .retry import RETRYABLE_CODES, write_report_retry, write_task_retry
from .views import (DiagnoseCounts, DiagnoseEntry, Diagnosis, EffectCounts,
                    Stats, StoreHistory)
from .wire import MAX_LINE_BYTES, Reply

# The version of idem this client ships with (configure.ac's AC_INIT):
# tests/python_client.sh checks that they agree.
__version__ = "0.1.0"

__all__ = [
    "__version__", "Client", "default_socket_path", "DEFAULT_ROOT",
    "SOCKET_NAME", "MAX_LINE_BYTES", "Reply",
    "DIGEST_SCHEMA", "EFFECT_DIGEST_SCHEMA", "submission_id_new",
    "task_canonical", "task_digest", "effect_canonical", "effect_digest",
    "IdemError", "IdemTransportError", "IdemProtocolError", "IdemConflict",
    "IdemInProgress", "IdemOutcomeUnknown", "IdemEffectIncomplete",
    "Receipt", "WriteResult", "ReportResult", "Conflict", "ConflictExisting",
    "Submission", "SubmissionLookup", "Hello", "EffectBegin",
    "EffectReceipt", "EffectSettled", "EffectExtended", "Fence",
    "Disposition", "Stats", "StoreHistory", "Diagnosis", "DiagnoseEntry",
    "DiagnoseCounts", "EffectCounts",
    "Effect", "EffectState", "Evidence", "NotApplied", "Probe", "effectful",
    "write_task_retry", "write_report_retry", "RETRYABLE_CODES",
]
