#!/usr/bin/env python3
# SPDX-License-Identifier: ISC
"""test_hostile.py: idem.Client and idem.aio.Client against a broker
that breaks the protocol (hostile.HostileBroker): a line that is not
JSON, not an object, without a boolean ok, a success without the
members its op promises or with members of the wrong type, a raw NUL,
invalid UTF-8, a \\u0000 in a string, a line over 1 MiB or one that
never ends, a connection closed before, after or in the middle of an
answer, no answer at all, two answers to one request, an answer a byte
at a time, a retryable error for ever, a non-retryable one marked
retryable, an answer about another key or another request.

Each ends in a typed error (IdemProtocolError, IdemTransportError, the
wire's code), within the client's timeout, with the connection closed
where its stream can no longer be trusted; never a success, a hang or
an answer given to the wrong call.  Fast: no real broker, timeouts of a
fraction of a second where a timeout is the point.
"""

import asyncio
import threading
import time
import unittest

import idem
import idem.aio

from hostile import (CLOSE, HANG, MAX_LINE_BYTES, STREAM, Cut,
                     HostileBroker, Later, Trickle, reply)

T = 5.0         # a timeout that only a hang reaches
SHORT = 0.3     # the timeout of the tests whose point is a timeout
TASK = {"sender": "PM", "recipient": "DEV", "subject": "s"}


def hello_ok(req):
    return reply(req, ok=True, server="idemd", version="1.0", protocol=1)


def receipt(sid, **over):
    r = {"client_submission_id": sid, "task_id": "TASK-20261206-001-PM-to-DEV",
         "task_path": "_lifecycle/inbox/TASK-20261206-001-PM-to-DEV.md",
         "digest_schema": "write-task-v1", "request_digest": "0" * 64,
         "file_digest": "1" * 64, "state": "committed",
         "created_at": "2026-12-06T00:00:00.000Z"}
    r.update(over)
    return r


def created(req, **over):
    members = {"ok": True, "disposition": "created", "action_taken": True,
               "idempotent": True,
               "receipt": receipt(req.get("client_submission_id"))}
    members.update(over)
    return reply(req, **members)


def proceed(req, **over):
    members = {"ok": True, "disposition": "proceed", "idempotent": True,
               "client_submission_id": req["client_submission_id"],
               "effect_kind": req["effect_kind"], "attempt": 1,
               "fence": "1-00", "external_key": "idem-" + "0" * 32}
    members.update(over)
    return reply(req, **members)


def effect_receipt(req, **over):
    r = {"client_submission_id": req["client_submission_id"],
         "effect_kind": req["effect_kind"], "attempt": 1,
         "result": None, "state": "committed",
         "committed_at": "2026-12-06T00:00:00.000Z"}
    r.update(over)
    return r


def error(req, code, retryable, **over):
    members = {"ok": False, "action_taken": False,
               "error": {"code": code, "message": code,
                         "retryable": retryable}}
    members.update(over)
    return reply(req, **members)


# idemd's refusal of a connection past --max-connections (worker.c).
REFUSAL = (b"{\"ok\":false,\"action_taken\":false,\"error\":{\"code\":"
           b"\"too_many_connections\",\"reason\":\"max_connections\","
           b"\"message\":\"too many\",\"retryable\":true}}\n")
# An error without an id that no request asked for.
STRAY = (b"{\"ok\":false,\"action_taken\":false,\"error\":{\"code\":"
         b"\"shutting_down\",\"message\":\"m\",\"retryable\":true}}\n")


def always(data):
    return lambda req, n: data(req) if callable(data) else data


