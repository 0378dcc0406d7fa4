#!/usr/bin/env python3
# SPDX-License-Identifier: ISC
"""test_client.py: the idem package (contrib/python) against a real idemd.

Environment: IDEMD (required: the idemd binary), IDEM_VECTORS (the
vectors directory; default tests/vectors beside this file), IDEM_VENV
(the venv the package is installed in: then the tests check that they
run the installed copy), IDEM_VERSION (configure.ac's version: then
__version__ must equal it).  `make check` sets them and runs this
through tests/python_client.sh, with the venv's python.

The brokers are harness.py's, one per test; the tests count the TASK and REPORT files on disk,
the authoritative objects.  Nothing sleeps to synchronise: the only
sleeps are the retry helper's own backoff.
"""

import contextlib
import hashlib
import io
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import unittest

import idem

from harness import (CAPACITY, HERE, MAIL, TASK, Broker, BrokerTestCase,
                     count_files, vectors_path)

# ---- Digest -----------------------------------------------------------------

class TestDigest(unittest.TestCase):
    def test_every_conformance_vector(self):
        for name in ("write-task-v1.json", "write-task-v1-fcop.json"):
            with open(vectors_path(name), encoding="utf-8") as f:
                doc = json.load(f)
            self.assertEqual(doc["schema"], idem.DIGEST_SCHEMA)
            self.assertGreater(len(doc["vectors"]), 0)
            for v in doc["vectors"]:
                with self.subTest(file=name, vector=v["name"]):
                    self.assertEqual(idem.task_canonical(v["task"]),
                                     v["canonical"].encode("utf-8"))
                    self.assertEqual(idem.task_digest(v["task"]),
                                     v["request_digest"])

    def test_generic_json_v1_vectors(self):
        path = vectors_path("generic-json-v1.json")
        if not os.path.exists(path):
            self.skipTest("no generic-json-v1 vectors at %s" % path)
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        self.assertEqual(doc["schema"], idem.EFFECT_DIGEST_SCHEMA)
        self.assertGreater(len(doc["vectors"]), 0)
        for v in doc["vectors"]:
            with self.subTest(vector=v["name"]):
                request = json.loads(v["request_json"])
                if "error" in v:
                    with self.assertRaises(ValueError):
                        idem.effect_canonical(v["effect_kind"], request)
                    continue
                self.assertEqual(
                    idem.effect_canonical(v["effect_kind"], request),
                    v["canonical"].encode("utf-8"))
                self.assertEqual(
                    idem.effect_digest(v["effect_kind"], request),
                    v["request_digest"])

    def test_generic_json_v1_numbers_and_refusals(self):
        self.assertEqual(idem.effect_canonical("k/v1", [1.0, -0.0, 1e21,
                                                        1e-7, 0.000001]),
                         b'{"kind":"k/v1","request":[1,0,1e+21,1e-7,'
                         b'0.000001]}')
        for bad in (float("nan"), float("inf"), 2 ** 53 + 1, {1: 2},
                    object(), "\ud800"):
            with self.subTest(value=repr(bad)):
                with self.assertRaises(ValueError):
                    idem.effect_digest("k/v1", bad)

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
                    dict(TASK, sender=None),
                    dict(TASK, body=7),
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
                               "version": "0.1.0",
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
        reply = self.peer(script).call({"op": "stats"})
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

    def test_receipt_raw_is_sliced_not_reserialized(self):
        receipt = (b'{ "task_id" : "TASK-20261202-001-PM-to-DEV",'
                   b' "task_path":"_lifecycle/inbox/T\\u00e9.md",'
                   b'"state":"committed", "n": 1.50 ,"created_at":null }')

        def script(s):
            req, _ = self.read_request(s)
            s.sendall(b'{"ok":true,"id":%d,"disposition":"reused",'
                      b'"action_taken":false,"idempotent":true,'
                      b'"receipt": %s ,"current_path":"done/x.md"}\n'
                      % (req["id"], receipt))
        r = self.peer(script).write_task(TASK, "raw-1")
        self.assertEqual(r.receipt.raw, receipt)
        self.assertEqual(r.receipt.task_path, "_lifecycle/inbox/T\u00e9.md")
        self.assertEqual(r.receipt.data["n"], 1.5)
        self.assertEqual(r.current_path, "done/x.md")
        self.assertEqual(r.path, "done/x.md")
        self.assertIsNone(r.receipt.created_at)

    def test_a_reply_without_its_receipt_is_a_protocol_error(self):
        def script(s):
            req, _ = self.read_request(s)
            s.sendall(b'{"ok":true,"id":%d,"disposition":"created"}\n'
                      % req["id"])
        with self.assertRaises(idem.IdemProtocolError):
            self.peer(script).write_task(TASK, "raw-2")

    def test_a_lost_broker_is_a_retryable_transport_error(self):
        def script(s):
            self.read_request(s)
            s.close()
        c = self.peer(script)
        with self.assertRaises(idem.IdemTransportError) as e:
            c.hello()
        self.assertTrue(e.exception.retryable)
        self.assertIsInstance(e.exception, idem.IdemError)


