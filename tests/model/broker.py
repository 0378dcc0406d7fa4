# SPDX-License-Identifier: ISC
"""tests/model/broker.py: a real idemd for the model test.

It owns class Broker: starting idemd on a temporary root (--ready-fd),
stopping (SIGTERM), killing (SIGKILL) and waiting for it, its workers,
its log, what a request that got no answer found (hang_report), and one
request over its Unix socket.  It never judges an answer: the machine
(machine.py) does.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from harness import IDEMD, REQUEST_TIMEOUT_S, SLOWDOWN, fail, now_ms


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
