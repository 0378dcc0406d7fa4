#!/usr/bin/env python3
"""
explore.py: ALICE-style crash-state exploration of idemd (issue "Prove it",
item 3).  doc/testing.md, section "Crash-state exploration", says what it
proves and how to read a failure.

DESIGN

Record.  A base root is made by a plain idemd: one committed write_task
(the "earlier" submission), then SIGTERM.  For each request kind a copy of
it is served by idemd --workers 1 under strace, from exec on: start-up,
one request, its reply, SIGTERM.  Start-up is in the trace on purpose: it
writes too (the lock file, fsyncs of the topology and of the journal), and
a crash during a restart is a state the next start must accept as well.

Model.  The trace becomes an ordered list of operations on files under
the root: create, write (offset and bytes), truncate, link, unlink,
rename, mkdir, and the barriers fsync/fdatasync.  Files are inodes (a
link shares one); each inode keeps its content and its content at the
last fsync/fdatasync, each directory its entries and its entries at its
last fsync.  A barrier counts at its entry (it covers only what completed
before it started), a mutation at its return.  Nothing else is durable:
an fsync of a file does not make its name durable, a directory fsync
does not make file data durable.

States.  After each prefix k of the list (k = 0 is the snapshot) the
crash states are: everything applied; unsynced file data dropped (each
file back to its last synced content); the last unsynced write of each
file torn to its first half, or zero-filled (size persisted, data not);
unsynced directory entries dropped; both dropped; and, for each pending
item alone (one file or one directory), that item dropped or torn while
the rest is applied, or that item kept while the rest is dropped.
Identical states are tested once (the lock file's content, a pid that
only a message reads, does not count).

Check.  Each state is written to a fresh root; idemd must reach ready on
it (a refusal is a failure: a crash can produce the state); the same
request is sent again, and the earlier submission; the answers and the
TASK/REPORT files are checked (see check_state); SIGTERM must end it
with status 0.

Only the standard library; python3 3.6 or later.
"""
import argparse
import concurrent.futures
import hashlib
import itertools
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

# "?": calls that some architectures do not have (aarch64 has no open,
# link, mkdir...) are skipped there instead of refused.
TRACED_CALLS = (
    "openat,?open,?creat,write,pwrite64,writev,pwritev,pwritev2,"
    "fsync,fdatasync,sync,syncfs,sync_file_range,"
    "?link,linkat,?unlink,unlinkat,?rename,?renameat,renameat2,"
    "ftruncate,truncate,fallocate,?mkdir,mkdirat,?rmdir,"
    "lseek,copy_file_range,?sendfile,close")

# Calls the model does not know: seen on a file under the root, they stop
# the exploration rather than let it prove something about a wrong model.
UNSUPPORTED = {"pwritev", "pwritev2", "sync", "syncfs", "sync_file_range",
               "truncate", "fallocate", "lseek", "copy_file_range",
               "sendfile"}

SOCKET_NAME = ".idem/idemd.sock"
LOCK_NAME = ".idem/idemd.lock"
# The rotate kind's base fills segment 1 to just under this, so that the
# request's first record starts segment 2 and a checkpoint.
SEGMENT_BYTES = 4096
READY_TIMEOUT = 20.0
REPLY_TIMEOUT = 20.0
STOP_TIMEOUT = 20.0

EARLIER_ID = "crashstates/earlier"
TASK_ID = "crashstates/task"
REPORT_ID = "crashstates/report"


class ExploreError(Exception):
    """The exploration itself could not run (not a finding about idemd)."""


# ---- the broker -------------------------------------------------------

class Broker:
    """One idemd on root, optionally under strace; ready when started."""

    def __init__(self, idemd, root, log_path, trace_path=None,
                 watch_log=False):
        self.root = root
        self.log_path = log_path
        self.pid = None
        self.lines = []
        self.cond = threading.Condition()
        self.reader = None
        r, w = os.pipe()
        argv = [idemd, "--root", root, "--workers", "1", "--capacity",
                "1024", "--segment-bytes", str(SEGMENT_BYTES),
                "--ready-fd", str(w)]
        if trace_path is not None:
            argv = ["strace", "-f", "-ttt", "-xx", "-s", "1048576", "-y",
                    "-o", trace_path, "-e", "trace=" + TRACED_CALLS] + argv
        env = dict(os.environ)
        for name in ("IDEM_CRASH_AT", "IDEM_CRASH_WORKER_AT", "IDEM_ROOT",
                     "IDEM_SOCKET", "LD_PRELOAD"):
            env.pop(name, None)
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=self.log,
            stderr=subprocess.PIPE if watch_log else self.log,
            pass_fds=(w,), env=env, cwd=os.path.dirname(root))
        os.close(w)
        if watch_log:
            self.reader = threading.Thread(target=self._read_log)
            self.reader.start()
        self.ready = self._wait_ready(r)
        os.close(r)
        if self.ready:
            # Under strace, proc is strace: the lock file names idemd.
            with open(os.path.join(root, LOCK_NAME), "rb") as f:
                self.pid = int(f.read().split()[0])

    def _read_log(self):
        for line in self.proc.stderr:
            self.log.write(line)
            self.log.flush()
            with self.cond:
                self.lines.append(line)
                self.cond.notify_all()
        with self.cond:
            self.lines.append(None)
            self.cond.notify_all()

    def wait_log(self, pattern):
        """Block until a log line matches pattern (bytes regex)."""
        seen = 0
        deadline = time.monotonic() + READY_TIMEOUT
        with self.cond:
            while True:
                for line in self.lines[seen:]:
                    if line is None:
                        return False
                    if re.search(pattern, line):
                        return True
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(left)

    def _wait_ready(self, r):
        got = b""
        deadline = time.monotonic() + READY_TIMEOUT
        while b"\n" not in got:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                self.kill()
                return False
            chunk = os.read(r, 64)
            if not chunk:
                break
            got += chunk
        if got != b"ready\n":
            try:
                self.proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.kill()
            return False
        return True

    def stop(self):
        """SIGTERM; the exit status, or None if it had to be killed."""
        if self.proc.poll() is None and self.pid is not None:
            os.kill(self.pid, signal.SIGTERM)
        try:
            status = self.proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            status = None
        if self.reader is not None:
            self.reader.join()
        self.log.close()
        return status

    def kill(self):
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        remove_segment(self.root)

    def log_tail(self, lines=12):
        try:
            with open(self.log_path, "rb") as f:
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def remove_segment(root):
    """The shared-memory segment a killed broker leaves (shm/segment.c)."""
    real = os.path.realpath(root).encode()
    name = "/dev/shm/idem-" + hashlib.sha256(real).hexdigest()[:16]
    try:
        os.unlink(name)
    except OSError:
        pass


