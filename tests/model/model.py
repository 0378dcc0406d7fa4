# SPDX-License-Identifier: ISC
"""tests/model/model.py: SPEC.md as a small in-memory reference model.

It owns what the contract says a broker must answer, and nothing of how
idemd does it (no slots, heaps, arenas or journals): a dictionary per
key (tasks by client_submission_id, reports by (task_id, id), effects by
(effect_kind, id)) holding the contract's states, digests, attempts,
fences and leases, and the digests themselves, computed here from
SPEC.md's text (not with the project's own digest code), checked
against tests/vectors/*.json by check_vectors().

The answers SPEC.md allows for each request in a given state are
decided in the machine's rules (machine.py, machine_effects.py: one
function per op, beside the request they check), on this state: where
the contract allows more than one answer (a lease measured on the
broker's clock whose end falls between a request's send and receive
times, a retryable refusal) they name the set, and apply the actual
answer to the model.
"""

import hashlib
import json
import re
import unicodedata

# ---- digests (SPEC.md "Digest scheme write-task-v1", "Effects") -----------

TASK_DEFAULTS = {"body": "", "priority": "P2", "risk_level": "low",
                 "thread_key": None, "parent": None, "references": [],
                 "depends_on": []}
REPORT_STATUSES = ("done", "blocked", "in_progress", "aborted")


def normalize(s):
    """CRLF and lone CR become LF, then NFC (not NFKC); no trimming."""
    return unicodedata.normalize("NFC",
                                 s.replace("\r\n", "\n").replace("\r", "\n"))


def jcs_string(s):
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch in "\b\t\n\f\r":
            out.append({"\b": "\\b", "\t": "\\t", "\n": "\\n",
                        "\f": "\\f", "\r": "\\r"}[ch])
        elif o < 0x20:
            out.append("\\u%04x" % o)
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def jcs(v):
    """RFC 8785 for what the model sends: strings, integers within
    +-2^53, booleans, null, arrays and objects (members sorted by UTF-16
    code units).  Reals are never generated (the vectors that hold them
    are skipped by check_vectors)."""
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return jcs_string(v)
    if isinstance(v, list):
        return "[" + ",".join(jcs(x) for x in v) + "]"
    if isinstance(v, dict):
        keys = sorted(v, key=lambda k: k.encode("utf-16-be"))
        return "{" + ",".join(jcs_string(k) + ":" + jcs(v[k])
                              for k in keys) + "}"
    raise TypeError("the model sends no %r" % type(v))


def norm_json(v):
    """Every string normalized, member names included."""
    if isinstance(v, str):
        return normalize(v)
    if isinstance(v, list):
        return [norm_json(x) for x in v]
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            out[normalize(k)] = norm_json(x)
        return out
    return v


def sha(s):
    return hashlib.sha256(s.encode("utf-8")).hexdigest()


def task_canonical(task):
    t = dict(TASK_DEFAULTS)
    for k, v in task.items():
        if v is not None:
            t[k] = v
    return jcs(norm_json(t))


def task_digest(task):
    return sha(task_canonical(task))


def report_digest(task_id, report, task_sender):
    r = {"task_id": task_id, "sender": report["sender"],
         "recipient": report.get("recipient") or task_sender,
         "status": report.get("status") or "done",
         "body": report.get("body") or ""}
    return sha(jcs(norm_json(r)))


def effect_canonical(kind, request):
    return jcs(norm_json({"kind": kind, "request": request}))


def effect_digest(kind, request):
    return sha(effect_canonical(kind, request))


def has_nul(v):
    if isinstance(v, str):
        return "\x00" in v
    if isinstance(v, list):
        return any(has_nul(x) for x in v)
    if isinstance(v, dict):
        return any(has_nul(k) or has_nul(x) for k, x in v.items())
    return False


def check_vectors(vecdir):
    """The digests above against the conformance vectors: returns the
    number checked; raises AssertionError on a difference."""
    n = 0
    with open(vecdir + "/write-task-v1.json", encoding="utf-8") as f:
        for v in json.load(f)["vectors"]:
            assert task_canonical(v["task"]) == v["canonical"], v["name"]
            assert task_digest(v["task"]) == v["request_digest"], v["name"]
            n += 1
    with open(vecdir + "/generic-json-v1.json", encoding="utf-8") as f:
        for v in json.load(f)["vectors"]:
            if "error" in v or "canonical" not in v:
                continue
            req = json.loads(v["request_json"])
            if _has_real(req) or _has_dup(v["request_json"]):
                continue
            assert effect_canonical(v["effect_kind"], req) == \
                v["canonical"], v["name"]
            assert effect_digest(v["effect_kind"], req) == \
                v["request_digest"], v["name"]
            n += 1
    return n


def _has_real(v):
    if isinstance(v, float):
        return True
    if isinstance(v, list):
        return any(_has_real(x) for x in v)
    if isinstance(v, dict):
        return any(_has_real(x) for x in v.values())
    return False


def _has_dup(text):
    seen = []

    def hook(pairs):
        seen.append(len(pairs) != len({normalize(k) for k, _ in pairs}))
        return dict(pairs)
    json.loads(text, object_pairs_hook=hook)
    return any(seen)


# ---- raw receipts ----------------------------------------------------------

