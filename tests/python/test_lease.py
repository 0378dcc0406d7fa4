#!/usr/bin/env python3
# SPDX-License-Identifier: ISC
"""test_lease.py: the lease of a running effect, kept by Client.effect
(a thread) and idem.aio's effect (a task) with effect_extend.

Against a scripted broker (FakeBroker: it answers begin, extend and
complete as each test says, and records what it was sent), what the
client does: it extends every third of the lease with the begin's fence,
reconnects after a lost connection, stops on an answer that is not a
lease (stale_fence) and on every way out of the block.

Against a real idemd (the tree's, which serves effect_extend: a broker
whose hello does not list it fails here): effect_extend's answers
(SPEC.md), a
300 ms lease around a body that runs 1 s completes with no
outcome_unknown while a second caller is told in_progress (sync and
asyncio), and a body that raises or is cancelled lets the lease lapse
into outcome_unknown (the extension stopped).  The bodies' sleeps are
the work that outlasts the lease, not synchronisation.
"""

import asyncio
import json
import os
import shutil
import socketserver
import tempfile
import threading
import time
import unittest

import idem
import idem.aio

from harness import MAIL, BrokerTestCase, Marker, serves, wait_unknown

WAIT_S = 30     # the longest any event is waited for before failing


def keeper_threads():
    return [t for t in threading.enumerate()
            if t.name.startswith("idem-lease ")]


class FakeBroker:
    """A Unix socket answering effect_begin (proceed, fence "f-1"),
    effect_extend (extend_answer(n): the n-th extension's reply; None:
    drop the connection without answering) and effect_complete, and
    recording every request with its connection's number."""

    def __init__(self, test, extend_answer=None):
        self.tmp = tempfile.mkdtemp(prefix="idem-fake-")
        test.addCleanup(shutil.rmtree, self.tmp, True)
        self.path = os.path.join(self.tmp, "fake.sock")
        self.requests = []          # (connection number, request)
        self.changed = threading.Condition()
        self.extend_answer = extend_answer or (lambda n: {
            "ok": True, "lease_expires_at": "2026-12-05T00:00:%02d.000Z"
            % n})
        self.connections = 0
        fake = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                with fake.changed:
                    fake.connections += 1
                    conn = fake.connections
                for line in self.rfile:
                    req = json.loads(line)
                    reply = fake.answer(conn, req)
                    if reply is None:
                        return
                    reply["id"] = req["id"]
                    try:
                        self.wfile.write(json.dumps(reply).encode() + b"\n")
                    except OSError:
                        return  # the client hung up (a stopped keeper)

        self.server = socketserver.ThreadingUnixStreamServer(self.path,
                                                             Handler)
        self.server.daemon_threads = True
        t = threading.Thread(target=self.server.serve_forever, daemon=True)
        t.start()
        test.addCleanup(self.server.server_close)
        test.addCleanup(self.server.shutdown)

    def answer(self, conn, req):
        with self.changed:
            self.requests.append((conn, req))
            self.changed.notify_all()
            n = len(self.extends())
        op = req["op"]
        if op == "effect_begin":
            return {"ok": True, "disposition": "proceed", "attempt": 1,
                    "fence": "f-1", "external_key": "key-1",
                    "action_taken": True}
        if op == "effect_extend":
            return self.extend_answer(n)
        if op == "effect_complete":
            return {"ok": True, "receipt": {
                "client_submission_id": req["client_submission_id"],
                "effect_kind": req["effect_kind"], "attempt": 1,
                "result": req.get("result"), "committed_at": "now"}}
        return {"ok": False, "error": {"code": "unknown_op",
                                       "message": op, "retryable": False}}

    def ops(self, op):
        with self.changed:
            return [(c, r) for c, r in self.requests if r["op"] == op]

    def extends(self):
        return [r for c, r in self.requests if r["op"] == "effect_extend"]

    def wait_extends(self, n):
        """Until the fake has been sent n extensions."""
        with self.changed:
            ok = self.changed.wait_for(lambda: len(self.extends()) >= n,
                                       WAIT_S)
        if not ok:
            raise AssertionError("%d extensions never came" % n)


