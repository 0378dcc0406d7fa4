"""idem.py: a client of idemd, the broker that makes FCoP task creation
idempotent.  Standard library only (Python 3.6+).

Usage (10 lines)::

    import idem
    task = {"sender": "PM", "recipient": "DEV", "subject": "Fix login"}
    sid = idem.submission_id_new()            # one per intent: keep it
    reply = idem.write_task_retry(task, sid)  # reconnects, backs off, retries
    print(reply["disposition"], reply["receipt"]["task_id"])  # same on retries
    with idem.Client() as c:                  # $IDEM_SOCKET or $IDEM_ROOT
        print(c.get_submission(sid)["submission"]["state"])   # committed
        try: c.write_task(dict(task, subject="Other"), sid)  # other text
        except idem.IdemConflict as e:
            print(e.reason, e.existing["task_id"])   # digest_mismatch TASK-...

The wire protocol (SPEC.md): newline-delimited JSON over a Unix stream
socket, one request line and one response line, at most 1 MiB each with
the newline; responses come back in request order.

Errors.  Every op returns the broker's reply (a dict; see Reply) when it
says "ok": true, and raises otherwise:

* IdemError: the broker answered an error (code, message, field,
  retryable, reply), or the client refused the request before sending it
  (code "too_large", "invalid_utf8", "invalid_request").
* IdemTransportError (an IdemError, code "transport", always retryable):
  connecting, sending or receiving failed.  The connection is closed and
  the outcome of the request is unknown: retry it with the same
  client_submission_id (write_task_retry does), on a new Client.
* IdemProtocolError (code "protocol", not retryable): the answer was not
  a protocol line (not JSON, over 1 MiB, answering another request).
  The connection is closed.
* IdemConflict (code "conflict", not retryable): write_task and
  write_report RAISE on a conflict rather than return it, so that a
  caller who only reads reply["receipt"] can never take a conflict for a
  success.  It carries reason (digest_mismatch, schema_mismatch,
  target_mismatch, task_missing), existing (the binding the id already
  has) and reply (the whole conflict reply).

A "created" or "reused" reply is a success, with or without "recovered".
A Client is not thread-safe: use one per thread.
"""

import hashlib
import json
import os
import random
import secrets
import socket
import time
import unicodedata

__all__ = [
    "Client", "Reply", "IdemError", "IdemTransportError", "IdemProtocolError",
    "IdemConflict", "submission_id_new", "task_canonical", "task_digest",
    "write_task_retry", "default_socket_path", "MAX_LINE_BYTES",
    "DIGEST_SCHEMA",
]

MAX_LINE_BYTES = 1024 * 1024    # a request or response line, with its newline
DIGEST_SCHEMA = "write-task-v1"
DEFAULT_ROOT = "./fcop"
SOCKET_NAME = ".idem/idemd.sock"
_READ_BYTES = 65536


# ---- Errors -----------------------------------------------------------------

class IdemError(Exception):
    """An error the broker answered, or one the client found itself.

    code: the wire code ("invalid_request", "in_progress", ...) or
    "transport" / "protocol" for the client's own; message; field (the
    dotted path of the offending field, or None); retryable (a retry with
    the same submission id may succeed); reply (the broker's whole reply,
    or None when there was none).
    """

    def __init__(self, code, message, field=None, retryable=False,
                 reply=None):
        super().__init__("%s: %s%s" % (code, message,
                                       " (field %s)" % field if field else ""))
        self.code = code
        self.message = message
        self.field = field
        self.retryable = bool(retryable)
        self.reply = reply


class IdemTransportError(IdemError):
    """Connect, send or receive failed: the outcome is unknown; retry."""

    def __init__(self, message, cause=None):
        super().__init__("transport", message, retryable=True)
        self.cause = cause


class IdemProtocolError(IdemError):
    """The broker's answer broke the protocol; the connection is closed."""

    def __init__(self, message):
        super().__init__("protocol", message, retryable=False)


class IdemConflict(IdemError):
    """The submission id is bound to other content (or a recovery fact
    contradicts it); nothing was created.  reason and existing are the
    reply's error.reason and existing."""

    def __init__(self, reply):
        error = reply.get("error") or {}
        super().__init__("conflict", error.get("message", "conflict"),
                         error.get("field"), False, reply)
        self.reason = error.get("reason")
        self.existing = reply.get("existing")


