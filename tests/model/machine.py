# SPDX-License-Identifier: ISC
"""tests/model/machine.py: a real idemd and the model of SPEC.md
(model.py) side by side: IdemMachine, Hypothesis's RuleBasedStateMachine.

Each rule sends one request (or a few, for the bulk rules that fill a
tiny table) over the broker's Unix socket, or restarts, kills, pauses
or compacts it, and compares the answer with the set of answers the
model allows; invariants after every step: one TASK file per id, no
number twice on a date, a committed receipt never changes a byte, no
effect proceeds twice without a release, stats agree with the model.

It owns the set-up (an idemd started with a capacity, arena and segment
drawn), one request with retries of what may be transient (call), the
answer checked against the set SPEC.md allows (expect), the rules of
tasks, reports, reads (get_submission, diagnose, stats), the operator
and the machine (compact, restart, kill -9 of the master or a worker,
a worker paused), and the invariants.  The effects' rules are
machine_effects.py's (EffectRules, a base class of IdemMachine); the
broker's process is broker.py's; test_model.py runs the machine.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
import traceback
import unicodedata

from hypothesis import strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize,
                                 invariant, rule)

import model as M
from broker import Broker
from harness import (DEFAULT_CAPACITY, IDEMCTL, KEY_SLOT, KNOWN, MAX_KEY,
                     RECIPIENTS, ROLES, RUN, SLOWDOWN, STATE_KINDS, STATS,
                     TEXTS, TRANSIENT_S, BudgetSpent, ModelFailure, fail,
                     note, table_full_known)
from machine_effects import EffectRules
from strategies import id_lengths, make_id, pick, variant

# master.c's line for a worker that died; the model's kills are SIGKILL.
UNEXPECTED_WORKER_DEATH = re.compile(
    r"worker \d+ \(pid \d+\) (exited with status|"
    r"killed by signal (?!9\b))")


class IdemMachine(EffectRules, RuleBasedStateMachine):
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