class Connection:
    def __init__(self, root):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(REPLY_TIMEOUT)
        self.sock.connect(os.path.join(root, SOCKET_NAME))
        self.buf = b""

    def call(self, line):
        """Send one request line; the raw reply line (bytes, no newline)."""
        self.sock.sendall(line + b"\n")
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ExploreError("the broker closed the connection")
            self.buf += chunk
        reply, self.buf = self.buf.split(b"\n", 1)
        return reply

    def close(self):
        self.sock.close()


def raw_member(line, key):
    """The bytes of member key of the JSON object line, exactly as sent."""
    text = line.decode("utf-8")
    marker = '"%s":' % key
    at = text.find(marker)
    if at < 0:
        return None
    start = at + len(marker)
    _, end = json.JSONDecoder().raw_decode(text, start)
    return text[start:end].encode("utf-8")


# ---- snapshots and materialized states --------------------------------

def read_tree(root):
    """{relpath: ("d",) or ("f", bytes)} of a root, sockets left out."""
    tree = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        rel = "" if rel == "." else rel
        for name in dirnames:
            tree[os.path.join(rel, name)] = ("d",)
        for name in filenames:
            path = os.path.join(dirpath, name)
            relpath = os.path.join(rel, name)
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as f:
                    tree[relpath] = ("f", f.read())
    return tree


def write_tree(tree, root):
    if os.path.exists(root):
        shutil.rmtree(root)
    os.makedirs(root)
    for relpath in sorted(tree):
        path = os.path.join(root, relpath)
        if tree[relpath][0] == "d":
            os.makedirs(path, exist_ok=True)
    for relpath in sorted(tree):
        entry = tree[relpath]
        if entry[0] == "f":
            with open(os.path.join(root, relpath), "wb") as f:
                f.write(entry[1])


def tree_key(tree):
    """Dedup key: the whole tree but the lock file's content."""
    h = hashlib.sha256()
    for relpath in sorted(tree):
        entry = tree[relpath]
        h.update(relpath.encode() + b"\0" + entry[0].encode())
        if entry[0] == "f" and relpath != LOCK_NAME:
            h.update(hashlib.sha256(entry[1]).digest())
    return h.hexdigest()


def describe_tree(tree):
    lines = []
    for relpath in sorted(tree):
        entry = tree[relpath]
        if entry[0] == "d":
            continue
        lines.append("    %s  %d bytes  sha256 %s" % (
            relpath, len(entry[1]), hashlib.sha256(entry[1]).hexdigest()[:16]))
    return "\n".join(lines)


# ---- the trace --------------------------------------------------------

LINE_RE = re.compile(r"^(\d+)\s+(\d+\.\d+)\s+(.*)$")
FD_RE = re.compile(r"^(-?\d+|AT_FDCWD)(?:<([^>]*)>)?(\(deleted\))?$")


def unescape(s):
    """A strace string body (-xx: every byte is \\xNN) to bytes."""
    out = bytearray()
    i = 0
    simple = {"n": 10, "t": 9, "r": 13, "v": 11, "f": 12, "\\": 92,
              '"': 34, "'": 39, "a": 7, "b": 8}
    while i < len(s):
        c = s[i]
        if c != "\\":
            out += c.encode("utf-8")
            i += 1
            continue
        n = s[i + 1]
        if n == "x":
            out.append(int(s[i + 2:i + 4], 16))
            i += 4
        elif n in simple:
            out.append(simple[n])
            i += 2
        elif n.isdigit():
            j = i + 1
            while j < len(s) and j < i + 4 and s[j] in "01234567":
                j += 1
            out.append(int(s[i + 1:j], 8))
            i = j
        else:
            out += n.encode()
            i += 2
    return bytes(out)


def split_args(text):
    """Top-level comma-separated arguments of a call, as strings."""
    args, depth, cur, i = [], 0, [], 0
    while i < len(text):
        c = text[i]
        if c == '"':
            j = i + 1
            while text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            cur.append(text[i:j + 1])
            i = j + 1
            continue
        if c in "[{(<":
            depth += 1
        elif c in "]})>":
            depth -= 1
        if c == "," and depth == 0:
            args.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
        i += 1
    if "".join(cur).strip():
        args.append("".join(cur).strip())
    return args


def parse_string(arg):
    if not arg.startswith('"'):
        raise ExploreError("expected a string: %r" % arg[:80])
    end = arg.rfind('"')
    if arg[end + 1:].startswith("..."):
        raise ExploreError("strace truncated a string; raise -s")
    return unescape(arg[1:end])


def parse_fd(arg):
    """(number or None for AT_FDCWD, path bytes or None, deleted)."""
    m = FD_RE.match(arg)
    if m is None:
        raise ExploreError("expected a descriptor: %r" % arg[:80])
    number = None if m.group(1) == "AT_FDCWD" else int(m.group(1))
    path = unescape(m.group(2)).decode("utf-8", "surrogateescape") \
        if m.group(2) is not None else None
    return number, path, m.group(3) is not None


def parse_iov(arg):
    data = b""
    for m in re.finditer(r'iov_base=("(?:[^"\\]|\\.)*")', arg):
        data += parse_string(m.group(1))
    return data


class Call:
    __slots__ = ("name", "args", "ret", "ret_path", "ts", "entry_line",
                 "exit_line", "failed")