class SyncHostile(unittest.TestCase):
    """idem.Client (and idem.write_task_retry) against HostileBroker."""

    def client(self, script, timeout=T, on_connect=None):
        fake = HostileBroker(self, script, on_connect)
        c = idem.Client(fake.path, timeout=timeout)
        self.addCleanup(c.close)
        return fake, c

    def refused(self, line_or_fn, call=lambda c: c.hello(),
                error=idem.IdemProtocolError):
        """The call on a fresh connection answered line_or_fn raises
        error and leaves the connection closed."""
        fake, c = self.client(always(line_or_fn))
        with self.assertRaises(error) as cm:
            call(c)
        self.assertTrue(c.closed, "the connection is still open")
        with self.assertRaises(idem.IdemTransportError):
            c.hello()
        return cm.exception

    # 1. not JSON
    def test_not_json(self):
        self.refused(b"hello there\n")
        self.refused(b"{\"ok\":true,\n")

    # 2. JSON, but not the answer
    def test_not_an_object_or_no_boolean_ok(self):
        for line in (b"[1,2]\n", b"\"ok\"\n", b"null\n", b"{}\n",
                     b"{\"id\":1,\"ok\":\"true\"}\n",
                     b"{\"id\":1,\"ok\":1}\n"):
            with self.subTest(line=line):
                self.refused(line)

    def test_success_without_required_members(self):
        sid = "hostile-1"
        write = lambda c: c.write_task(TASK, sid)    # noqa: E731
        for over in ({"receipt": None}, {"disposition": None},
                     {"disposition": "conflict"},
                     {"disposition": "proceed"},
                     {"receipt": receipt(sid, task_id=None)},
                     {"receipt": receipt(sid, task_id=7)},
                     {"receipt": receipt(sid, state=None)},
                     {"receipt": "TASK-1"}):
            with self.subTest(over=over):
                self.refused(lambda req: created(req, **over), write)

    def test_proceed_without_its_members(self):
        begin = lambda c: c.effect_begin("e-1", "mail", {})  # noqa: E731
        for over in ({"fence": None}, {"attempt": None},
                     {"attempt": "1"}, {"attempt": 0},
                     {"external_key": None}, {"fence": True},
                     {"disposition": "created"},
                     {"disposition": "reused"}):
            with self.subTest(over=over):
                self.refused(lambda req: proceed(req, **over), begin)

    def test_applied_complete_without_a_receipt(self):
        self.refused(lambda req: reply(req, ok=True, action_taken=True,
                                       state="committed"),
                     lambda c: c.effect_complete("e-1", "mail", "1-00",
                                                 "applied", {"r": 1}))

    # 3. NUL, invalid UTF-8, \u0000
    def test_nul_invalid_utf8_escaped_nul(self):
        self.refused(b"{\"id\":1,\"ok\":true,\"server\":\"id\x00emd\","
                     b"\"version\":\"1\",\"protocol\":1}\n")
        self.refused(b"{\"id\":1,\"ok\":true,\"server\":\"id\xffemd\","
                     b"\"version\":\"1\",\"protocol\":1}\n")
        self.refused(b"{\"id\":1,\"ok\":true,\"server\":\"id\\u0000emd\","
                     b"\"version\":\"1\",\"protocol\":1}\n")
        sid = "nul-1"
        self.refused(lambda req: created(req, receipt=receipt(
            sid, task_id="TASK-1\u0000-evil")),
            lambda c: c.write_task(TASK, sid))

    # 4. over the line limit, or no newline ever
    def test_line_over_the_limit(self):
        big = b"{\"id\":1,\"ok\":true,\"pad\":\"" + \
            b"x" * MAX_LINE_BYTES + b"\"}\n"
        self.refused(big)

    def test_line_that_never_ends(self):
        start = time.monotonic()
        self.refused(lambda req: STREAM)
        self.assertLess(time.monotonic() - start, T)

    # 5. closed before, after, in the middle
    def test_closed_mid_line(self):
        self.refused(Cut(b"{\"id\":1,\"ok\":tr"),
                     error=idem.IdemTransportError)

    def test_closed_after_reading(self):
        self.refused(CLOSE, error=idem.IdemTransportError)

    def test_closed_before_reading(self):
        fake, c = self.client(always(hello_ok), on_connect=CLOSE)
        with self.assertRaises(idem.IdemTransportError):
            c.hello()
        self.assertTrue(c.closed)

    # 6. no answer
    def test_no_answer_times_out(self):
        fake, c = self.client(always(HANG), timeout=SHORT)
        start = time.monotonic()
        with self.assertRaises(idem.IdemTransportError):
            c.hello()
        self.assertLess(time.monotonic() - start, T)
        self.assertTrue(c.closed)

    # 7. two answers to one request
    def test_two_answers_to_one_request(self):
        sid_a, sid_b = "two-a", "two-b"

        def script(req, n):
            if n == 1:
                return created(req) + created(req)
            return created(req)
        fake, c = self.client(script)
        self.assertEqual(c.write_task(TASK, sid_a).receipt
                         .client_submission_id, sid_a)
        with self.assertRaises(idem.IdemProtocolError):
            c.write_task(TASK, sid_b)
        self.assertTrue(c.closed)

    def test_second_answer_without_id_is_no_success(self):
        # The extra line carries no id: it must not pass for the
        # answer to the next call (a stats that is another op's reply).
        def script(req, n):
            if n == 1:
                return hello_ok(req) + b"{\"ok\":true,\"server\":\"x\"," \
                    b"\"version\":\"1\",\"protocol\":1}\n"
            return hello_ok(req)
        fake, c = self.client(script)
        c.hello()
        with self.assertRaises(idem.IdemProtocolError):
            c.hello()

    def test_second_answer_an_error_without_id(self):
        # An extra refusal without an id (as a refusal before reading
        # comes): found before the next request, never that request's
        # conflict.
        extra = (b"{\"ok\":false,\"disposition\":\"conflict\",\"error\":"
                 b"{\"code\":\"conflict\",\"message\":\"m\"}}\n")

        def script(req, n):
            return created(req) + extra if n == 1 else created(req)
        fake, c = self.client(script)
        c.write_task(TASK, "e-a")
        with self.assertRaises(idem.IdemProtocolError):
            c.write_task(TASK, "e-b")
        self.assertEqual(fake.count(), 1)   # e-b was never sent

    def test_error_without_id_after_an_answer(self):
        # A refusal without an id that the broker sends after the first
        # answer was read (two writes, the second once the client has
        # the first): on a connection that has answered, only an answer
        # with the request's id is one; never the next call's error.
        read = threading.Event()

        def script(req, n):
            return Later(hello_ok(req), read, STRAY) if n == 1 else HANG
        fake, c = self.client(script)
        c.hello()
        read.set()
        with self.assertRaises(idem.IdemProtocolError):
            c.hello()
        self.assertTrue(c.closed)

    def test_compacted_receipt_is_an_answer(self):
        # A compacted task's receipt (receipt_pruned: its tombstone's
        # facts, no file_digest) is reused, as libidem reads it.
        pruned = receipt("p-1")
        del pruned["file_digest"]
        fake, c = self.client(lambda req, n: created(
            req, disposition="reused", action_taken=False,
            receipt_pruned=True, receipt=pruned))
        r = c.write_task(TASK, "p-1")
        self.assertTrue(r.reused)
        self.assertIsNone(r.receipt.file_digest)
        self.assertEqual(r.receipt.task_id, pruned["task_id"])

    def test_answer_without_id_is_no_success(self):
        self.refused(b"{\"ok\":true,\"server\":\"idemd\",\"version\":\"1\","
                     b"\"protocol\":1}\n")

    def test_refusal_before_the_request_is_the_error(self):
        # too_many_connections: the broker's one line before it reads,
        # without an id (SPEC.md), then it closes.  The request is sent
        # once it has closed: the send fails (EPIPE) with the refusal
        # waiting, which is the answer: the retryable error, not a
        # transport one.
        fake, c = self.client(always(CLOSE), on_connect=Cut(REFUSAL))
        self.assertTrue(fake.closed.wait(T))
        with self.assertRaises(idem.IdemError) as cm:
            c.hello()
        self.assertEqual(cm.exception.code, "too_many_connections")
        self.assertTrue(cm.exception.retryable)
        self.assertEqual(fake.count(), 0)

    # 8. a byte at a time
    def test_slow_answer_within_the_timeout(self):
        fake, c = self.client(lambda req, n: Trickle(hello_ok(req), 0.001))
        self.assertEqual(c.hello().server, "idemd")

    def test_slow_answer_past_the_timeout(self):
        # Every byte comes within the timeout, the whole answer not: the
        # timeout bounds the call, not each read.
        fake, c = self.client(lambda req, n: Trickle(hello_ok(req), 0.1),
                              timeout=SHORT)
        start = time.monotonic()
        with self.assertRaises(idem.IdemTransportError):
            c.hello()
        self.assertLess(time.monotonic() - start, 2.0)
        self.assertTrue(c.closed)

    # 9. retryable for ever, non-retryable marked retryable
    def retry(self, script, attempts=4):
        fake = HostileBroker(self, script)
        slept = []
        try:
            idem.write_task_retry(TASK, "r-1", attempts=attempts,
                                  path=fake.path, timeout=T,
                                  sleep=slept.append)
        except idem.IdemError as e:
            return fake, e
        self.fail("write_task_retry succeeded")

    def test_retryable_for_ever_stops_at_the_bound(self):
        for code in ("in_progress", "table_full", "storage_unavailable",
                     "shutting_down", "too_many_connections"):
            with self.subTest(code=code):
                fake, e = self.retry(lambda req, n: error(req, code, True))
                self.assertEqual(e.code, code)
                self.assertEqual(fake.count(), 4)

    def test_not_retryable_is_never_retried(self):
        for code in ("conflict", "invalid_request", "outcome_unknown",
                     "digest_disagrees", "sequence_exhausted"):
            with self.subTest(code=code):
                extra = {"disposition": "conflict"} \
                    if code == "conflict" else {}
                # Marked retryable by the broker: still not retried.
                fake, e = self.retry(
                    lambda req, n: error(req, code, True, **extra))
                self.assertEqual(e.code, code)
                self.assertEqual(fake.count(), 1)

    def test_protocol_error_is_not_retried(self):
        fake, e = self.retry(always(b"nonsense\n"))
        self.assertIsInstance(e, idem.IdemProtocolError)
        self.assertEqual(fake.count(), 1)

    def test_hang_is_retried_to_the_bound(self):
        fake = HostileBroker(self, always(HANG))
        with self.assertRaises(idem.IdemTransportError):
            idem.write_task_retry(TASK, "r-2", attempts=2, path=fake.path,
                                  timeout=SHORT, sleep=lambda s: None)
        self.assertEqual(fake.count(), 2)

    # 10. an answer about another key or request
    def test_answer_to_another_request(self):
        self.refused(lambda req: reply(dict(req, id=req["id"] + 1),
                                       ok=True, server="idemd",
                                       version="1", protocol=1))
        self.refused(lambda req: reply(dict(req, id=str(req["id"])),
                                       ok=True, server="idemd",
                                       version="1", protocol=1))

    def test_receipt_of_another_key(self):
        self.refused(lambda req: created(req, receipt=receipt("other")),
                     lambda c: c.write_task(TASK, "mine"))

    def test_effect_answer_of_another_key(self):
        begin = lambda c: c.effect_begin("e-1", "mail", {})  # noqa: E731
        self.refused(lambda req: proceed(req, client_submission_id="e-2"),
                     begin)
        self.refused(lambda req: proceed(req, effect_kind="sms"), begin)
        self.refused(lambda req: reply(
            req, ok=True, disposition="reused", action_taken=False,
            receipt=effect_receipt(req, client_submission_id="e-2")),
            begin)
        self.refused(lambda req: reply(
            req, ok=True, action_taken=True, state="committed",
            receipt=effect_receipt(req, effect_kind="sms")),
            lambda c: c.effect_complete("e-1", "mail", "1-00", "applied",
                                        None))


