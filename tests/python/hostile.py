# SPDX-License-Identifier: ISC
"""hostile.py: a scripted broker that breaks the protocol on purpose,
for test_hostile.py (idem.Client and idem.aio.Client against it).

HostileBroker(test, script) listens on a Unix socket of a temporary
directory; for the n-th request line of the whole run (n from 1) it asks
script(request, n) what to do, and does it:

  bytes               write them (anything: no line, two lines, NUL ...)
  HANG                read on, answer nothing (until the test ends)
  CLOSE               close the connection without answering
  Cut(data)           write data, then close the connection
  Trickle(data, s)    write data a byte at a time, s seconds apart
  STREAM              write bytes without a newline until the client
                      hangs up (a line that never ends)
  Later(data, event, more)
                      write data, wait for event (the test's: set once
                      the client has read data), then write more (a
                      line sent unasked after an answer was read)

on_connect, if given, is done when a connection is accepted, before
anything is read (CLOSE: closed unread; bytes: a line sent unasked;
Cut(data): a refusal before reading, as idemd's too_many_connections).
closed: an Event set once a connection has been closed on this side.
requests: every request line received, decoded.  reply(req, **members)
makes an answer line that echoes the request's id."""

import json
import os
import shutil
import socketserver
import tempfile
import threading

HANG = "hang"
CLOSE = "close"
STREAM = "stream"
MAX_LINE_BYTES = 1024 * 1024


class Cut:
    def __init__(self, data):
        self.data = data


class Trickle:
    def __init__(self, data, delay):
        self.data = data
        self.delay = delay


class Later:
    def __init__(self, data, event, more):
        self.data = data
        self.event = event
        self.more = more


def reply(req, **members):
    """One answer line to req (its id echoed), with the members given."""
    body = {"id": req.get("id")}
    body.update(members)
    return json.dumps(body).encode() + b"\n"


class HostileBroker:

    def __init__(self, test, script, on_connect=None):
        self.tmp = tempfile.mkdtemp(prefix="idem-hostile-")
        test.addCleanup(shutil.rmtree, self.tmp, True)
        self.path = os.path.join(self.tmp, "hostile.sock")
        self.script = script
        self.on_connect = on_connect
        self.requests = []
        self.connections = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.closed = threading.Event()
        fake = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                with fake.lock:
                    fake.connections += 1
                if fake.on_connect is not None and \
                        not fake.act(self, fake.on_connect):
                    return
                while not fake.stop.is_set():
                    try:
                        line = self.rfile.readline(MAX_LINE_BYTES + 1)
                    except OSError:
                        return      # the client hung up
                    if not line:
                        return
                    req = json.loads(line)
                    with fake.lock:
                        fake.requests.append(req)
                        n = len(fake.requests)
                    if not fake.act(self, fake.script(req, n)):
                        return

        class Server(socketserver.ThreadingUnixStreamServer):
            def shutdown_request(self, request):
                super().shutdown_request(request)
                fake.closed.set()

        self.server = Server(self.path, Handler)
        self.server.daemon_threads = True
        self.server.block_on_close = False
        # A short poll: shutdown() waits for it, in every test's cleanup.
        t = threading.Thread(target=self.server.serve_forever,
                             kwargs={"poll_interval": 0.02}, daemon=True)
        t.start()
        test.addCleanup(self.server.server_close)
        test.addCleanup(self.server.shutdown)
        test.addCleanup(self.stop.set)

    def act(self, handler, action):
        """Do action on handler's connection; False: the connection is
        over (closed, or the client hung up)."""
        try:
            if action == HANG:
                self.stop.wait()
                return False
            if action == CLOSE:
                return False
            if action == STREAM:
                chunk = b"x" * 65536
                while not self.stop.is_set():
                    handler.wfile.write(chunk)
                return False
            if isinstance(action, Cut):
                handler.wfile.write(action.data)
                return False
            if isinstance(action, Later):
                handler.wfile.write(action.data)
                handler.wfile.flush()
                if not action.event.wait(5) or self.stop.is_set():
                    return False
                handler.wfile.write(action.more)
                handler.wfile.flush()
                return True
            if isinstance(action, Trickle):
                for i in range(len(action.data)):
                    handler.wfile.write(action.data[i:i + 1])
                    handler.wfile.flush()
                    if self.stop.wait(action.delay):
                        return False
                return True
            handler.wfile.write(action)
            handler.wfile.flush()
            return True
        except OSError:
            return False        # the client hung up

    def count(self):
        with self.lock:
            return len(self.requests)