def read_calls(trace_path):
    """Whole calls, unfinished/resumed pairs joined, in completion order."""
    pending = {}
    calls = []
    with open(trace_path, "r", encoding="ascii", errors="replace") as f:
        for line_no, line in enumerate(f):
            line = line.rstrip("\n")
            m = LINE_RE.match(line)
            if m is None:
                continue
            pid, ts, rest = m.group(1), float(m.group(2)), m.group(3)
            if rest.startswith("---") or rest.startswith("+++"):
                continue
            entry_line = line_no
            if rest.startswith("<... "):
                if pid not in pending:
                    continue
                entry_line, head = pending.pop(pid)
                rest = head + rest[rest.index("resumed>") + 8:]
            if rest.endswith("<unfinished ...>"):
                pending[pid] = (line_no, rest[:-len("<unfinished ...>")])
                continue
            call = parse_call(rest)
            if call is None:
                continue
            call.ts = ts
            call.entry_line = entry_line
            call.exit_line = line_no
            calls.append(call)
    return calls


def parse_call(text):
    m = re.match(r"^([a-z0-9_]+)\((.*)$", text)
    if m is None:
        return None
    body = m.group(2)
    cut = body.rfind(") = ")
    if cut < 0:
        if body.rstrip().endswith("= ?"):
            return None		# the process died in it
        return None
    call = Call()
    call.name = m.group(1)
    call.args = split_args(body[:cut])
    ret = body[cut + 4:].strip()
    call.failed = ret.startswith("-1") or ret.startswith("?")
    call.ret_path = None
    rm = re.match(r"^(-?\d+)(?:<([^>]*)>)?", ret)
    call.ret = int(rm.group(1)) if rm else None
    if rm and rm.group(2) is not None:
        call.ret_path = unescape(rm.group(2)).decode("utf-8",
                                                   "surrogateescape")
    return call


class Op:
    """One operation on the persistent state, paths relative to the root."""
    __slots__ = ("kind", "path", "path2", "offset", "data", "size",
                 "append", "key", "ts", "what")

    def __init__(self, kind, path, **kw):
        self.kind = kind
        self.path = path
        self.path2 = kw.get("path2")
        self.offset = kw.get("offset")
        self.data = kw.get("data")
        self.size = kw.get("size")
        self.append = kw.get("append", False)
        self.key = 0
        self.ts = 0.0
        self.what = ""

    def describe(self):
        if self.kind == "write":
            where = "append" if self.append else "at %d" % self.offset
            return "write %s %d bytes %s" % (self.path, len(self.data), where)
        if self.kind == "trunc":
            return "truncate %s to %d" % (self.path, self.size)
        if self.kind in ("link", "rename"):
            return "%s %s -> %s" % (self.kind, self.path, self.path2)
        return "%s %s" % (self.kind, self.path or ".")