class AsyncHostile(unittest.TestCase):
    """idem.aio.Client (and its write_task_retry) against HostileBroker:
    the same judgements, awaited."""

    def run_client(self, script, call, timeout=T, on_connect=None):
        fake = HostileBroker(self, script, on_connect)

        async def go():
            c = idem.aio.Client(fake.path, timeout=timeout)
            try:
                return await call(c), c
            except idem.IdemError as e:
                return e, c
            finally:
                closed = c.closed
                await c.close()
                c.closed_before_close = closed
        result, c = asyncio.run(go())
        return fake, result, c

    def refused(self, script, call=lambda c: c.hello(),
                error=idem.IdemProtocolError, timeout=T):
        fake, e, c = self.run_client(script, call, timeout)
        self.assertIsInstance(e, error)
        self.assertTrue(c.closed_before_close, "the connection is open")
        return fake

    def test_not_json_not_object_no_ok(self):
        for line in (b"hello\n", b"[1]\n", b"{\"id\":1,\"ok\":1}\n",
                     b"{\"id\":1,\"ok\":true,\"server\":\"a\\u0000\","
                     b"\"version\":\"1\",\"protocol\":1}\n",
                     b"{\"id\":1,\"ok\":true,\"server\":\"a\xff\","
                     b"\"version\":\"1\",\"protocol\":1}\n"):
            with self.subTest(line=line):
                self.refused(always(line))

    def test_success_without_required_members(self):
        begin = lambda c: c.effect_begin("e-1", "mail", {})  # noqa: E731
        self.refused(lambda req, n: proceed(req, attempt=None), begin)
        self.refused(lambda req, n: created(req, disposition="conflict"),
                     lambda c: c.write_task(TASK, "a-1"))
        self.refused(lambda req, n: reply(req, ok=True, action_taken=True,
                                          state="committed"),
                     lambda c: c.effect_complete("e-1", "mail", "1-00",
                                                 "applied", 1))

    def test_never_ending_line_and_no_answer(self):
        self.refused(always(STREAM))
        self.refused(always(HANG), error=idem.IdemTransportError,
                     timeout=SHORT)
        self.refused(always(CLOSE), error=idem.IdemTransportError)

    def test_slow_answer_past_the_timeout(self):
        self.refused(lambda req, n: Trickle(hello_ok(req), 0.1),
                     error=idem.IdemTransportError, timeout=SHORT)

    def test_two_answers_to_one_request(self):
        def script(req, n):
            return created(req) + created(req) if n == 1 else created(req)

        async def two(c):
            first = await c.write_task(TASK, "two-a")
            self.assertEqual(first.receipt.client_submission_id, "two-a")
            return await c.write_task(TASK, "two-b")
        self.refused(script, two)

    def test_second_answer_an_error_without_id(self):
        extra = (b"{\"ok\":false,\"disposition\":\"conflict\",\"error\":"
                 b"{\"code\":\"conflict\",\"message\":\"m\"}}\n")

        async def two(c):
            await c.write_task(TASK, "e-a")
            return await c.write_task(TASK, "e-b")
        fake = self.refused(
            lambda req, n: created(req) + extra if n == 1 else created(req),
            two)
        self.assertEqual(fake.count(), 1)   # e-b was never sent

    def test_error_without_id_after_an_answer(self):
        read = threading.Event()

        async def two(c):
            await c.hello()
            read.set()
            return await c.hello()
        self.refused(lambda req, n: Later(hello_ok(req), read, STRAY)
                     if n == 1 else HANG, two)

    def test_refusal_before_the_request_is_the_error(self):
        # As the sync test: connected, the broker's refusal sent and its
        # end closed before the request, which then fails to send.
        fake = HostileBroker(self, always(CLOSE), Cut(REFUSAL))

        async def go():
            c = idem.aio.Client(fake.path, timeout=T)
            await c.connect()
            # Blocks the loop: nothing is read until the request is sent.
            self.assertTrue(fake.closed.wait(T))
            try:
                await c.hello()
            except idem.IdemError as e:
                return e
            finally:
                await c.close()
        e = asyncio.run(go())
        self.assertIsInstance(e, idem.IdemError)
        self.assertEqual(e.code, "too_many_connections")
        self.assertTrue(e.retryable)
        self.assertEqual(fake.count(), 0)

    def test_receipt_of_another_key(self):
        self.refused(lambda req, n: created(req, receipt=receipt("other")),
                     lambda c: c.write_task(TASK, "mine"))

    def test_retry_bounds(self):
        fake = HostileBroker(self, lambda req, n: error(req, "table_full",
                                                        True))

        async def go(path):
            try:
                await idem.aio.write_task_retry(TASK, "r-1", attempts=3,
                                                path=path, timeout=T,
                                                base_delay=0.001)
            except idem.IdemError as e:
                return e
        e = asyncio.run(go(fake.path))
        self.assertEqual(e.code, "table_full")
        self.assertEqual(fake.count(), 3)
        fake = HostileBroker(self, lambda req, n: error(
            req, "outcome_unknown", True))
        e = asyncio.run(go(fake.path))
        self.assertEqual(e.code, "outcome_unknown")
        self.assertEqual(fake.count(), 1)


if __name__ == "__main__":
    unittest.main()
