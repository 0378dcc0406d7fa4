# SPDX-License-Identifier: ISC
"""typed_usage.py: a caller's code, typechecked (mypy --strict) against
the INSTALLED idem package by tests/python_client.sh: it proves that the
package ships its hints (py.typed) and that they say what the README
shows.  It is only typechecked, never run."""

from typing import Any, Dict, Optional

import idem


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