class TraceModel:
    """Turns calls into Ops; knows only which paths exist (for O_CREAT)."""

    def __init__(self, root, cwd, tree):
        self.root = root
        self.cwd = cwd
        self.exists = set(tree) | {""}
        self.dirs = {p for p in tree if tree[p][0] == "d"} | {""}
        self.fds = {}		# (fd, path) -> {"append": bool, "pos": int}
        self.ops = []

    def rel(self, path):
        if path is None:
            return None
        path = os.path.normpath(path)
        if path == self.root:
            return ""
        if path.startswith(self.root + "/"):
            return path[len(self.root) + 1:]
        return None

    def at(self, dirarg, namearg):
        name = parse_string(namearg).decode("utf-8", "surrogateescape")
        if name.startswith("/"):
            return self.rel(name)
        if dirarg is None:
            base = self.cwd
        else:
            _, base, _ = parse_fd(dirarg)
            if base is None:
                raise ExploreError("a relative name without a directory "
                                   "path: %s" % dirarg)
        return self.rel(os.path.join(base, name))

    def add(self, call, op):
        op.ts = call.ts
        # A barrier covers what completed before it started.
        op.key = call.entry_line if op.kind == "sync" else call.exit_line
        self.ops.append(op)

    def feed(self, call):
        name = call.name
        if call.failed or call.ret is None:
            return
        if name == "close":
            _, path, _ = parse_fd(call.args[0])
            fd = int(call.args[0].split("<")[0])
            self.fds.pop((fd, path), None)
            return
        handler = getattr(self, "on_" + name, None)
        if name in UNSUPPORTED:
            rel = self.target_of(call)
            # rewinddir() seeks a directory: that writes nothing.
            if rel is not None and not (name == "lseek" and
                                        rel in self.dirs):
                raise ExploreError("%s on %s: the model does not know it"
                                   % (name, rel))
            return
        if handler is not None:
            handler(call)

    def target_of(self, call):
        for arg in call.args:
            if "<" in arg and FD_RE.match(arg):
                _, path, _ = parse_fd(arg)
                if self.rel(path) is not None:
                    return self.rel(path)
        return None

    def fd_path(self, arg):
        number, path, deleted = parse_fd(arg)
        if deleted:
            return number, path, None
        return number, path, self.rel(path)

    # open
    def opened(self, call, flags):
        if call.ret_path is None:
            return
        rel = self.rel(call.ret_path)
        if rel is None:
            return
        if "O_CREAT" in flags and rel not in self.exists:
            self.add(call, Op("create", rel))
            self.exists.add(rel)
        elif "O_TRUNC" in flags and ("O_WRONLY" in flags or
                                     "O_RDWR" in flags):
            self.add(call, Op("trunc", rel, size=0))
        self.fds[(call.ret, call.ret_path)] = {
            "append": "O_APPEND" in flags, "pos": 0}

    def on_openat(self, call):
        self.opened(call, call.args[2])

    def on_open(self, call):
        self.opened(call, call.args[1])

    def on_creat(self, call):
        self.opened(call, "O_CREAT|O_WRONLY|O_TRUNC")

    # data
    def written(self, call, data, offset=None):
        number, path, rel = self.fd_path(call.args[0])
        if rel is None or call.ret <= 0:
            return
        data = data[:call.ret]
        if offset is not None:
            self.add(call, Op("write", rel, offset=offset, data=data))
            return
        state = self.fds.get((number, path))
        if state is None:
            raise ExploreError("write to %s through a descriptor opened "
                               "outside the trace" % rel)
        if state["append"]:
            self.add(call, Op("write", rel, data=data, append=True))
        else:
            self.add(call, Op("write", rel, offset=state["pos"], data=data))
            state["pos"] += len(data)

    def on_write(self, call):
        self.written(call, parse_string(call.args[1]))

    def on_pwrite64(self, call):
        self.written(call, parse_string(call.args[1]), int(call.args[3]))

    def on_writev(self, call):
        self.written(call, parse_iov(call.args[1]))

    def on_ftruncate(self, call):
        _, _, rel = self.fd_path(call.args[0])
        if rel is not None:
            self.add(call, Op("trunc", rel, size=int(call.args[1])))

    def on_fsync(self, call):
        _, _, rel = self.fd_path(call.args[0])
        if rel is not None:
            self.add(call, Op("sync", rel))

    on_fdatasync = on_fsync

    # names
    def ignored(self, rel):
        return rel == SOCKET_NAME

    def on_mkdir(self, call):
        rel = self.at(None, call.args[0])
        if rel is not None:
            self.add(call, Op("mkdir", rel))
            self.exists.add(rel)
            self.dirs.add(rel)

    def on_mkdirat(self, call):
        rel = self.at(call.args[0], call.args[1])
        if rel is not None:
            self.add(call, Op("mkdir", rel))
            self.exists.add(rel)
            self.dirs.add(rel)

    def linked(self, call, old, new):
        if old is None and new is None:
            return
        if old is None or new is None:
            raise ExploreError("link across the root's boundary")
        self.add(call, Op("link", old, path2=new))
        self.exists.add(new)

    def on_link(self, call):
        self.linked(call, self.at(None, call.args[0]),
                    self.at(None, call.args[1]))

    def on_linkat(self, call):
        if "AT_EMPTY_PATH" in call.args[4]:
            raise ExploreError("linkat AT_EMPTY_PATH: not modelled")
        self.linked(call, self.at(call.args[0], call.args[1]),
                    self.at(call.args[2], call.args[3]))

    def unlinked(self, call, rel):
        if rel is None or self.ignored(rel):
            return
        self.add(call, Op("unlink", rel))
        self.exists.discard(rel)

    def on_unlink(self, call):
        self.unlinked(call, self.at(None, call.args[0]))

    def on_rmdir(self, call):
        self.unlinked(call, self.at(None, call.args[0]))

    def on_unlinkat(self, call):
        self.unlinked(call, self.at(call.args[0], call.args[1]))

    def renamed(self, call, old, new):
        if old is None and new is None:
            return
        if old is None or new is None:
            raise ExploreError("rename across the root's boundary")
        self.add(call, Op("rename", old, path2=new))
        self.exists.discard(old)
        self.exists.add(new)

    def on_rename(self, call):
        self.renamed(call, self.at(None, call.args[0]),
                     self.at(None, call.args[1]))

    def on_renameat(self, call):
        self.renamed(call, self.at(call.args[0], call.args[1]),
                     self.at(call.args[2], call.args[3]))

    def on_renameat2(self, call):
        if "RENAME_EXCHANGE" in call.args[4]:
            raise ExploreError("renameat2 RENAME_EXCHANGE: not modelled")
        self.on_renameat(call)


# ---- the file-system model --------------------------------------------

class Inode:
    """A file or a directory: what it is now, what of it is durable, and
    the changes in between, in order."""
    __slots__ = ("is_dir", "data", "synced", "entries", "synced_entries",
                 "pending")

    def __init__(self, is_dir, data=b""):
        self.is_dir = is_dir
        self.data = bytearray(data)	# files
        self.synced = bytes(data)
        self.entries = {}		# directories
        self.synced_entries = {}
        # Files: ("write", offset, bytes) or ("trunc", size, None).
        # Directories: ("set", name, inode) or ("del", name, None).
        self.pending = []


class FileSystem:
    """The volatile state and what of it is durable."""

    def __init__(self, tree):
        self.root = Inode(True)
        for relpath in sorted(tree):
            entry = tree[relpath]
            parent, name = self.parent_of(relpath)
            node = Inode(True) if entry[0] == "d" else Inode(False, entry[1])
            parent.entries[name] = node
            parent.synced_entries[name] = node

    def lookup(self, relpath):
        node = self.root
        if relpath == "":
            return node
        for part in relpath.split("/"):
            if not node.is_dir or part not in node.entries:
                raise ExploreError("no %s in the model" % relpath)
            node = node.entries[part]
        return node

    def parent_of(self, relpath):
        head, name = os.path.split(relpath)
        return self.lookup(head), name

    def set_entry(self, relpath, node):
        parent, name = self.parent_of(relpath)
        parent.entries[name] = node
        parent.pending.append(("set", name, node))

    def del_entry(self, relpath):
        parent, name = self.parent_of(relpath)
        if name not in parent.entries:
            raise ExploreError("no %s in the model" % relpath)
        del parent.entries[name]
        parent.pending.append(("del", name, None))

    def apply(self, op):
        if op.kind == "create":
            self.set_entry(op.path, Inode(False))
        elif op.kind == "mkdir":
            self.set_entry(op.path, Inode(True))
        elif op.kind == "link":
            self.set_entry(op.path2, self.lookup(op.path))
        elif op.kind == "unlink":
            self.del_entry(op.path)
        elif op.kind == "rename":
            # One directory's changes persist in order; a rename across
            # two directories is two changes (the model's doubt).
            node = self.lookup(op.path)
            self.del_entry(op.path)
            self.set_entry(op.path2, node)
        elif op.kind == "write":
            node = self.lookup(op.path)
            offset = len(node.data) if op.append else op.offset
            write_at(node.data, offset, op.data)
            node.pending.append(("write", offset, op.data))
        elif op.kind == "trunc":
            node = self.lookup(op.path)
            truncate(node.data, op.size)
            node.pending.append(("trunc", op.size, None))
        elif op.kind == "sync":
            node = self.lookup(op.path)
            if node.is_dir:
                node.synced_entries = dict(node.entries)
            else:
                node.synced = bytes(node.data)
            node.pending = []
        else:
            raise ExploreError("unknown op %s" % op.kind)

    def pending_items(self):
        """(path, inode) of every inode any crash state can show whose
        durable state is behind its volatile one."""
        items, seen = [], set()

        def walk(node, path):
            if id(node) in seen:
                return
            seen.add(id(node))
            if node.pending:
                items.append((path, node))
            if not node.is_dir:
                return
            children = list(node.synced_entries.items())
            children += [(name, child) for kind, name, child in node.pending
                         if kind == "set"]
            for name, child in children:
                walk(child, os.path.join(path, name) if path else name)
        walk(self.root, "")
        return items

    def tree(self, choice):
        """Materialize; choice(inode) is an option of options(inode), or
        None for "everything applied"."""
        tree = {}

        def walk(node, path):
            for name, child in sorted(entries_of(node, choice(node))
                                      .items()):
                relpath = os.path.join(path, name) if path else name
                if child.is_dir:
                    tree[relpath] = ("d",)
                    walk(child, relpath)
                else:
                    tree[relpath] = ("f", content_of(child, choice(child)))
        walk(self.root, "")
        return tree


