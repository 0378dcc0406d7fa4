# SPDX-License-Identifier: ISC
"""idem.digest: submission ids and the write-task-v1 digest (SPEC.md,
"Digest scheme write-task-v1"), computed as the broker computes it, so a
caller may send request_digest and have the broker check it.
"""

from __future__ import annotations

import decimal
import hashlib
import math
import secrets
import unicodedata
from typing import Any, Dict, List, Mapping, Optional, Union

__all__ = ["DIGEST_SCHEMA", "EFFECT_DIGEST_SCHEMA", "submission_id_new",
           "task_canonical", "task_digest", "effect_canonical",
           "effect_digest"]

DIGEST_SCHEMA = "write-task-v1"
EFFECT_DIGEST_SCHEMA = "generic-json-v1"
# generic-json-v1 refuses integers a double cannot hold exactly.
_MAX_SAFE_INTEGER = 2 ** 53

_TASK_DEFAULTS: Dict[str, Any] = {
    "body": "", "priority": "P2", "risk_level": "low", "thread_key": None,
    "parent": None, "references": [], "depends_on": [],
}
_TASK_REQUIRED = ("sender", "recipient", "subject")
_TASK_LISTS = ("references", "depends_on")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t",
            "\n": "\\n", "\f": "\\f", "\r": "\\r"}

_Field = Union[None, str, List[str]]


def submission_id_new(prefix: str = "") -> str:
    """A fresh random client_submission_id (URL-safe base64, 128 bits),
    after prefix.  Make it once per business intent and keep it for
    every retry of that intent."""
    return prefix + secrets.token_urlsafe(16)


def _normalize(s: str) -> str:
    """CRLF and lone CR become LF, then NFC (not NFKC); no trimming."""
    return unicodedata.normalize(
        "NFC", s.replace("\r\n", "\n").replace("\r", "\n"))


def _json_string(s: str) -> str:
    """RFC 8785 (JCS) string: escape only '"', '\\' and U+0000..U+001F."""
    out = ['"']
    for ch in s:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch < " ":
            out.append("\\u%04x" % ord(ch))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _json_value(v: _Field) -> str:
    if v is None:
        return "null"
    if isinstance(v, str):
        return _json_string(v)
    return "[" + ",".join(_json_string(x) for x in v) + "]"


def task_canonical(task: Mapping[str, Any]) -> bytes:
    """The write-task-v1 canonical bytes of task: defaults applied (None
    for an optional field is its default), strings normalized, the ten
    fields in byte order, no whitespace.  Raises ValueError for a task the
    broker would refuse for its shape (a missing required field, an
    unknown field, a wrong type, a string that is not valid Unicode)."""
    if not isinstance(task, Mapping):
        raise ValueError("task must be a mapping")
    unknown = sorted(set(task) - set(_TASK_REQUIRED) - set(_TASK_DEFAULTS))
    if unknown:
        raise ValueError("task has no field %r" % unknown[0])
    fields: Dict[str, _Field] = {}
    for key in _TASK_REQUIRED + tuple(_TASK_DEFAULTS):
        v: Optional[Any] = task.get(key)
        if v is None:
            if key in _TASK_REQUIRED:
                raise ValueError("task.%s is required" % key)
            fields[key] = _TASK_DEFAULTS[key]
        elif key in _TASK_LISTS:
            if not isinstance(v, (list, tuple)) or not all(
                    isinstance(x, str) for x in v):
                raise ValueError("task.%s must be a list of strings" % key)
            fields[key] = [_normalize(x) for x in v]
        elif isinstance(v, str):
            fields[key] = _normalize(v)
        else:
            raise ValueError("task.%s must be a string" % key)
    keys = sorted(fields, key=lambda k: k.encode("utf-8"))
    text = "{" + ",".join(_json_string(k) + ":" + _json_value(fields[k])
                          for k in keys) + "}"
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError("the task holds a string that is not valid "
                         "Unicode: %s" % e) from e


def task_digest(task: Mapping[str, Any]) -> str:
    """write-task-v1: the lower-case hex SHA-256 of task_canonical(task),
    the request_digest the broker computes for the same task."""
    return hashlib.sha256(task_canonical(task)).hexdigest()


# ---- generic-json-v1 (SPEC.md, "Effects") -----------------------------------

def _es_number(v: float) -> str:
    """A double in ECMAScript's Number::toString form, as JCS wants it:
    the shortest digits that round-trip (Python's repr finds them), then
    ECMAScript's choice between plain and exponent notation."""
    if not math.isfinite(v):
        raise ValueError("generic-json-v1 has no NaN or infinity")
    if v == 0:
        return "0"
    sign = "-" if v < 0 else ""
    t = decimal.Decimal(repr(abs(v))).normalize().as_tuple()
    digits = "".join(str(d) for d in t.digits)
    k = len(digits)
    n = int(t.exponent) + k     # value = 0.digits * 10 ** n
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * -n + digits
    e = n - 1
    mantissa = digits[0] + ("." + digits[1:] if k > 1 else "")
    return sign + mantissa + "e" + ("+" if e >= 0 else "-") + str(abs(e))


def _utf16_key(s: str) -> bytes:
    return s.encode("utf-16-be", "surrogatepass")


def _jcs(v: Any, out: List[str]) -> None:
    if v is None:
        out.append("null")
    elif v is True:
        out.append("true")
    elif v is False:
        out.append("false")
    elif isinstance(v, int):
        if abs(v) > _MAX_SAFE_INTEGER:
            raise ValueError("generic-json-v1: the integer %d is past 2**53"
                             % v)
        out.append(str(v))
    elif isinstance(v, float):
        out.append(_es_number(v))
    elif isinstance(v, str):
        out.append(_json_string(_normalize(v)))
    elif isinstance(v, (list, tuple)):
        out.append("[")
        for i, x in enumerate(v):
            if i:
                out.append(",")
            _jcs(x, out)
        out.append("]")
    elif isinstance(v, Mapping):
        members: Dict[str, Any] = {}
        for name, x in v.items():
            if not isinstance(name, str):
                raise ValueError("generic-json-v1: a member name is not a "
                                 "string: %r" % (name,))
            key = _normalize(name)
            if key in members:
                raise ValueError("generic-json-v1: two member names are "
                                 "equal after normalization: %r" % key)
            members[key] = x
        out.append("{")
        for i, key in enumerate(sorted(members, key=_utf16_key)):
            if i:
                out.append(",")
            out.append(_json_string(key))
            out.append(":")
            _jcs(members[key], out)
        out.append("}")
    else:
        raise ValueError("generic-json-v1: %s is not a JSON value"
                         % type(v).__name__)


def effect_canonical(effect_kind: str, request: Any) -> bytes:
    """The generic-json-v1 canonical bytes of {"kind": effect_kind,
    "request": request}: every string (member names too) CRLF/CR -> LF
    and NFC, then JCS (members sorted by UTF-16 code units, numbers in
    ECMAScript form).  Raises ValueError for what the broker refuses:
    names equal after normalization, integers past 2**53, non-JSON
    values, strings that are not valid Unicode."""
    out: List[str] = []
    _jcs({"kind": effect_kind, "request": request}, out)
    try:
        return "".join(out).encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError("the request holds a string that is not valid "
                         "Unicode: %s" % e) from e


def effect_digest(effect_kind: str, request: Any) -> str:
    """generic-json-v1: the lower-case hex SHA-256 of effect_canonical,
    the request_digest the broker computes for the same effect (optional
    in effect_begin: the broker checks it when it is sent)."""
    return hashlib.sha256(effect_canonical(effect_kind, request)).hexdigest()
