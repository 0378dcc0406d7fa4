# SPDX-License-Identifier: ISC
"""tests/model/test_model.py: a real idemd and the model of SPEC.md
(model.py) driven side by side by Hypothesis's RuleBasedStateMachine.

Each rule sends one request (or a few, for the bulk rules that fill a
tiny table) over the broker's Unix socket, or restarts, kills, pauses
or compacts it, and compares the answer with the set of answers the
model allows; invariants after every step: one TASK file per id, no
number twice on a date, a committed receipt never changes a byte, no
effect proceeds twice without a release, stats agree with the model.

Run by tests/model/run.sh (make check).  Environment:
  IDEMD, IDEMCTL        the binaries (make check sets them)
  IDEM_MODEL_BUDGET     seconds of random exploration (default 150)
  IDEM_MODEL_SEED       replay this seed only (printed by every run)
  IDEM_MODEL_DB         Hypothesis's example database (the build tree)
  IDEM_MODEL_STEPS      steps per sequence (default 40)
  IDEM_MODEL_KNOWN      defects whose regression sequences are skipped,
                        comma-separated names of KNOWN_DEFECTS (see
                        REGRESSIONS below); unset: every one runs
  IDEM_SANITIZER_FLAGS  a sanitizer build: timeouts scaled by SLOWDOWN
"""

import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import unicodedata

from hypothesis import HealthCheck, settings
from hypothesis import note as hyp_note
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.errors import Flaky
from hypothesis.stateful import (RuleBasedStateMachine, initialize,
                                 invariant, rule,
                                 run_state_machine_as_test)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as M  # noqa: E402

IDEMD = os.environ.get("IDEMD", "build/broker/idemd")
IDEMCTL = os.environ.get("IDEMCTL", "build/contrib/idemctl")
SLOWDOWN = 5 if os.environ.get("IDEM_SANITIZER_FLAGS") else 1
# How long a retryable refusal may last before the model calls it a
# refusal for ever (a checkpoint, a worker's restart take milliseconds;
# the defects last 20 s and more).
TRANSIENT_S = 8.0 * SLOWDOWN
REQUEST_TIMEOUT_S = 30.0 * SLOWDOWN
DEFAULT_CAPACITY = 262144
MAX_RESULT = 65536          # compact JSON bytes (doc/protocol.md, Limits)
MAX_ID = 200
KEY_SLOT = 56               # the key heap's slot: lengths near k*56
MAX_KEY = 128 + 1 + 200     # the longest key: an effect's kind, 0x1f, id
ROLES = ["PM", "DEV", "LEAD-QA", "DEV_01", "OPS"]
RECIPIENTS = ["DEV", "DEV.D1", "PM", "LEAD-QA.QA_2", "OPS"]
# Texts whose variants (NFC, NFD, CRLF, lone CR) are one request.
TEXTS = ["Fix login", "caf\u00e9 cr\u00e8me", "line 1\nline 2\n",
         "\u00c5ngstr\u00f6m \u1e9b\u0323", "\ud55c\uad6d\uc5b4 \u00f1"]


# The defects (issue 27) by name.  A name in IDEM_MODEL_KNOWN
# skips its regression sequences (regressions.py) and, in the random
# search, stops generating the input that shows it (or, for a refusal
# that lasts, accepts it): for a branch without that fix, so that the
# search goes on past it.  Unset (make check): the full model.
KNOWN_DEFECTS = {
    "seq-exhausted-checkpoint": "item 1: a sequence_exhausted refusal "
    "with a full table poisons checkpoints",
    "long-id-table-full": "item 2: long ids get table_full for ever "
    "once the table cycled",
    "arena-full-complete": "item 3: effect_complete answers table_full "
    "for long with a full result arena",
    "nul": "item 4: a NUL in a request string is accepted",
    "lease-null": "item 7: lease_ms null is refused",
    "absent-result": "item 7: applied without result on an effect "
    "committed with another result",
    "history-count": "found by the model: stats history_entries counts "
    "a receipt twice after restarts with another --capacity",
    "restart-capacity": "found by the model: a restart with --capacity "
    "64 after 63 submissions (2 in flight) is refused ('63 ... more "
    "than --capacity 64 holds'); and after 65 effects begun together, "
    "all committed since",
    "shortened-lease": "found by the model: an extension that shortens "
    "the lease is answered before it is durable; lost in a crash, the "
    "later end counts",
}
KNOWN = set(x for x in os.environ.get("IDEM_MODEL_KNOWN", "").split(",")
            if x)
for _k in KNOWN:
    if _k not in KNOWN_DEFECTS:
        sys.exit("IDEM_MODEL_KNOWN: %s is not one of %s" % (
            _k, ", ".join(sorted(KNOWN_DEFECTS))))


def table_full_known(rep):
    """A lasting table_full that a defect named in KNOWN explains (by
    the cause idemd's message gives)."""
    msg = (rep.get("error") or {}).get("message", "")
    if "arena-full-complete" in KNOWN and "result arena" in msg:
        return True
    return "long-id-table-full" in KNOWN and "may evict" in msg


class ModelFailure(AssertionError):
    pass


class RegressionSkipped(Exception):
    """A regression's step that cannot run here (an idemd without fault
    injection, another store): run_regressions lists it as skipped."""


# The random search stops at a deadline, not a count of examples:
# Hypothesis keeps its first examples small, and a sequence's length
# varies.  Past it, the next sequence ends the run at its start with
# BudgetSpent; unless a failure was seen (any exception of a sequence,
# not only the model's), whose shrinking must run to its end.
RUN = {"deadline": None, "failed": False, "first": None}


class BudgetSpent(KeyboardInterrupt):
    """Hypothesis (6.67, engine.py's test_function) records where every
    sequence ended in its tree of draws, KeyboardInterrupt alone
    excepted.  A sequence ended by any other exception right after
    `start`'s draws, where earlier sequences went on drawing, is
    "Inconsistent data generation!" (Flaky), which ended every seed at
    its budget that way, and saved that sequence in the example
    database; a KeyboardInterrupt is neither recorded nor saved."""


def fail(msg):
    RUN["failed"] = True
    if RUN["first"] is None:
        RUN["first"] = msg
    raise ModelFailure(msg)


def note(text):
    """Hypothesis's note inside a test, print outside (a regression)."""
    try:
        hyp_note(text)
    except Exception:   # pylint: disable=broad-except
        print("  " + text)


def now_ms():
    return time.time() * 1000.0


def parse_time_ms(text):
    """A reply's time ("2026-12-05T01:02:03.456Z") in ms since the epoch."""
    import calendar
    m = re.match(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.(\d{3})Z$",
                 text or "")
    if m is None:
        fail("not a reply time: %r" % text)
    f = [int(x) for x in m.groups()]
    return calendar.timegm(tuple(f[:6]) + (0, 0, 0)) * 1000.0 + f[6]


# ---- the broker ------------------------------------------------------------