def write_at(data, offset, chunk):
    if offset > len(data):
        data.extend(b"\0" * (offset - len(data)))
    data[offset:offset + len(chunk)] = chunk


def truncate(data, size):
    if size < len(data):
        del data[size:]
    else:
        data.extend(b"\0" * (size - len(data)))


def options(node, zero_fill):
    """What a crash can leave of node's pending changes: (j, how), the
    first j applied, and with how "torn" or "zero" the next write also
    half applied or applied as zeros (size persisted, data not).  First
    (len(pending), "") is everything applied, last (0, "") nothing: the
    first combination to reach a state names it, so names say what was
    lost rather than what was kept."""
    out = [(len(node.pending), "")]
    for j in range(len(node.pending) - 1, -1, -1):
        if node.pending[j][0] == "write":
            if len(node.pending[j][2]) > 1:
                out.append((j, "torn"))
            if zero_fill:
                out.append((j, "zero"))
        out.append((j, ""))
    return out


def entries_of(node, option):
    if option is None or option[0] == len(node.pending):
        return node.entries
    entries = dict(node.synced_entries)
    for kind, name, child in node.pending[:option[0]]:
        if kind == "set":
            entries[name] = child
        else:
            entries.pop(name, None)
    return entries


def content_of(node, option):
    if option is None or option == (len(node.pending), ""):
        return bytes(node.data)
    j, how = option
    data = bytearray(node.synced)
    for kind, a, chunk in node.pending[:j]:
        if kind == "write":
            write_at(data, a, chunk)
        else:
            truncate(data, a)
    if how == "torn":
        _, a, chunk = node.pending[j]
        write_at(data, a, chunk[:len(chunk) // 2])
    elif how == "zero":
        _, a, chunk = node.pending[j]
        write_at(data, a, b"\0" * len(chunk))
    return bytes(data)


def describe_option(path, node, option):
    j, how = option
    what = "entry changes" if node.is_dir else "changes"
    text = "%s%s: %d of %d unsynced %s" % (
        path or ".", "/" if node.is_dir else "", j, len(node.pending), what)
    if how == "torn":
        text += ", the next one torn in half"
    elif how == "zero":
        text += ", the next one zero-filled"
    return text


class State:
    __slots__ = ("tree", "k", "variant", "acked", "count")


def crash_states(base_tree, ops, k_ack, zero_fill, limit):
    """Every crash state of every prefix of ops, deduplicated, in order.

    At prefix k each pending item (a file or directory with changes since
    its last sync) may have persisted any prefix of its changes, the next
    write possibly torn; items are independent of each other.  All
    combinations are taken while there are at most limit of them; past
    that, each item's options with the others fully applied and with the
    others fully dropped."""
    fs = FileSystem(base_tree)
    unique = {}
    generated = 0
    for k in range(len(ops) + 1):
        if k > 0:
            fs.apply(ops[k - 1])
        items = fs.pending_items()
        per_item = [options(node, zero_fill) for _, node in items]
        total = 1
        for o in per_item:
            total *= len(o)
        if total <= limit:
            combos = itertools.product(*per_item)
        else:
            combos = []
            for i, o in enumerate(per_item):
                for option in o:
                    for rest in ("all", "none"):
                        combo = [opts[0] if rest == "all" else opts[-1]
                                 for opts in per_item]
                        combo[i] = option
                        combos.append(tuple(combo))
        for combo in combos:
            generated += 1
            chosen = {id(node): option
                      for (_, node), option in zip(items, combo)}
            tree = fs.tree(lambda n: chosen.get(id(n)))
            key = tree_key(tree)
            state = unique.get(key)
            if state is None:
                state = State()
                state.tree = tree
                state.k = k
                dropped = [describe_option(path, node, option)
                           for (path, node), option in zip(items, combo)
                           if option != (len(node.pending), "")]
                state.variant = "; ".join(dropped) if dropped else \
                    "everything applied"
                state.acked = False
                state.count = 0
                unique[key] = state
            state.count += 1
            # A state some crash after the reply can leave must answer as
            # acknowledged, whichever earlier point also leaves it.
            if k >= k_ack:
                state.acked = True
    return list(unique.values()), generated


# ---- the request kinds ------------------------------------------------

def task_request(submission_id, subject, request_id):
    request = {"op": "write_task", "id": request_id,
               "task": {"sender": "PM", "recipient": "DEV",
                        "subject": subject,
                        "body": "Crash-state exploration.\nSecond line.\n",
                        "priority": "P1"}}
    if submission_id is not None:
        request["client_submission_id"] = submission_id
    return json.dumps(request, separators=(",", ":")).encode()


def report_request(task_id):
    return json.dumps({
        "op": "write_report", "id": 3, "task_id": task_id,
        "client_submission_id": REPORT_ID,
        "report": {"sender": "DEV", "status": "done",
                   "body": "Done, as the crash states say.\n"}},
        separators=(",", ":")).encode()


def front_matter(data):
    """{key: raw value} of the front matter idem writes."""
    facts = {}
    lines = data.split(b"\n")
    if not lines or lines[0] != b"---":
        return facts
    for line in lines[1:]:
        if line == b"---":
            break
        key, sep, value = line.partition(b": ")
        if sep:
            facts[key.decode("ascii", "replace")] = value
    return facts


def workspace_files(root, prefix):
    """[(relpath, bytes)] of every non-hidden <prefix>*.md outside .idem."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".idem"]
        for name in filenames:
            if name.startswith(prefix) and name.endswith(".md"):
                path = os.path.join(dirpath, name)
                with open(path, "rb") as f:
                    found.append((os.path.relpath(path, root), f.read()))
    return found


def with_submission(files, submission_id, task_id=None):
    want = json.dumps(submission_id).encode()
    out = []
    for relpath, data in files:
        facts = front_matter(data)
        if facts.get("client_submission_id") != want:
            continue
        if task_id is not None and \
                facts.get("task_id") != json.dumps(task_id).encode():
            continue
        out.append((relpath, data))
    return out


class Base:
    """A root to record on: its tree and its earlier submission."""
    __slots__ = ("tree", "earlier_request", "earlier_reply", "earlier_task")


class Kind:
    """One request kind: its request, its reply, and its checks."""

    def __init__(self, name, request, base):
        self.name = name
        self.request = request
        self.base = base
        self.reply = None		# the original reply, raw
        self.ops = []
        self.k_ack = None
        self.phases = {}

    def check(self, root, before, reply, problems, earlier):
        if self.name in ("task", "rotate"):
            self.check_task(root, before, reply, problems)
        elif self.name == "legacy":
            self.check_legacy(root, before, reply, problems)
        else:
            self.check_report(root, before, reply, problems, earlier)

    def check_task(self, root, before, reply, problems):
        r = json.loads(reply)
        if not r.get("ok") or r.get("disposition") not in ("created",
                                                           "reused"):
            problems.append("retry answered %s" % reply.decode())
            return
        prior = with_submission(before, TASK_ID)
        if len(prior) > 1:
            problems.append("%d TASK files of the submission before the "
                            "retry" % len(prior))
        if self.acked:
            if r["disposition"] != "reused" or r.get("action_taken"):
                problems.append("acknowledged before the crash, but the "
                                "retry answered %s" % r["disposition"])
            if raw_member(reply, "receipt") != \
                    raw_member(self.reply, "receipt"):
                problems.append("receipt differs from the first one:\n"
                                "      first %s\n      retry %s" % (
                                    raw_member(self.reply, "receipt"),
                                    raw_member(reply, "receipt")))
        after = with_submission(workspace_files(root, "TASK-"), TASK_ID)
        if len(after) != 1:
            problems.append("%d TASK files of the submission after the "
                            "retry: %s" % (len(after),
                                           [p for p, _ in after]))
            return
        receipt = r["receipt"]
        relpath, data = after[0]
        if relpath != receipt["task_path"]:
            problems.append("the TASK file is %s, the receipt says %s" % (
                relpath, receipt["task_path"]))
        if hashlib.sha256(data).hexdigest() != receipt["file_digest"]:
            problems.append("the TASK file's digest is not the receipt's "
                            "file_digest")

    def check_legacy(self, root, before, reply, problems):
        r = json.loads(reply)
        if not r.get("ok") or r.get("disposition") != "created" or \
                r.get("idempotent") is not False:
            problems.append("legacy retry answered %s" % reply.decode())
            return
        new_id = r["receipt"]["task_id"]
        names_before = {os.path.basename(p)[:-3] for p, _ in before}
        if new_id in names_before:
            problems.append("the retry took %s, a name already on disk" %
                            new_id)
        first = json.loads(self.reply)["receipt"]
        if self.acked:
            if new_id == first["task_id"]:
                problems.append("the retry reused the acknowledged number "
                                "of %s" % new_id)
            found = [d for p, d in workspace_files(root, "TASK-")
                     if os.path.basename(p) == first["task_id"] + ".md"]
            if len(found) != 1 or hashlib.sha256(found[0]).hexdigest() != \
                    first["file_digest"]:
                problems.append("the acknowledged legacy task %s is not on "
                                "disk as written" % first["task_id"])
        found = [d for p, d in workspace_files(root, "TASK-")
                 if p == r["receipt"]["task_path"]]
        if len(found) != 1 or hashlib.sha256(found[0]).hexdigest() != \
                r["receipt"]["file_digest"]:
            problems.append("the retry's task %s is not on disk as "
                            "answered" % new_id)

    def check_report(self, root, before, reply, problems, earlier):
        r = json.loads(reply)
        task_id = json.loads(earlier)["receipt"]["task_id"]
        if not r.get("ok"):
            problems.append("report retry answered %s" % reply.decode())
            return
        first = json.loads(self.reply)
        prior = with_submission(before, REPORT_ID, None)
        if len(prior) > 1:
            problems.append("%d REPORT files of the submission before the "
                            "retry" % len(prior))
        if self.acked:
            if r.get("deduplicated") is not True or \
                    r.get("report_id") != first["report_id"] or \
                    r.get("report_path") != first["report_path"]:
                problems.append("acknowledged before the crash, but the "
                                "retry answered %s" % reply.decode())
        after = [(p, d) for p, d in with_submission(
            workspace_files(root, "REPORT-"), REPORT_ID)
            if front_matter(d).get("task_id") ==
            json.dumps(task_id).encode()]
        if len(after) != 1:
            problems.append("%d REPORT files of the submission after the "
                            "retry: %s" % (len(after),
                                           [p for p, _ in after]))
        elif after[0][0] != r.get("report_path"):
            problems.append("the REPORT file is %s, the reply says %s" % (
                after[0][0], r.get("report_path")))


# ---- recording and checking -------------------------------------------

class Explorer:
    def __init__(self, args):
        self.args = args
        self.idemd = os.path.realpath(args.idemd)
        self.work = os.path.realpath(tempfile.mkdtemp(
            prefix="idem-crashstates.", dir=args.tmpdir))
        self.lock = threading.Lock()
        self.failures = []
        self.slots = []

    def log(self, text):
        with self.lock:
            print(text, flush=True)

    def make_base(self, name, fill):
        """A root with the earlier submission committed; with fill, legacy
        tasks after it until segment 1 is one record short of
        SEGMENT_BYTES."""
        base = Base()
        root = os.path.join(self.work, name, "root")
        os.makedirs(root)
        b = Broker(self.idemd, root, os.path.join(self.work, name,
                                                  "idemd.log"))
        if not b.ready:
            raise ExploreError("idemd did not start on an empty root:\n" +
                               b.log_tail())
        c = Connection(root)
        base.earlier_request = task_request(EARLIER_ID, "committed before "
                                            "the trace", 1)
        base.earlier_reply = c.call(base.earlier_request)
        segment = os.path.join(root, ".idem", "journal",
                               "0000000000000001.jnl")
        # A legacy record is 160 bytes; the request's first one is more.
        while fill and os.path.getsize(segment) + 160 < SEGMENT_BYTES:
            reply = json.loads(c.call(task_request(None, "filler", 0)))
            if not reply.get("ok"):
                raise ExploreError("a filler task: %s" % reply)
        c.close()
        if b.stop() != 0:
            raise ExploreError("idemd did not stop cleanly on the base root")
        if json.loads(base.earlier_reply).get("disposition") != "created":
            raise ExploreError("the earlier submission: %s" %
                               base.earlier_reply.decode())
        base.tree = read_tree(root)
        base.earlier_task = json.loads(base.earlier_reply)["receipt"][
            "task_id"]
        return base

    def record(self, kind):
        where = os.path.join(self.work, kind.name)
        root = os.path.join(where, "traced", "root")
        write_tree(kind.base.tree, root)
        trace = os.path.join(where, "trace.txt")
        rotate = kind.name == "rotate"
        b = Broker(self.idemd, root, os.path.join(where, "traced.log"),
                   trace_path=trace, watch_log=rotate)
        if not b.ready:
            raise ExploreError("idemd did not start under strace:\n" +
                               b.log_tail())
        c = Connection(root)
        t_request = time.time()
        kind.reply = c.call(kind.request)
        c.close()
        # The checkpoint runs beside the request; its pruning follows the
        # log line and finishes before a SIGTERM'd broker exits.
        if rotate and not b.wait_log(rb"checkpoint checkpoint-"):
            b.kill()
            raise ExploreError("no checkpoint in the rotate run:\n" +
                               b.log_tail())
        status = b.stop()
        if status != 0:
            raise ExploreError("traced idemd ended with status %s" % status)
        if not json.loads(kind.reply).get("ok"):
            raise ExploreError("the traced %s request failed: %s" % (
                kind.name, kind.reply.decode()))

        model = TraceModel(os.path.realpath(root),
                           os.path.dirname(os.path.realpath(root)),
                           kind.base.tree)
        reply_line = None
        for call in read_calls(trace):
            if reply_line is None and call.name in ("write", "writev") and \
                    not call.failed and "socket:" in unescape_fd(call):
                data = parse_iov(call.args[1]) if call.name == "writev" \
                    else parse_string(call.args[1])
                if data.startswith(kind.reply):
                    reply_line = call.entry_line
            model.feed(call)
        if reply_line is None:
            raise ExploreError("the reply is not in the trace")
        model.ops.sort(key=lambda op: op.key)
        kind.ops = model.ops
        # Acknowledged: every operation before the reply was written.
        kind.k_ack = sum(1 for op in kind.ops if op.key < reply_line)
        kind.startup_ops = sum(1 for op in kind.ops if op.ts < t_request)
        with open(os.path.join(where, "ops.txt"), "w") as f:
            for i, op in enumerate(kind.ops):
                mark = " <- reply sent after this" \
                    if i + 1 == kind.k_ack else ""
                f.write("%3d %.6f %s%s\n" % (i + 1, op.ts, op.describe(),
                                             mark))

    def slot(self):
        with self.lock:
            if self.slots:
                return self.slots.pop()
        return os.path.join(self.work, "s%d" % id(threading.current_thread()))

    def give_back(self, path):
        with self.lock:
            self.slots.append(path)

    def check_state(self, kind, number, state):
        where = self.slot()
        try:
            problems = self.check_in(kind, state, where)
        except (OSError, ValueError, ExploreError) as e:
            problems = ["the check itself failed: %s" % e]
        finally:
            self.give_back(where)
        if problems:
            self.failed(kind, number, state, problems, where)
        return not problems

    def check_in(self, kind, state, where):
        root = os.path.join(where, "root")
        write_tree(state.tree, root)
        before = workspace_files(root, "TASK-") + \
            workspace_files(root, "REPORT-")
        log_path = os.path.join(where, "idemd.log")
        if os.path.exists(log_path):
            os.unlink(log_path)
        b = Broker(self.idemd, root, log_path)
        if not b.ready:
            b.stop()
            return ["idemd refused to start on this state:\n" +
                    indent(b.log_tail())]
        problems = []
        try:
            c = Connection(root)
            reply = c.call(kind.request)
            earlier = c.call(kind.base.earlier_request)
            c.close()
        except (OSError, ExploreError) as e:
            b.kill()
            return ["no answer: %s\n%s" % (e, indent(b.log_tail()))]
        kind.acked = state.acked
        kind.check(root, before, reply, problems, kind.base.earlier_reply)
        r = json.loads(earlier)
        if r.get("disposition") != "reused" or \
                raw_member(earlier, "receipt") != \
                raw_member(kind.base.earlier_reply, "receipt"):
            problems.append("the earlier committed submission answered %s"
                            % earlier.decode())
        status = b.stop()
        if status != 0:
            problems.append("idemd did not stop cleanly (status %s)" %
                            status)
        if problems:
            problems.append("idemd log:\n" + indent(b.log_tail()))
        return problems

    def failed(self, kind, number, state, problems, where):
        keep = os.path.join(self.work, "failures", "%s-%d" % (kind.name,
                                                              number))
        write_tree(state.tree, os.path.join(keep, "root"))
        text = ["FAIL: %s state %d: crash after op %d of %d (%s), %s%s" % (
            kind.name, number, state.k, len(kind.ops),
            kind.ops[state.k - 1].describe() if state.k else "snapshot",
            state.variant, ", reply already sent" if state.acked else "")]
        text += ["  " + p for p in problems]
        text.append("  the state (kept in %s):" % keep)
        text.append(describe_tree(state.tree))
        with open(os.path.join(keep, "failure.txt"), "w") as f:
            f.write("\n".join(text) + "\n")
        with self.lock:
            self.failures.append("\n".join(text))
        self.log("\n".join(text))

    def explore(self, kind, deadline):
        states, generated = crash_states(kind.base.tree, kind.ops,
                                         kind.k_ack, self.args.zero_fill,
                                         self.args.combinations)
        chosen = choose(states, self.args.max_states)
        jobs = max(1, self.args.jobs)
        explored = 0
        kind_failures = 0
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            futures = []
            for number, state in chosen:
                futures.append(pool.submit(self.run_one, kind, number,
                                           state, deadline))
            for f in futures:
                result = f.result()
                if result is None:
                    continue
                explored += 1
                if not result:
                    kind_failures += 1
        acked = sum(1 for s in states if s.acked)
        self.log("%s: %d operations on the root (%d in start-up, reply "
                 "after op %d); crash states generated %d, unique %d (%d "
                 "with the reply sent), explored %d, failures %d" % (
                     kind.name, len(kind.ops), kind.startup_ops, kind.k_ack,
                     generated, len(states), acked, explored,
                     kind_failures))
        return explored, len(states)

    def run_one(self, kind, number, state, deadline):
        if time.monotonic() > deadline:
            return None
        # kind.acked is per call: give each thread its own view.
        view = Kind(kind.name, kind.request, kind.base)
        view.reply = kind.reply
        view.ops = kind.ops
        ok = self.check_state(view, number, state)
        if self.args.verbose:
            self.log("  %s %d: %s: after op %d, %s%s" % (
                "ok" if ok else "FAIL", number, kind.name, state.k,
                state.variant, " (acked)" if state.acked else ""))
        return ok


def unescape_fd(call):
    try:
        _, path, _ = parse_fd(call.args[0])
    except ExploreError:
        return ""
    return path or ""


def choose(states, cap):
    """All states, or cap of them spread evenly over the trace."""
    numbered = list(enumerate(states, 1))
    if cap is None or len(numbered) <= cap:
        return numbered
    step = len(numbered) / float(cap)
    return [numbered[int(i * step)] for i in range(cap)]


def indent(text):
    return "\n".join("      " + line for line in text.splitlines())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idemd", default=os.environ.get("IDEMD"),
                        help="the idemd binary (env IDEMD)")
    parser.add_argument("--kinds", default="task,legacy,report,rotate",
                        help="request kinds: task, legacy, report, rotate")
    parser.add_argument("--jobs", type=int,
                        default=min(4, os.cpu_count() or 1),
                        help="states checked at once")
    parser.add_argument("--max-states", type=int, default=None,
                        help="at most this many states per kind")
    parser.add_argument("--budget", type=float, default=150.0,
                        help="seconds for the whole run; states left over "
                        "are counted as not explored")
    parser.add_argument("--zero-fill", action="store_true",
                        help="also crash states where an unsynced write's "
                        "size persisted but not its data (zeros)")
    parser.add_argument("--combinations", type=int, default=4096,
                        help="take every combination of the pending items' "
                        "options while there are at most this many")
    parser.add_argument("--tmpdir", default=os.environ.get("TMPDIR", "/tmp"))
    parser.add_argument("--keep", action="store_true",
                        help="keep the work directory even on success")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    if not args.idemd:
        parser.error("--idemd or IDEMD is required")
    if shutil.which("strace") is None:
        print("SKIP: strace not found")
        return 77

    started = time.monotonic()
    deadline = started + args.budget
    ex = Explorer(args)
    total_explored = total_unique = 0
    try:
        names = args.kinds.split(",")
        for name in names:
            if name not in ("task", "legacy", "report", "rotate"):
                parser.error("unknown kind %s" % name)
        small = ex.make_base("base", False)
        kinds = []
        for name in names:
            if name == "task":
                kinds.append(Kind("task", task_request(
                    TASK_ID, "one new task", 2), small))
            elif name == "legacy":
                kinds.append(Kind("legacy", task_request(
                    None, "one legacy task", 2), small))
            elif name == "report":
                kinds.append(Kind("report", report_request(
                    small.earlier_task), small))
            else:
                kinds.append(Kind("rotate", task_request(
                    TASK_ID, "one new task past the segment", 2),
                    ex.make_base("base-full", True)))
        for kind in kinds:
            ex.record(kind)
        for kind in kinds:
            explored, unique = ex.explore(kind, deadline)
            total_explored += explored
            total_unique += unique
    except ExploreError as e:
        print("ERROR: %s" % e)
        print("work directory kept: %s" % ex.work)
        return 99
    elapsed = time.monotonic() - started
    if total_explored < total_unique:
        print("note: %d of %d unique states not explored (--max-states or "
              "--budget)" % (total_unique - total_explored, total_unique))
    print("crash states explored: %d, failures: %d (%.1f s)" % (
        total_explored, len(ex.failures), elapsed))
    if ex.failures or args.keep:
        print("work directory kept: %s" % ex.work)
    else:
        shutil.rmtree(ex.work, ignore_errors=True)
    return 1 if ex.failures else 0


if __name__ == "__main__":
    sys.exit(main())
