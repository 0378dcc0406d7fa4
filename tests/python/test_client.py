#!/usr/bin/env python3
"""test_client.py: contrib/python/idem.py against a real idemd.

Environment: IDEMD (required: the idemd binary), IDEM_VECTORS (the
vectors directory or write-task-v1.json; default tests/vectors beside
this file).  `make check` sets both and runs this through
tests/python_client.sh.

Every broker runs on its own tempfile.mkdtemp() root and is waited for
through --ready-fd; the tests count the TASK and REPORT files on disk,
the authoritative objects.  Nothing sleeps to synchronise: the only
sleeps are the retry helper's own backoff.
"""

import contextlib
import fcntl
import hashlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import idem

HERE = os.path.dirname(os.path.abspath(__file__))
CAPACITY = "4096"       # a small shared segment is enough here
TASK = {"sender": "PM", "recipient": "DEV", "subject": "Fix login",
        "body": "Steps:\r\n1. reproduce\r\n2. fix"}


def vectors_path():
    path = os.environ.get("IDEM_VECTORS") or os.path.join(
        HERE, os.pardir, "vectors")
    if os.path.isdir(path):
        path = os.path.join(path, "write-task-v1.json")
    return path


def idemd_path():
    path = os.environ.get("IDEMD")
    if not path:
        raise RuntimeError("set IDEMD to the idemd binary (make check does)")
    return path


def count_files(root, prefix):
    """Files named PREFIX-*.md anywhere in the workspace (FCoP tools move
    tasks between stages; idem's temporaries start with a dot)."""
    n = 0
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x != ".idem"]
        n += sum(1 for f in files
                 if f.startswith(prefix + "-") and f.endswith(".md"))
    return n


class Broker:
    """One idemd on root, started and known to be serving."""

    def __init__(self, root, env=None):
        self.root = root
        self.socket = os.path.join(root, ".idem", "idemd.sock")
        self.log_path = os.path.join(os.path.dirname(root),
                                     os.path.basename(root) + ".log")
        self.proc = None
        self.start(env)

    def start(self, env=None):
        full_env = {k: v for k, v in os.environ.items()
                    if k not in ("IDEM_CRASH_AT", "IDEM_CRASH_WORKER_AT",
                                 "IDEM_ROOT", "IDEM_SOCKET")}
        full_env.update(env or {})
        r, w = os.pipe()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [idemd_path(), "--root", self.root, "--capacity", CAPACITY,
                 "--ready-fd", str(w)],
                pass_fds=(w,), env=full_env, stdin=subprocess.DEVNULL,
                stdout=log, stderr=log)
        os.close(w)
        got = b""
        with os.fdopen(r, "rb") as ready:
            # EOF without "ready" means every holder of the pipe is gone.
            while not got.endswith(b"\n"):
                chunk = ready.read(1)
                if not chunk:
                    break
                got += chunk
        if got != b"ready\n":
            self.proc.wait()
            raise RuntimeError("idemd did not start (status %s): %s" % (
                self.proc.returncode, self.log()))

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def wait_dead(self, timeout=60):
        """Wait for the master to exit, then for its workers: they die
        with it but hold the root's lock until they have."""
        status = self.proc.wait(timeout=timeout)
        fd = os.open(os.path.join(self.root, ".idem", "idemd.lock"),
                     os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
        return status

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.wait_dead(timeout=5)
            except subprocess.TimeoutExpired:
                sys.stderr.write("warning: idemd ignored SIGTERM for 5 s; "
                                 "killing it\n")
                self.proc.kill()
                self.wait_dead()
        if self.proc.returncode != 0:
            self.remove_segment()

    def remove_segment(self):
        """A broker that did not stop cleanly leaves its shared segment,
        /dev/shm/idem-<16 hex of SHA-256 of the root's real path>."""
        digest = hashlib.sha256(
            os.path.realpath(self.root).encode("utf-8")).hexdigest()
        try:
            os.unlink("/dev/shm/idem-" + digest[:16])
        except FileNotFoundError:
            pass


class BrokerTestCase(unittest.TestCase):
    broker_env = None

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="idem-py-")
        self.root = os.path.join(self.tmp, "fcop")
        self.broker = Broker(self.root, self.broker_env)
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.addCleanup(self.broker.stop)

    def client(self):
        c = idem.Client(self.broker.socket, timeout=60)
        self.addCleanup(c.close)
        return c

    def tasks(self):
        return count_files(self.root, "TASK")

    def reports(self):
        return count_files(self.root, "REPORT")


