#!/usr/bin/env python3
# SPDX-License-Identifier: ISC
"""test_aio.py: idem.aio, the asyncio client, against a real idemd (every
op, the effect context manager and @effectful, concurrent coroutines on
one id) and against a scripted peer (how lines arrive, a request
cancelled or timed out on the wire).  Run by tests/python_client.sh
with the other test_*.py files; harness.py starts the brokers.

Nothing sleeps to synchronise: coroutines wait for asyncio.Events set
where the awaited thing happens.
"""

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import idem
import idem.aio

from harness import CAPACITY, HERE, MAIL, TASK, BrokerTestCase, Marker


def run(coro):
    return asyncio.run(coro)


class AioBrokerTestCase(BrokerTestCase):
    def setUp(self):
        super().setUp()
        self.marker = Marker(os.path.join(self.tmp, "sent.txt"))

    def aclient(self, timeout=60):
        return idem.aio.Client(self.broker.socket, timeout=timeout)


class TestAioOps(AioBrokerTestCase):
    """Every op, awaited, with the typed replies of idem.Client."""

    def test_every_op(self):
        async def main():
            async with self.aclient() as c:
                h = await c.hello()
                self.assertIsInstance(h, idem.Hello)
                self.assertEqual(h.server, "idemd")
                self.assertTrue(h.serves("write_task"))

                first = await c.write_task(TASK, "a-1", request_digest=True,
                                           meta={"trace": 1})
                self.assertIsInstance(first, idem.WriteResult)
                self.assertTrue(first.created)
                self.assertEqual(first.receipt.request_digest,
                                 idem.task_digest(TASK))
                again = await c.write_task(TASK, "a-1")
                self.assertTrue(again.reused)
                self.assertEqual(again.receipt.raw, first.receipt.raw)
                with self.assertRaises(idem.IdemConflict) as cm:
                    await c.write_task(dict(TASK, subject="other"), "a-1")
                self.assertEqual(cm.exception.conflict.reason,
                                 "digest_mismatch")
                self.assertEqual(cm.exception.conflict.bound.task_id,
                                 first.receipt.task_id)

                rep = await c.write_report(first.receipt.task_id,
                                           {"sender": "DEV", "body": "ok"},
                                           "r-1")
                self.assertIsInstance(rep, idem.ReportResult)
                self.assertFalse(rep.deduplicated)
                rep2 = await c.write_report(first.receipt.task_id,
                                            {"sender": "DEV", "body": "ok"},
                                            "r-1")
                self.assertTrue(rep2.deduplicated)
                self.assertEqual(rep2.report_id, rep.report_id)

                found = await c.get_submission("a-1")
                self.assertIsInstance(found, idem.SubmissionLookup)
                self.assertEqual(found.submission.state, "committed")
                self.assertEqual(found.submission.raw_receipt,
                                 first.receipt.raw)
                self.assertFalse((await c.get_submission("none")).found)

                d = await c.diagnose(stale_after_ms=0)
                self.assertIsInstance(d, idem.Diagnosis)
                self.assertEqual(d.entries, [])
                self.assertEqual(d.counts, idem.DiagnoseCounts(0, 0, 1))

                s = await c.stats()
                self.assertIsInstance(s, idem.Stats)
                self.assertEqual((s.created, s.reused, s.conflict),
                                 (1, 1, 1))
                self.assertEqual(s.table_capacity, int(CAPACITY))

                b = await c.effect_begin("x-1", MAIL, {"to": "a"},
                                         lease_ms=30000)
                self.assertIsInstance(b, idem.EffectBegin)
                self.assertEqual(b.disposition, "proceed")
                done = await c.effect_complete("x-1", MAIL, b.fence,
                                               "applied", {"id": 1})
                self.assertIsInstance(done, idem.EffectSettled)
                self.assertEqual(done.receipt.result, {"id": 1})
                reused = await c.effect_begin("x-1", MAIL, {"to": "a"})
                self.assertEqual(reused.receipt.raw, done.receipt.raw)
                with self.assertRaises(idem.IdemConflict) as cm:
                    await c.effect_resolve("x-1", MAIL, "not_applied")
                self.assertEqual(cm.exception.conflict.reason,
                                 "already_committed")

                replies = await c.pipeline([{"op": "hello"},
                                            {"op": "no_such_op"}])
                self.assertEqual(replies[0]["server"], "idemd")
                self.assertEqual(replies[1]["error"]["code"], "unknown_op")
            self.assertTrue(c.closed)
        run(main())
        self.assertEqual(self.tasks(), 1)
        self.assertEqual(self.reports(), 1)

    def test_the_sync_and_async_clients_send_the_same_request(self):
        """One idem.ops for both: the same digest, the same receipt."""
        sync = self.client().write_task(TASK, "same-1")

        async def main():
            async with self.aclient() as c:
                return await c.write_task(TASK, "same-1")
        self.assertEqual(run(main()).receipt.raw, sync.receipt.raw)

    def test_an_unreachable_broker_is_a_transport_error(self):
        async def main():
            c = idem.aio.Client(os.path.join(self.tmp, "none.sock"))
            with self.assertRaises(idem.IdemTransportError) as cm:
                await c.hello()
            self.assertTrue(cm.exception.retryable)
            self.assertTrue(c.closed)
            with self.assertRaises(idem.IdemTransportError):
                await idem.aio.connect(os.path.join(self.tmp, "none.sock"))
        run(main())

    def test_the_retry_helpers_wait_for_the_broker(self):
        """write_task_retry across a broker that is down at the first
        attempt and started by the retry callback: one task, and the
        same receipt for a later retry."""
        self.broker.stop()
        calls = []

        def on_retry(attempt, error, delay):
            calls.append((attempt, error.code))
            if attempt == 1:
                self.broker.start()

        async def main():
            first = await idem.aio.write_task_retry(
                TASK, "retry-1", path=self.broker.socket, timeout=60,
                request_digest=True, on_retry=on_retry)
            again = await idem.aio.write_task_retry(
                TASK, "retry-1", path=self.broker.socket, timeout=60)
            self.assertTrue(first.created)
            self.assertEqual(again.receipt.raw, first.receipt.raw)
            report = {"sender": "DEV", "body": "done"}
            r1 = await idem.aio.write_report_retry(
                first.receipt.task_id, report, "rep-1",
                path=self.broker.socket)
            r2 = await idem.aio.write_report_retry(
                first.receipt.task_id, report, "rep-1",
                path=self.broker.socket)
            self.assertEqual((r1.deduplicated, r2.deduplicated),
                             (False, True))
            with self.assertRaises(idem.IdemConflict):
                await idem.aio.write_task_retry(
                    dict(TASK, subject="other"), "retry-1",
                    path=self.broker.socket, on_retry=on_retry)
            with self.assertRaises(ValueError):
                await idem.aio.write_task_retry(TASK, "")
        run(main())
        self.assertEqual(calls, [(1, "transport")])
        self.assertEqual(self.tasks(), 1)
        self.assertEqual(self.reports(), 1)

    def test_one_client_serves_coroutines_in_turn(self):
        async def main():
            async with self.aclient() as c:
                results = await asyncio.gather(*(
                    c.write_task(dict(TASK, subject="s%d" % (i % 5)),
                                 "turn-%d" % (i % 5)) for i in range(40)))
            for i, r in enumerate(results):
                self.assertEqual(r.receipt.client_submission_id,
                                 "turn-%d" % (i % 5))
            return results
        results = run(main())
        self.assertEqual(sum(r.created for r in results), 5)
        self.assertEqual(self.tasks(), 5)


    def test_an_unreadable_request_answered_without_id(self):
        # idemd's invalid_json for an integer past 64 bits comes without
        # an id (it could not read the request): after an answer it is
        # still this call's answer, and the connection stays usable.
        async def main():
            async with self.aclient() as c:
                await c.hello()
                with self.assertRaises(idem.IdemError) as cm:
                    await c.write_task(TASK, "big-int", meta={"n": 10 ** 30})
                self.assertNotIsInstance(cm.exception, idem.IdemProtocolError)
                self.assertEqual(cm.exception.code, "invalid_json")
                self.assertFalse(c.closed)
                self.assertEqual((await c.hello()).server, "idemd")
        asyncio.run(main())
        self.assertEqual(self.tasks(), 0)