class Broker:
    """A real idemd on a temporary root, started as tests/lib.sh does
    (--ready-fd), stopped with SIGTERM so that it leaves no segment."""

    def __init__(self, tmp=None, host=None, store_args=()):
        base = os.environ.get("TMPDIR", "/tmp")
        self.owner = tmp is None
        self.tmp = tmp or tempfile.mkdtemp(prefix="idem-model.", dir=base)
        self.root = os.path.join(self.tmp, "root")
        if self.owner:
            os.mkdir(self.root)
            # FCoP 4's declaration, for fcop-create-task-v1
            # (doc/protocol.md).
            with open(os.path.join(self.root, "fcop.json"), "w") as f:
                f.write('{"workspace_id":"urn:uuid:'
                        '0f0e0d0c-0b0a-4908-8706-050403020100"}\n')
        if host is None:
            self.state = os.path.join(self.root, ".idem")
            self.log = os.path.join(self.tmp, "idemd.log")
        else:
            # On PostgreSQL each host has its own state directory, its
            # socket and its lock (doc/cluster.md).
            self.state = os.path.join(self.root, ".idem", "hosts", host)
            self.log = os.path.join(self.tmp, "idemd-%s.log" % host)
        self.sock = os.path.join(self.state, "idemd.sock")
        self.store_args = list(store_args)
        self.proc = None
        self.args = []
        self.starts = 0

    def start(self, args, env=None):
        """Start idemd with ARGS (and ENV, for fault injection, else
        this process's): True once it is serving."""
        self.starts += 1
        self.args = list(args)
        r, w = os.pipe()
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [IDEMD, "--root", self.root, "--workers", "2",
                 "--ready-fd", str(w)] + self.store_args + self.args,
                pass_fds=(w,), stdin=subprocess.DEVNULL, stdout=log,
                stderr=log, env=env)
        os.close(w)
        got = b""
        deadline = time.time() + 30 * SLOWDOWN
        while time.time() < deadline:
            import select
            rd, _, _ = select.select([r], [], [], 0.5)
            if rd:
                c = os.read(r, 16)
                if not c:
                    break
                got += c
                if got.endswith(b"\n"):
                    break
            elif self.proc.poll() is not None:
                break
        os.close(r)
        if got == b"ready\n":
            return True
        if self.proc.poll() is None:
            self.proc.kill()
        self.wait_dead()
        return False

    def wait_dead(self):
        if self.proc is None:
            return None
        status = self.proc.wait()
        self.proc = None
        # Workers die with the master but hold the root's lock until
        # they do (doc/idemd.8): the next start must not race them.
        lock = os.path.join(self.state, "idemd.lock")
        try:
            import fcntl
            fd = os.open(lock, os.O_RDWR)
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.close(fd)
        except OSError:
            pass
        return status

    def stop(self):
        if self.proc is None:
            return 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30 * SLOWDOWN)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.wait_dead()
            fail("idemd did not stop within 30 s of SIGTERM")
        return self.wait_dead()

    def kill9(self):
        self.proc.kill()
        self.wait_dead()

    def logs(self):
        return [self.log]

    def workers(self):
        try:
            with open("/proc/%d/task/%d/children" %
                      (self.proc.pid, self.proc.pid)) as f:
                return [int(x) for x in f.read().split()]
        except OSError:
            return []

    def close(self):
        try:
            if self.proc is not None:
                for w in self.workers():
                    try:
                        os.kill(w, signal.SIGCONT)
                    except OSError:
                        pass
                self.stop()
        finally:
            if self.owner:
                shutil.rmtree(self.tmp, ignore_errors=True)

    def hang_report(self):
        """What a request that got no answer found: each of idemd's
        threads and its workers' (state, wait channel, system call) and
        the log's last lines, so that a hang Hypothesis cannot replay
        still says where it was."""
        out = []
        pids = ([self.proc.pid] if self.proc is not None else []) + \
            self.workers()
        for pid in pids:
            try:
                tids = sorted(int(t) for t in
                              os.listdir("/proc/%d/task" % pid))
            except OSError:
                continue
            for tid in tids:
                d = "/proc/%d/task/%d/" % (pid, tid)
                fields = []
                for name in ("comm", "wchan", "syscall"):
                    try:
                        with open(d + name) as f:
                            fields.append(f.read().strip()[:80])
                    except OSError:
                        fields.append("?")
                try:
                    with open(d + "stat") as f:
                        state = f.read().rsplit(")", 1)[1].split()[0]
                except (OSError, IndexError):
                    state = "?"
                out.append("  %d/%d %s %s wchan=%s syscall=%s" % (
                    pid, tid, fields[0], state, fields[1], fields[2]))
        try:
            with open(self.log, errors="replace") as f:
                out += ["log: " + l.rstrip() for l in f.readlines()[-40:]]
        except OSError:
            pass
        return "\n".join(out)

    def request(self, obj):
        """One request on a fresh connection: (raw line, parsed, send
        and receive times in wall-clock ms)."""
        line = obj if isinstance(obj, str) else json.dumps(
            obj, ensure_ascii=False, separators=(",", ":"))
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(REQUEST_TIMEOUT_S)
        t0 = now_ms()
        try:
            s.connect(self.sock)
            s.sendall(line.encode("utf-8") + b"\n")
            buf = b""
            while not buf.endswith(b"\n"):
                c = s.recv(1 << 20)
                if not c:
                    break
                buf += c
        except socket.timeout:
            fail("no answer within %.0f s to %s\n%s" %
                 (REQUEST_TIMEOUT_S, line[:300], self.hang_report()))
        except OSError as e:
            s.close()
            return None, None, t0, now_ms(), e
        finally:
            s.close()
        t1 = now_ms()
        if not buf.endswith(b"\n"):
            return None, None, t0, t1, "connection closed"
        raw = buf.decode("utf-8")[:-1]
        return raw, json.loads(raw), t0, t1, None


# ---- strategies ------------------------------------------------------------

def id_lengths():
    near = [k * KEY_SLOT + d for k in range(1, 4) for d in (-2, -1, 0, 1, 2)]
    # A report's key is task_id + "\n" + id: task ids here are 27..40
    # bytes, so ids near 56*k - 28..41 fill a report key to a boundary.
    near += [KEY_SLOT * k - t for k in (1, 2, 3, 4) for t in (28, 29, 35,
                                                              41)]
    near = [n for n in near if 1 <= n <= MAX_ID]
    return st.one_of(st.sampled_from(near + [1, 2, 199, 200]),
                     st.integers(1, MAX_ID))


ID_CHARS = "".join(chr(c) for c in range(0x21, 0x7F))


def make_id(serial, length, salt):
    head = "%d~" % serial
    rnd = random.Random(salt)
    body = "".join(rnd.choice(ID_CHARS) for _ in range(max(0, length)))
    s = (head + body)[:length]
    if len(s) < len(head):      # too short for the serial: a random id
        s = "".join(rnd.choice(ID_CHARS) for _ in range(length))
    return s


def pick(data, items):
    """One of ITEMS (None if empty), drawn the same way whatever their
    number, so that the draws do not depend on the broker's answers."""
    i = data.draw(st.integers(0, 1 << 20))
    return items[i % len(items)] if items else None


def variant(text, v):
    """One of the spellings of TEXT that normalize to the same string."""
    if v == 0:
        return unicodedata.normalize("NFC", text)
    if v == 1:
        return unicodedata.normalize("NFD", text)
    if v == 2:
        return text.replace("\n", "\r\n")
    return unicodedata.normalize("NFD", text).replace("\n", "\r")


def result_value(size, salt):
    """A result whose compact JSON is about SIZE bytes (exactly, for a
    string: the quotes count)."""
    if size <= 0:
        return None
    if size < 8:
        return salt % 1000
    if size < 64:
        return {"id": salt, "note": "x" * (size - 24)}
    return "%08x" % salt + "r" * (size - 10)


RESULT_SIZES = st.sampled_from([0, 1, 16, 100, 1000, 4096, 32768, 65535,
                                MAX_RESULT])


# ---- the machine -----------------------------------------------------------