# ---- Digest -----------------------------------------------------------------

class TestDigest(unittest.TestCase):
    def test_every_conformance_vector(self):
        with open(vectors_path(), encoding="utf-8") as f:
            doc = json.load(f)
        self.assertEqual(doc["schema"], idem.DIGEST_SCHEMA)
        self.assertGreater(len(doc["vectors"]), 0)
        for v in doc["vectors"]:
            with self.subTest(vector=v["name"]):
                self.assertEqual(idem.task_canonical(v["task"]),
                                 v["canonical"].encode("utf-8"))
                self.assertEqual(idem.task_digest(v["task"]),
                                 v["request_digest"])

    def test_spec_example(self):
        self.assertEqual(
            idem.task_canonical({"sender": "PM", "recipient": "DEV",
                                 "subject": "Fix login"}),
            b'{"body":"","depends_on":[],"parent":null,"priority":"P2",'
            b'"recipient":"DEV","references":[],"risk_level":"low",'
            b'"sender":"PM","subject":"Fix login","thread_key":null}')

    def test_escapes_only_what_jcs_escapes(self):
        body = '"\\/\b\f\x00\x1f\x7f\u2028é'
        c = idem.task_canonical(dict(TASK, body=body))
        self.assertIn('"body":"\\"\\\\/\\b\\f\\u0000\\u001f\x7f\u2028é"'
                      .encode("utf-8"), c)

    def test_null_means_the_default(self):
        bare = {"sender": "PM", "recipient": "DEV", "subject": "Fix login"}
        self.assertEqual(idem.task_digest(dict(bare, body=None,
                                               references=None)),
                         idem.task_digest(bare))

    def test_refuses_what_the_broker_refuses(self):
        for bad in ({"sender": "PM", "recipient": "DEV"},
                    dict(TASK, colour="red"),
                    dict(TASK, references="doc/a.md"),
                    dict(TASK, subject="\ud800")):
            with self.subTest(task=repr(bad)):
                with self.assertRaises(ValueError):
                    idem.task_digest(bad)

    def test_submission_ids_are_fresh_and_printable(self):
        ids = {idem.submission_id_new() for _ in range(100)}
        self.assertEqual(len(ids), 100)
        for i in ids:
            self.assertTrue(all(0x21 <= ord(ch) <= 0x7e for ch in i))
        self.assertTrue(idem.submission_id_new("run-42/").startswith(
            "run-42/"))


# ---- The line reader, against a scripted peer -------------------------------

class TestLines(unittest.TestCase):
    """A socketpair stands in for the broker, to script how bytes arrive."""

    def peer(self, script):
        ours, theirs = socket.socketpair()
        self.addCleanup(theirs.close)
        t = threading.Thread(target=script, args=(theirs,), daemon=True)
        t.start()
        self.addCleanup(t.join, 10)
        c = idem.Client(sock=ours)
        self.addCleanup(c.close)
        return c

    @staticmethod
    def read_request(s, buf=b""):
        while b"\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                raise EOFError
            buf += chunk
        line, _, rest = buf.partition(b"\n")
        return json.loads(line), rest

    def test_partial_reads_are_joined(self):
        def script(s):
            req, _ = self.read_request(s)
            line = json.dumps({"ok": True, "id": req["id"], "server": "idemd",
                               "x": "é" * 1000}, ensure_ascii=False)
            for b in (line + "\n").encode("utf-8"):
                s.sendall(bytes([b]))
        reply = self.peer(script).hello()
        self.assertEqual(reply["x"], "é" * 1000)

    def test_bytes_past_a_line_are_kept_for_the_next(self):
        def script(s):
            rest = b""
            ids = []
            for _ in range(2):
                req, rest = self.read_request(s, rest)
                ids.append(req["id"])
            s.sendall(b"".join(b'{"ok":true,"id":%d,"n":%d}\n' % (i, n)
                               for n, i in enumerate(ids)))
        c = self.peer(script)
        replies = c.pipeline([{"op": "stats"}, {"op": "stats"}])
        self.assertEqual([r["n"] for r in replies], [0, 1])

    def test_a_line_of_exactly_one_mib_is_read(self):
        def script(s):
            req, _ = self.read_request(s)
            head = b'{"ok":true,"id":%d,"pad":"' % req["id"]
            pad = idem.MAX_LINE_BYTES - len(head) - len(b'"}\n')
            s.sendall(head + b"x" * pad + b'"}\n')
        reply = self.peer(script).stats()
        self.assertEqual(len(reply.raw) + 1, idem.MAX_LINE_BYTES)

    def test_a_longer_line_is_a_protocol_error(self):
        def script(s):
            req, _ = self.read_request(s)
            head = b'{"ok":true,"id":%d,"pad":"' % req["id"]
            try:
                s.sendall(head + b"x" * idem.MAX_LINE_BYTES + b'"}\n')
            except OSError:
                pass    # the client hung up, as it should
        c = self.peer(script)
        with self.assertRaises(idem.IdemProtocolError):
            c.stats()
        self.assertTrue(c.closed)

    def test_an_answer_to_another_request_is_a_protocol_error(self):
        def script(s):
            self.read_request(s)
            s.sendall(b'{"ok":true,"id":999}\n')
        c = self.peer(script)
        with self.assertRaises(idem.IdemProtocolError):
            c.stats()
        with self.assertRaises(idem.IdemTransportError):
            c.stats()

    def test_a_lost_broker_is_a_retryable_transport_error(self):
        def script(s):
            self.read_request(s)
            s.close()
        c = self.peer(script)
        with self.assertRaises(idem.IdemTransportError) as e:
            c.hello()
        self.assertTrue(e.exception.retryable)
        self.assertIsInstance(e.exception, idem.IdemError)