class TestAioEffects(AioBrokerTestCase):
    """async with client.effect(...) and @idem.aio.effectful: proceed,
    reused, conflict, outcome_unknown, NotApplied, convergence."""

    def test_proceed_then_reused(self):
        async def main():
            async with self.aclient() as c:
                async with c.effect("e-1", MAIL, {"to": "a"}) as e:
                    self.assertEqual(e.disposition, "proceed")
                    self.assertEqual(e.state, "running")
                    self.assertEqual(e.attempt, 1)
                    receipt = await e.complete(
                        self.marker.send("a", e.external_key))
                self.assertEqual(e.state, "committed")
                self.assertIs(e.receipt, receipt)
                async with c.effect("e-1", MAIL, {"to": "a"}) as again:
                    self.assertEqual(again.disposition, "reused")
                    self.assertEqual(again.state, "committed")
                    self.assertFalse(again.proceed)
                self.assertEqual(again.receipt.raw, receipt.raw)
                self.assertEqual(again.result, e.result)
        run(main())
        self.assertEqual(self.marker.count(), 1)

    def test_conflict_runs_no_block(self):
        async def main():
            async with self.aclient() as c:
                async with c.effect("e-2", MAIL, {"to": "a"}) as e:
                    await e.complete({"id": 1})
                ran = []
                with self.assertRaises(idem.IdemConflict) as cm:
                    async with c.effect("e-2", MAIL, {"to": "b"}) as e2:
                        ran.append(e2)
                self.assertEqual(ran, [])
                self.assertEqual(cm.exception.conflict.reason,
                                 "digest_mismatch")
        run(main())

    def test_not_applied_releases_and_outcome_unknown_is_raised(self):
        async def main():
            async with self.aclient() as c:
                with self.assertRaises(idem.NotApplied):
                    async with c.effect("e-3", MAIL, {"to": "a"}) as e:
                        raise idem.NotApplied("550")
                self.assertEqual(e.state, "released")
                async with c.effect("e-3", MAIL, {"to": "a"}) as e2:
                    self.assertEqual(e2.attempt, 2)
                    self.assertEqual(e2.external_key, e.external_key)
                    await e2.complete(self.marker.send("a"))

                with self.assertRaises(RuntimeError):
                    async with c.effect("e-4", MAIL, {"to": "a"},
                                        lease_ms=100) as e3:
                        self.marker.send("a")
                        raise RuntimeError("lost after the send")
                self.assertEqual(e3.state, "abandoned")
        run(main())
        from harness import wait_unknown
        wait_unknown(self.client(), "e-4", {"to": "a"})

        async def after():
            async with self.aclient() as c:
                ran = []
                with self.assertRaises(idem.IdemOutcomeUnknown):
                    async with c.effect("e-4", MAIL, {"to": "a"}) as e:
                        ran.append(e)
                self.assertEqual(ran, [])

                async def probe(error):
                    self.assertIsInstance(error, idem.IdemOutcomeUnknown)
                    return idem.Evidence("applied", {"seen": True}, "log")
                async with c.effect("e-4", MAIL, {"to": "a"},
                                    probe=probe) as e:
                    self.assertTrue(e.reused)
                    self.assertTrue(e.recovered)
                self.assertEqual(e.result, {"seen": True})
        run(after())
        self.assertEqual(self.marker.count(), 2)

    def test_the_decorator_performs_once(self):
        calls = []

        @idem.aio.effectful(MAIL, path=self.broker.socket, timeout=60)
        async def send(msg, e):
            calls.append(e.attempt)
            return self.marker.send(msg, e.external_key)

        async def main():
            first = await send("d-1", {"to": "a"})
            again = await send("d-1", {"to": "a"})
            self.assertEqual(first, again)
            self.assertEqual(send.__name__, "send")
        run(main())
        self.assertEqual(calls, [1])
        self.assertEqual(self.marker.count(), 1)

    def test_concurrent_coroutines_with_one_id_converge(self):
        """Eight coroutines, on a shared client and on clients of their
        own, ask for one effect at once: one performs it (its body waits
        until every other has been told in_progress), the others wait
        for it and then get its receipt, byte for byte."""
        n = 8

        async def main():
            shared = self.aclient()
            others_refused = asyncio.Event()
            performed = asyncio.Event()
            refused = []

            @idem.aio.effectful(MAIL, client=shared)
            async def send_shared(msg, e):
                return await body(msg, e)

            @idem.aio.effectful(MAIL, path=self.broker.socket, timeout=60)
            async def send_own(msg, e):
                return await body(msg, e)

            async def body(msg, e):
                await others_refused.wait()
                return self.marker.send(msg, e.external_key)

            async def one(i):
                send = send_shared if i % 2 else send_own
                while True:
                    try:
                        result = await send("conv-1", {"to": "all"})
                    except idem.IdemInProgress:
                        refused.append(i)
                        if len(refused) == n - 1:
                            others_refused.set()
                        await performed.wait()
                        continue
                    performed.set()
                    return result
            try:
                return await asyncio.gather(*(one(i) for i in range(n)))
            finally:
                await shared.close()
        results = run(main())
        self.assertEqual(len(results), n)
        self.assertTrue(all(r == results[0] for r in results), results)
        self.assertEqual(self.marker.count(), 1)
        r = self.client().effect_begin("conv-1", MAIL, {"to": "all"})
        self.assertTrue(r.reused)
        self.assertEqual(r.receipt.result, results[0])


