# SPDX-License-Identifier: ISC
"""tests/model/machine_effects.py: the effect ledger's rules and judges.

It owns class EffectRules, a mixin of IdemMachine (machine.py):
effect_begin, effect_complete, effect_extend, effect_resolve, NULs in
an effect's request, bulk effects and time passing (leases lapse), each
answer judged against the model's effect (fences, attempts, leases,
receipts) and applied to it; and extend_across_crash, the regressions'
crash in the middle of an extension.  It uses the machine's call,
expect, _boot and kill_master; Hypothesis collects its @rules through
IdemMachine's classes (in 6.67 by name, whatever the class).
"""

import json
import os
import re
import time

from hypothesis import strategies as st
from hypothesis.stateful import rule

import model as M
from harness import (KNOWN, STATS, TEXTS, RegressionSkipped, fail, note,
                     parse_time_ms)
from strategies import RESULT_SIZES, id_lengths, result_value, variant


class EffectRules:
    """IdemMachine's rules of effects (a mixin: the state is the
    machine's, self.m the model, self.b the broker)."""

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