# ---- Against idemd ----------------------------------------------------------

class TestOps(BrokerTestCase):
    def test_hello(self):
        h = self.client().hello()
        self.assertIs(h["ok"], True)
        self.assertEqual(h["server"], "idemd")
        self.assertEqual(h["protocol"], 1)
        self.assertRegex(h["version"], r"^\d+\.\d+\.\d+")
        self.assertIn("write-task-v1", h["digest_schemas"])

    def test_created_then_reused_with_the_same_receipt_bytes(self):
        c = self.client()
        sid = idem.submission_id_new("test/")
        first = c.write_task(TASK, sid, meta={"trace_id": "t1"})
        self.assertEqual(first["disposition"], "created")
        self.assertIs(first["action_taken"], True)
        self.assertIs(first["idempotent"], True)
        self.assertNotIn("recovered", first)
        receipt = first["receipt"]
        self.assertEqual(receipt["client_submission_id"], sid)
        self.assertEqual(receipt["digest_schema"], "write-task-v1")
        self.assertEqual(receipt["request_digest"], idem.task_digest(TASK))
        self.assertEqual(receipt["state"], "committed")
        with open(os.path.join(self.root, receipt["task_path"]), "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(),
                             receipt["file_digest"])

        # A retry on another connection, with other meta and its digest.
        again = self.client().write_task(TASK, sid, request_digest=True,
                                         meta={"trace_id": "t2", "retry": 1})
        self.assertEqual(again["disposition"], "reused")
        self.assertIs(again["action_taken"], False)
        self.assertEqual(again["receipt"], receipt)
        self.assertEqual(again.raw_value("receipt"),
                         first.raw_value("receipt"))
        self.assertIsNotNone(first.raw_value("receipt"))
        self.assertEqual(self.tasks(), 1)

    def test_conflict_creates_nothing(self):
        c = self.client()
        sid = idem.submission_id_new()
        first = c.write_task(TASK, sid)
        with self.assertRaises(idem.IdemConflict) as cm:
            c.write_task(dict(TASK, subject="Fix logout"), sid)
        e = cm.exception
        self.assertEqual(e.code, "conflict")
        self.assertEqual(e.reason, "digest_mismatch")
        self.assertFalse(e.retryable)
        self.assertEqual(e.existing["task_id"], first["receipt"]["task_id"])
        self.assertEqual(e.existing["request_digest"],
                         first["receipt"]["request_digest"])
        self.assertEqual(e.reply["disposition"], "conflict")
        self.assertIs(e.reply["action_taken"], False)
        self.assertEqual(self.tasks(), 1)
        # The connection is still good, and the binding unchanged.
        self.assertEqual(c.write_task(TASK, sid)["disposition"], "reused")
        self.assertEqual(self.tasks(), 1)

    def test_legacy_calls_create_every_time(self):
        c = self.client()
        a = c.write_task(TASK)
        b = c.write_task(TASK)
        for r in (a, b):
            self.assertEqual(r["disposition"], "created")
            self.assertIs(r["idempotent"], False)
            self.assertIsNone(r["receipt"]["client_submission_id"])
            self.assertNotIn("request_digest", r["receipt"])
        self.assertNotEqual(a["receipt"]["task_id"], b["receipt"]["task_id"])
        self.assertEqual(self.tasks(), 2)

    def test_errors_name_code_and_field(self):
        c = self.client()
        with self.assertRaises(idem.IdemError) as cm:
            c.write_task({"recipient": "DEV", "subject": "x"}, "e-1")
        self.assertEqual(cm.exception.code, "invalid_request")
        self.assertEqual(cm.exception.field, "task.sender")
        self.assertFalse(cm.exception.retryable)
        with self.assertRaises(idem.IdemError) as cm:
            c.write_task(TASK, "e-2", request_digest="0" * 64)
        self.assertEqual(cm.exception.code, "digest_disagrees")
        with self.assertRaises(idem.IdemError) as cm:
            c.write_task(TASK, "e-3", digest_schema="write-task-v9")
        self.assertEqual(cm.exception.code, "unsupported_schema")
        self.assertEqual(self.tasks(), 0)

    def test_a_request_over_one_mib_is_refused_before_sending(self):
        c = self.client()
        with self.assertRaises(idem.IdemError) as cm:
            c.write_task(dict(TASK, body="x" * idem.MAX_LINE_BYTES), "big")
        self.assertEqual(cm.exception.code, "too_large")
        self.assertEqual(c.hello()["server"], "idemd")   # still usable
        self.assertEqual(self.tasks(), 0)

    def test_write_report_created_then_deduplicated(self):
        c = self.client()
        task_id = c.write_task(TASK, "t-1")["receipt"]["task_id"]
        report = {"sender": "DEV", "status": "done", "body": "fixed\r\n"}
        first = c.write_report(task_id, report, "r-1")
        self.assertIs(first["deduplicated"], False)
        self.assertRegex(first["report_id"],
                         r"^REPORT-\d{8}-\d{3,}-DEV-to-PM$")
        self.assertEqual(first["report_path"],
                         "reports/%s.md" % first["report_id"])
        self.assertTrue(os.path.isfile(os.path.join(self.root,
                                                     first["report_path"])))
        again = c.write_report(task_id, dict(report, body="fixed\n"), "r-1")
        self.assertIs(again["deduplicated"], True)
        self.assertEqual(again["report_id"], first["report_id"])
        self.assertEqual(again["report_path"], first["report_path"])
        self.assertEqual(self.reports(), 1)
        with self.assertRaises(idem.IdemConflict):
            c.write_report(task_id, dict(report, status="partial"), "r-1")
        self.assertEqual(self.reports(), 1)
        with self.assertRaises(idem.IdemError) as cm:
            c.write_report("TASK-20000101-001-PM-to-DEV", report, "r-2")
        self.assertEqual(cm.exception.code, "task_not_found")
        self.assertEqual(self.reports(), 1)

    def test_get_submission(self):
        c = self.client()
        self.assertEqual(c.get_submission("nobody")["found"], False)
        created = c.write_task(TASK, "g-1")
        s = c.get_submission("g-1")
        self.assertIs(s["found"], True)
        sub = s["submission"]
        self.assertEqual(sub["state"], "committed")
        self.assertEqual(sub["task_id"], created["receipt"]["task_id"])
        self.assertEqual(sub["task_path"], created["receipt"]["task_path"])
        self.assertEqual(sub["receipt"], created["receipt"])
        self.assertEqual(s.raw_value("submission") is not None, True)

    def test_diagnose(self):
        c = self.client()
        c.write_task(TASK, "d-1")
        d = c.diagnose(stale_after_ms=0)
        self.assertEqual(d["entries"], [])
        self.assertEqual(d["counts"],
                         {"reserved": 0, "task_created": 0, "committed": 1})
        with self.assertRaises(idem.IdemError) as cm:
            c.diagnose(stale_after_ms=-1)
        self.assertEqual(cm.exception.field, "stale_after_ms")

    def test_stats_count_what_happened(self):
        c = self.client()
        c.write_task(TASK, "s-1")
        c.write_task(TASK, "s-1")
        with self.assertRaises(idem.IdemConflict):
            c.write_task(dict(TASK, priority="P0"), "s-1")
        c.write_task(TASK)
        s = c.stats()
        for key in ("created", "reused", "conflict", "legacy_created",
                    "errors", "journal_records", "journal_fsyncs",
                    "table_used", "table_capacity", "workers",
                    "worker_restarts", "uptime_ms"):
            self.assertIsInstance(s[key], int, key)
        self.assertEqual((s["created"], s["reused"], s["conflict"],
                          s["legacy_created"]), (1, 1, 1, 1))
        self.assertEqual(s["table_capacity"], int(CAPACITY))
        self.assertEqual(s["workers"], 2)

    def test_pipelined_replies_come_in_request_order(self):
        c = self.client()
        replies = c.pipeline([
            {"op": "write_task", "client_submission_id": "p-1", "task": TASK},
            {"op": "get_submission", "client_submission_id": "p-1"},
            {"op": "hello"},
            {"op": "no_such_op"},
        ])
        self.assertEqual(replies[0]["disposition"], "created")
        self.assertEqual(replies[1]["submission"]["state"], "committed")
        self.assertEqual(replies[2]["server"], "idemd")
        self.assertEqual(replies[3]["error"]["code"], "unknown_op")

    def test_socket_from_the_environment(self):
        saved = {k: os.environ.get(k) for k in ("IDEM_SOCKET", "IDEM_ROOT")}

        def restore():
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self.addCleanup(restore)
        os.environ.pop("IDEM_SOCKET", None)
        os.environ["IDEM_ROOT"] = self.root
        self.assertEqual(idem.default_socket_path(), self.broker.socket)
        with idem.Client() as c:
            self.assertEqual(c.hello()["server"], "idemd")
        os.environ["IDEM_SOCKET"] = os.path.join(self.tmp, "none.sock")
        with self.assertRaises(idem.IdemTransportError):
            idem.Client()
        os.environ.pop("IDEM_SOCKET")
        os.environ.pop("IDEM_ROOT")
        self.assertEqual(idem.default_socket_path(),
                         os.path.join("./fcop", ".idem", "idemd.sock"))

    def test_the_module_docstring_example_runs(self):
        doc = idem.__doc__
        block = doc[doc.index("    import idem\n"):doc.index("\nThe wire ")]
        code = "\n".join(line[4:] for line in block.strip("\n").splitlines())
        saved = {k: os.environ.get(k) for k in ("IDEM_SOCKET", "IDEM_ROOT")}

        def restore():
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self.addCleanup(restore)
        os.environ.pop("IDEM_SOCKET", None)
        os.environ["IDEM_ROOT"] = self.root
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, "idem.__doc__", "exec"), {})
        lines = out.getvalue().splitlines()
        self.assertEqual(len(lines), 3, lines)
        self.assertRegex(lines[0], r"^created TASK-\d{8}-001-PM-to-DEV$")
        self.assertEqual(lines[1], "committed")
        self.assertEqual(lines[2], "digest_mismatch " + lines[0].split()[1])
        self.assertEqual(self.tasks(), 1)

    def test_retry_helper_gives_up_on_what_is_not_retryable(self):
        calls = []
        with self.assertRaises(idem.IdemError) as cm:
            idem.write_task_retry({"sender": "PM"}, "x-1",
                                  path=self.broker.socket,
                                  on_retry=lambda *a: calls.append(a))
        self.assertEqual(cm.exception.code, "invalid_request")
        self.assertEqual(calls, [])
        first = idem.write_task_retry(TASK, "x-2", path=self.broker.socket)
        self.assertEqual(first["disposition"], "created")
        with self.assertRaises(idem.IdemConflict):
            idem.write_task_retry(dict(TASK, subject="other"), "x-2",
                                  path=self.broker.socket,
                                  on_retry=lambda *a: calls.append(a))
        self.assertEqual(calls, [])

    def test_retry_helper_stops_after_its_attempts(self):
        delays = []
        with self.assertRaises(idem.IdemTransportError):
            idem.write_task_retry(
                TASK, "x-3", attempts=4, base_delay=0.001, max_delay=0.002,
                path=os.path.join(self.tmp, "none.sock"),
                on_retry=lambda n, e, d: delays.append((n, e.code, d)))
        self.assertEqual([(n, code) for n, code, _ in delays],
                         [(1, "transport"), (2, "transport"),
                          (3, "transport")])
        self.assertTrue(all(0 <= d <= 0.002 for _, _, d in delays))

    def test_retry_helper_stops_at_its_deadline(self):
        start = time.monotonic()
        with self.assertRaises(idem.IdemTransportError):
            idem.write_task_retry(
                TASK, "x-4", attempts=10 ** 9, base_delay=0.01,
                max_delay=0.05, deadline=0.3,
                path=os.path.join(self.tmp, "none.sock"))
        self.assertLess(time.monotonic() - start, 0.3 + 1.0)


