"""EventWorker: a gunicorn worker running gevent's event loop, with the proxy's shutdown.

It does what gunicorn's own gevent worker does: monkey-patch the process when the worker starts
(before the app is imported: see server.py), then serve every connection in a greenlet, so a
stream costs a greenlet and two sockets, not a thread: one worker holds thousands of streams, and
a token that arrives wakes only the event loop. What it changes:

- gevent itself is imported only in the worker, after the fork. gunicorn's master imports this
  module to find the class, and a master that imported gevent would hold pages the worker then
  copies as soon as it uses them (idle memory), and would not be "nothing imported before patching";
- SIGTERM: stop accepting at once (gunicorn's loop notices only within a second); let the requests
  being answered finish for `--grace-period` seconds, not waiting for idle keep-alive connections
  (gunicorn waits for every open connection); then end the streams still running with an error
  event, and exit once they are sent;
- SIGINT and SIGQUIT (Ctrl-C, the master's quick shutdown): stop at once without a traceback;
- a client socket sends a frame with one plain send() (see _client_socket_class).
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import sys
import time
from functools import partial

from gunicorn.workers.base_async import AsyncWorker

FLUSH_SECONDS = 2.0  # after the grace period, for the streams' error events to reach the clients
# How long a thread of gevent's pool (a grammar built off the loop: offload.py) may hold the GIL
# before the event loop's thread gets it back; Python's default, 5 ms, would stall every stream that long.
SWITCH_INTERVAL_SECONDS = 0.001
STOP_SIGNALS = (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM)


class EventWorker(AsyncWorker):
    def init_process(self):
        self._note_stops_before_ready()  # first: a Ctrl-C may come while gevent is being imported
        from gevent import GreenletExit, hub, monkey

        self.greenlet_exit = GreenletExit  # handle_request's: gevent is imported only here (see above)
        monkey.patch_all()  # first: the app and everything it imports come after this
        sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
        from gevent import socket as gevent_socket

        self.gevent_socket = gevent_socket
        self.client_socket_class = _client_socket_class(gevent_socket.socket)
        self.sockets = [gevent_socket.socket(s.FAMILY, socket.SOCK_STREAM, fileno=s.sock.detach()) for s in self.sockets]
        hub.reinit()
        super().init_process()

    def _note_stops_before_ready(self) -> None:
        """A stop signal before the worker's own handlers are set (Ctrl-C during start-up) went to the
        master's handler the fork copied, which queues it in the master's queue, the worker's copy of
        it: unseen, the worker lived on until the master's SIGKILL (--grace-period later). Signals the
        copy queued since the fork, and those that come from now until init_signals, are acted on there."""
        master_queue = getattr(getattr(signal.getsignal(signal.SIGINT), "__self__", None), "SIG_QUEUE", None)
        self.stops_before_ready = [number for number in _drained(master_queue) if number in STOP_SIGNALS]
        for stop_signal in STOP_SIGNALS:
            signal.signal(stop_signal, lambda number, frame: self.stops_before_ready.append(number))

    def init_signals(self):
        import gevent
        from gevent.event import Event

        super().init_signals()
        self.stopping = Event()
        self.quitting = False  # a quick shutdown (INT, QUIT): no drain
        # Run by the event loop in a greenlet of its own, at once (a plain signal handler would run
        # in whichever greenlet was interrupted, and only when the loop next returns to Python).
        self._sigterm = gevent.signal_handler(signal.SIGTERM, self.begin_shutdown)
        if self.stops_before_ready:
            self.quitting = any(number != signal.SIGTERM for number in self.stops_before_ready)
            self.begin_shutdown()

    def begin_shutdown(self) -> None:
        self.alive = False
        self.stopping.set()

    def notify(self):
        super().notify()
        if self.ppid != os.getppid():
            self.log.info("Parent changed, shutting down: %s", self)
            sys.exit(0)

    def timeout_ctx(self):
        import gevent

        return gevent.Timeout(self.cfg.keepalive, False)  # an idle keep-alive connection is closed

    def handle_quit(self, sig, frame):
        """SIGINT (Ctrl-C reaches every process of the terminal's group) or SIGQUIT (the master's quick
        shutdown): stop now, quietly. gunicorn's own handler ends in sys.exit() from a greenlet, which
        gevent prints as a SystemExit traceback; here the main loop leaves instead, without draining."""
        self.quitting = True
        self.begin_shutdown()

    def handle_usr1(self, sig, frame):
        import gevent

        gevent.spawn(AsyncWorker.handle_usr1, self, sig, frame)

    def run(self):
        servers = [self._serve(listener) for listener in self.sockets]
        while not self.stopping.wait(1.0) and self.alive:
            self.notify()  # also exits if the master went away
        for server in servers:
            server.close()  # stop accepting now
        if self.quitting:
            self.cfg.worker_int(self)  # gunicorn's hook for a worker stopped by INT or QUIT
            return
        self._drain(servers)

    def _serve(self, listener):
        from gevent.pool import Pool
        from gevent.server import StreamServer

        listener.setblocking(1)
        server = StreamServer(listener, handle=partial(self.handle, listener), spawn=Pool(self.worker_connections))
        if self.cfg.workers > 1:
            server.max_accept = 1  # leave the next connection to a less busy worker
        server.start()
        return server

    def handle(self, listener, client, addr):
        client.setblocking(1)
        if type(client) is self.gevent_socket.socket:
            client.__class__ = self.client_socket_class
        super().handle(listener, client, addr)

    def handle_request(self, listener_name, req, sock, addr):
        try:
            return super().handle_request(listener_name, req, sock, addr)
        except (self.greenlet_exit, SystemExit):
            return False  # killed at shutdown: the connection just closes

    def _drain(self, servers) -> None:
        from .routes import state  # the app is made: its modules are loaded
        from .routes.dashboard import VIEW_KEY

        grace_period = self.cfg.graceful_timeout - 5  # server.py adds 5 s for the master
        self.wsgi.app.extensions[VIEW_KEY].close()  # the dashboards' streams would hold the grace period
        state(self.wsgi.app).inflight.drain()  # idle WebSockets close, batches go back; responses in flight finish
        self._wait_for_requests(time.monotonic() + grace_period)
        if self.wsgi.in_flight:
            self.log.info("grace period over: ending %d streams", state(self.wsgi.app).inflight.shut_down())
            self._wait_for_requests(time.monotonic() + FLUSH_SECONDS)
        for server in servers:
            server.stop(timeout=0.5)  # idle keep-alive connections

    def _wait_for_requests(self, deadline: float) -> None:
        import gevent

        while self.wsgi.in_flight and time.monotonic() < deadline:
            self.notify()
            gevent.sleep(0.05)


def _drained(master_queue) -> list:
    """What gunicorn's master queue (a queue.SimpleQueue) holds, taken out; nothing when it is not one."""
    taken = []
    while master_queue is not None:
        try:
            taken.append(master_queue.get_nowait())
        except (queue.Empty, AttributeError):
            break
    return taken