def _error_from_reply(reply):
    error = reply.get("error")
    if reply.get("disposition") == "conflict" or (
            isinstance(error, dict) and error.get("code") == "conflict"):
        return IdemConflict(reply)
    if not isinstance(error, dict) or not isinstance(error.get("code"), str):
        return IdemProtocolError("an error reply without an error code")
    return IdemError(error["code"], error.get("message", ""),
                     error.get("field"), error.get("retryable") is True,
                     reply)


# ---- Replies ----------------------------------------------------------------

class Reply(dict):
    """A reply: a dict of the decoded JSON object, plus raw, the response
    line's bytes as the broker sent them (without the newline)."""

    def __init__(self, data, raw):
        super().__init__(data)
        self.raw = raw

    def raw_value(self, key):
        """The exact bytes the broker sent for the top-level member key
        (e.g. "receipt"), or None if there is none.  SPEC.md promises a
        reused receipt byte for byte equal to the first call's."""
        text = self.raw.decode("utf-8")
        decoder = json.JSONDecoder()
        i = _skip_ws(text, 0)
        if text[i:i + 1] != "{":
            return None
        i = _skip_ws(text, i + 1)
        while i < len(text) and text[i] != "}":
            name, i = decoder.raw_decode(text, i)
            i = _skip_ws(text, i)
            if text[i:i + 1] != ":":
                return None
            start = _skip_ws(text, i + 1)
            _, end = decoder.raw_decode(text, start)
            if name == key:
                return text[start:end].encode("utf-8")
            i = _skip_ws(text, end)
            if text[i:i + 1] == ",":
                i = _skip_ws(text, i + 1)
        return None


def _skip_ws(text, i):
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


# ---- Connections ------------------------------------------------------------

def default_socket_path():
    """$IDEM_SOCKET, else $IDEM_ROOT/.idem/idemd.sock, else
    ./fcop/.idem/idemd.sock (empty variables count as unset)."""
    path = os.environ.get("IDEM_SOCKET")
    if path:
        return path
    root = os.environ.get("IDEM_ROOT") or DEFAULT_ROOT
    return os.path.join(root, SOCKET_NAME)


