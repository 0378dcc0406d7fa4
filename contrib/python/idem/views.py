# SPDX-License-Identifier: ISC
"""idem.views: the broker's read-only views as typed objects: stats()
(Stats) and diagnose() (Diagnosis, its DiagnoseEntry rows and counts).

The fields mirror SPEC.md's members ("stats", "diagnose", "Effects");
what a broker adds beyond them stays readable: Stats.counters holds
every integer counter, DiagnoseEntry.data every member of a row, and
like every reply object they answer reply["member"] for the code of
version 0.1, which read them as dicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from .errors import IdemProtocolError
from .replies import _object, _opt_bool, _opt_int, _opt_str, _ReplyAccess
from .wire import Reply

__all__ = ["Stats", "StoreHistory", "Diagnosis", "DiagnoseEntry",
           "DiagnoseCounts", "EffectCounts"]


def _int(data: Dict[str, Any], key: str, what: str) -> int:
    v = _opt_int(data, key)
    if v is None:
        raise IdemProtocolError("%s without an integer %s" % (what, key))
    return v


@dataclass(frozen=True)
class StoreHistory:
    """stats' "store" with --store postgresql: the workspace's history,
    every broker's (doc/cluster.md)."""

    submissions: Optional[int]
    committed: Optional[int]
    in_flight: Optional[int]
    tombstones: Optional[int]
    effects: Optional[int]

    @classmethod
    def parse(cls, data: Dict[str, Any]) -> StoreHistory:
        return cls(*(_opt_int(data, k) for k in (
            "submissions", "committed", "in_flight", "tombstones",
            "effects")))


@dataclass(frozen=True)
class Stats(_ReplyAccess):
    """stats' answer: the counters SPEC.md names (a broker that lacks
    one is a protocol error), counters (every integer member, those
    included: the effects_* counters, table_evictions, ...), and store
    (None but on --store postgresql, where it is None too when the
    server did not answer)."""

    created: int
    reused: int
    conflict: int
    legacy_created: int
    errors: int
    journal_records: int
    journal_fsyncs: int
    table_used: int
    table_capacity: int
    history_entries: int
    workers: int
    worker_restarts: int
    uptime_ms: int
    counters: Dict[str, int] = field(repr=False)
    store: Optional[StoreHistory] = field(repr=False)
    reply: Reply = field(repr=False, compare=False)

    @classmethod
    def parse(cls, reply: Reply) -> Stats:
        counters = {k: v for k, v in reply.items()
                    if isinstance(v, int) and not isinstance(v, bool)
                    and k != "id"}
        store = _object(reply, "store")

        def n(key: str) -> int:
            return _int(reply, key, "stats")
        return cls(n("created"), n("reused"), n("conflict"),
                   n("legacy_created"), n("errors"), n("journal_records"),
                   n("journal_fsyncs"), n("table_used"),
                   n("table_capacity"), n("history_entries"), n("workers"),
                   n("worker_restarts"), n("uptime_ms"), counters,
                   None if store is None else StoreHistory.parse(store),
                   reply)


@dataclass(frozen=True)
class DiagnoseEntry:
    """One unfinished submission or effect of diagnose.

    Every row: client_submission_id, state, age_ms, stalled (older than
    stale_after_ms).  A task's or report's (effect_kind None): task_id,
    task_path, task_exists, request_digest_matches (null: no file),
    file_digest_matches (null before task_created).  An effect's
    (effect_kind set; state reserved, outcome_unknown or released):
    attempt, external_key, lease_expires_at and lease_live while
    reserved.  On a shared store: lease_owner, lease_ms_left.  data:
    every member."""

    client_submission_id: str
    state: str
    age_ms: Optional[int]
    stalled: Optional[bool]
    effect_kind: Optional[str]
    task_id: Optional[str]
    task_path: Optional[str]
    task_exists: Optional[bool]
    request_digest_matches: Optional[bool]
    file_digest_matches: Optional[bool]
    attempt: Optional[int]
    external_key: Optional[str]
    lease_expires_at: Optional[str]
    lease_live: Optional[bool]
    lease_owner: Optional[str]
    lease_ms_left: Optional[int]
    data: Dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def parse(cls, data: Dict[str, Any]) -> DiagnoseEntry:
        sid = data.get("client_submission_id")
        state = data.get("state")
        if not isinstance(sid, str) or not isinstance(state, str):
            raise IdemProtocolError("a diagnose entry without "
                                    "client_submission_id or state")
        return cls(sid, state, _opt_int(data, "age_ms"),
                   _opt_bool(data, "stalled"),
                   _opt_str(data, "effect_kind"),
                   _opt_str(data, "task_id"), _opt_str(data, "task_path"),
                   _opt_bool(data, "task_exists"),
                   _opt_bool(data, "request_digest_matches"),
                   _opt_bool(data, "file_digest_matches"),
                   _opt_int(data, "attempt"),
                   _opt_str(data, "external_key"),
                   _opt_str(data, "lease_expires_at"),
                   _opt_bool(data, "lease_live"),
                   _opt_str(data, "lease_owner"),
                   _opt_int(data, "lease_ms_left"), data)

    @property
    def is_effect(self) -> bool:
        return self.effect_kind is not None

    def __getitem__(self, key: str) -> Any:
        return self.data[key]


@dataclass(frozen=True)
class DiagnoseCounts:
    """diagnose's "counts": the tasks and reports per state."""

    reserved: int
    task_created: int
    committed: int


@dataclass(frozen=True)
class EffectCounts:
    """diagnose's "effect_counts": the effects per state (a lapsed lease
    counts as outcome_unknown)."""

    reserved: int
    outcome_unknown: int
    released: int
    committed: int


@dataclass(frozen=True)
class Diagnosis(_ReplyAccess):
    """diagnose's answer: entries (effects whose outcome is unknown
    first: they are what an operator must settle), counts, and
    effect_counts (None from a broker without effects)."""

    entries: List[DiagnoseEntry]
    counts: DiagnoseCounts
    effect_counts: Optional[EffectCounts]
    reply: Reply = field(repr=False, compare=False)

    @classmethod
    def parse(cls, reply: Reply) -> Diagnosis:
        entries = reply.get("entries")
        counts = _object(reply, "counts")
        if not isinstance(entries, list) or counts is None:
            raise IdemProtocolError("diagnose without entries or counts")
        effects = _object(reply, "effect_counts")
        return cls(
            [DiagnoseEntry.parse(e) if isinstance(e, dict)
             else _not_an_entry() for e in entries],
            DiagnoseCounts(*(_int(counts, k, "diagnose counts") for k in (
                "reserved", "task_created", "committed"))),
            None if effects is None else EffectCounts(
                *(_int(effects, k, "diagnose effect_counts") for k in (
                    "reserved", "outcome_unknown", "released",
                    "committed"))),
            reply)

    @property
    def outcome_unknown(self) -> List[DiagnoseEntry]:
        """The effects an operator must settle (effect_resolve)."""
        return [e for e in self.entries if e.state == "outcome_unknown"]


def _not_an_entry() -> DiagnoseEntry:
    raise IdemProtocolError("a diagnose entry that is not an object")