# ---- The installed package ---------------------------------------------------

class TestPackage(unittest.TestCase):
    def test_runs_the_installed_copy(self):
        venv = os.environ.get("IDEM_VENV")
        if not venv:
            self.skipTest("IDEM_VENV not set: not run by "
                          "tests/python_client.sh")
        self.assertEqual(os.path.realpath(sys.prefix),
                         os.path.realpath(venv))
        path = os.path.realpath(idem.__file__)
        self.assertTrue(path.startswith(os.path.realpath(venv) + os.sep),
                        path)
        self.assertTrue(os.path.isfile(os.path.join(os.path.dirname(path),
                                                    "py.typed")))

    def test_version(self):
        self.assertRegex(idem.__version__, r"^\d+\.\d+\.\d+")
        if "IDEM_VERSION" in os.environ:
            self.assertEqual(idem.__version__, os.environ["IDEM_VERSION"])
        if os.environ.get("IDEM_VENV"):
            from importlib import metadata
            self.assertEqual(metadata.version("idemd-client"),
                             idem.__version__)
            files = {str(f) for f in metadata.files("idemd-client")}
            self.assertIn("idem/py.typed", files)
            self.assertIn("idem/__init__.py", files)
            self.assertNotIn("idem_build.py", files)

    def test_the_build_backend_makes_a_valid_wheel_and_sdist(self):
        """idem_build's PEP 517 hooks, called as pip calls them: a wheel
        whose RECORD matches its files, the same bytes twice (no time or
        order in it), an sdist that builds again; nothing written beside
        the sources."""
        import base64
        import tarfile
        import zipfile
        src = os.path.join(os.environ.get("IDEM_SRCDIR") or
                           os.path.join(HERE, os.pardir, os.pardir),
                           "contrib", "python")
        before = sorted(os.walk(src))
        sys.path.insert(0, src)
        self.addCleanup(sys.path.remove, src)
        sys.dont_write_bytecode = True      # nothing beside the sources
        import idem_build
        self.assertEqual(idem_build.get_requires_for_build_wheel(), [])
        out = tempfile.mkdtemp(prefix="idem-py-build-")
        self.addCleanup(shutil.rmtree, out, True)
        names = []
        for d in ("a", "b"):
            os.mkdir(os.path.join(out, d))
            names.append(idem_build.build_wheel(os.path.join(out, d)))
        self.assertEqual(names[0], "idemd_client-%s-py3-none-any.whl"
                         % idem.__version__)
        with open(os.path.join(out, "a", names[0]), "rb") as f:
            a = f.read()
        with open(os.path.join(out, "b", names[1]), "rb") as f:
            self.assertEqual(f.read(), a)
        with zipfile.ZipFile(os.path.join(out, "a", names[0])) as z:
            info = "idemd_client-%s.dist-info/" % idem.__version__
            record = z.read(info + "RECORD").decode("utf-8").splitlines()
            listed = set()
            for line in record:
                name, digest, size = line.rsplit(",", 2)
                listed.add(name)
                if name == info + "RECORD":
                    continue
                data = z.read(name)
                self.assertEqual(int(size), len(data), name)
                self.assertEqual(digest, "sha256=" + base64.urlsafe_b64encode(
                    hashlib.sha256(data).digest()).rstrip(b"=").decode())
            self.assertEqual(listed, set(z.namelist()))
            self.assertIn("idem/py.typed", listed)
            meta = z.read(info + "METADATA").decode("utf-8")
            self.assertIn("Name: idemd-client\n", meta)
            self.assertIn("Version: %s\n" % idem.__version__, meta)
        sdist = idem_build.build_sdist(out)
        with tarfile.open(os.path.join(out, sdist)) as t:
            members = set(t.getnames())
        base = sdist[:-len(".tar.gz")]
        for name in ("PKG-INFO", "pyproject.toml", "idem_build.py",
                     "idem/__init__.py", "idem/py.typed"):
            self.assertIn(base + "/" + name, members)
        self.assertEqual(sorted(os.walk(src)), before)

    def test_standard_library_only(self):
        from importlib import metadata
        if not os.environ.get("IDEM_VENV"):
            self.skipTest("IDEM_VENV not set")
        self.assertIsNone(metadata.requires("idemd-client"))