class TestDocExamples(BrokerTestCase):
    """doc/effects.md's Python examples, as a user runs them: each block
    a program of its own, in a fresh directory, with IDEM_SOCKET set."""

    def examples(self):
        src = os.environ.get("IDEM_SRCDIR") or os.path.join(
            HERE, os.pardir, os.pardir)
        with open(os.path.join(src, "doc", "effects.md"),
                  encoding="utf-8") as f:
            doc = f.read()
        section = doc[doc.index("\n## Python: sync and asyncio\n"):]
        end = section.find("\n## ", 1)
        if end != -1:
            section = section[:end]
        blocks = re.findall(r"\n```python\n(.*?)\n```\n", section, re.S)
        self.assertEqual(len(blocks), 2, "a sync and an asyncio example")
        return blocks

    def run_example(self, code, cwd):
        env = dict(os.environ, IDEM_SOCKET=self.broker.socket)
        env.pop("IDEM_ROOT", None)
        p = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        return p.stdout.decode().splitlines()

    def test_the_examples_run(self):
        sync, aio = self.examples()
        cwd = os.path.join(self.tmp, "example")
        os.mkdir(cwd)
        lines = self.run_example(sync, cwd) + self.run_example(sync, cwd)
        self.assertEqual(len(lines), 4, lines)
        self.assertRegex(lines[0], r"^proceed \{'message_id': 'm-")
        result = lines[0][len("proceed "):]
        self.assertEqual(lines[1:], ["reused " + result] * 3)
        with open(os.path.join(cwd, "outbox.jsonl"), encoding="utf-8") as f:
            self.assertEqual(len(f.readlines()), 1)     # one mail

        self.assertEqual(self.run_example(aio, cwd), ["60 charged"])
        self.assertEqual(self.run_example(aio, cwd), ["60 charged"])
        s = self.client().stats()
        self.assertEqual(s.counters["effects_proceed"], 1 + 3)
        self.assertEqual(s.counters["effects_outcome_unknown"], 0)