CHUNKED_HEAD = b"\r\nTransfer-Encoding: chunked\r\n"  # as gunicorn writes it (Response.default_headers)


def send_flags(data: bytes) -> int:
    """The flags of a plain send of `data` to a client: MSG_MORE for the head of a chunked answer (a
    stream's), which gunicorn sends on its own just before the first chunk, so the kernel holds it and
    the two leave as one segment: the client wakes once for its first token, not once for the head and
    again for the token (issue 54). A chunk always follows a chunked head, if only the last, empty one
    (gunicorn's Response.close), so nothing waits; any other head goes at once."""
    if isinstance(data, bytes) and data[:7] == b"HTTP/1." and CHUNKED_HEAD in data[: data.find(b"\r\n\r\n") + 2]:
        return socket.MSG_MORE
    return 0


def _client_socket_class(gevent_socket_class):
    """A client connection whose sendall() tries one plain send() first: an SSE frame is small and
    the socket buffer nearly always has room, so the frame goes out in one system call without
    gevent's general sendall (a getsockopt call, a timer, a loop over 1 MiB pieces) on every token."""

    class ClientSocket(gevent_socket_class):
        __slots__ = ()

        def sendall(self, data, flags=0):
            flags |= send_flags(data)
            try:
                sent = self._sock.send(data, flags)  # the underlying non-blocking socket
            except BlockingIOError:
                sent = 0
            if sent < len(data):
                super().sendall(memoryview(data)[sent:], flags)  # waits for room, as gevent does

    return ClientSocket
