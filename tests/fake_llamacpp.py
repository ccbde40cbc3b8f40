"""A scriptable fake llama.cpp server, for the faults a real one cannot produce on demand.

`FakeLlamaCpp().start()` listens on a free loopback port; set `.behaviour` to one of
BEHAVIOURS before a request. Streams use chunked transfer encoding like llama-server.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from dataclasses import dataclass, field

BEHAVIOURS = ("ok", "hang", "hang_mid_stream", "malformed", "status_500", "loading", "die_mid_stream", "slow_tokens")


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake: FakeLlamaCpp  # set on the subclass made per server

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        self.fake.connections.append(self.connection)

    def do_GET(self):  # noqa: N802 - http.server's naming
        self.fake.get_paths.append(self.path)
        if self.path == "/health":
            self._json(503, {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}) \
                if self.fake.behaviour == "loading" else self._json(200, {"status": "ok"})
        elif self.path == "/props":
            self._json(200, {"chat_template": self.fake.chat_template, "bos_token": "", "eos_token": "",
                             "default_generation_settings": {"n_ctx": 2048}, "total_slots": 4,
                             **self.fake.props_extra})
        else:
            self._json(404, {"error": {"code": 404, "message": "File Not Found"}})

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        self.fake.requests.append(body)
        if self.path == "/tokenize":
            return self._json(200, {"tokens": list(range(len(body.get("content", "").split())))})
        behaviour = self.fake.behaviour
        if behaviour == "hang":
            time.sleep(self.fake.hang_seconds)
            return self._json(200, {"content": "late", "stop": True, "stop_type": "eos"})
        if behaviour == "status_500":
            return self._raw(500, b"<html>Internal Server Error</html>", "text/html")
        if behaviour == "loading":
            return self._json(503, {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}})
        self._stream(behaviour)

    def _stream(self, behaviour: str):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if behaviour == "malformed":
            self._chunk(b"data: {not json\n\n")
            return self._end()
        timings = {} if self.fake.cached_tokens is None else \
            {"timings": {"cache_n": self.fake.cached_tokens, "prompt_n": 3 - self.fake.cached_tokens}}
        per_token = timings if self.fake.requests[-1].get("timings_per_token") else {}
        for n, token in enumerate(self.fake.tokens):
            if behaviour == "die_mid_stream" and n == 2:
                self.wfile.flush()
                self.connection.shutdown(2)  # no terminating chunk: the connection just dies
                return
            if behaviour == "hang_mid_stream" and n == 2:
                time.sleep(self.fake.hang_seconds)
            if behaviour == "slow_tokens":
                time.sleep(self.fake.token_interval)
            self._event({"content": token, "stop": False, "tokens_predicted": n + 1, "tokens_evaluated": 3,
                         **per_token})
        self._event({"content": "", "stop": True, "stop_type": self.fake.stop_type,
                     "stopping_word": self.fake.stopping_word if self.fake.stop_type == "word" else "",
                     "tokens_predicted": len(self.fake.tokens), "tokens_evaluated": 3, **timings})
        self._end()

    def _event(self, payload: dict):
        self._chunk(b"data: " + json.dumps(payload).encode() + b"\n\n")

    def _chunk(self, data: bytes):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _end(self):
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _json(self, status: int, payload: dict):
        self._raw(status, json.dumps(payload).encode(), "application/json")

    def _raw(self, status: int, body: bytes, content_type: str):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@dataclass
class FakeLlamaCpp:
    behaviour: str = "ok"
    tokens: tuple[str, ...] = (" Hello", ",", " world", "!")
    hang_seconds: float = 5.0
    token_interval: float = 0.3
    stop_type: str = "eos"                       # how the stream ends: "eos", "word" or "limit"
    stopping_word: str = ""                      # the stop string reported with stop_type "word"
    cached_tokens: int | None = None             # timings.cache_n on the final event (every event if asked)
    chat_template: str | None = None             # what /props reports
    props_extra: dict = field(default_factory=dict)
    requests: list = field(default_factory=list)
    get_paths: list = field(default_factory=list)
    connections: list = field(default_factory=list)
    server: http.server.ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def start(self) -> FakeLlamaCpp:
        handler = type("Handler", (_Handler,), {"fake": self})
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.server.handle_error = lambda request, client_address: None  # clients that hang up are expected
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server:
            self.server.shutdown()
            self.server.server_close()

    def kill(self) -> None:
        """Gone as a killed process is: no listener, and every open connection reset."""
        self.stop()
        for connection in self.connections:
            try:
                connection.shutdown(2)
            except OSError:
                pass
