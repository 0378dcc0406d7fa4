# SPDX-License-Identifier: ISC
"""idem.wire: the protocol's lines, for every client (idem.Client and
idem.aio.Client): a request encoded, response lines cut out of what the
socket gives (LineBuffer), and one response line decoded, with its bytes
kept.  No I/O here: the clients read and write, this module decides.

SPEC.md promises that a reused receipt is byte for byte the first call's.
json.loads cannot keep that promise visible (it forgets spacing, member
order, number spelling and escapes), so a Reply keeps the line's bytes and
raw_value() slices a member's exact text out of them: no re-serialising.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Mapping, Optional, Tuple

from .errors import IdemError, IdemProtocolError

__all__ = ["MAX_LINE_BYTES", "READ_BYTES", "Reply", "LineBuffer",
           "encode_request", "decode_reply", "closes_connection"]

MAX_LINE_BYTES = 1024 * 1024    # a request or response line, with its newline
READ_BYTES = 65536              # what a client asks its socket for at once

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


def encode_request(request: Mapping[str, Any]) -> bytes:
    """The request's line, newline included.  Raises IdemError for one
    the client refuses to send: invalid_utf8 (a lone surrogate),
    invalid_request (not JSON: NaN, an object), too_large."""
    try:
        line = json.dumps(request, ensure_ascii=False, separators=(",", ":"),
                          allow_nan=False).encode("utf-8") + b"\n"
    except UnicodeEncodeError as e:
        raise IdemError("invalid_utf8", "the request holds a string that "
                        "is not valid Unicode: %s" % e) from e
    except (TypeError, ValueError) as e:
        raise IdemError("invalid_request", str(e)) from e
    if len(line) > MAX_LINE_BYTES:
        raise IdemError("too_large", "the request is %d bytes; a line is "
                        "at most %d, newline included" % (
                            len(line), MAX_LINE_BYTES))
    return line


class LineBuffer:
    """The bytes received and not yet taken as lines.  feed() what the
    socket gave; next_line() takes one response line (without its
    newline) or None until a whole one is there; bytes past it are kept
    for the next call.  A line over MAX_LINE_BYTES (newline included)
    raises IdemProtocolError."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._scanned = 0

    def feed(self, chunk: bytes) -> None:
        self._buf += chunk

    def next_line(self) -> Optional[bytes]:
        nl = self._buf.find(b"\n", self._scanned)
        if nl == -1:
            self._scanned = len(self._buf)
            if self._scanned >= MAX_LINE_BYTES:
                raise IdemProtocolError("a response line over %d bytes"
                                        % MAX_LINE_BYTES)
            return None
        if nl + 1 > MAX_LINE_BYTES:
            raise IdemProtocolError("a response line over %d bytes"
                                    % MAX_LINE_BYTES)
        line = bytes(self._buf[:nl])
        del self._buf[:nl + 1]
        self._scanned = 0
        return line

    def pending(self) -> bool:
        """Whether bytes past the last line taken are waiting."""
        return len(self._buf) > 0

    def has_line(self) -> bool:
        """Whether a whole line is waiting."""
        return self._buf.find(b"\n") != -1

    def clear(self) -> None:
        self._buf = bytearray()
        self._scanned = 0


def _holds_nul(value: Any) -> bool:
    """Whether a decoded JSON value holds U+0000 in a string or a member
    name anywhere."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if "\x00" in v:
                return True
        elif isinstance(v, dict):
            for k, x in v.items():
                if "\x00" in k:
                    return True
                stack.append(x)
        elif isinstance(v, list):
            stack.extend(v)
    return False


# The codes of the errors idemd sends without an id on a connection it
# has read from: it could not read the request, so it has no id to echo
# (broker/request.c: not JSON, e.g. an integer past 64 bits; not UTF-8;
# not an object, a NUL in a member name or an id that is no scalar;
# broker/worker.c: a line over the limit).  too_many_connections, the
# other error without an id, comes only before the broker reads
# anything: never after an answer.
UNREAD_CODES = frozenset(("invalid_json", "invalid_utf8", "invalid_request",
                          "too_large"))


def _unread_error(data: Dict[str, Any]) -> bool:
    """Whether an error is one idemd sends when it could not read the
    request (UNREAD_CODES)."""
    error = data.get("error")
    return isinstance(error, dict) and error.get("code") in UNREAD_CODES


def _same_id(data: Dict[str, Any], request_id: Any) -> bool:
    """Whether the reply's id is the request's, in type as in value
    (True is not 1, 1.0 is not 1)."""
    answered = data["id"]
    return type(answered) is type(request_id) and answered == request_id


def decode_reply(line: bytes, request_id: Any,
                 answered: bool = False) -> Reply:
    """The Reply of one response line to the request of request_id
    (answered: the connection has answered a request before).
    Raises IdemProtocolError for a line that is not a JSON object with a
    boolean ok, that holds U+0000 in a string (SPEC.md allows none in a
    request; the broker never sends one, and a C caller could not see
    past it), or that answers another request: the caller must close
    the connection, whose later lines can no longer be matched.

    A success must echo the request's id (every request of this client
    carries one, and SPEC.md says the response echoes it): a success
    without it could be an answer to an earlier request.  An error may
    come without one as a connection's first answer (the broker refuses
    a connection, too_many_connections, before it reads the request) or
    when the broker could not read the request (UNREAD_CODES: invalid_json
    for an integer past 64 bits).  Any other error without an id on a
    connection that has answered is a line nobody asked for (a stray
    refusal arrived after the last answer was read)."""
    try:
        data = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise IdemProtocolError("the response is not JSON: %s" % e) from e
    if not isinstance(data, dict) or not isinstance(data.get("ok"), bool):
        raise IdemProtocolError("the response is not an object with a "
                                "boolean ok")
    if b"\\u0000" in line and _holds_nul(data):
        raise IdemProtocolError("the response holds U+0000 in a string")
    if "id" in data:
        if not _same_id(data, request_id):
            raise IdemProtocolError("the response answers request %r, "
                                    "not %r" % (data["id"], request_id))
    elif data["ok"]:
        raise IdemProtocolError("a success without the request's id %r"
                                % (request_id,))
    elif answered and not _unread_error(data):
        raise IdemProtocolError("an error without the request's id %r on "
                                "a connection that has answered before"
                                % (request_id,))
    return Reply(data, line)


def closes_connection(reply: Reply) -> bool:
    """Whether the broker closes the connection after this reply
    (too_large, SPEC.md): the client closes its end too."""
    if reply["ok"]:
        return False
    error = reply.get("error")
    return isinstance(error, dict) and error.get("code") == "too_large"