class IdemMachine(RuleBasedStateMachine):
    """The broker and the model side by side (model.py)."""

    def __init__(self):
        super().__init__()
        self.b = None
        self.serial = 0
        self.seen_files = {}     # file name -> csid (None: not ours)
        self.log_seen = {}       # bytes checked of each of idemd's logs
        self.steps = 0

    # -- set-up ---------------------------------------------------------
    @initialize(cap=st.sampled_from([64, 64, 100, 1000, DEFAULT_CAPACITY]),
                arena=st.sampled_from([0, 0, 4194304, 131072]),
                seg=st.sampled_from([0, 4096]))
    def start(self, cap, arena, seg):
        if RUN["deadline"] is not None and not RUN["failed"] and \
                time.time() > RUN["deadline"]:
            raise BudgetSpent()
        self.b = self.new_broker()
        self.m = M.Model(cap, slack_ms=5.0)
        self.cfg = (cap, arena, seg)
        STATS["sequences"] += 1
        self._boot(cap, arena, seg)

    pg = False      # two brokers on PostgreSQL (test_model_pg.py)

    def new_broker(self):
        return Broker()

    def compact_argv(self):
        return [IDEMCTL, "compact", "--older-than", "0", "--root",
                self.b.root]

    def _args(self, cap, arena, seg):
        a = []
        if cap != DEFAULT_CAPACITY:
            a += ["--capacity", str(cap)]
        if arena:
            a += ["--result-bytes", str(arena)]
        if seg:
            a += ["--segment-bytes", str(seg)]
        return a

    def _boot(self, cap, arena, seg):
        note("start idemd %s" % " ".join(self._args(cap, arena, seg)))
        if not self.b.start(self._args(cap, arena, seg)):
            in_flight = self.m.in_flight()
            if cap < in_flight or "restart-capacity" in KNOWN:
                # doc/idemd.8: a capacity smaller than the work in
                # flight stops start-up with the capacity that fits.
                note("refused: capacity %d < %d in flight" %
                     (cap, in_flight))
                # Its "fatal:" line is the refusal the model allows.
                for log in self.b.logs():
                    try:
                        self.log_seen[log] = os.path.getsize(log)
                    except OSError:
                        pass
                cap = DEFAULT_CAPACITY
                if self.b.start(self._args(cap, arena, seg)):
                    self.cfg = (cap, arena, seg)
                    self.m.capacity = cap
                    self.m.reset_counters()
                    self.m.restarted = True
                    return
            fail("idemd did not start with %s; log:\n%s" % (
                self._args(cap, arena, seg), self._log_tail()))
        self.cfg = (cap, arena, seg)
        self.m.capacity = cap
        self.m.reset_counters()
        self.m.restarted = self.m.restarted or self.b.starts > 1

    def _log_tail(self):
        try:
            with open(self.b.log, errors="replace") as f:
                return "".join(f.readlines()[-20:])
        except OSError:
            return ""

    def teardown(self):
        # Called as the sequence ends, by Hypothesis's `finally`: an
        # exception of the sequence's own (not Hypothesis's StopTest,
        # not BudgetSpent) is a failure to shrink to its end.
        exc = sys.exc_info()[1]
        if isinstance(exc, Exception):
            RUN["failed"] = True
            # Kept, so that a failure Hypothesis cannot replay (Flaky)
            # still says what it was, where.
            if RUN["first"] is None and not isinstance(exc, ModelFailure):
                RUN["first"] = "".join(
                    traceback.format_exception(exc))[-4000:]
        if self.b is not None:
            self.b.close()

    # -- one request, with retries of what may be transient ------------
    def call(self, obj, transient=("table_full", "storage_unavailable",
                                   "shutting_down")):
        """Send OBJ; a retryable refusal in TRANSIENT is retried for up
        to TRANSIENT_S (the model then decides whether the last one was
        allowed).  Returns (raw, reply, t_send_first, t_recv_last)."""
        STATS["requests"] += 1
        deadline = time.time() + TRANSIENT_S
        first = None
        while True:
            raw, rep, t0, t1, err = self.b.request(obj)
            if first is None:
                first = t0
            if err is not None:
                fail("request failed (%s): %s\nlog:\n%s" % (
                    err, json.dumps(obj)[:300], self._log_tail()))
            e = rep.get("error") or {}
            if (not rep["ok"] and e.get("retryable") and
                    e.get("code") in transient and time.time() < deadline):
                STATS["transient_retries"] += 1
                time.sleep(0.05)
                continue
            return raw, rep, first, t1

    def code(self, rep):
        if rep["ok"]:
            return None
        e = rep["error"]
        if e["code"] == "conflict":
            return "conflict:" + e.get("reason", "?")
        return e["code"]

    def expect(self, rep, allowed, what):
        c = self.code(rep)
        d = rep.get("disposition")
        key = c if c is not None else "ok:" + str(d)
        if key not in allowed:
            if c == "table_full" and (self.m.in_flight() >=
                                      self.m.capacity or
                                      self.key_space_held(rep) or
                                      table_full_known(rep)):
                STATE_KINDS.add((what.split()[0], "table_full",
                                 self._fill()))
                return "table_full"
            fail("%s: answered %s, SPEC.md allows %s (in flight %d, "
                 "capacity %d)\nreply: %s" % (
                     what, key, sorted(allowed), self.m.in_flight(),
                     self.m.capacity, json.dumps(rep)[:600]))
        STATE_KINDS.add((what.split()[0], key, self._fill()))
        return key

    def key_space_held(self, rep):
        """table_full for key space is SPEC's answer too when the keys in
        flight alone leave room for no other: idemd's key heap is
        KEY_SLOT bytes a slot plus one longest key, a key takes
        KEY_SLOT at least, and only committed entries can make room
        (found by the hour-long run: 63 effects in flight under
        --capacity 64 whose kinds were 128 bytes long)."""
        if "key space" not in rep["error"].get("message", ""):
            return False
        heap = KEY_SLOT * self.m.capacity + MAX_KEY
        return self.m.in_flight_key_room(KEY_SLOT) + KEY_SLOT > heap

    def _fill(self):
        cap = self.m.capacity
        used = len(self.m.tasks) + len(self.m.reports) + len(self.m.effects)
        if cap == DEFAULT_CAPACITY:
            return "default"
        return "x%d" % min(4, used // cap) if used >= cap else \
            "%d%%" % (100 * used // cap // 25 * 25)

    def cached_only(self):
        """Whether a committed entry may have left the table: after a
        restart, once the keys outnumber --capacity, or once the table
        evicted anything: long keys fill its key space before its slots
        (a key's room is gathered by evicting indexed entries), which
        the model, knowing nothing of the key space, asks the broker."""
        m = self.m
        if self.pg or m.restarted or (len(m.tasks) + len(m.reports) +
                                      len(m.effects)) > m.capacity:
            return True
        _, rep, _, _ = self.call({"op": "stats"})
        return rep.get("table_evictions", 0) != 0

    def new_id(self, length):
        self.serial += 1
        return make_id(self.serial, length, self.serial * 7919 + length)

    # -- tasks ----------------------------------------------------------
    def task_obj(self, csid, text, v, sender, recipient):
        t = {"sender": ROLES[sender], "recipient": RECIPIENTS[recipient],
             "subject": variant(TEXTS[text], v)[:1024],
             "body": variant(TEXTS[(text + 1) % len(TEXTS)], v)}
        return {"op": "write_task", "client_submission_id": csid,
                "task": t}, M.task_digest(t)

    def do_write_task(self, csid, text, v, sender=0, recipient=0,
                      body=None, schema="write-task-v1"):
        obj, digest = self.task_obj(csid, text, v, sender, recipient)
        if body is not None:
            obj["task"]["body"] = body
            digest = M.task_digest(obj["task"])
        if schema != "write-task-v1":
            # FCoP 4's candidate schema (doc/protocol.md): the model
            # does not compute its digest, it keeps the broker's, so
            # "the same request" is the same text index.
            obj["digest_schema"] = schema
            digest = "%s/%d" % (schema, text)
        raw, rep, t0, t1 = self.call(obj)
        m = self.m
        t = m.tasks.get(csid)
        if t is not None and t.receipt is not None and \
                t.facts["digest_schema"] != schema:
            self.expect(rep, {"conflict:schema_mismatch"},
                        "write_task other schema")
            return
        if t is not None and t.receipt is not None:
            if t.digest == digest:
                self.expect(rep, {"ok:reused"}, "write_task retry")
                self.check_task_receipt(t, raw, rep, "write_task retry")
                m.count("reused")
            else:
                self.expect(rep, {"conflict:digest_mismatch"},
                            "write_task other digest")
                ex = rep.get("existing") or {}
                if ex.get("request_digest") != \
                        t.facts["request_digest"] or \
                        ex.get("task_id") != t.facts["task_id"]:
                    fail("conflict's existing is not the first: %s" % raw)
            return
        if t is not None:
            fail("the model holds an uncommitted task %r" % csid)
        today = time.strftime("%Y%m%d", time.gmtime(t0 / 1000))
        if len(m.numbers.get(today, ())) >= 999:
            # The model's own creations used the date's 999 numbers
            # (write_task_bulk: up to 80 a step), as fill_day does.
            m.day_full.add(today)
        if today in m.day_full:
            k = self.expect(rep, {"sequence_exhausted"}, "write_task new")
            return
        k = self.expect(rep, {"ok:created"}, "write_task new")
        if k != "ok:created":
            return
        if rep.get("action_taken") is not True:
            fail("created without action_taken: %s" % raw)
        rc = rep["receipt"]
        mt = M.TASK_ID_RE.match(rc["task_id"])
        if not mt:
            fail("task_id %r is not FCoP's" % rc["task_id"])
        date, num = mt.group(1), int(mt.group(2))
        if date != today and date != time.strftime(
                "%Y%m%d", time.gmtime(t1 / 1000)):
            fail("task_id %s is not of today (%s)" % (rc["task_id"], today))
        if not 1 <= num <= 999:
            fail("number %d out of 001..999" % num)
        used = m.numbers.setdefault(date, set())
        if num in used:
            fail("number %03d of %s handed out twice (%s)" %
                 (num, date, rc["task_id"]))
        used.add(num)
        exp = {"client_submission_id": csid,
               "task_path": "_lifecycle/inbox/%s.md" % rc["task_id"],
               "digest_schema": schema, "request_digest": digest,
               "state": "committed"}
        if schema != "write-task-v1":
            exp["request_digest"] = rc.get("request_digest")
        for f, v2 in exp.items():
            if rc.get(f) != v2:
                fail("receipt %s is %r, not %r" % (f, rc.get(f), v2))
        if not rc["task_id"].endswith("-%s-to-%s" % (
                obj["task"]["sender"], obj["task"]["recipient"])):
            fail("task_id %s does not name the roles" % rc["task_id"])
        nt = M.Task(digest, obj["task"])
        nt.receipt = M.raw_member(raw, "receipt")
        nt.facts = rc
        m.tasks[csid] = nt
        m.task_files[rc["task_id"]] = csid
        m.count("created")
        STATS["created"] += 1

    def check_task_receipt(self, t, raw, rep, what, container=None):
        got = M.raw_member(raw if container is None else container,
                           "receipt")
        if got == t.receipt:
            return
        if t.compacted and rep.get("receipt_pruned") is True:
            rc = json.loads(got)
            for f in ("client_submission_id", "task_id", "task_path",
                      "digest_schema", "request_digest", "state",
                      "created_at"):
                if rc.get(f) != t.facts.get(f):
                    fail("%s: pruned receipt's %s is %r, not %r" % (
                        what, f, rc.get(f), t.facts.get(f)))
            STATE_KINDS.add(("pruned", "task", self._fill()))
            return
        fail("%s: the committed receipt changed:\nfirst %s\nnow   %s" % (
            what, t.receipt, got))

    @rule(n=id_lengths(), text=st.integers(0, len(TEXTS) - 1),
          v=st.integers(0, 3), sender=st.integers(0, 4),
          recipient=st.integers(0, 4))
    def write_task_new(self, n, text, v, sender, recipient):
        self.do_write_task(self.new_id(n), text, v, sender, recipient)

    @rule(data=st.data(), v=st.integers(0, 3), other=st.booleans())
    def write_task_again(self, data, v, other):
        csid = pick(data, sorted(self.m.tasks))
        if csid is None:
            return
        t = self.m.tasks[csid]
        text = TEXTS.index(unicodedata.normalize(
            "NFC", t.task["subject"].replace("\r\n", "\n")
            .replace("\r", "\n")))
        if other:
            text = (text + 1) % len(TEXTS)
        s = ROLES.index(t.task["sender"])
        r = RECIPIENTS.index(t.task["recipient"])
        self.do_write_task(csid, text, v, s, r)

    @rule(n=st.integers(1, 100), first=st.booleans(),
          text=st.integers(0, 1), again=st.sampled_from(
              ["same", "other schema", "other text"]))
    def write_task_schemas(self, n, first, text, again):
        """An id under one digest schema, then under the other:
        conflict schema_mismatch (FCoP 4's operation_id grammar for the
        id; ROOT/fcop.json declares the workspace)."""
        self.serial += 1
        csid = ("s%d-" % self.serial + "aZ09._:-" * 20)[:max(n, 8)]
        schemas = ["write-task-v1", "fcop-create-task-v1"]
        s0 = schemas[int(first)]
        self.do_write_task(csid, text, 0, schema=s0)
        if again == "same":
            self.do_write_task(csid, text, 1, schema=s0)
        elif again == "other schema":
            self.do_write_task(csid, text, 0, schema=schemas[1 - int(first)])
        else:
            self.do_write_task(csid, 1 - text, 0, schema=s0)

    @rule(k=st.integers(1, 80), n=st.sampled_from([1, 4, 8, 16]))
    def write_task_bulk(self, k, n):
        """Short ids through the table: a tiny one cycles."""
        for _ in range(k):
            self.do_write_task(self.new_id(n), 0, 0)

    @rule(n=id_lengths(), size=st.sampled_from([5000, 70000]))
    def write_task_big_body(self, n, size):
        """A body that fills a 4096-byte segment: a checkpoint."""
        self.do_write_task(self.new_id(n), 2, 0, body="b" * size)

    @rule()
    def fill_day(self):
        """Another FCoP writer takes every free number of today: the
        next creation is sequence_exhausted and writes nothing."""
        today = time.strftime("%Y%m%d", time.gmtime())
        if today in self.m.day_full:
            return
        used = self.m.numbers.setdefault(today, set())
        inbox = os.path.join(self.b.root, "_lifecycle", "inbox")
        for n in range(1, 1000):
            if n in used:
                continue
            name = "TASK-%s-%03d-OPS-to-PM" % (today, n)
            with open(os.path.join(inbox, name + ".md"), "w") as f:
                f.write('---\nprotocol: "fcop"\nversion: 1\ntype: "TASK"\n'
                        'task_id: "%s"\nsender: "OPS"\nrecipient: "PM"\n'
                        'client_submission_id: null\n---\nother writer\n'
                        % name)
            used.add(n)
            self.m.task_files[name] = None
        self.m.day_full.add(today)

    @rule(where=st.sampled_from(["subject", "body", "meta-free"]))
    def write_task_nul(self, where):
        """SPEC.md: no string in a request may contain U+0000."""
        if "nul" in KNOWN:
            return
        csid = self.new_id(12)
        obj, _ = self.task_obj(csid, 0, 0, 0, 0)
        if where == "meta-free":
            obj["meta"] = {"trace": "a\u0000b"}
        else:
            obj["task"][where] = "a\u0000b"
        raw, rep, _, _ = self.call(obj)
        self.expect(rep, {"invalid_request"}, "write_task NUL in %s" %
                    where)

    # -- reports --------------------------------------------------------
    @rule(data=st.data(), n=id_lengths(), again=st.booleans(),
          status=st.sampled_from([None, "done", "blocked"]),
          v=st.integers(0, 3))
    def write_report(self, data, n, again, status, v):
        m = self.m
        csid_t = pick(data, sorted(c for c, t in m.tasks.items()
                                   if t.receipt))
        mine_i = data.draw(st.integers(0, 1 << 20))
        if csid_t is None:
            return
        t = m.tasks[csid_t]
        task_id = t.facts["task_id"]
        mine = sorted(k[1] for k in m.reports if k[0] == task_id)
        if again and mine:
            csid = mine[mine_i % len(mine)]
        else:
            csid = self.new_id(n)
        rep_obj = {"sender": "DEV", "body": variant(TEXTS[2], v)}
        if status is not None:
            rep_obj["status"] = status
        digest = M.report_digest(task_id, rep_obj, t.task["sender"])
        raw, rep, _, _ = self.call({"op": "write_report",
                                    "task_id": task_id,
                                    "client_submission_id": csid,
                                    "report": rep_obj})
        r = m.reports.get((task_id, csid))
        if r is None:
            if self.expect(rep, {"ok:None"}, "write_report new") != \
                    "ok:None":
                return
            if rep.get("deduplicated") is not False:
                fail("a new report is deduplicated: %s" % raw)
            mr = M.REPORT_ID_RE.match(rep["report_id"])
            if not mr:
                fail("report_id %r" % rep["report_id"])
            used = m.report_numbers.setdefault(mr.group(1), set())
            num = int(mr.group(2))
            if num in used:
                fail("report number %03d twice" % num)
            used.add(num)
            m.reports[(task_id, csid)] = M.Report(
                digest, rep["report_id"], rep["report_path"])
            m.count("reports_created")
        elif r.digest == digest:
            self.expect(rep, {"ok:None"}, "write_report retry")
            if rep.get("deduplicated") is not True or \
                    rep.get("report_id") != r.report_id or \
                    rep.get("report_path") != r.report_path:
                fail("a repeated report is not the first: %s" % raw)
        else:
            self.expect(rep, {"conflict:digest_mismatch"},
                        "write_report other content")

    @rule()
    def write_report_no_task(self):
        raw, rep, _, _ = self.call({
            "op": "write_report", "task_id": "TASK-20000101-001-PM-to-DEV",
            "client_submission_id": "x", "report": {"sender": "DEV"}})
        self.expect(rep, {"task_not_found"}, "write_report no task")

    # -- effects ----------------------------------------------------------
    KINDS = ["mail.send/v1", "k", "charge/" + "v" * 120]

    def effect_request(self, which, v):
        return {"to": variant(TEXTS[which % len(TEXTS)], v),
                "n": which, "caf\u00e9" if v % 2 == 0 else
                "cafe\u0301": [1, True, None]}

    def do_begin(self, kind, csid, which, v, lease):
        m = self.m
        req = self.effect_request(which, v)
        digest = M.effect_digest(kind, req)
        obj = {"op": "effect_begin", "client_submission_id": csid,
               "effect_kind": kind, "request": req}
        if lease is None and "lease-null" in KNOWN:
            lease = "absent"
        if lease != "absent":
            obj["lease_ms"] = lease
        lease_ms = 30000 if lease in ("absent", None) else lease
        raw, rep, t0, t1 = self.call(obj)
        e = m.effects.get((kind, csid))
        what = "effect_begin"
        if e is None or e.state == "released":
            if e is not None and e.digest != digest:
                self.expect(rep, {"conflict:digest_mismatch"},
                            what + " other request")
                return
            k = self.expect(rep, {"ok:proceed"}, what + " " +
                            ("new" if e is None else "released"))
            if k != "ok:proceed":
                return
            if e is None:
                e = M.Effect(kind, csid, digest)
                m.effects[(kind, csid)] = e
                e.external_key = rep.get("external_key")
            elif rep.get("external_key") != e.external_key:
                fail("external_key changed across attempts: %s" % raw)
            if rep.get("attempt") != e.attempt + 1:
                fail("attempt %r, the model says %d" % (
                    rep.get("attempt"), e.attempt + 1))
            if rep.get("request_digest") != digest:
                fail("request_digest %s, the model computes %s" % (
                    rep.get("request_digest"), digest))
            if not re.match(r"^%d-[0-9a-f]{16}$" % (e.attempt + 1),
                            rep.get("fence", "")):
                fail("fence %r" % rep.get("fence"))
            e.proceeds_since_release += 1
            if e.proceeds_since_release > 1:
                fail("proceed twice without a release: %s" % raw)
            e.attempt += 1
            e.fence = rep["fence"]
            e.fences.append(e.fence)
            e.state = "reserved"
            e.lease_lo = t0 + lease_ms
            e.lease_hi = t1 + lease_ms
            e.lease_floor = e.lease_lo
            return
        if e.digest != digest:
            self.expect(rep, {"conflict:digest_mismatch"},
                        what + " other request")
            return
        if e.state == "committed":
            self.expect(rep, {"ok:reused"}, what + " committed")
            self.check_effect_receipt(e, raw, rep, what, recovered=True)
            return
        if e.state == "unknown":
            self.expect(rep, {"outcome_unknown"}, what + " unknown")
            return
        ls = m.lease_state(e, t0, t1)
        allowed = {"live": {"in_progress"}, "lapsed": {"outcome_unknown"},
                   "either": {"in_progress", "outcome_unknown"}}[ls]
        k = self.expect(rep, allowed, what + " reserved " + ls)
        if k == "outcome_unknown":
            e.state = "unknown"

    def check_effect_receipt(self, e, raw, rep, what, container=None,
                             recovered=False):
        got = M.raw_member(raw if container is None else container,
                           "receipt")
        if got == e.receipt:
            # effect_begin's reused says recovered when a resolve
            # committed it (SPEC.md); other replies are not checked.
            if recovered and bool(rep.get("recovered")) != e.recovered:
                fail("%s: recovered %r, the model says %r" % (
                    what, rep.get("recovered"), e.recovered))
            return
        if e.compacted and rep.get("receipt_pruned") is True:
            rc = json.loads(got)
            if rc.get("result_digest") != M.sha(e.result_raw) or \
                    rc.get("attempt") != e.attempt or \
                    rc.get("request_digest") != e.digest:
                fail("%s: pruned receipt %s against result %s" % (
                    what, got, e.result_raw[:100]))
            return
        fail("%s: the committed receipt changed:\nfirst %s\nnow   %s" % (
            what, (e.receipt or "")[:400], (got or "")[:400]))

    def commit_effect(self, e, raw, rep, result, recovered):
        rc = rep.get("receipt") or {}
        exp = {"client_submission_id": e.csid, "effect_kind": e.kind,
               "digest_schema": "generic-json-v1",
               "request_digest": e.digest, "attempt": e.attempt,
               "external_key": e.external_key, "state": "committed",
               "result": result}
        for f, v in exp.items():
            if rc.get(f, "<absent>") != v:
                fail("receipt %s is %r, not %r" % (
                    f, str(rc.get(f, "<absent>"))[:80], str(v)[:80]))
        e.state = "committed"
        e.receipt = M.raw_member(raw, "receipt")
        e.result_raw = M.raw_member(e.receipt, "result") or \
            json.dumps(rc.get("result"), separators=(",", ":"))
        e.result = result
        e.recovered = recovered

    def pick_effect(self, data, absent_ok=True):
        # The same draws whatever the model holds: a broker's answer
        # that varies with timing must not change what is drawn next.
        keys = sorted(self.m.effects)
        old = data.draw(st.integers(0, 5)) > 0
        i = data.draw(st.integers(0, 1 << 20))
        kind = data.draw(st.sampled_from(self.KINDS))
        n = data.draw(id_lengths())
        if keys and (not absent_ok or old):
            return keys[i % len(keys)]
        return kind, self.new_id(n)

    @rule(data=st.data(), which=st.integers(0, 2), v=st.integers(0, 3),
          lease=st.sampled_from(["absent", None, 100, 100, 30000,
                                 86400000]))
    def effect_begin(self, data, which, v, lease):
        kind, csid = self.pick_effect(data)
        self.do_begin(kind, csid, which, v, lease)

    @rule(data=st.data(), fence=st.sampled_from(
        ["latest", "latest", "latest", "stale", "forged"]),
        outcome=st.sampled_from(["applied", "applied", "not_applied"]),
        size=RESULT_SIZES, same=st.booleans())
    def effect_complete(self, data, fence, outcome, size, same):
        kind, csid = self.pick_effect(data)
        e = self.m.effects.get((kind, csid))
        self.do_complete(kind, csid, e, fence, outcome, size, same)

    def pick_fence(self, e, fence):
        """A fence of e as FENCE says ("latest", "stale", "forged"):
        (fence, whether it is the latest issued)."""
        if e is None or not e.fences:
            return "1-%016x" % (self.serial * 2654435761 % (1 << 64)), \
                False
        if fence == "stale" and len(e.fences) > 1:
            return e.fences[-2], False
        if fence == "forged":
            return e.fence.split("-")[0] + "-" + "%016x" % (
                int(e.fence.split("-")[1], 16) ^ 0x5a5a), False
        return e.fence, True

    def do_complete(self, kind, csid, e, fence, outcome, size, same):
        if e == "model":
            e = self.m.effects.get((kind, csid))
        if e is not None and e.state == "committed" and same:
            result = e.result
        else:
            result = result_value(size, self.serial)
        f, latest = self.pick_fence(e, fence)
        obj = {"op": "effect_complete", "client_submission_id": csid,
               "effect_kind": kind, "fence": f, "outcome": outcome}
        if result is not None or size != 0 or ("absent-result" in KNOWN
                                               and e is not None and
                                               e.state == "committed"):
            obj["result"] = result
        raw, rep, t0, t1 = self.call(obj)
        what = "effect_complete %s" % outcome
        if e is None:
            self.expect(rep, {"conflict:no_reservation"}, what + " none")
            return
        if not latest:
            allowed = {"conflict:stale_fence"}
            if fence == "forged" and e.compacted and \
                    e.state == "committed" and len(f.split("-")[1]) == 16:
                # doc/protocol.md: a tombstone keeps the attempt, not
                # the fence's random part, so a forged fence of the
                # committed attempt is judged by its result there.
                allowed = {"conflict:stale_fence",
                           "conflict:already_committed"}
                if outcome == "applied" and result == e.result:
                    allowed.add("ok:None")
            k = self.expect(rep, allowed, what + " stale")
            if k == "ok:None":
                self.check_effect_receipt(e, raw, rep, what)
            STATS["stale_fences"] += 1
            return
        if e.state in ("reserved", "unknown"):
            if outcome == "applied":
                k = self.expect(rep, {"ok:None"}, what + " " + e.state)
                if k == "ok:None":
                    if rep.get("action_taken") is not True:
                        fail("a commit without action_taken: %s" % raw)
                    self.commit_effect(e, raw, rep, result, False)
            else:
                k = self.expect(rep, {"ok:None"}, what + " " + e.state)
                if k == "ok:None":
                    self.release(e, rep, raw)
            return
        if e.state == "committed":
            if outcome == "applied" and result == e.result:
                self.expect(rep, {"ok:None"}, what + " committed same")
                self.check_effect_receipt(e, raw, rep, what, None)
            else:
                self.expect(rep, {"conflict:already_committed"},
                            what + " committed other")
            return
        # released
        if outcome == "applied":
            self.expect(rep, {"conflict:no_reservation"},
                        what + " released")
        else:
            self.expect(rep, {"ok:None"}, what + " released again")
            if rep.get("state") != "released" or \
                    rep.get("action_taken") is not False:
                fail("a repeated release: %s" % raw)

    @rule(data=st.data(), fence=st.sampled_from(
        ["latest", "latest", "latest", "stale", "forged"]),
        lease=st.sampled_from(["absent", None, 100, 300, 30000, 86400000]))
    def effect_extend(self, data, fence, lease):
        """SPEC.md, "Effects": the latest fence moves a live lease to now
        + lease_ms; a lapsed one is outcome_unknown (not revived)."""
        kind, csid = self.pick_effect(data)
        self.do_extend(kind, csid, fence, lease)

    def extend_request(self, kind, csid, fence, lease):
        """(request, fence's latest, lease_ms) of an effect_extend."""
        e = self.m.effects.get((kind, csid))
        f, latest = self.pick_fence(e, fence)
        obj = {"op": "effect_extend", "client_submission_id": csid,
               "effect_kind": kind, "fence": f}
        if lease != "absent":
            obj["lease_ms"] = lease
        lease_ms = 30000 if lease in ("absent", None) else lease
        return obj, latest, lease_ms

    def do_extend(self, kind, csid, fence, lease):
        obj, latest, lease_ms = self.extend_request(kind, csid, fence,
                                                    lease)
        raw, rep, t0, t1 = self.call(obj)
        self.judge_extend(self.m.effects.get((kind, csid)), fence, latest,
                          lease_ms, raw, rep, t0, t1)

    def judge_extend(self, e, fence, latest, lease_ms, raw, rep, t0, t1):
        """An effect_extend's answer against the model, applied to it."""
        what = "effect_extend"
        if e is None:
            self.expect(rep, {"conflict:no_reservation"}, what + " none")
            return
        if not latest:
            allowed = {"conflict:stale_fence"}
            if fence == "forged" and e.compacted and \
                    e.state == "committed":
                # A tombstone keeps the attempt, not the random part
                # (as for effect_complete): the committed state answers.
                allowed.add("conflict:already_committed")
            self.expect(rep, allowed, what + " stale")
            STATS["stale_fences"] += 1
            return
        if e.state == "committed":
            self.expect(rep, {"conflict:already_committed"},
                        what + " committed")
            return
        if e.state == "released":
            self.expect(rep, {"conflict:no_reservation"}, what + " released")
            return
        if e.state == "unknown":
            self.expect(rep, {"outcome_unknown"}, what + " unknown")
            return
        ls = self.m.lease_state(e, t0, t1)
        allowed = {"live": {"ok:None"}, "lapsed": {"outcome_unknown"},
                   "either": {"ok:None", "outcome_unknown"}}[ls]
        k = self.expect(rep, allowed, what + " reserved " + ls)
        if k == "outcome_unknown":
            e.state = "unknown"
            return
        if k != "ok:None":
            return
        if sorted(rep) != sorted(["ok", "id", "lease_expires_at"]
                                 if "id" in rep else
                                 ["ok", "lease_expires_at"]):
            fail("effect_extend answered more than SPEC.md's "
                 "{ok, lease_expires_at}: %s" % raw)
        until = parse_time_ms(rep["lease_expires_at"])
        if not (t0 + lease_ms - self.m.slack_ms <= until <=
                t1 + lease_ms + self.m.slack_ms):
            fail("effect_extend: the lease ends at %s, not %d ms after "
                 "the call: %s" % (rep["lease_expires_at"], lease_ms, raw))
        e.lease_lo = t0 + lease_ms
        e.lease_hi = t1 + lease_ms
        e.lease_floor = min(e.lease_floor, e.lease_lo)

    def extend_across_crash(self, kind, csid, lease):
        """Regressions only.  On the local store (an idemd built with
        fault injection), idemd restarted with
        IDEM_CRASH_AT=before_journal_kick dies in the pass that appends
        the extension's record of the reserved effect (KIND, CSID),
        after the answers that pass wrote and before it wakes the
        journaler, which lingers for no record
        (IDEM_CRASH_JOURNAL_LINGER_US=0): what a kill -9 at the worst
        moment leaves, deterministically.  Answered, the extension is
        judged as any; not answered, it may or may not have been
        recorded (SPEC.md: the last durable expiry counts), so the lease
        may end at either end.  Then idemd starts again as kill_master
        starts it.  On PostgreSQL, a kill -9 right after the answer."""
        e = self.m.effects[(kind, csid)]
        if e.state != "reserved":
            fail("extend_across_crash of a %s effect" % e.state)
        if self.pg:
            # PostgreSQL commits an extension before its answer: the
            # worst moment there is a kill -9 right after the answer.
            self.do_extend(kind, csid, "latest", lease)
            self.kill_master()
            return
        st_ = self.b.stop()
        if st_ != 0:
            fail("idemd exited %s on SIGTERM; log:\n%s" % (
                st_, self._log_tail()))
        env = dict(os.environ, IDEM_CRASH_AT="before_journal_kick",
                   IDEM_CRASH_JOURNAL_LINGER_US="0")
        if not self.b.start(self._args(*self.cfg), env=env):
            tail = self._log_tail()
            # Its "fatal:" refusal is not a failure of the broker's.
            for log in self.b.logs():
                self.log_seen[log] = os.path.getsize(log)
            self._boot(*self.cfg)
            if "has no fault injection" in tail:
                raise RegressionSkipped("needs configure "
                                        "--enable-fault-injection")
            fail("idemd did not start to crash; log:\n%s" % tail)
        obj, latest, lease_ms = self.extend_request(kind, csid, "latest",
                                                    lease)
        raw, rep, t0, t1, err = self.b.request(obj)
        self.b.wait_dead()
        self._boot(*self.cfg)
        if err is None:
            note("extend_across_crash: answered %s" % raw)
            self.judge_extend(e, "latest", latest, lease_ms, raw, rep,
                              t0, t1)
        elif self.m.lease_state(e, t0, t1) != "lapsed":
            note("extend_across_crash: no answer (%s)" % err)
            # Recorded or not (the lease may have been live when it was
            # judged): either end.
            e.lease_lo = min(e.lease_lo, t0 + lease_ms)
            e.lease_hi = max(e.lease_hi, t1 + lease_ms)
            e.lease_floor = min(e.lease_floor, t0 + lease_ms)
        for x in self.m.effects.values():
            if x.state == "reserved":
                x.lease_lo = min(x.lease_lo, x.lease_floor)
        STATS["kills"] += 1

    def release(self, e, rep, raw):
        if rep.get("state") != "released" or \
                rep.get("attempt") != e.attempt or \
                rep.get("external_key") != e.external_key:
            fail("a release answered %s" % raw)
        e.state = "released"
        e.proceeds_since_release = 0

    @rule(data=st.data(), observed=st.sampled_from(
        ["applied", "not_applied", "unknown"]), size=RESULT_SIZES,
        same=st.booleans())
    def effect_resolve(self, data, observed, size, same):
        kind, csid = self.pick_effect(data)
        m = self.m
        e = m.effects.get((kind, csid))
        if e is not None and e.state == "committed" and same:
            result = e.result
        else:
            result = result_value(size, self.serial + 1)
        ev = {"observed": observed, "source": "model"}
        if observed == "applied" and (result is not None or size != 0 or (
                "absent-result" in KNOWN and e is not None and
                e.state == "committed")):
            ev["result"] = result
        raw, rep, t0, t1 = self.call({
            "op": "effect_resolve", "client_submission_id": csid,
            "effect_kind": kind, "evidence": ev})
        what = "effect_resolve %s" % observed
        if e is None:
            self.expect(rep, {"conflict:no_reservation"}, what + " none")
            return
        if e.state == "committed":
            if observed == "applied" and result == e.result:
                self.expect(rep, {"ok:None"}, what + " committed same")
                self.check_effect_receipt(e, raw, rep, what)
            else:
                self.expect(rep, {"conflict:already_committed"},
                            what + " committed")
            return
        if e.state == "reserved":
            ls = m.lease_state(e, t0, t1)
            if ls == "live":
                self.expect(rep, {"in_progress"}, what + " live")
                return
            if ls == "either" and self.code(rep) == "in_progress":
                return
        state = e.state
        k = self.expect(rep, {"ok:None"}, what + " " + state)
        if k != "ok:None":
            return
        if observed == "applied":
            self.commit_effect(e, raw, rep, result, True)
            if rep.get("recovered") is not True:
                fail("a resolve's commit without recovered: %s" % raw)
        elif observed == "not_applied":
            self.release(e, rep, raw)
        else:
            if rep.get("state") != "outcome_unknown":
                fail("resolve unknown answered %s" % raw)
            e.state = "unknown"

    @rule(data=st.data(), what=st.sampled_from(
        ["request", "result", "evidence", "source"]))
    def effect_nul(self, data, what):
        """SPEC.md: no string in a request may contain U+0000."""
        if "nul" in KNOWN:
            return
        kind, csid = self.pick_effect(data)
        self.do_effect_nul(kind, csid, what)

    def do_effect_nul(self, kind, csid, what):
        e = self.m.effects.get((kind, csid))
        if what == "request":
            obj = {"op": "effect_begin", "client_submission_id": csid,
                   "effect_kind": kind, "request": {"a": "x\u0000y"}}
        elif what == "result":
            obj = {"op": "effect_complete", "client_submission_id": csid,
                   "effect_kind": kind,
                   "fence": e.fence if e and e.fence else "1-0",
                   "outcome": "applied", "result": "a\u0000b"}
        elif what == "evidence":
            obj = {"op": "effect_resolve", "client_submission_id": csid,
                   "effect_kind": kind, "evidence": {
                       "observed": "applied", "result": {"k\u0000": 1}}}
        else:
            obj = {"op": "effect_resolve", "client_submission_id": csid,
                   "effect_kind": kind, "evidence": {
                       "observed": "unknown", "source": "a\u0000b"}}
        raw, rep, _, _ = self.call(obj)
        self.expect(rep, {"invalid_request"}, "effect NUL in %s" % what)

    @rule(k=st.integers(1, 70), size=st.sampled_from([10, 1000, 65536]),
          lease=st.sampled_from([100, 30000]), batched=st.booleans())
    def effects_bulk(self, k, size, lease, batched=False):
        """Begin and complete K new effects with results of SIZE bytes
        (each in turn, or all begun first): a tiny table and a tiny
        result arena cycle."""
        keys = []
        for _ in range(k):
            csid = self.new_id(8)
            self.do_begin("bulk/v1", csid, 0, 0, lease)
            keys.append(csid)
            if not batched:
                self.complete_bulk(keys, size)
                keys = []
        self.complete_bulk(keys, size)

    def complete_bulk(self, keys, size):
        for csid in keys:
            e = self.m.effects.get(("bulk/v1", csid))
            if e is not None and e.state == "reserved":
                self.do_complete("bulk/v1", csid, e, "latest", "applied",
                                 size, False)

    @rule(ms=st.sampled_from([120, 250]))
    def time_passes(self, ms):
        """The broker's clock moves: 100 ms leases lapse."""
        time.sleep(ms / 1000.0)

    # -- reads ----------------------------------------------------------
    @rule(data=st.data())
    def get_submission(self, data):
        m = self.m
        task = data.draw(st.booleans())
        csid = pick(data, sorted(m.tasks))
        ekind, ecsid = self.pick_effect(data)
        if task and csid is not None:
            raw, rep, _, _ = self.call({"op": "get_submission",
                                        "client_submission_id": csid})
            t = m.tasks[csid]
            s = rep.get("submission") or {}
            if not rep.get("found") or s.get("state") != "committed":
                fail("get_submission of a committed task: %s" % raw)
            self.check_task_receipt(t, raw, dict(rep, **s),
                                    "get_submission",
                                    container=M.raw_member(raw,
                                                           "submission"))
            return
        kind, csid = ekind, ecsid
        raw, rep, t0, t1 = self.call({"op": "get_submission",
                                      "client_submission_id": csid,
                                      "effect_kind": kind})
        e = m.effects.get((kind, csid))
        if e is None:
            if rep.get("found") is not False:
                fail("get_submission of no effect: %s" % raw)
            return
        s = rep.get("submission") or {}
        want = {"reserved": None, "unknown": {"outcome_unknown"},
                "released": {"released"},
                "committed": {"committed"}}[e.state]
        if want is None:
            ls = m.lease_state(e, t0, t1)
            want = {"live": {"reserved"},
                    "lapsed": {"outcome_unknown", "reserved"},
                    "either": {"reserved", "outcome_unknown"}}[ls]
            if ls == "lapsed" and s.get("state") == "reserved" and \
                    s.get("lease_live") is not False:
                fail("a lapsed lease shown live: %s" % raw)
        if s.get("state") not in want or s.get("attempt") != e.attempt:
            fail("get_submission of an effect: %s; model %s attempt %d"
                 % (raw[:500], e.state, e.attempt))
        if e.state == "committed":
            self.check_effect_receipt(e, raw, dict(rep, **s),
                                      "get_submission",
                                      container=M.raw_member(
                                          raw, "submission"))

    @rule()
    def diagnose(self):
        raw, rep, t0, t1 = self.call({"op": "diagnose",
                                      "stale_after_ms": 0})
        m = self.m
        c = rep.get("counts") or {}
        # SPEC.md does not say whether `committed` counts the history or
        # the working set; idemd counts its table (the cache), so the
        # model requires the whole history only while nothing can have
        # left the table (no restart, fewer keys than --capacity).
        exact = not self.cached_only()
        want = {"reserved": 0, "task_created": 0}
        got = {k: c.get(k) for k in want}
        if got != want or not (0 <= c.get("committed", -1) <=
                               m.committed_tasks()) or (
                exact and c.get("committed") != m.committed_tasks()):
            fail("diagnose counts %s, the model %s committed" % (
                c, m.committed_tasks()))
        ec = rep.get("effect_counts") or {}
        rng = m.effect_counts(t0)
        rng2 = m.effect_counts(t1)
        for k, (lo, hi) in rng.items():
            if k == "committed" and not exact:
                lo = 0
            lo = min(lo, rng2[k][0])
            hi = max(hi, rng2[k][1])
            if not lo <= ec.get(k, -1) <= hi:
                fail("diagnose effect_counts %s: %s not in %d..%d" % (
                    ec, k, lo, hi))
        # Every entry the model holds in flight, outcome_unknown first.
        seen_other = False
        for ent in rep.get("entries", []):
            if ent.get("state") == "outcome_unknown":
                if seen_other:
                    fail("diagnose lists an outcome_unknown after "
                         "other entries: %s" % raw[:800])
            else:
                seen_other = True

    @rule()
    def stats(self):
        raw, rep, _, _ = self.call({"op": "stats"})
        m = self.m
        want = {"created": m.counters.get("created", 0),
                "reused": m.counters.get("reused", 0),
                "legacy_created": 0,
                "reports_created": m.counters.get("reports_created", 0),
                "table_capacity": m.capacity, "workers": 2,
                "history_entries": m.committed_tasks() + len(m.reports) +
                sum(1 for e in m.effects.values()
                    if e.state == "committed")}
        got = {k: rep.get(k) for k in want}
        if self.pg:
            # Each broker counts its own table and index, not the
            # workspace's rows (stats' `store` does, doc/cluster.md).
            got["history_entries"] = want["history_entries"]
            got["created"] = want["created"]
            got["reused"] = want["reused"]
            got["reports_created"] = want["reports_created"]
        if "history-count" in KNOWN and got["history_entries"] is not None \
                and got["history_entries"] >= want["history_entries"]:
            # Counted twice is the known defect; fewer would be a lost
            # receipt, still a failure.
            got["history_entries"] = want["history_entries"]
        if got != want:
            fail("stats %s, the model %s%s" % (got, want, "" if
                 got["workers"] == want["workers"] else
                 "; log:\n" + self._log_tail()))
        if rep.get("table_used", 0) > m.capacity:
            fail("table_used %d over capacity %d" % (rep["table_used"],
                                                     m.capacity))

    # -- the operator and the machine ---------------------------------------
    @rule()
    def compact(self):
        """idemctl compact --older-than 0 while the broker runs
        (idemctl(1): 'The broker may be running')."""
        p = subprocess.run(self.compact_argv(), capture_output=True,
                           text=True, timeout=60 * SLOWDOWN)
        if p.returncode not in (0, 1):
            fail("idemctl compact exited %d: %s" % (p.returncode,
                                                    p.stderr))
        if p.returncode == 1 and "no index" not in p.stderr:
            fail("idemctl compact refused: %s" % p.stderr)
        for t in self.m.tasks.values():
            if t.receipt is not None:
                t.compacted = True
        for e in self.m.effects.values():
            if e.state == "committed":
                e.compacted = True
        self.m.compactions += 1

    @rule(cap=st.sampled_from([64, 100, 1000, DEFAULT_CAPACITY]),
          arena=st.sampled_from([0, 4194304, 131072]),
          seg=st.sampled_from([0, 4096]))
    def restart(self, cap, arena, seg):
        st_ = self.b.stop()
        if st_ != 0:
            fail("idemd exited %s on SIGTERM; log:\n%s" % (
                st_, self._log_tail()))
        self._boot(cap, arena, seg)
        STATS["restarts"] += 1

    @rule()
    def kill_master(self):
        self.b.kill9()
        self._boot(*self.cfg)
        # An extension not flushed yet is lost: the lease may end at any
        # earlier expiry of the attempt (SPEC.md, "Effects").
        for e in self.m.effects.values():
            if e.state == "reserved":
                e.lease_lo = min(e.lease_lo, e.lease_floor)
        STATS["kills"] += 1

    @rule()
    def kill_worker(self):
        ws = self.b.workers()
        if not ws:
            fail("idemd has no workers")
        os.kill(ws[0], signal.SIGKILL)
        # The master replaces it: wait until its stats says two again
        # (on PostgreSQL, the killed broker's, not the other's).
        ask = getattr(self.b, "request_killed", self.b.request)
        deadline = time.time() + 10 * SLOWDOWN
        while time.time() < deadline:
            # In this order: the killed worker reaped and its
            # replacement forked, and only then stats asked, so that
            # its 2 cannot be the dead worker's slot read before the
            # reap (the PostgreSQL flake of #27: 1 at the next stats).
            now = self.b.workers()
            if len(now) == 2 and ws[0] not in now:
                raw, rep, _, _, err = ask({"op": "stats"})
                if rep is not None and rep.get("workers") == 2:
                    break
            time.sleep(0.02)
        else:
            fail("the master did not replace a killed worker")
        self.m.count("worker_restarts")
        STATS["kills"] += 1

    @rule(n=id_lengths())
    def pause_worker(self, n):
        """SIGSTOP a worker, send a creation (it may wait for the
        worker), SIGCONT: the answer is the model's."""
        import threading
        ws = self.b.workers()
        os.kill(ws[0], signal.SIGSTOP)
        out = {}

        def go():
            try:
                self.do_write_task(self.new_id(n), 1, 1)
            except BaseException as e:    # re-raised below
                out["e"] = e
        th = threading.Thread(target=go)
        th.start()
        th.join(0.2)
        os.kill(ws[0], signal.SIGCONT)
        th.join()
        if "e" in out:
            raise out["e"]

    # -- invariants -------------------------------------------------------
    @invariant()
    def files(self):
        """One TASK file per id, no number twice on a date."""
        if self.b is None:
            return
        self.steps += 1
        STATS["steps"] += 1
        base = os.path.join(self.b.root, "_lifecycle")
        by_csid = {}
        nums = {}
        for stage in os.listdir(base):
            for name in os.listdir(os.path.join(base, stage)):
                if not (name.startswith("TASK-") and name.endswith(".md")):
                    continue
                tid = name[:-3]
                if tid not in self.seen_files:
                    self.seen_files[tid] = self._file_csid(
                        os.path.join(base, stage, name))
                c = self.seen_files[tid]
                if c is not None:
                    by_csid.setdefault(c, []).append(tid)
                mt = M.TASK_ID_RE.match(tid)
                if mt:
                    k = (mt.group(1), mt.group(2))
                    if k in nums:
                        fail("number %s used twice: %s and %s" % (
                            k, nums[k], tid))
                    nums[k] = tid
        for c, tids in by_csid.items():
            if len(tids) != 1:
                fail("%d TASK files for id %r: %s" % (len(tids), c, tids))
        for c, t in self.m.tasks.items():
            if t.receipt is not None and c not in by_csid:
                fail("no TASK file for committed id %r" % c)
        if len(by_csid) != self.m.committed_tasks():
            fail("%d ids have a TASK file, the model committed %d" % (
                len(by_csid), self.m.committed_tasks()))

    @invariant()
    def log_clean(self):
        """Beyond the contract: idemd logs no failed write of its index
        (a checkpoint that failed leaves the journal unpruned and the
        table's committed entries unevictable: issue 27, item 1), and no
        worker dies but those the model kills (SIGKILL): a worker that
        exits or dies of another signal is a defect, which `stats`'
        `workers` would otherwise show only by chance (every broker's
        log: on PostgreSQL both of the pair's)."""
        if self.b is None:
            return
        for log in self.b.logs():
            try:
                with open(log, "rb") as f:
                    f.seek(self.log_seen.get(log, 0))
                    new = f.read()
            except OSError:
                continue
            self.log_seen[log] = self.log_seen.get(log, 0) + len(new)
            for line in new.decode("utf-8", "replace").splitlines():
                if "seq-exhausted-checkpoint" in KNOWN and \
                        "warning: index" in line:
                    continue
                if "warning: index" in line or "fatal:" in line or \
                        "AddressSanitizer" in line or \
                        "runtime error:" in line or \
                        UNEXPECTED_WORKER_DEATH.search(line):
                    fail("idemd logged: %s" % line)

    def _file_csid(self, path):
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f):
                if line.startswith("client_submission_id: "):
                    return json.loads(line[len("client_submission_id: "):])
                if line.strip() == "---" and i > 0:
                    break
        return None


# ---- running it ------------------------------------------------------------

# master.c's line for a worker that died; the model's kills are SIGKILL.
UNEXPECTED_WORKER_DEATH = re.compile(
    r"worker \d+ \(pid \d+\) (exited with status|"
    r"killed by signal (?!9\b))")

STATS = {"sequences": 0, "steps": 0, "requests": 0, "created": 0,
         "transient_retries": 0, "restarts": 0, "kills": 0,
         "stale_fences": 0}
STATE_KINDS = set()
MACHINE = IdemMachine       # test_model_pg.py sets its own


def run_seed(seed, seconds, steps, db):
    """Hypothesis for SECONDS over sequences of at most STEPS steps from
    SEED; raises on the first (shrunk) failure."""
    RUN["deadline"] = time.time() + seconds
    RUN["failed"] = False
    RUN["first"] = None
    s = settings(max_examples=1000000, stateful_step_count=steps,
                 deadline=None, database=db, print_blob=True,
                 suppress_health_check=list(HealthCheck),
                 report_multiple_bugs=False)
    MACHINE._hypothesis_internal_use_seed = seed
    MACHINE.TestCase.settings = s
    run_state_machine_as_test(MACHINE, settings=s)


class Draws:
    """A rule's `data` in a kept sequence: the values Hypothesis drew
    (its "Draw n:" lines), in order."""

    def __init__(self, values):
        self.values = list(values)

    def draw(self, strategy):
        del strategy
        return self.values.pop(0)


def has_model_failure(e):
    c = e.__context__ or e.__cause__
    while c is not None and not isinstance(c, ModelFailure):
        c = c.__context__ or c.__cause__
    return c is not None


def run_regressions(known):
    # pylint: disable=import-outside-toplevel
    """Every shrunk failure kept in regressions.py, replayed as it was
    found.  Those of a defect named in KNOWN (IDEM_MODEL_KNOWN) are
    listed as skipped, with the reason."""
    import regressions
    failed = 0
    pending = regressions.PENDING
    if os.environ.get("IDEM_MODEL_PENDING") == "none":
        pending = set()
    for name, defect, steps in regressions.REGRESSIONS:
        if defect in known or defect in pending:
            print("SKIP: regression %s (%s: %s; %s)" % (
                name, defect, KNOWN_DEFECTS.get(defect, "?"),
                "IDEM_MODEL_KNOWN" if defect in known else
                "PENDING in regressions.py"))
            continue
        mach = MACHINE()
        try:
            for rule_name, kw in steps:
                if "data" in kw:
                    kw = dict(kw, data=Draws(kw["data"]))
                getattr(mach, rule_name)(**kw)
                mach.files()
                mach.log_clean()
            print("PASS: regression %s" % name)
        except RegressionSkipped as e:
            print("SKIP: regression %s (%s)" % (name, e))
        except ModelFailure as e:
            print("FAIL: regression %s (defect %s): %s" % (name, defect,
                                                             e))
            failed += 1
        finally:
            mach.teardown()
    return failed


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    vec = os.environ.get("IDEM_VECTORS", os.path.join(here, "..",
                                                      "vectors"))
    n = M.check_vectors(vec)
    print("PASS: the model's digests agree with %d vectors" % n)
    # A sanitizer build is about five times slower a step: twice the
    # time, for fewer steps (its timeouts are scaled by SLOWDOWN).
    budget = float(os.environ.get("IDEM_MODEL_BUDGET", "120")) * (
        2 if SLOWDOWN > 1 else 1)
    steps = int(os.environ.get("IDEM_MODEL_STEPS", "40"))
    known = KNOWN
    dbdir = os.environ.get("IDEM_MODEL_DB")
    db = DirectoryBasedExampleDatabase(dbdir) if dbdir else None
    started = time.time()
    failed = 0
    only = os.environ.get("IDEM_MODEL_SEED")
    if only is None or os.environ.get("IDEM_MODEL_REGRESSIONS_ONLY"):
        failed += run_regressions(known)
        if os.environ.get("IDEM_MODEL_REGRESSIONS_ONLY"):
            print("%d failure(s)" % failed)
            return 1 if failed else 0
    if only is not None:
        seeds = [int(only)]
    else:
        fresh = random.SystemRandom().randrange(1 << 32)
        seeds = [1, fresh]
        print("seeds %s, %.0f s each" % (seeds, budget / 2))
    i = 0
    while True:
        if i < len(seeds):
            seed = seeds[i]
        elif only is None and time.time() - started < budget:
            seed = random.SystemRandom().randrange(1 << 32)
            print("fresh seed %d" % seed)
        else:
            break
        if only is None and i > 0 and time.time() - started >= budget:
            print("budget of %.0f s spent: seeds %s not run" % (
                budget, seeds[i:]))
            break
        i += 1
        print("seed %d (replay: IDEM_MODEL_SEED=%d)" % (seed, seed),
              flush=True)
        t = time.time()
        try:
            try:
                run_seed(seed, max(5.0, budget / 2 if only is None else
                                   budget), steps, db)
            except BudgetSpent:
                pass
            print("PASS: seed %d, %.0f s" % (seed, time.time() - t),
                  flush=True)
        except (ModelFailure, Flaky) as e:
            if isinstance(e, Flaky) and not has_model_failure(e) and \
                    not RUN["failed"]:
                # The broker answered one sequence two ways within the
                # contract (a lease's end, a retry's moment) and
                # Hypothesis cannot replay it: no failure was seen.
                print("note: seed %d ended early: %s" % (seed, e))
                continue
            if isinstance(e, Flaky):
                # A real broker is not a pure function of the sequence
                # (a lease's end, a checkpoint's moment): Hypothesis saw
                # the failure and could not replay it the same way.
                # The failure itself is the exception's context, or
                # (Hypothesis's tree of draws raised Flaky when no
                # exception was being handled) the first one fail()
                # saw in this seed.
                print("FAIL: seed %d: %s" % (seed, e), flush=True)
                c = e.__context__ or e.__cause__
                while c is not None and not isinstance(c, ModelFailure):
                    c = c.__context__ or c.__cause__
                if c is not None:
                    print("FAIL: seed %d, first seen: %s" % (seed, c))
                    e = c
                else:
                    print("FAIL: seed %d, first seen: %s" % (
                        seed, RUN["first"] or "an exception of the "
                        "sequence (not the model's), not replayed"))
            else:
                print("FAIL: seed %d: %s" % (seed, e), flush=True)
            # Hypothesis puts the shrunk sequence in the exception's
            # notes (Python 3.11): print it, to be kept in
            # regressions.py.
            for line in getattr(e, "__notes__", []):
                print("| " + line)
            print("replay: IDEM_MODEL_SEED=%d %s" % (seed, sys.argv[0]))
            failed += 1
            break
    print("figures: %d sequences, %d steps, %d requests, %d tasks "
          "created, %d transient retries, %d restarts, %d kills, "
          "%d distinct (rule, answer, table fill) states, %.0f s" % (
              STATS["sequences"], STATS["steps"], STATS["requests"],
              STATS["created"], STATS["transient_retries"],
              STATS["restarts"], STATS["kills"], len(STATE_KINDS),
              time.time() - started))
    if os.environ.get("IDEM_MODEL_STATES"):
        for s in sorted(STATE_KINDS):
            print("state: %s %s %s" % s)
    print("%d failure(s)" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