# ---- The retry helper across a broker crash ---------------------------------

class TestRetryAcrossCrash(unittest.TestCase):
    """IDEM_CRASH_AT kills the whole broker in the first attempt; the helper
    keeps retrying (backoff) while the test restarts the broker without
    it, and finishes under the original identity with one TASK file."""

    def run_crash(self, point):
        if os.environ.get("IDEM_FAULT_INJECTION") == "no":
            self.skipTest("needs a build with fault injection "
                          "(configure --enable-fault-injection)")
        tmp = tempfile.mkdtemp(prefix="idem-py-")
        self.addCleanup(shutil.rmtree, tmp, True)
        root = os.path.join(tmp, "fcop")
        broker = Broker(root, {"IDEM_CRASH_AT": point})
        self.addCleanup(broker.stop)

        sid = idem.submission_id_new("crash/")
        failed = threading.Event()
        retries = []
        outcome = {}

        def on_retry(attempt, error, delay):
            retries.append((attempt, error.code))
            failed.set()

        def run():
            try:
                outcome["reply"] = idem.write_task_retry(
                    TASK, sid, attempts=100000, base_delay=0.005,
                    max_delay=0.1, path=broker.socket, timeout=60,
                    on_retry=on_retry)
            except BaseException as e:      # reported by the main thread
                outcome["error"] = e

        helper = threading.Thread(target=run, daemon=True)
        helper.start()
        self.assertEqual(broker.wait_dead(), -signal.SIGKILL,
                         broker.log())
        self.assertIn("crash point %s reached" % point, broker.log())
        self.assertTrue(failed.wait(60), "the helper saw no failure")
        self.assertTrue(helper.is_alive(), outcome)    # still retrying
        self.assertEqual(retries[0], (1, "transport"))
        self.assertLessEqual(count_files(root, "TASK"), 1)

        broker.start()
        helper.join(120)
        self.assertFalse(helper.is_alive(), "the helper never finished")
        self.assertNotIn("error", outcome)
        reply = outcome["reply"]
        self.assertIs(reply["ok"], True)
        self.assertEqual(count_files(root, "TASK"), 1)
        receipt = reply["receipt"]
        self.assertEqual(receipt["client_submission_id"], sid)
        self.assertEqual(receipt["request_digest"], idem.task_digest(TASK))
        path = os.path.join(root, receipt["task_path"])
        with open(path, "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(),
                             receipt["file_digest"])
        with idem.Client(broker.socket) as c:
            again = c.write_task(TASK, sid)
            self.assertEqual(again["disposition"], "reused")
            self.assertEqual(again.raw_value("receipt"),
                             reply.raw_value("receipt"))
            self.assertEqual(c.get_submission(sid)["submission"]["state"],
                             "committed")
        self.assertEqual(count_files(root, "TASK"), 1)
        return reply

    def test_crash_after_task_created_durable(self):
        reply = self.run_crash("after_task_created_durable")
        self.assertEqual(reply["disposition"], "reused")
        self.assertIs(reply.get("recovered"), True)
        self.assertIs(reply["action_taken"], False)

    def test_crash_after_reserve_durable(self):
        reply = self.run_crash("after_reserve_durable")
        self.assertEqual(reply["disposition"], "created")
        self.assertIs(reply.get("recovered"), True)
        self.assertIs(reply["action_taken"], True)

    def test_crash_after_task_file_linked(self):
        reply = self.run_crash("after_task_file_linked")
        self.assertEqual(reply["disposition"], "reused")
        self.assertIs(reply.get("recovered"), True)

    def test_crash_after_commit_durable(self):
        reply = self.run_crash("after_commit_durable")
        self.assertEqual(reply["disposition"], "reused")


if __name__ == "__main__":
    unittest.main()
