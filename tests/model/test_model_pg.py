# SPDX-License-Identifier: ISC
"""tests/model/test_model_pg.py: the model's machine (machine.py) on
the PostgreSQL store: two brokers (`--store postgresql://...`,
`--host-id A` and `B`) on one workspace, requests alternating between
them, against one model; besides the local machine's rules the
database's backends are terminated (pg_terminate_backend) and the
database restarted (fast or immediate, a crash) among the steps.

A private server is started for the run as tests/cluster/pgserver.c
starts one: initdb and pg_ctl as `nobody` when root, no TCP listener,
fsync on.  Run by tests/model/run_pg.sh; the environment is
test_model.py's, plus IDEM_PG_BINDIR.
"""

import glob
import os
import pwd
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
import test_model as T  # noqa: E402
from broker import Broker  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import rule  # noqa: E402
from machine import IdemMachine  # noqa: E402


def bindir():
    d = os.environ.get("IDEM_PG_BINDIR")
    if d and os.access(os.path.join(d, "initdb"), os.X_OK):
        return d
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.access(os.path.join(d, "initdb"), os.X_OK) and \
                os.access(os.path.join(d, "pg_ctl"), os.X_OK):
            return d
    return None


class PgServer:
    """A private PostgreSQL for the run."""

    def __init__(self, bdir):
        self.bin = bdir
        self.dir = tempfile.mkdtemp(prefix="idem-pg.", dir="/tmp")
        self.data = os.path.join(self.dir, "data")
        self.log = os.path.join(self.dir, "server.log")
        self.user = None
        if os.geteuid() == 0:
            pw = pwd.getpwnam("nobody")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            # pg_ctl -l appends to it as the server's owner.
            open(self.log, "a").close()
            os.chown(self.log, pw.pw_uid, pw.pw_gid)
            self.user = pw
        self.run([os.path.join(bdir, "initdb"), "-D", self.data, "-U",
                  "idem", "-A", "trust", "-E", "UTF8", "--no-locale",
                  "--no-sync"])
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            f.write("\n# idem's model test\nlisten_addresses = ''\n"
                    "unix_socket_directories = '%s'\nport = 5432\n"
                    "fsync = on\nsynchronous_commit = on\n"
                    "max_connections = 200\nshared_buffers = 32MB\n"
                    % self.dir)
        self.uri = ("postgresql:///postgres?host=%s&port=5432&user=idem"
                    % self.dir)
        self.ctl("start")

    def run(self, argv, check=True):
        def demote():
            if self.user is not None:
                os.setgid(self.user.pw_gid)
                os.setuid(self.user.pw_uid)
        with open(self.log, "ab") as log:
            p = subprocess.run(argv, stdout=log, stderr=log,
                               preexec_fn=demote, cwd=self.dir,
                               timeout=120)
        if check and p.returncode != 0:
            raise H.ModelFailure("%s failed; log %s" % (argv[0], self.log))
        return p.returncode

    def ctl(self, what, mode="fast"):
        argv = [os.path.join(self.bin, "pg_ctl"), "-D", self.data, "-l",
                self.log, "-w", "-t", "60"]
        if what == "start":
            argv += ["start"]
        else:
            argv += ["-m", mode, what]
        self.run(argv)

    def sql(self, text):
        return subprocess.run(["psql", "-X", "-q", "-d", self.uri, "-c",
                               text], capture_output=True, text=True,
                              timeout=60)

    def destroy(self):
        try:
            self.ctl("stop", "immediate")
        except Exception:   # pylint: disable=broad-except
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


SERVER = {"pg": None}


class Pair:
    """Two brokers on one workspace, looking like one Broker to the
    machine: requests alternate between them; kill9 and workers are
    broker A's; start starts whichever is not running."""

    def __init__(self, uri):
        self.a = Broker(host="A",
                          store_args=["--store", uri, "--host-id", "A"])
        self.tmp, self.root = self.a.tmp, self.a.root
        self.uri = uri
        p = subprocess.run([H.IDEMCTL, "store", "init", "--store", uri,
                            "--root", self.root], capture_output=True,
                           text=True, timeout=60)
        if p.returncode != 0:
            raise H.ModelFailure("idemctl store init: %s" % p.stderr)
        self.b = Broker(tmp=self.tmp, host="B",
                          store_args=["--store", uri, "--host-id", "B"])
        self.log = self.a.log
        self.turn = 0

    @property
    def starts(self):
        return self.a.starts

    def start(self, args):
        for x in (self.a, self.b):
            if x.proc is None and not x.start(args):
                return False
        return True

    def stop(self):
        s = self.b.stop()
        return self.a.stop() or s

    def kill9(self):
        self.a.kill9()

    def workers(self):
        return self.a.workers()

    def logs(self):
        return [self.a.log, self.b.log]

    def request_killed(self, obj):
        """To the broker whose processes the kill rules act on (A)."""
        return self.a.request(obj)

    def request(self, obj):
        self.turn += 1
        return (self.a if self.turn % 2 else self.b).request(obj)

    def close(self):
        try:
            self.b.close()
        finally:
            self.a.close()


class IdemPgMachine(IdemMachine):
    """IdemMachine on PostgreSQL, two brokers."""

    pg = True

    def new_broker(self):
        return Pair(SERVER["pg"].uri)

    def _log_tail(self):
        out = []
        for x in (self.b.a, self.b.b):
            try:
                with open(x.log, errors="replace") as f:
                    out += f.readlines()[-10:]
            except OSError:
                pass
        return "".join(out)

    def compact_argv(self):
        return [H.IDEMCTL, "compact", "--older-than", "0", "--root",
                self.b.root, "--store", self.b.uri]

    @rule()
    def pg_terminate_backends(self):
        """Every session of the brokers cut by the server."""
        p = SERVER["pg"].sql("SELECT pg_terminate_backend(pid) FROM "
                             "pg_stat_activity WHERE pid <> "
                             "pg_backend_pid() AND datname IS NOT NULL")
        if p.returncode != 0:
            H.fail("pg_terminate_backend: %s" % p.stderr)
        H.STATS["pg_faults"] = H.STATS.get("pg_faults", 0) + 1

    @rule(mode=st.sampled_from(["fast", "immediate"]))
    def pg_restart(self, mode):
        """The database restarted under the brokers (immediate: a
        crash and its recovery)."""
        SERVER["pg"].ctl("restart", mode)
        H.STATS["pg_faults"] = H.STATS.get("pg_faults", 0) + 1


def main():
    d = bindir()
    if d is None:
        print("SKIP: PostgreSQL's server programs (initdb, pg_ctl) are not "
              "installed (apt-get install postgresql-15)")
        return 77
    if shutil.which("psql") is None:
        print("SKIP: psql is not installed")
        return 77
    SERVER["pg"] = PgServer(d)
    try:
        T.MACHINE = IdemPgMachine
        return T.main()
    finally:
        SERVER["pg"].destroy()


if __name__ == "__main__":
    sys.exit(main())