def stale_fence(n):
    return {"ok": False, "disposition": "conflict", "action_taken": False,
            "error": {"code": "conflict", "reason": "stale_fence",
                      "message": "a later begin holds the key",
                      "retryable": False}}


class TestLeaseKeeper(unittest.TestCase):
    """What the client sends, against FakeBroker."""

    def test_sync_extends_with_the_fence_every_third_and_stops(self):
        fake = FakeBroker(self)
        with idem.Client(fake.path, timeout=WAIT_S) as c:
            start = time.monotonic()
            with c.effect("k-1", MAIL, {"to": "a"}, lease_ms=300) as e:
                fake.wait_extends(3)
                elapsed = time.monotonic() - start
                self.assertEqual(len(keeper_threads()), 1)
                e.complete({"ok": 1})
            self.assertEqual(keeper_threads(), [])
        self.assertEqual(e.state, "committed")
        self.assertGreaterEqual(e.extensions, 2)
        self.assertIsNone(e.lease_error)
        # Three ticks of 100 ms at the least; a loaded machine may be late.
        self.assertGreaterEqual(elapsed, 0.3)
        for req in fake.extends():
            self.assertEqual((req["client_submission_id"], req["effect_kind"],
                              req["fence"], req["lease_ms"]),
                             ("k-1", MAIL, "f-1", 300))
        # Every extension on a connection of the keeper's own.
        begin_conn = fake.ops("effect_begin")[0][0]
        self.assertNotIn(begin_conn, [c for c, _ in
                                      fake.ops("effect_extend")])
        self.assertEqual(fake.ops("effect_complete")[0][0], begin_conn)

    def test_sync_stops_on_every_way_out(self):
        fake = FakeBroker(self)
        with idem.Client(fake.path, timeout=WAIT_S) as c:
            with self.assertRaises(RuntimeError):
                with c.effect("k-2", MAIL, {}, lease_ms=300) as e:
                    fake.wait_extends(1)
                    raise RuntimeError("the body failed")
            self.assertEqual(keeper_threads(), [])
            self.assertEqual(e.state, "abandoned")
            with self.assertRaises(idem.NotApplied):
                with c.effect("k-3", MAIL, {}, lease_ms=300) as e:
                    fake.wait_extends(2)
                    raise idem.NotApplied("refused")
            self.assertEqual(keeper_threads(), [])
            self.assertEqual(e.state, "released")
            with self.assertRaises(idem.IdemEffectIncomplete):
                with c.effect("k-4", MAIL, {}, lease_ms=300) as e:
                    fake.wait_extends(3)
            self.assertEqual(keeper_threads(), [])
            with c.effect("k-5", MAIL, {}, extend=False) as e:
                self.assertEqual(keeper_threads(), [])
                e.complete(None)
        completes = [r["outcome"] for _, r in fake.ops("effect_complete")]
        self.assertEqual(completes, ["not_applied", "applied"])

    def test_sync_stops_on_stale_fence_and_reconnects_after_a_drop(self):
        answers = {1: None, 3: None}    # the 1st and 3rd: connection lost

        def answer(n):
            if n in answers:
                return answers[n]
            return stale_fence(n) if n >= 4 else {
                "ok": True, "lease_expires_at": "t%d" % n}
        fake = FakeBroker(self, answer)
        with idem.Client(fake.path, timeout=WAIT_S) as c:
            with c.effect("k-6", MAIL, {}, lease_ms=300) as e:
                fake.wait_extends(4)
                keeper = e._keeper
                keeper.join(WAIT_S)
                self.assertFalse(keeper.is_alive())
                self.assertTrue(e.lease_lost)
                self.assertEqual(e.lease_error.conflict.reason,
                                 "stale_fence")
                self.assertEqual(e.lease_expires_at, "t2")
                self.assertEqual(e.extensions, 1)
                e.complete({"late": True})
        conns = [c for c, _ in fake.ops("effect_extend")]
        self.assertEqual(len(set(conns)), 3)    # new after each drop
        self.assertEqual(len(fake.extends()), 4)

    def test_async_extends_and_stops_on_every_way_out(self):
        fake = FakeBroker(self)

        async def main():
            async with idem.aio.Client(fake.path, timeout=WAIT_S) as c:
                async with c.effect("a-1", MAIL, {}, lease_ms=300) as e:
                    await asyncio.get_running_loop().run_in_executor(
                        None, fake.wait_extends, 2)
                    await e.complete({"ok": 1})
                self.assertIsNone(e._keeper)
                self.assertEqual(e.state, "committed")
                self.assertIsNone(e.lease_error)

                with self.assertRaises(KeyError):
                    async with c.effect("a-2", MAIL, {}, lease_ms=300) as e:
                        await asyncio.get_running_loop().run_in_executor(
                            None, fake.wait_extends, 3)
                        raise KeyError("body")
                self.assertEqual(e.state, "abandoned")

                started = asyncio.Event()

                @idem.aio.effectful(MAIL, client=c, lease_ms=300)
                async def forever(request, e):
                    started.set()
                    await asyncio.Event().wait()
                task = asyncio.ensure_future(forever("a-3", {}))
                await started.wait()
                task.cancel()
                with self.assertRaises(asyncio.CancelledError):
                    await task
                others = [t for t in asyncio.all_tasks()
                          if t is not asyncio.current_task()]
                self.assertEqual(others, [])
        asyncio.run(main())
        for req in fake.extends():
            self.assertEqual((req["fence"], req["lease_ms"]), ("f-1", 300))
        completes = [r["client_submission_id"]
                     for _, r in fake.ops("effect_complete")]
        self.assertEqual(completes, ["a-1"])

    def test_async_stops_on_stale_fence(self):
        fake = FakeBroker(self, lambda n: stale_fence(n) if n >= 2 else {
            "ok": True, "lease_expires_at": "t%d" % n})

        async def main():
            async with idem.aio.Client(fake.path, timeout=WAIT_S) as c:
                async with c.effect("a-4", MAIL, {}, lease_ms=300) as e:
                    keeper = e._keeper
                    await asyncio.wait([keeper], timeout=WAIT_S)
                    self.assertTrue(keeper.done())
                    self.assertEqual(e.lease_error.conflict.reason,
                                     "stale_fence")
                    self.assertEqual(e.lease_expires_at, "t1")
                    await e.complete(None)
        asyncio.run(main())