# ---- Against idemd ----------------------------------------------------------

class TestOps(BrokerTestCase):
    def test_hello(self):
        h = self.client().hello()
        self.assertIsInstance(h, idem.Hello)
        self.assertEqual(h.server, "idemd")
        self.assertEqual(h.protocol, 1)
        self.assertRegex(h.version, r"^\d+\.\d+\.\d+")
        self.assertIn("write-task-v1", h.digest_schemas)
        if h.ops is not None:
            self.assertTrue(h.serves("write_task"))
            self.assertFalse(h.serves("no_such_op"))
        if "IDEM_VERSION" in os.environ:
            self.assertEqual(h.version, os.environ["IDEM_VERSION"])

    def test_created_then_reused_with_the_same_receipt_bytes(self):
        c = self.client()
        sid = idem.submission_id_new("test/")
        first = c.write_task(TASK, sid, meta={"trace_id": "t1"})
        self.assertIsInstance(first, idem.WriteResult)
        self.assertEqual(first.disposition, "created")
        self.assertTrue(first.created)
        self.assertIs(first.action_taken, True)
        self.assertIs(first.idempotent, True)
        self.assertIs(first.recovered, False)
        self.assertIsNone(first.current_path)
        receipt = first.receipt
        self.assertEqual(receipt.client_submission_id, sid)
        self.assertEqual(receipt.digest_schema, "write-task-v1")
        self.assertEqual(receipt.request_digest, idem.task_digest(TASK))
        self.assertEqual(receipt.state, "committed")
        self.assertEqual(first.path, receipt.task_path)
        with open(os.path.join(self.root, receipt.task_path), "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(),
                             receipt.file_digest)
        # raw is the receipt member's text, sliced from the line.
        self.assertIn(b'"receipt":' + receipt.raw, first.reply.raw)
        self.assertEqual(json.loads(receipt.raw), receipt.data)

        # A retry on another connection, with other meta and its digest.
        again = self.client().write_task(TASK, sid, request_digest=True,
                                         meta={"trace_id": "t2", "retry": 1})
        self.assertEqual(again.disposition, "reused")
        self.assertTrue(again.reused)
        self.assertIs(again.action_taken, False)
        self.assertEqual(again.receipt.raw, receipt.raw)
        self.assertEqual(again.receipt, receipt)
        self.assertEqual(self.tasks(), 1)

    def test_a_moved_task_has_a_current_path_and_the_same_receipt(self):
        c = self.client()
        first = c.write_task(TASK, "mv-1")
        active = "_lifecycle/active/%s.md" % first.receipt.task_id
        os.rename(os.path.join(self.root, first.receipt.task_path),
                  os.path.join(self.root, active))     # an FCoP tool's move
        again = c.write_task(TASK, "mv-1")
        self.assertEqual(again.disposition, "reused")
        self.assertEqual(again.current_path, active)
        self.assertEqual(again.path, active)
        self.assertEqual(again.receipt.task_path, first.receipt.task_path)
        self.assertEqual(again.receipt.raw, first.receipt.raw)
        sub = c.get_submission("mv-1").submission
        self.assertEqual(sub.current_path, active)
        self.assertEqual(sub.receipt.raw, first.receipt.raw)
        self.assertEqual(self.tasks(), 1)

    def test_the_dict_api_of_version_0_1_still_works(self):
        c = self.client()
        first = c.write_task(TASK, "compat-1")
        self.assertEqual(first["disposition"], "created")
        self.assertEqual(first["receipt"]["task_id"], first.receipt.task_id)
        self.assertEqual(first.receipt["task_path"], first.receipt.task_path)
        self.assertNotIn("recovered", first)
        self.assertIsNone(first.get("recovered"))
        self.assertEqual(first.raw_value("receipt"), first.receipt.raw)
        again = idem.write_task_retry(TASK, "compat-1",
                                      path=self.broker.socket)
        self.assertEqual(again["disposition"], "reused")
        self.assertEqual(c.get_submission("compat-1")["submission"]["state"],
                         "committed")
        self.assertEqual(c.stats()["created"], 1)
        with self.assertRaises(idem.IdemConflict) as cm:
            c.write_task(dict(TASK, subject="other"), "compat-1")
        self.assertEqual(cm.exception.reason, "digest_mismatch")
        self.assertEqual(cm.exception.existing["task_id"],
                         first.receipt.task_id)

    def test_conflict_creates_nothing(self):
        c = self.client()
        sid = idem.submission_id_new()
        first = c.write_task(TASK, sid)
        with self.assertRaises(idem.IdemConflict) as cm:
            c.write_task(dict(TASK, subject="Fix logout"), sid)
        e = cm.exception
        self.assertEqual(e.code, "conflict")
        self.assertFalse(e.retryable)
        self.assertIsInstance(e.conflict, idem.Conflict)
        self.assertEqual(e.conflict.reason, "digest_mismatch")
        self.assertEqual(e.conflict.bound.client_submission_id, sid)
        self.assertEqual(e.conflict.bound.state, "committed")
        self.assertEqual(e.conflict.bound.task_id, first.receipt.task_id)
        self.assertEqual(e.conflict.bound.request_digest,
                         first.receipt.request_digest)
        self.assertEqual(e.reply["disposition"], "conflict")
        self.assertIs(e.reply["action_taken"], False)
        self.assertEqual(self.tasks(), 1)
        # The connection is still good, and the binding unchanged.
        self.assertEqual(c.write_task(TASK, sid).disposition, "reused")
        self.assertEqual(self.tasks(), 1)

    def test_legacy_calls_create_every_time(self):
        c = self.client()
        a = c.write_task(TASK)
        b = c.write_task(TASK)
        for r in (a, b):
            self.assertEqual(r.disposition, "created")
            self.assertIs(r.idempotent, False)
            self.assertIsNone(r.receipt.client_submission_id)
            self.assertIsNone(r.receipt.request_digest)
        self.assertNotEqual(a.receipt.task_id, b.receipt.task_id)
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
        self.assertEqual(c.hello().server, "idemd")   # still usable
        self.assertEqual(self.tasks(), 0)

    def test_an_unreadable_request_answered_without_id(self):
        # An integer past 64 bits: idemd cannot read the request, so its
        # invalid_json comes without an id (broker/request.c).  After an
        # answer on the connection that is still this call's answer, not
        # a line nobody asked for, and the connection stays usable.
        c = self.client()
        self.assertEqual(c.hello().server, "idemd")
        with self.assertRaises(idem.IdemError) as cm:
            c.write_task(TASK, "big-int", meta={"n": 10 ** 30})
        self.assertNotIsInstance(cm.exception, idem.IdemProtocolError)
        self.assertEqual(cm.exception.code, "invalid_json")
        self.assertNotIn("id", cm.exception.reply)
        self.assertFalse(c.closed)
        self.assertEqual(c.hello().server, "idemd")
        self.assertEqual(self.tasks(), 0)

    def test_write_report_created_then_deduplicated(self):
        c = self.client()
        task_id = c.write_task(TASK, "t-1").receipt.task_id
        report = {"sender": "DEV", "status": "done", "body": "fixed\r\n"}
        first = c.write_report(task_id, report, "r-1")
        self.assertIsInstance(first, idem.ReportResult)
        self.assertIs(first.deduplicated, False)
        self.assertRegex(first.report_id,
                         r"^REPORT-\d{8}-\d{3,}-DEV-to-PM$")
        self.assertEqual(first.report_path,
                         "reports/%s.md" % first.report_id)
        self.assertTrue(os.path.isfile(os.path.join(self.root,
                                                     first.report_path)))
        again = c.write_report(task_id, dict(report, body="fixed\n"), "r-1")
        self.assertIs(again.deduplicated, True)
        self.assertEqual(again.report_id, first.report_id)
        self.assertEqual(again.report_path, first.report_path)
        self.assertEqual(self.reports(), 1)
        # The retry helper: same id, one REPORT.
        third = idem.write_report_retry(task_id, report, "r-1",
                                        path=self.broker.socket)
        self.assertIs(third.deduplicated, True)
        self.assertEqual(third.report_id, first.report_id)
        self.assertEqual(self.reports(), 1)
        with self.assertRaises(idem.IdemConflict):
            c.write_report(task_id, dict(report, status="blocked"), "r-1")
        self.assertEqual(self.reports(), 1)
        with self.assertRaises(idem.IdemError) as cm:
            c.write_report("TASK-20000101-001-PM-to-DEV", report, "r-2")
        self.assertEqual(cm.exception.code, "task_not_found")
        self.assertEqual(self.reports(), 1)

    def test_get_submission(self):
        c = self.client()
        missing = c.get_submission("nobody")
        self.assertIs(missing.found, False)
        self.assertIsNone(missing.submission)
        created = c.write_task(TASK, "g-1")
        s = c.get_submission("g-1")
        self.assertIs(s.found, True)
        sub = s.submission
        self.assertIsInstance(sub, idem.Submission)
        self.assertEqual(sub.client_submission_id, "g-1")
        self.assertEqual(sub.state, "committed")
        self.assertEqual(sub.task_id, created.receipt.task_id)
        self.assertEqual(sub.task_path, created.receipt.task_path)
        self.assertEqual(sub.request_digest, idem.task_digest(TASK))
        # The receipt inside the submission: the same bytes.
        self.assertEqual(sub.receipt.raw, created.receipt.raw)
        self.assertEqual(sub.raw_receipt, created.receipt.raw)

    def test_diagnose(self):
        c = self.client()
        c.write_task(TASK, "d-1")
        d = c.diagnose(stale_after_ms=0)
        self.assertEqual(d["entries"], [])
        self.assertEqual(d["counts"],
                         {"reserved": 0, "task_created": 0, "committed": 1})
        self.assertIsInstance(d, idem.Diagnosis)
        self.assertEqual(d.entries, [])
        self.assertEqual(d.counts, idem.DiagnoseCounts(0, 0, 1))
        if d.effect_counts is not None:
            self.assertEqual(d.effect_counts, idem.EffectCounts(0, 0, 0, 0))
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
        # Typed: SPEC's members as fields, every counter in counters.
        self.assertIsInstance(s, idem.Stats)
        self.assertEqual((s.created, s.reused, s.conflict, s.legacy_created,
                          s.table_capacity, s.workers),
                         (1, 1, 1, 1, int(CAPACITY), 2))
        self.assertGreater(s.journal_records, 0)
        self.assertGreater(s.uptime_ms, 0)
        self.assertEqual(s.counters["created"], 1)
        self.assertEqual(s.counters, {k: v for k, v in s.reply.items()
                                      if k not in ("ok", "id", "store")
                                      and isinstance(v, int)
                                      and not isinstance(v, bool)})
        self.assertIsNone(s.store)

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
            self.assertEqual(c.hello().server, "idemd")
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
        self.assertEqual(first.disposition, "created")
        with self.assertRaises(idem.IdemConflict):
            idem.write_task_retry(dict(TASK, subject="other"), "x-2",
                                  path=self.broker.socket,
                                  on_retry=lambda *a: calls.append(a))
        self.assertEqual(calls, [])
        # It takes the id and never makes one up.
        for sid in (None, ""):
            with self.assertRaises(ValueError):
                idem.write_task_retry(TASK, sid, path=self.broker.socket)
        self.assertEqual(self.tasks(), 1)

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
        self.assertIsInstance(reply, idem.WriteResult)
        self.assertEqual(count_files(root, "TASK"), 1)
        receipt = reply.receipt
        self.assertEqual(receipt.client_submission_id, sid)
        self.assertEqual(receipt.request_digest, idem.task_digest(TASK))
        path = os.path.join(root, receipt.task_path)
        with open(path, "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(),
                             receipt.file_digest)
        with idem.Client(broker.socket) as c:
            again = c.write_task(TASK, sid)
            self.assertEqual(again.disposition, "reused")
            self.assertEqual(again.receipt.raw, receipt.raw)
            self.assertEqual(c.get_submission(sid).submission.state,
                             "committed")
        self.assertEqual(count_files(root, "TASK"), 1)
        return reply

    def test_crash_after_task_created_durable(self):
        reply = self.run_crash("after_task_created_durable")
        self.assertEqual(reply.disposition, "reused")
        self.assertIs(reply.recovered, True)
        self.assertIs(reply.action_taken, False)

    def test_crash_after_reserve_durable(self):
        reply = self.run_crash("after_reserve_durable")
        self.assertEqual(reply.disposition, "created")
        self.assertIs(reply.recovered, True)
        self.assertIs(reply.action_taken, True)

    def test_crash_after_task_file_linked(self):
        reply = self.run_crash("after_task_file_linked")
        self.assertEqual(reply.disposition, "reused")
        self.assertIs(reply.recovered, True)

    def test_crash_after_commit_durable(self):
        reply = self.run_crash("after_commit_durable")
        self.assertEqual(reply.disposition, "reused")