class Client:
    """One connection to idemd.

    Client(path=None, timeout=None): path defaults to default_socket_path();
    timeout (seconds, None: block) bounds each connect, send and receive.
    A write_task can legitimately wait for an identical submission in
    flight (idemd --inflight-wait-ms, 10 s by default): keep timeout above
    it.  Use as a context manager, or call close().

    After an IdemTransportError or IdemProtocolError the connection is
    closed and every later call raises IdemTransportError: an unread
    answer could otherwise be taken for the reply to a later request.
    """

    def __init__(self, path=None, timeout=None, sock=None):
        self.path = path if path is not None else default_socket_path()
        self._buf = bytearray()
        self._next_id = 1
        if sock is not None:        # an already connected stream (tests)
            self._sock = sock
            return
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.settimeout(timeout)
            self._sock.connect(self.path)
        except OSError as e:
            self._sock.close()
            self._sock = None
            raise IdemTransportError("connect %s: %s" % (
                self.path, e.strerror or e), e) from e

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._buf = bytearray()

    @property
    def closed(self):
        return self._sock is None

    def _lost(self, error):
        self.close()
        return error

    # -- lines --

    def _encode(self, request):
        if "id" not in request:
            request = dict(request, id=self._next_id)
            self._next_id += 1
        try:
            line = json.dumps(request, ensure_ascii=False,
                              separators=(",", ":"),
                              allow_nan=False).encode("utf-8") + b"\n"
        except UnicodeEncodeError as e:
            raise IdemError("invalid_utf8", "the request holds a string "
                            "that is not valid Unicode: %s" % e) from e
        except ValueError as e:
            raise IdemError("invalid_request", str(e)) from e
        if len(line) > MAX_LINE_BYTES:
            raise IdemError("too_large", "the request is %d bytes; a line "
                            "is at most %d, newline included" % (
                                len(line), MAX_LINE_BYTES))
        return request.get("id"), line

    def _send(self, data):
        if self._sock is None:
            raise IdemTransportError("the connection is closed")
        try:
            self._sock.sendall(data)
        except OSError as e:
            raise self._lost(IdemTransportError(
                "send: %s" % (e.strerror or e), e)) from e

    def _read_line(self):
        """One response line without its newline; partial reads are
        joined, bytes past the line are kept for the next call."""
        if self._sock is None:
            raise IdemTransportError("the connection is closed")
        scanned = 0
        while True:
            nl = self._buf.find(b"\n", scanned)
            if nl != -1:
                break
            scanned = len(self._buf)
            if scanned >= MAX_LINE_BYTES:
                raise self._lost(IdemProtocolError(
                    "a response line over %d bytes" % MAX_LINE_BYTES))
            try:
                chunk = self._sock.recv(_READ_BYTES)
            except InterruptedError:
                continue
            except OSError as e:
                raise self._lost(IdemTransportError(
                    "receive: %s" % (e.strerror or e), e)) from e
            if not chunk:
                raise self._lost(IdemTransportError(
                    "receive: the broker closed the connection"))
            self._buf += chunk
        if nl + 1 > MAX_LINE_BYTES:
            raise self._lost(IdemProtocolError(
                "a response line over %d bytes" % MAX_LINE_BYTES))
        line = bytes(self._buf[:nl])
        del self._buf[:nl + 1]
        return line

    def _decode(self, line, request_id):
        try:
            data = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise self._lost(IdemProtocolError(
                "the response is not JSON: %s" % e)) from e
        if not isinstance(data, dict) or not isinstance(data.get("ok"), bool):
            raise self._lost(IdemProtocolError(
                "the response is not an object with a boolean ok"))
        # Error replies to unparseable lines carry no id; ours always parse.
        if "id" in data and data["id"] != request_id:
            raise self._lost(IdemProtocolError(
                "the response answers request %r, not %r" % (
                    data["id"], request_id)))
        reply = Reply(data, line)
        if not data["ok"]:
            error = reply.get("error")
            if isinstance(error, dict) and error.get("code") == "too_large":
                self.close()    # the broker closes the connection
        return reply

    # -- requests --

    def call(self, request):
        """Send one request (a dict with "op") and return its Reply,
        whatever its "ok".  An "id" is added unless the request has one.
        Raises IdemTransportError / IdemProtocolError only."""
        request_id, line = self._encode(request)
        self._send(line)
        return self._decode(self._read_line(), request_id)

    def pipeline(self, requests):
        """Send every request, then read every reply (in request order)."""
        encoded = [self._encode(r) for r in requests]
        self._send(b"".join(line for _, line in encoded))
        return [self._decode(self._read_line(), rid) for rid, _ in encoded]

    def _ok(self, request):
        reply = self.call(request)
        if not reply["ok"]:
            raise _error_from_reply(reply)
        return reply

    def hello(self):
        """{"server", "version", "protocol", "digest_schemas"}."""
        return self._ok({"op": "hello"})

    def write_task(self, task, client_submission_id=None, request_digest=None,
                   meta=None, digest_schema=None):
        """Create a task.  task: sender, recipient, subject and the optional
        fields of SPEC.md.  Without client_submission_id the call is legacy
        (a new task each time, reply["idempotent"] false).  request_digest:
        a digest for the broker to check (True: task_digest(task)); meta: a
        free-form dict, never digested.  Returns the reply (disposition
        "created" or "reused", "receipt", maybe "recovered", and
        "current_path" when FCoP tools moved the task since); raises
        IdemConflict on a conflict, IdemError on any other error."""
        request = {"op": "write_task", "task": task}
        if client_submission_id is not None:
            request["client_submission_id"] = client_submission_id
        if digest_schema is not None:
            request["digest_schema"] = digest_schema
        if request_digest is True:
            request_digest = task_digest(task)
        if request_digest is not None:
            request["request_digest"] = request_digest
        if meta is not None:
            request["meta"] = meta
        return self._ok(request)

    def write_report(self, task_id, report, client_submission_id=None,
                     meta=None):
        """Write a REPORT for task_id.  report: sender, and optionally
        recipient, status, body.  Returns {"deduplicated", "report_id",
        "report_path"}; raises IdemConflict when the id is bound to other
        content, IdemError (task_not_found, ...) otherwise."""
        request = {"op": "write_report", "task_id": task_id, "report": report}
        if client_submission_id is not None:
            request["client_submission_id"] = client_submission_id
        if meta is not None:
            request["meta"] = meta
        return self._ok(request)

    def get_submission(self, client_submission_id):
        """{"found": false} or {"found": true, "submission": {...}}."""
        return self._ok({"op": "get_submission",
                         "client_submission_id": client_submission_id})

    def diagnose(self, stale_after_ms=None):
        """The unfinished submissions: {"entries": [...], "counts": {...}}."""
        request = {"op": "diagnose"}
        if stale_after_ms is not None:
            request["stale_after_ms"] = stale_after_ms
        return self._ok(request)

    def stats(self):
        """The broker's counters."""
        return self._ok({"op": "stats"})