class Peer:
    """A scripted broker: an asyncio Unix server whose handler is the
    test's script(reader, writer)."""

    def __init__(self, test, script):
        self.tmp = tempfile.mkdtemp(prefix="idem-aio-peer-")
        test.addCleanup(shutil.rmtree, self.tmp, True)
        self.path = os.path.join(self.tmp, "peer.sock")
        self.script = script
        self.server = None

    async def handle(self, reader, writer):
        try:
            await self.script(reader, writer)
        finally:
            writer.close()      # also when the loop ends and cancels it

    async def __aenter__(self):
        self.server = await asyncio.start_unix_server(self.handle, self.path)
        return self

    async def __aexit__(self, *exc):
        self.server.close()
        await self.server.wait_closed()


async def read_request(reader):
    return json.loads(await reader.readline())


class TestAioLines(unittest.TestCase):
    def test_partial_reads_are_joined(self):
        async def script(reader, writer):
            req = await read_request(reader)
            line = json.dumps({"ok": True, "id": req["id"], "server": "idemd",
                               "version": "0.1.0", "x": "é" * 1000},
                              ensure_ascii=False).encode() + b"\n"
            for i in range(0, len(line), 7):
                writer.write(line[i:i + 7])
                await writer.drain()
            writer.close()

        async def main():
            async with Peer(self, script) as p:
                async with idem.aio.Client(p.path) as c:
                    h = await c.hello()
            self.assertEqual(h["x"], "é" * 1000)
        run(main())

    def test_a_longer_line_and_another_id_are_protocol_errors(self):
        async def too_long(reader, writer):
            req = await read_request(reader)
            writer.write(b'{"ok":true,"id":%d,"pad":"' % req["id"]
                         + b"x" * idem.MAX_LINE_BYTES + b'"}\n')
            try:
                await writer.drain()
            except OSError:
                pass
            writer.close()

        async def other_id(reader, writer):
            await read_request(reader)
            writer.write(b'{"ok":true,"id":999}\n')
            await writer.drain()
            writer.close()

        async def main():
            for script in (too_long, other_id):
                async with Peer(self, script) as p:
                    c = idem.aio.Client(p.path)
                    with self.assertRaises(idem.IdemProtocolError):
                        await c.hello()
                    self.assertTrue(c.closed)
                    with self.assertRaises(idem.IdemTransportError):
                        await c.hello()
        run(main())

    def test_a_request_cancelled_or_timed_out_on_the_wire_closes(self):
        """The answer to a cancelled request would be read as the next
        request's: the connection is closed instead."""
        async def main():
            got = asyncio.Event()

            async def silent(reader, writer):
                await read_request(reader)
                got.set()
                await reader.read()         # never answers
                writer.close()

            async with Peer(self, silent) as p:
                c = idem.aio.Client(p.path)
                call = asyncio.ensure_future(c.stats())
                await got.wait()
                call.cancel()
                with self.assertRaises(asyncio.CancelledError):
                    await call
                self.assertTrue(c.closed)
                with self.assertRaises(idem.IdemTransportError):
                    await c.stats()

                got.clear()
                c = idem.aio.Client(p.path, timeout=0.2)
                with self.assertRaises(idem.IdemTransportError) as cm:
                    await c.stats()
                self.assertTrue(got.is_set())
                self.assertIn("no answer within", str(cm.exception))
                self.assertTrue(c.closed)
        run(main())


if __name__ == "__main__":
    unittest.main()