def raw_member(line, name):
    """The bytes of the top-level member NAME's value (an object) in the
    reply LINE as the broker wrote them, or None."""
    i = 1
    n = len(line)
    depth = 0
    key = None
    while i < n:
        c = line[i]
        if c == '"':
            j = i + 1
            while line[j] != '"':
                j += 2 if line[j] == "\\" else 1
            s = line[i:j + 1]
            i = j + 1
            if depth == 0:
                k = i
                while k < n and line[k] == " ":
                    k += 1
                if k < n and line[k] == ":":
                    key = json.loads(s)
                    i = k + 1
                    continue
            continue
        if c in "{[":
            if depth == 0 and key == name:
                start = i
                d = 0
                while True:
                    c2 = line[i]
                    if c2 == '"':
                        i += 1
                        while line[i] != '"':
                            i += 2 if line[i] == "\\" else 1
                    elif c2 in "{[":
                        d += 1
                    elif c2 in "}]":
                        d -= 1
                        if d == 0:
                            return line[start:i + 1]
                    i += 1
            depth += 1
        elif c in "}]":
            depth -= 1
        i += 1
    return None


# ---- the model -------------------------------------------------------------

TASK_ID_RE = re.compile(r"^TASK-(\d{8})-(\d{3})-([A-Z0-9_-]+)-to-"
                        r"([A-Z0-9_.-]+)$")
REPORT_ID_RE = re.compile(r"^REPORT-(\d{8})-(\d{3})-")


class Task:
    def __init__(self, digest, task):
        self.digest = digest
        self.task = task
        self.receipt = None        # raw bytes of the committed receipt
        self.facts = None          # parsed receipt
        self.compacted = False     # idemctl compact ran since it committed


class Report:
    def __init__(self, digest, report_id, report_path):
        self.digest = digest
        self.report_id = report_id
        self.report_path = report_path


class Effect:
    """States: reserved (a lease [lo, hi] in broker wall-clock ms, the
    window being the begin's (or the last effect_extend's) send and
    receive times), unknown (lapsed, or evidence said unknown),
    released, committed."""

    def __init__(self, kind, csid, digest):
        self.kind = kind
        self.csid = csid
        self.digest = digest
        self.state = None
        self.attempt = 0
        self.fence = None
        self.fences = []           # every fence issued, oldest first
        self.lease_lo = 0.0
        self.lease_hi = 0.0
        # The earliest expiry a record of this attempt gave: after a
        # kill -9 the last durable one counts (an extension is answered
        # before it is durable), which may be any of them, but never a
        # later one than the last answer said (SPEC.md: "only sooner").
        self.lease_floor = 0.0
        self.result_raw = None     # compact result bytes once committed
        self.receipt = None
        self.recovered = False
        self.compacted = False
        self.proceeds_since_release = 0


class Model:
    def __init__(self, capacity, slack_ms):
        self.tasks = {}
        self.reports = {}
        self.effects = {}
        self.numbers = {}          # date -> set of task numbers used
        self.report_numbers = {}   # date -> set of report numbers used
        self.task_files = {}       # task_id -> csid (None: another writer)
        self.day_full = set()      # dates whose 999 numbers are used
        self.capacity = capacity
        self.slack_ms = slack_ms   # clock uncertainty around a lease end
        self.counters = {}         # since the broker's start
        self.compactions = 0
        self.restarted = False

    # -- leases ---------------------------------------------------------
    def lease_state(self, e, t_send_ms, t_recv_ms):
        """'live', 'lapsed' or 'either' for a request sent at t_send and
        answered by t_recv (wall clock, as the broker's)."""
        if e.state != "reserved":
            return None
        if t_recv_ms < e.lease_lo - self.slack_ms:
            return "live"
        if t_send_ms > e.lease_hi + self.slack_ms:
            return "lapsed"
        return "either"

    def in_flight(self):
        n = sum(1 for t in self.tasks.values() if t.receipt is None)
        n += sum(1 for e in self.effects.values()
                 if e.state in ("reserved", "unknown", "released"))
        return n

    def in_flight_key_room(self, least):
        """The table's key bytes the submissions in flight hold: each
        key's UTF-8 length (an effect's: kind, 0x1f, id), at least
        LEAST."""
        n = sum(max(len(c.encode()), least)
                for c, t in self.tasks.items() if t.receipt is None)
        n += sum(max(len(k.encode()) + 1 + len(c.encode()), least)
                 for (k, c), e in self.effects.items()
                 if e.state in ("reserved", "unknown", "released"))
        return n

    def count(self, name, k=1):
        self.counters[name] = self.counters.get(name, 0) + k

    def reset_counters(self):
        self.counters = {}

    def committed_tasks(self):
        return sum(1 for t in self.tasks.values() if t.receipt is not None)

    def effect_counts(self, t_ms):
        c = {"reserved": [0, 0], "outcome_unknown": [0, 0],
             "released": [0, 0], "committed": [0, 0]}
        for e in self.effects.values():
            if e.state == "reserved":
                s = self.lease_state(e, t_ms, t_ms)
                if s == "live":
                    names = ["reserved"]
                elif s == "lapsed":
                    names = ["outcome_unknown"]
                else:
                    names = None
                if names is None:
                    c["reserved"][1] += 1
                    c["outcome_unknown"][1] += 1
                else:
                    c[names[0]][0] += 1
                    c[names[0]][1] += 1
            else:
                name = {"unknown": "outcome_unknown"}.get(e.state, e.state)
                c[name][0] += 1
                c[name][1] += 1
        return c
