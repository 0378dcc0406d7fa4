# SPDX-License-Identifier: ISC
"""typed_usage.py: a caller's code, typechecked (mypy --strict) against
the INSTALLED idem package by tests/python_client.sh: it proves that the
package ships its hints (py.typed) and that they say what the README
shows.  It is only typechecked, never run."""

from typing import Any, Dict, List, Optional

import idem
import idem.aio


def create(task: Dict[str, Any], sid: str) -> str:
    r: idem.WriteResult = idem.write_task_retry(task, sid)
    receipt: idem.Receipt = r.receipt
    raw: bytes = receipt.raw
    assert raw
    where: str = r.path
    moved: Optional[str] = r.current_path
    return receipt.task_id if moved is None else where


def state(sid: str) -> Optional[str]:
    with idem.Client(timeout=30.0) as c:
        found = c.get_submission(sid)
        if found.submission is None:
            return None
        return found.submission.state


def conflict_reason(task: Dict[str, Any], sid: str) -> Optional[str]:
    try:
        idem.Client().write_task(task, sid)
    except idem.IdemConflict as e:
        facts: idem.Conflict = e.conflict
        return facts.reason
    return None


def send_mail(msg: Dict[str, str], key: Optional[str]) -> Dict[str, str]:
    return {"message_id": "m", "key": key or ""}


def mail(sid: str, msg: Dict[str, str]) -> Any:
    with idem.Client() as c:
        with c.effect(sid, "mail.send/v1", msg) as e:
            if e.proceed:
                e.complete(send_mail(msg, e.external_key))
        return e.result


def probe(error: idem.IdemOutcomeUnknown) -> idem.Evidence:
    return idem.Evidence("not_applied", source="mail log %s"
                         % error.external_key)


@idem.effectful("mail.send/v1", probe=probe)
def send(msg: Dict[str, str], e: idem.Effect) -> Dict[str, str]:
    return send_mail(msg, e.external_key)


result: Any = send("run-1/mail", {"to": "a@example.com"})
digest: str = idem.effect_digest("mail.send/v1", {"to": "a@example.com"})
version: str = idem.__version__


def states(sid: str) -> idem.EffectState:
    with idem.Client() as c:
        with c.effect(sid, "mail.send/v1", {}, lease_ms=300) as e:
            d: idem.Disposition = e.disposition
            if d == "proceed":
                e.complete(None)
            expires: Optional[str] = e.lease_expires_at
            assert expires is None or e.lease_error is None
        return e.state


def views() -> int:
    with idem.Client() as c:
        s: idem.Stats = c.stats()
        d: idem.Diagnosis = c.diagnose(stale_after_ms=0)
        unknown: List[idem.DiagnoseEntry] = d.outcome_unknown
        counts: Optional[idem.EffectCounts] = d.effect_counts
        left: Optional[int] = unknown[0].lease_ms_left if unknown else None
        assert counts is None or left is None or left >= 0
        return s.created + s.counters["effects_committed"] + d.counts.committed


async def amail(sid: str, msg: Dict[str, str]) -> Any:
    async with idem.aio.Client(timeout=30.0) as c:
        h: idem.Hello = await c.hello()
        assert h.serves("effect_extend")
        async with c.effect(sid, "mail.send/v1", msg) as e:
            if e.proceed:
                r: idem.EffectReceipt = await e.complete(
                    send_mail(msg, e.external_key))
                assert r.raw
        ext: idem.EffectExtended = await c.effect_extend(
            sid, "mail.send/v1", "fence", 30000)
        assert ext.lease_expires_at
        w: idem.WriteResult = await c.write_task(
            {"sender": "PM", "recipient": "DEV", "subject": "x"}, sid)
        assert w.receipt.task_id
        return e.result


async def aprobe(error: idem.IdemOutcomeUnknown) -> idem.Evidence:
    return idem.Evidence("unknown", source=error.external_key)


@idem.aio.effectful("mail.send/v1", probe=aprobe, lease_ms=60000)
async def asend(msg: Dict[str, str], e: idem.aio.Effect) -> Dict[str, str]:
    return send_mail(msg, e.external_key)


async def asend_twice() -> Any:
    first: Any = await asend("run-1/amail", {"to": "a@example.com"})
    return first == await asend("run-1/amail", {"to": "a@example.com"})


async def aretry(task: Dict[str, Any], sid: str) -> str:
    r: idem.WriteResult = await idem.aio.write_task_retry(task, sid,
                                                          deadline=5.0)
    return r.receipt.task_id