# ---- Effects (SPEC.md, "Effects") -------------------------------------------


class TestEffects(BrokerTestCase):
    """Client.effect, effectful and the three ops against idemd.  Each
    test skips, with the reason, on a broker whose hello does not list
    effect_begin in its ops.  The effect performed is a line appended to
    a marker file: the test counts the lines, the authoritative record
    of how many times the side effect happened."""

    def setUp(self):
        super().setUp()
        hello = self.client().hello()
        if not hello.serves("effect_begin"):
            self.skipTest("this idemd does not serve effects (hello ops: "
                          "%s)" % (hello.ops,))
        self.marker = os.path.join(self.tmp, "sent.txt")

    def send(self, request, e=None):
        """The side effect: one line per performance."""
        with open(self.marker, "a", encoding="utf-8") as f:
            f.write(json.dumps(request) + "\n")
        return {"message_id": "m-%d" % self.sent(),
                "key": None if e is None else e.external_key}

    def sent(self):
        try:
            with open(self.marker, encoding="utf-8") as f:
                return sum(1 for _ in f)
        except FileNotFoundError:
            return 0

    def wait_unknown(self, c, sid, request, kind=MAIL):
        """Until the lease lapses: begin answers in_progress while it is
        live (no state changes), then outcome_unknown."""
        end = time.monotonic() + 30
        while True:
            try:
                c.effect_begin(sid, kind, request)
            except idem.IdemOutcomeUnknown as e:
                return e
            except idem.IdemInProgress:
                pass
            else:
                self.fail("begin answered neither in_progress nor "
                          "outcome_unknown")
            self.assertLess(time.monotonic(), end, "the lease never lapsed")
            time.sleep(0.05)

    def test_proceed_complete_then_reused_byte_identical(self):
        c = self.client()
        msg = {"to": "a@example.com", "subject": "Hi", "n": 1.5}
        e = c.effect("e-1", MAIL, msg)
        self.assertEqual(e.state, "pending")
        with e:
            self.assertTrue(e.proceed)
            self.assertEqual((e.disposition, e.state), ("proceed", "running"))
            self.assertFalse(e.reused)
            self.assertEqual(e.attempt, 1)
            self.assertIsNotNone(e.fence)
            self.assertIsInstance(e.external_key, str)
            key = e.external_key
            receipt = e.complete(self.send(msg, e))
        self.assertIsInstance(receipt, idem.EffectReceipt)
        self.assertEqual(e.state, "committed")
        self.assertIs(e.receipt, receipt)
        self.assertEqual(e.result, {"message_id": "m-1", "key": key})
        self.assertEqual(json.loads(receipt.raw), receipt.data)
        self.assertEqual(self.sent(), 1)

        for c2 in (c, self.client()):
            with c2.effect("e-1", MAIL, dict(msg)) as again:
                self.assertFalse(again.proceed)
                self.assertTrue(again.reused)
                self.assertEqual((again.disposition, again.state),
                                 ("reused", "committed"))
                if again.proceed:
                    self.send(msg)
            self.assertEqual(again.receipt.raw, receipt.raw)
            self.assertEqual(again.result, e.result)
        self.assertEqual(self.sent(), 1)

        found = c.get_submission("e-1", effect_kind=MAIL)
        self.assertTrue(found.found)
        self.assertEqual(found.submission.effect_kind, MAIL)
        self.assertEqual(found.submission.state, "committed")
        self.assertEqual(found.submission.raw_receipt, receipt.raw)
        self.assertEqual(found.submission.effect_receipt.raw, receipt.raw)
        self.assertEqual(c.write_task(TASK, "e-1").disposition, "created")

    def test_the_request_digest_is_the_clients(self):
        c = self.client()
        msg = {"to": "b@example.com", "body": "caf\u0065\u0301\r\n"}
        b = c.effect_begin("e-d", MAIL, msg,
                           request_digest=idem.effect_digest(MAIL, msg))
        self.assertTrue(b.proceed)
        r = c.effect_complete("e-d", MAIL, b.fence, "applied", {"ok": 1})
        self.assertEqual(r.receipt.request_digest,
                         idem.effect_digest(MAIL, msg))
        with self.assertRaises(idem.IdemError) as cm:
            c.effect_begin("e-d2", MAIL, msg, request_digest="0" * 64)
        self.assertEqual(cm.exception.code, "digest_disagrees")

    def test_conflict_performs_nothing(self):
        c = self.client()
        with c.effect("e-2", MAIL, {"to": "a"}) as e:
            e.complete(self.send("a", e))
        ran = []
        with self.assertRaises(idem.IdemConflict) as cm:
            with c.effect("e-2", MAIL, {"to": "b"}) as e2:
                ran.append(e2)
        self.assertEqual(ran, [])
        self.assertEqual(cm.exception.conflict.reason, "digest_mismatch")
        self.assertFalse(cm.exception.retryable)
        self.assertEqual(self.sent(), 1)

    def test_not_applied_releases_with_the_same_external_key(self):
        c = self.client()
        with c.effect("e-3", MAIL, {"to": "a"}) as e:
            key = e.external_key
            e.not_applied()
        self.assertIsNone(e.receipt)
        with self.assertRaises(idem.NotApplied):
            with c.effect("e-3", MAIL, {"to": "a"}) as e2:
                self.assertEqual((e2.attempt, e2.external_key), (2, key))
                raise idem.NotApplied("refused") from ValueError("refused")
        self.assertIsNone(e2.receipt)
        with c.effect("e-3", MAIL, {"to": "a"}) as e3:
            self.assertEqual((e3.attempt, e3.external_key), (3, key))
            e3.complete(self.send("a", e3))
        self.assertEqual(e3.result["key"], key)
        self.assertEqual(self.sent(), 1)

    def test_stale_fence_changes_nothing(self):
        c = self.client()
        first = c.effect_begin("e-4", MAIL, {"to": "a"})
        c.effect_complete("e-4", MAIL, first.fence, "not_applied")
        second = c.effect_begin("e-4", MAIL, {"to": "a"})
        self.assertNotEqual(first.fence, second.fence)
        with self.assertRaises(idem.IdemConflict) as cm:
            c.effect_complete("e-4", MAIL, first.fence, "applied", {"x": 1})
        self.assertEqual(cm.exception.conflict.reason, "stale_fence")
        done = c.effect_complete("e-4", MAIL, second.fence, "applied",
                                 {"x": 2})
        self.assertEqual(done.receipt.result, {"x": 2})
        with self.assertRaises(idem.IdemConflict) as cm:
            c.effect_complete("e-none", MAIL, first.fence, "applied", {})
        self.assertEqual(cm.exception.conflict.reason, "no_reservation")

    def test_an_exception_after_proceed_reports_nothing(self):
        c = self.client()
        with self.assertRaises(OSError):
            with c.effect("e-5", MAIL, {"to": "a"}, lease_ms=30000) as e:
                self.send("a", e)
                raise OSError("connection to the mail server lost")
        # Nothing reported: the lease is live, a second caller waits.
        with self.assertRaises(idem.IdemInProgress) as cm:
            c.effect_begin("e-5", MAIL, {"to": "a"})
        self.assertTrue(cm.exception.retryable)
        sub = c.get_submission("e-5", effect_kind=MAIL).submission
        self.assertNotEqual(sub.state, "committed")
        self.assertIsNone(sub.raw_receipt)
        self.assertEqual((sub.state, sub.external_key, sub.attempt,
                          sub.lease_live, sub.recovered),
                         ("reserved", e.external_key, 1, True, False))
        self.assertRegex(sub.lease_expires_at, r"^\d{4}-\d\d-\d\dT")
        self.assertIsInstance(sub.age_ms, int)
        self.assertEqual(e.state, "abandoned")
        self.assertEqual(self.sent(), 1)

    def test_a_block_that_forgets_to_report_is_an_error(self):
        c = self.client()
        with self.assertRaises(idem.IdemEffectIncomplete):
            with c.effect("e-6", MAIL, {"to": "a"}) as e:
                self.assertTrue(e.proceed)
        with self.assertRaises(idem.IdemInProgress):
            c.effect_begin("e-6", MAIL, {"to": "a"})

    def test_a_lapsed_lease_is_outcome_unknown_never_proceed(self):
        c = self.client()
        with self.assertRaises(RuntimeError):
            with c.effect("e-7", MAIL, {"to": "a"}, lease_ms=100) as e:
                self.send("a", e)
                raise RuntimeError("crashed between send and complete")
        unknown = self.wait_unknown(c, "e-7", {"to": "a"})
        self.assertFalse(unknown.retryable)
        self.assertEqual(unknown.code, "outcome_unknown")
        ran = []
        with self.assertRaises(idem.IdemOutcomeUnknown):
            with c.effect("e-7", MAIL, {"to": "a"}) as e2:
                ran.append(e2)
        self.assertEqual(ran, [])
        # Evidence "unknown" keeps it so, listed first by diagnose.
        c.effect_resolve("e-7", MAIL, "unknown", source="test")
        with self.assertRaises(idem.IdemOutcomeUnknown):
            c.effect_begin("e-7", MAIL, {"to": "a"})
        entries = c.diagnose()["entries"]
        self.assertGreater(len(entries), 0)
        self.assertEqual(entries[0]["client_submission_id"], "e-7")
        d = c.diagnose()
        first = d.entries[0]
        self.assertTrue(first.is_effect)
        self.assertEqual((first.client_submission_id, first.effect_kind,
                          first.state, first.attempt, first.external_key),
                         ("e-7", MAIL, "outcome_unknown", 1,
                          e.external_key))
        self.assertEqual([x.client_submission_id for x in d.outcome_unknown],
                         ["e-7"])
        self.assertEqual(d.effect_counts.outcome_unknown, 1)
        self.assertEqual(e.state, "abandoned")
        self.assertEqual(self.sent(), 1)

    def test_a_probe_settles_outcome_unknown(self):
        c = self.client()
        for sid, observed in (("e-8", "applied"), ("e-9", "not_applied")):
            with self.assertRaises(RuntimeError):
                with c.effect(sid, MAIL, {"to": sid}, lease_ms=100) as e:
                    if observed == "applied":
                        self.send(sid, e)
                    raise RuntimeError("lost")
            self.wait_unknown(c, sid, {"to": sid})
            probed = []

            def probe(error):
                probed.append(error)
                if observed == "applied":
                    return idem.Evidence("applied", {"message_id": "seen"},
                                         "mail server log")
                return idem.Evidence("not_applied", source="mail server log")
            with c.effect(sid, MAIL, {"to": sid}, probe=probe) as e:
                if e.proceed:
                    self.assertEqual(observed, "not_applied")
                    self.assertEqual(e.attempt, 2)
                    e.complete(self.send(sid, e))
            self.assertEqual(len(probed), 1)
            self.assertIsInstance(probed[0], idem.IdemOutcomeUnknown)
            self.assertIsNotNone(e.receipt)
            if observed == "applied":
                self.assertTrue(e.reused)
                self.assertTrue(e.recovered)
                self.assertEqual(e.result, {"message_id": "seen"})
            again = c.effect_begin(sid, MAIL, {"to": sid})
            self.assertTrue(again.reused)
            self.assertEqual(again.receipt.raw, e.receipt.raw)
        self.assertEqual(self.sent(), 2)    # e-8 once, e-9 once

    def test_resolve_contradicting_a_receipt_is_a_conflict(self):
        c = self.client()
        with c.effect("e-10", MAIL, {"to": "a"}) as e:
            e.complete({"message_id": "m"})
        with self.assertRaises(idem.IdemConflict) as cm:
            c.effect_resolve("e-10", MAIL, "not_applied", source="test")
        self.assertEqual(cm.exception.conflict.reason, "already_committed")
        self.assertTrue(c.effect_begin("e-10", MAIL, {"to": "a"}).reused)

    def test_the_decorator_performs_once(self):
        calls = []

        @idem.effectful(MAIL, path=self.broker.socket, timeout=60)
        def send_mail(msg, e):
            calls.append((msg, e.attempt))
            return self.send(msg, e)
        first = send_mail("d-1", {"to": "a"})
        again = send_mail("d-1", {"to": "a"})
        self.assertEqual(first, again)
        self.assertEqual(calls, [({"to": "a"}, 1)])
        self.assertEqual(send_mail.__name__, "send_mail")

        @idem.effectful(MAIL, client=self.client())
        def refused(msg, e):
            raise idem.NotApplied("the server said 550")
        with self.assertRaises(idem.NotApplied):
            refused("d-2", {"to": "b"})
        self.assertEqual(send_mail("d-2", {"to": "b"})["message_id"], "m-2")
        self.assertEqual(calls[-1], ({"to": "b"}, 2))
        self.assertEqual(self.sent(), 2)

    def test_a_receipt_survives_a_restart(self):
        c = self.client()
        with c.effect("e-11", MAIL, {"to": "a"}) as e:
            e.complete(self.send("a", e))
        c.close()
        self.broker.stop()
        self.broker.start()
        with self.client().effect("e-11", MAIL, {"to": "a"}) as again:
            self.assertTrue(again.reused)
        self.assertEqual(again.receipt.raw, e.receipt.raw)
        self.assertEqual(self.sent(), 1)

    def test_complete_after_kill_9_and_restart_reaches_the_new_broker(self):
        """The crash window between the side effect and its report: the
        broker dies (SIGKILL) and comes back; the lease survived it, and
        complete() resends the same report on a new connection."""
        c = self.client()
        with c.effect("e-12", MAIL, {"to": "a"}, lease_ms=60000) as e:
            result = self.send("a", e)
            self.broker.proc.kill()
            self.assertEqual(self.broker.wait_dead(), -signal.SIGKILL)
            self.broker.start()
            receipt = e.complete(result)
        self.assertEqual(receipt.result, result)
        self.assertEqual(receipt.attempt, 1)
        again = self.client().effect_begin("e-12", MAIL, {"to": "a"})
        self.assertTrue(again.reused)
        self.assertEqual(again.receipt.raw, receipt.raw)
        self.assertEqual(self.sent(), 1)

    def test_bad_requests_are_refused_typed(self):
        c = self.client()
        for kwargs, field in (({"effect_kind": "write_task"},
                               "effect_kind"),
                              ({"lease_ms": 5}, "lease_ms")):
            args = dict({"client_submission_id": "bad-1",
                         "effect_kind": MAIL, "request": {}}, **kwargs)
            with self.subTest(field=field):
                with self.assertRaises(idem.IdemError) as cm:
                    c.effect_begin(**args)
                self.assertEqual(cm.exception.code, "invalid_request")
                self.assertEqual(cm.exception.field, field)


if __name__ == "__main__":
    unittest.main()
