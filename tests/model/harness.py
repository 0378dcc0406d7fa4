# SPDX-License-Identifier: ISC
"""tests/model/harness.py: what every part of the model test shares.

It owns the run's settings and limits (the binaries, the sanitizer's
SLOWDOWN, the timeouts, the table's and ids' sizes, the roles and texts
requests are made of), the known defects (KNOWN_DEFECTS, and KNOWN,
those IDEM_MODEL_KNOWN names), the failures (ModelFailure, fail,
RegressionSkipped), the random search's deadline (RUN, BudgetSpent),
notes, reply times, and the run's figures (STATS, STATE_KINDS).  It
knows nothing of the broker's process or of the machine's rules.
"""

import os
import re
import sys
import time

from hypothesis import note as hyp_note

IDEMD = os.environ.get("IDEMD", "build/broker/idemd")
IDEMCTL = os.environ.get("IDEMCTL", "build/contrib/idemctl")
SLOWDOWN = 5 if os.environ.get("IDEM_SANITIZER_FLAGS") else 1
# How long a retryable refusal may last before the model calls it a
# refusal for ever (a checkpoint, a worker's restart take milliseconds;
# the defects last 20 s and more).
TRANSIENT_S = 8.0 * SLOWDOWN
REQUEST_TIMEOUT_S = 30.0 * SLOWDOWN
DEFAULT_CAPACITY = 262144
MAX_RESULT = 65536          # compact JSON bytes (doc/protocol.md, Limits)
MAX_ID = 200
KEY_SLOT = 56               # the key heap's slot: lengths near k*56
MAX_KEY = 128 + 1 + 200     # the longest key: an effect's kind, 0x1f, id
ROLES = ["PM", "DEV", "LEAD-QA", "DEV_01", "OPS"]
RECIPIENTS = ["DEV", "DEV.D1", "PM", "LEAD-QA.QA_2", "OPS"]
# Texts whose variants (NFC, NFD, CRLF, lone CR) are one request.
TEXTS = ["Fix login", "caf\u00e9 cr\u00e8me", "line 1\nline 2\n",
         "\u00c5ngstr\u00f6m \u1e9b\u0323", "\ud55c\uad6d\uc5b4 \u00f1"]


# The defects (issue 27) by name.  A name in IDEM_MODEL_KNOWN
# skips its regression sequences (regressions.py) and, in the random
# search, stops generating the input that shows it (or, for a refusal
# that lasts, accepts it): for a branch without that fix, so that the
# search goes on past it.  Unset (make check): the full model.
KNOWN_DEFECTS = {
    "seq-exhausted-checkpoint": "item 1: a sequence_exhausted refusal "
    "with a full table poisons checkpoints",
    "long-id-table-full": "item 2: long ids get table_full for ever "
    "once the table cycled",
    "arena-full-complete": "item 3: effect_complete answers table_full "
    "for long with a full result arena",
    "nul": "item 4: a NUL in a request string is accepted",
    "lease-null": "item 7: lease_ms null is refused",
    "absent-result": "item 7: applied without result on an effect "
    "committed with another result",
    "history-count": "found by the model: stats history_entries counts "
    "a receipt twice after restarts with another --capacity",
    "restart-capacity": "found by the model: a restart with --capacity "
    "64 after 63 submissions (2 in flight) is refused ('63 ... more "
    "than --capacity 64 holds'); and after 65 effects begun together, "
    "all committed since",
    "shortened-lease": "found by the model: an extension that shortens "
    "the lease is answered before it is durable; lost in a crash, the "
    "later end counts",
}
KNOWN = set(x for x in os.environ.get("IDEM_MODEL_KNOWN", "").split(",")
            if x)
for _k in KNOWN:
    if _k not in KNOWN_DEFECTS:
        sys.exit("IDEM_MODEL_KNOWN: %s is not one of %s" % (
            _k, ", ".join(sorted(KNOWN_DEFECTS))))


def table_full_known(rep):
    """A lasting table_full that a defect named in KNOWN explains (by
    the cause idemd's message gives)."""
    msg = (rep.get("error") or {}).get("message", "")
    if "arena-full-complete" in KNOWN and "result arena" in msg:
        return True
    return "long-id-table-full" in KNOWN and "may evict" in msg


class ModelFailure(AssertionError):
    pass


class RegressionSkipped(Exception):
    """A regression's step that cannot run here (an idemd without fault
    injection, another store): run_regressions lists it as skipped."""


# The random search stops at a deadline, not a count of examples:
# Hypothesis keeps its first examples small, and a sequence's length
# varies.  Past it, the next sequence ends the run at its start with
# BudgetSpent; unless a failure was seen (any exception of a sequence,
# not only the model's), whose shrinking must run to its end.
RUN = {"deadline": None, "failed": False, "first": None}


class BudgetSpent(KeyboardInterrupt):
    """Hypothesis (6.67, engine.py's test_function) records where every
    sequence ended in its tree of draws, KeyboardInterrupt alone
    excepted.  A sequence ended by any other exception right after
    `start`'s draws, where earlier sequences went on drawing, is
    "Inconsistent data generation!" (Flaky), which ended every seed at
    its budget that way, and saved that sequence in the example
    database; a KeyboardInterrupt is neither recorded nor saved."""


def fail(msg):
    RUN["failed"] = True
    if RUN["first"] is None:
        RUN["first"] = msg
    raise ModelFailure(msg)


def note(text):
    """Hypothesis's note inside a test, print outside (a regression)."""
    try:
        hyp_note(text)
    except Exception:   # pylint: disable=broad-except
        print("  " + text)


def now_ms():
    return time.time() * 1000.0


def parse_time_ms(text):
    """A reply's time ("2026-12-05T01:02:03.456Z") in ms since the epoch."""
    import calendar
    m = re.match(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.(\d{3})Z$",
                 text or "")
    if m is None:
        fail("not a reply time: %r" % text)
    f = [int(x) for x in m.groups()]
    return calendar.timegm(tuple(f[:6]) + (0, 0, 0)) * 1000.0 + f[6]


# The run's figures, printed at its end (test_model.py's main).
STATS = {"sequences": 0, "steps": 0, "requests": 0, "created": 0,
         "transient_retries": 0, "restarts": 0, "kills": 0,
         "stale_fences": 0}
STATE_KINDS = set()
