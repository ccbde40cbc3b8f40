"""EventWorker: gunicorn's gevent worker with the proxy's shutdown.

gunicorn's gevent worker monkey-patches the process when it starts (before the app is imported:
see server.py), then serves every connection in a greenlet, so a stream costs a greenlet and
two sockets, not a thread: one worker holds thousands of streams, and a token that arrives wakes
only the event loop. What this class changes is SIGTERM:

- stop accepting at once (gunicorn's loop would notice only within a second);
- let the requests being answered finish for `--grace-period` seconds, not waiting for idle
  keep-alive connections (gunicorn waits for every open connection);
- then end the streams still running with an error event, and exit once they are sent.

This module is imported by gunicorn's master to find the class: it imports gevent and gunicorn
only, and patches nothing itself.
"""

from __future__ import annotations

import signal
import time
from functools import partial

import gevent
from gevent import socket as gevent_socket
from gevent.event import Event
from gevent.pool import Pool
from gevent.server import StreamServer
from gunicorn.workers.ggevent import GeventWorker

FLUSH_SECONDS = 2.0  # after the grace period, for the streams' error events to reach the clients


class EventWorker(GeventWorker):
    def init_signals(self):
        super().init_signals()
        self.stopping = Event()
        # Run by the event loop in a greenlet of its own, at once (a plain signal handler would run
        # in whichever greenlet was interrupted, and only when the loop next returns to Python).
        self._sigterm = gevent.signal_handler(signal.SIGTERM, self.begin_shutdown)

    def begin_shutdown(self) -> None:
        self.alive = False
        self.stopping.set()

    def run(self):
        servers = [self._serve(listener) for listener in self.sockets]
        while not self.stopping.wait(1.0) and self.alive:
            self.notify()  # also exits if the master went away
        for server in servers:
            server.close()  # stop accepting now
        self._drain(servers)

    def _serve(self, listener) -> StreamServer:
        listener.setblocking(1)
        server = StreamServer(listener, handle=partial(self.handle, listener), spawn=Pool(self.worker_connections))
        if self.cfg.workers > 1:
            server.max_accept = 1  # leave the next connection to a less busy worker
        server.start()
        return server

    def handle(self, listener, client, addr):
        if type(client) is gevent_socket.socket:
            client.__class__ = _ClientSocket
        super().handle(listener, client, addr)

    def _drain(self, servers) -> None:
        grace_period = self.cfg.graceful_timeout - 5  # server.py adds 5 s for the master
        self._wait_for_requests(time.monotonic() + grace_period)
        if self.wsgi.in_flight:
            state = self.wsgi.app.extensions["api_like_oai"]
            self.log.info("grace period over: ending %d streams", state.inflight.shut_down())
            self._wait_for_requests(time.monotonic() + FLUSH_SECONDS)
        for server in servers:
            server.stop(timeout=0.5)  # idle keep-alive connections

    def _wait_for_requests(self, deadline: float) -> None:
        while self.wsgi.in_flight and time.monotonic() < deadline:
            self.notify()
            gevent.sleep(0.05)


class _ClientSocket(gevent_socket.socket):
    """A client connection whose sendall() tries one plain send() first: an SSE frame is small and
    the socket buffer nearly always has room, so the frame goes out in one system call without
    gevent's general sendall (a getsockopt call, a timer, a loop over 1 MiB pieces) on every token."""

    __slots__ = ()

    def sendall(self, data, flags=0):
        try:
            sent = self._sock.send(data, flags)  # the underlying non-blocking socket
        except BlockingIOError:
            sent = 0
        if sent < len(data):
            super().sendall(memoryview(data)[sent:], flags)  # waits for room, as gevent does
