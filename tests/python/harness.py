#!/usr/bin/env python3
# SPDX-License-Identifier: ISC
"""harness.py: what the Python client's tests share: a real idemd per
test (Broker, BrokerTestCase), the vectors' path, file counts, and the
effect tests' marker (the side effect performed: a line appended to a
file, counted).  Environment: IDEMD (required: the idemd binary),
IDEM_VECTORS (the vectors directory; default tests/vectors).

Every broker runs on its own tempfile.mkdtemp() root and is waited for
through --ready-fd; nothing sleeps to synchronise."""

import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import idem

HERE = os.path.dirname(os.path.abspath(__file__))
CAPACITY = "4096"       # a small shared segment is enough here
TASK = {"sender": "PM", "recipient": "DEV", "subject": "Fix login",
        "body": "Steps:\r\n1. reproduce\r\n2. fix"}


def vectors_path(name="write-task-v1.json"):
    path = os.environ.get("IDEM_VECTORS") or os.path.join(
        HERE, os.pardir, "vectors")
    if os.path.isdir(path):
        path = os.path.join(path, name)
    else:
        path = os.path.join(os.path.dirname(path), name)
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


MAIL = "mail.send/v1"


class Marker:
    """The side effect of the effect tests: one line appended to a file
    per performance; count() is the authoritative number of times it
    happened."""

    def __init__(self, path):
        self.path = path

    def send(self, request, key=None):
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(request) + "\n")
        return {"message_id": "m-%d" % self.count(), "key": key}

    def count(self):
        try:
            with open(self.path, encoding="utf-8") as f:
                return sum(1 for _ in f)
        except FileNotFoundError:
            return 0


def serves(broker, op):
    """Whether broker's hello lists op."""
    with idem.Client(broker.socket, timeout=60) as c:
        return c.hello().serves(op)


def wait_unknown(c, sid, request, kind=MAIL, timeout=30):
    """Until the lease lapses: effect_begin answers in_progress while it
    is live (nothing changes), then outcome_unknown, returned.  A lapse
    is the passing of time on the broker's clock: there is no event to
    wait for, so this asks again every 50 ms."""
    end = time.monotonic() + timeout
    while True:
        try:
            c.effect_begin(sid, kind, request)
        except idem.IdemOutcomeUnknown as e:
            return e
        except idem.IdemInProgress:
            pass
        else:
            raise AssertionError("begin answered neither in_progress nor "
                                 "outcome_unknown")
        if time.monotonic() > end:
            raise AssertionError("the lease never lapsed")
        time.sleep(0.05)
