# SPDX-License-Identifier: ISC
"""idem.wire: one response line, decoded, with its bytes kept.

SPEC.md promises that a reused receipt is byte for byte the first call's.
json.loads cannot keep that promise visible (it forgets spacing, member
order, number spelling and escapes), so a Reply keeps the line's bytes and
raw_value() slices a member's exact text out of them: no re-serialising.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Tuple

__all__ = ["MAX_LINE_BYTES", "Reply"]

MAX_LINE_BYTES = 1024 * 1024    # a request or response line, with its newline

_WS = " \t\r\n"
_DECODER = json.JSONDecoder()


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _member_span(text: str, start: int, key: str
                 ) -> Optional[Tuple[int, int]]:
    """The [begin, end) of the value of member key of the JSON object
    that starts at text[start], or None (no such member, not an object).
    The last member of that name wins, as it does for json.loads."""
    i = _skip_ws(text, start)
    if text[i:i + 1] != "{":
        return None
    found = None
    i = _skip_ws(text, i + 1)
    while i < len(text) and text[i] != "}":
        name, i = _DECODER.raw_decode(text, i)
        i = _skip_ws(text, i)
        if text[i:i + 1] != ":":
            return None
        begin = _skip_ws(text, i + 1)
        _, end = _DECODER.raw_decode(text, begin)
        if name == key:
            found = (begin, end)
        i = _skip_ws(text, end)
        if text[i:i + 1] == ",":
            i = _skip_ws(text, i + 1)
    return found


class Reply(Dict[str, Any]):
    """A reply: a dict of the decoded JSON object, plus raw, the response
    line's bytes as the broker sent them (without the newline)."""

    def __init__(self, data: Dict[str, Any], raw: bytes) -> None:
        super().__init__(data)
        self.raw = raw

    def raw_value(self, *path: str) -> Optional[bytes]:
        """The exact bytes the broker sent for the member at path, e.g.
        raw_value("receipt") or raw_value("submission", "receipt"), or
        None if there is none.  The line is valid UTF-8 (it decoded), so
        slicing its text and encoding it again gives its very bytes."""
        if not path:
            return self.raw
        text = self.raw.decode("utf-8")
        begin = 0
        end = len(text)
        for key in path:
            span = _member_span(text, begin, key)
            if span is None:
                return None
            begin, end = span
        return text[begin:end].encode("utf-8")