class TestLeaseAgainstIdemd(BrokerTestCase):
    """effect_extend on a real broker."""

    def setUp(self):
        super().setUp()
        self.assertTrue(serves(self.broker, "effect_extend"),
                        "this idemd does not serve effect_extend (hello's "
                        "ops lack it)")
        self.marker = Marker(os.path.join(self.tmp, "sent.txt"))

    def test_extend_answers(self):
        c = self.client()
        with self.assertRaises(idem.IdemConflict) as cm:
            c.effect_extend("x-none", MAIL, "1-0123456789abcdef", 1000)
        self.assertEqual(cm.exception.conflict.reason, "no_reservation")

        first = c.effect_begin("x-1", MAIL, {"to": "a"}, lease_ms=30000)
        ext = c.effect_extend("x-1", MAIL, first.fence, 60000)
        self.assertIsInstance(ext, idem.EffectExtended)
        self.assertRegex(ext.lease_expires_at, r"^\d{4}-\d\d-\d\dT")
        c.effect_complete("x-1", MAIL, first.fence, "not_applied")
        second = c.effect_begin("x-1", MAIL, {"to": "a"}, lease_ms=30000)
        with self.assertRaises(idem.IdemConflict) as cm:
            c.effect_extend("x-1", MAIL, first.fence, 1000)
        self.assertEqual(cm.exception.conflict.reason, "stale_fence")
        c.effect_complete("x-1", MAIL, second.fence, "applied", {"n": 1})
        with self.assertRaises(idem.IdemConflict) as cm:
            c.effect_extend("x-1", MAIL, second.fence, 1000)
        self.assertEqual(cm.exception.conflict.reason, "already_committed")

        # After a lapse: outcome_unknown, not extended; complete accepted.
        lapsed = c.effect_begin("x-2", MAIL, {"to": "b"}, lease_ms=100)
        wait_unknown(self.client(), "x-2", {"to": "b"})
        with self.assertRaises(idem.IdemOutcomeUnknown):
            c.effect_extend("x-2", MAIL, lapsed.fence, 30000)
        done = c.effect_complete("x-2", MAIL, lapsed.fence, "applied",
                                 {"late": True})
        self.assertEqual(done.receipt.result, {"late": True})

    def assert_in_progress(self, sid):
        with self.assertRaises(idem.IdemInProgress):
            self.client().effect_begin(sid, MAIL, {"to": "long"})

    def test_a_300ms_lease_outlives_a_1s_body(self):
        c = self.client()
        with c.effect("long-1", MAIL, {"to": "long"}, lease_ms=300) as e:
            for _ in range(5):
                time.sleep(0.2)             # the work: 1 s in all
                self.assert_in_progress("long-1")
            sub = self.client().get_submission("long-1", MAIL).submission
            self.assertEqual((sub.state, sub.lease_live, sub.external_key),
                             ("reserved", True, e.external_key))
            self.assertGreater(sub.lease_ms_left, 0)
            self.assertLessEqual(sub.lease_ms_left, 300)
            row = [x for x in self.client().diagnose().entries
                   if x.client_submission_id == "long-1"]
            self.assertEqual(len(row), 1)
            self.assertEqual((row[0].effect_kind, row[0].state,
                              row[0].lease_live), (MAIL, "reserved", True))
            self.assertGreater(row[0].lease_ms_left, 0)
            e.complete(self.marker.send("long", e.external_key))
        self.assertEqual(e.state, "committed")
        self.assertIsNone(e.lease_error)
        self.assertGreaterEqual(e.extensions, 3)
        self.assertEqual(e.receipt.attempt, 1)
        stats = c.stats()
        self.assertEqual(stats.counters.get("effects_outcome_unknown"), 0)
        self.assertEqual(stats.counters.get("effects_proceed"), 1)
        self.assertTrue(c.effect_begin("long-1", MAIL,
                                       {"to": "long"}).reused)
        self.assertEqual(self.marker.count(), 1)

    def test_a_300ms_lease_outlives_a_1s_coroutine(self):
        async def main():
            async with idem.aio.Client(self.broker.socket, timeout=60) as c:
                @idem.aio.effectful(MAIL, client=c, lease_ms=300)
                async def send(msg, e):
                    for _ in range(5):
                        await asyncio.sleep(0.2)    # the work
                        await asyncio.get_running_loop().run_in_executor(
                            None, self.assert_in_progress, "long-2")
                    return self.marker.send(msg, e.external_key)
                return await send("long-2", {"to": "long"}), await c.stats()
        result, stats = asyncio.run(main())
        self.assertEqual(result["message_id"], "m-1")
        self.assertEqual(stats.counters.get("effects_outcome_unknown"), 0)
        self.assertEqual(self.marker.count(), 1)

    def test_a_failed_or_cancelled_body_lapses_into_outcome_unknown(self):
        c = self.client()
        with self.assertRaises(OSError):
            with c.effect("gone-1", MAIL, {"to": "a"}, lease_ms=300) as e:
                self.marker.send("a")
                raise OSError("lost after the send")
        self.assertEqual(e.state, "abandoned")
        wait_unknown(c, "gone-1", {"to": "a"})

        async def main():
            started = asyncio.Event()
            async with idem.aio.Client(self.broker.socket, timeout=60) as ac:
                @idem.aio.effectful(MAIL, client=ac, lease_ms=300)
                async def send(msg, e):
                    self.marker.send(msg)
                    started.set()
                    await asyncio.Event().wait()    # until cancelled
                task = asyncio.ensure_future(send("gone-2", {"to": "a"}))
                await started.wait()
                task.cancel()
                with self.assertRaises(asyncio.CancelledError):
                    await task
        asyncio.run(main())
        unknown = wait_unknown(c, "gone-2", {"to": "a"})
        self.assertEqual(unknown.code, "outcome_unknown")
        sub = c.get_submission("gone-2", effect_kind=MAIL).submission
        self.assertNotEqual(sub.state, "committed")
        self.assertIsNone(sub.raw_receipt)
        self.assertEqual(self.marker.count(), 2)


if __name__ == "__main__":
    unittest.main()