# ---- Submission ids and the write-task-v1 digest ----------------------------

def submission_id_new(prefix=""):
    """A fresh random client_submission_id (URL-safe base64, 128 bits),
    after prefix.  Make it once per business intent and keep it for
    every retry of that intent."""
    return prefix + secrets.token_urlsafe(16)


_TASK_DEFAULTS = {
    "body": "", "priority": "P2", "risk_level": "low", "thread_key": None,
    "parent": None, "references": [], "depends_on": [],
}
_TASK_REQUIRED = ("sender", "recipient", "subject")
_TASK_NULLABLE = ("thread_key", "parent")
_TASK_LISTS = ("references", "depends_on")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t",
            "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _normalize(s):
    """CRLF and lone CR become LF, then NFC (not NFKC); no trimming."""
    return unicodedata.normalize(
        "NFC", s.replace("\r\n", "\n").replace("\r", "\n"))


def _json_string(s):
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


def _json_value(v):
    if v is None:
        return "null"
    if isinstance(v, str):
        return _json_string(v)
    return "[" + ",".join(_json_string(x) for x in v) + "]"


def task_canonical(task):
    """The write-task-v1 canonical bytes of task (SPEC.md, "Digest scheme"):
    defaults applied, strings normalized, the ten fields in byte order,
    no whitespace.  Raises ValueError for a task the broker would refuse
    for its shape (a missing required field, an unknown field, a wrong
    type, a string that is not valid Unicode)."""
    if not isinstance(task, dict):
        raise ValueError("task must be a dict")
    unknown = sorted(set(task) - set(_TASK_REQUIRED) - set(_TASK_DEFAULTS))
    if unknown:
        raise ValueError("task has no field %r" % unknown[0])
    fields = {}
    for key in _TASK_REQUIRED + tuple(_TASK_DEFAULTS):
        if key not in task:
            if key in _TASK_REQUIRED:
                raise ValueError("task.%s is required" % key)
            fields[key] = _TASK_DEFAULTS[key]
            continue
        v = task[key]
        if v is None and key not in _TASK_REQUIRED:
            fields[key] = _TASK_DEFAULTS[key]  # null means the default
        elif key in _TASK_LISTS:
            if not isinstance(v, (list, tuple)) or not all(
                    isinstance(x, str) for x in v):
                raise ValueError("task.%s must be a list of strings" % key)
            fields[key] = [_normalize(x) for x in v]
        elif v is None and key in _TASK_NULLABLE:
            fields[key] = None
        elif isinstance(v, str):
            fields[key] = _normalize(v)
        else:
            raise ValueError("task.%s must be a string%s" % (
                key, " or None" if key in _TASK_NULLABLE else ""))
    keys = sorted(fields, key=lambda k: k.encode("utf-8"))
    text = "{" + ",".join(_json_string(k) + ":" + _json_value(fields[k])
                          for k in keys) + "}"
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError("the task holds a string that is not valid "
                         "Unicode: %s" % e) from e


def task_digest(task):
    """write-task-v1: the lower-case hex SHA-256 of task_canonical(task),
    the request_digest the broker computes for the same task."""
    return hashlib.sha256(task_canonical(task)).hexdigest()


# ---- Retrying ---------------------------------------------------------------

_RETRYABLE_CODES = ("in_progress", "storage_unavailable", "shutting_down")


def write_task_retry(task, client_submission_id, attempts=8, base_delay=0.05,
                     max_delay=5.0, deadline=None, path=None, timeout=None,
                     request_digest=None, meta=None, on_retry=None,
                     sleep=time.sleep):
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

    Returns the final reply: disposition "created" or "reused", with
    "recovered": true when it finished a creation an earlier attempt (or
    process) had interrupted; all are success.  Raises IdemConflict at
    once, any other IdemError at once when it is not retryable, and the
    last error when attempts or time run out (then the outcome is
    unknown: calling again later with the same id is safe).

    on_retry(attempt, error, delay), if given, is called before each
    backoff sleep (attempt counts from 1: the attempt that failed).
    """
    if not client_submission_id:
        raise ValueError("write_task_retry needs a client_submission_id: "
                         "a legacy call is not idempotent")
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    if request_digest is True:
        request_digest = task_digest(task)
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
                return c.write_task(task, client_submission_id,
                                    request_digest=request_digest, meta=meta)
        except IdemConflict:
            raise
        except IdemError as e:
            if not (e.retryable or e.code in _RETRYABLE_CODES):
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
