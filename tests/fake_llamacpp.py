"""A scriptable fake llama.cpp server, for the faults a real one cannot produce on demand.

`FakeLlamaCpp().start()` listens on a free loopback port; set `.behaviour` to one of
BEHAVIOURS before a request, or `.script` to a function writing each answer from the request
(tests/scripted_model.py plays an agent's model that way). Streams use chunked transfer encoding
like llama-server.

Under /v1 it is an OpenAI-compatible server too, as llama-server is (for `kind: openai` models):
/v1/models, /v1/embeddings, and /v1/chat/completions answering `.openai_deltas` (the deltas of
one choice, as vLLM streams them) with `.openai_finish` and `.openai_usage`, streamed or whole.
"""

from __future__ import annotations

import base64
import http.server
import json
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

UNDECODABLE = "Failed to load image or audio file"  # llama-server's words (tools/server/server-common.cpp)
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
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": "fake", "object": "model", "owned_by": "fake"}]})
        elif self.path == "/health":
            self._json(
                503, {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
            ) if self.fake.behaviour == "loading" else self._json(200, {"status": "ok"})
        elif self.path == "/props":
            self._json(
                200,
                {
                    "chat_template": self.fake.chat_template,
                    "bos_token": "",
                    "eos_token": "",
                    "default_generation_settings": {"n_ctx": 2048},
                    "total_slots": 4,
                    **self.fake.props_extra,
                },
            )
        else:
            self._json(404, {"error": {"code": 404, "message": "File Not Found"}})

    def do_POST(self):  # noqa: N802
        if self.path in self.fake.routes:  # a test's own llama-server endpoint (reranking, audio): the raw body
            return self.fake.routes[self.path](self, self.rfile.read(int(self.headers.get("Content-Length", 0))))
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        self.fake.requests.append(body)
        if self.path == "/tokenize":
            return self._json(200, {"tokens": list(range(len(body.get("content", "").split())))})
        behaviour = self.fake.behaviour
        if isinstance(body.get("prompt"), dict) and (refusal := self.fake.media_refusal(body["prompt"])):
            if refusal == UNDECODABLE:  # a runtime_error in llama-server: its 500, as it answers
                return self._json(500, {"error": {"code": 500, "message": refusal, "type": "server_error"}})
            return self._json(400, {"error": {"code": 400, "message": refusal, "type": "invalid_request_error"}})
        if self.path.startswith("/v1/") and behaviour in ("ok", "die_mid_stream"):
            return self._openai(body)
        if behaviour == "hang":
            time.sleep(self.fake.hang_seconds)
            return self._json(200, {"content": "late", "stop": True, "stop_type": "eos"})
        if behaviour == "status_500":
            return self._raw(500, b"<html>Internal Server Error</html>", "text/html")
        if behaviour == "loading":
            return self._json(503, {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}})
        self._stream(behaviour, self.fake.script(body) if self.fake.script else self.fake.tokens)

    def _stream(self, behaviour: str, tokens: Sequence[str]):
        self.fake.count_stream(+1)
        try:
            self._stream_events(behaviour, tokens)
        finally:
            self.fake.count_stream(-1)

    def _stream_events(self, behaviour: str, tokens: Sequence[str]):
        if self.fake.first_token_gate is not None:
            try:
                self.fake.first_token_gate.wait()
            except threading.BrokenBarrierError:
                self.fake.gate_broken += 1
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if behaviour == "malformed":
            self._chunk(b"data: {not json\n\n")
            return self._end()
        timings = (
            {}
            if self.fake.cached_tokens is None
            else {"timings": {"cache_n": self.fake.cached_tokens, "prompt_n": 3 - self.fake.cached_tokens}}
        )
        per_token = timings if self.fake.requests[-1].get("timings_per_token") else {}
        if self.fake.requests[-1].get("return_progress"):
            self._prompt_progress()
        if behaviour == "slow_prefill":
            self.wfile.flush()
            time.sleep(self.fake.hang_seconds)  # a long prompt read: the head sent, no token yet
        if behaviour == "die_in_prefill":
            self.wfile.flush()
            self.connection.shutdown(2)  # lost while reading the prompt: nothing of an answer was sent
            return
        for n, token in enumerate(tokens):
            if behaviour == "die_mid_stream" and n == 2:
                self.wfile.flush()
                self.connection.shutdown(2)  # no terminating chunk: the connection just dies
                return
            if behaviour == "hang_mid_stream" and n == 2:
                time.sleep(self.fake.hang_seconds)
            if behaviour == "slow_tokens":
                time.sleep(self.fake.token_interval)
            self._event({"content": token, "stop": False, "tokens_predicted": n + 1, "tokens_evaluated": 3, **per_token})
        self._event(
            {
                "content": "",
                "stop": True,
                "stop_type": self.fake.stop_type,
                "stopping_word": self.fake.stopping_word if self.fake.stop_type == "word" else "",
                "tokens_predicted": len(tokens),
                "tokens_evaluated": 3,
                **timings,
            }
        )
        self._end()

    def _prompt_progress(self):
        """llama-server's progress events while it reads the prompt, `progress_pause` seconds apart."""
        for n, progress in enumerate(self.fake.prompt_progress):
            if n:
                time.sleep(self.fake.progress_pause)
            self._event(
                {
                    "index": 0,
                    "content": "",
                    "tokens": [0],
                    "stop": False,
                    "id_slot": -1,
                    "tokens_predicted": 0,
                    "tokens_evaluated": progress["total"],
                    "prompt_progress": progress,
                }
            )

    # --- the OpenAI-compatible API under /v1 ---------------------------------------------------

    def _openai(self, body: dict):
        if self.path == "/v1/embeddings":
            count = len(body["input"]) if isinstance(body["input"], list) else 1
            vector = (
                base64.b64encode(struct.pack("<2f", 0.5, -0.25)).decode()
                if body.get("encoding_format") == "base64"
                else [0.5, -0.25]
            )
            return self._json(
                200,
                {
                    "object": "list",
                    "model": body.get("model"),
                    "usage": {"prompt_tokens": 2 * count, "total_tokens": 2 * count},
                    "data": [{"object": "embedding", "index": n, "embedding": vector} for n in range(count)],
                },
            )
        if self.path != "/v1/chat/completions":
            return self._json(404, {"error": {"message": f"no {self.path} here", "type": "not_found_error"}})
        if not body.get("stream"):
            return self._json(200, self.fake.openai_completion(body.get("model")))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for n, chunk in enumerate(self.fake.openai_chunks(body)):
            if self.fake.behaviour == "die_mid_stream" and n == 3:
                self.wfile.flush()
                self.connection.shutdown(2)
                return
            self._chunk(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        self._chunk(b"data: [DONE]\n\n")
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
    stop_type: str = "eos"  # how the stream ends: "eos", "word" or "limit"
    stopping_word: str = ""  # the stop string reported with stop_type "word"
    cached_tokens: int | None = None  # timings.cache_n on the final event (every event if asked)
    chat_template: str | None = None  # what /props reports
    props_extra: dict = field(default_factory=dict)
    script: Callable[[dict], Sequence[str]] | None = None  # the tokens to answer a request with, from its body
    openai_deltas: list | None = None  # what /v1/chat/completions answers; None: `tokens` as content
    openai_finish: str = "stop"
    openai_stop_reason: str | None = None  # vLLM's `stop_reason`: the stop string that matched
    openai_usage: dict = field(default_factory=lambda: {"prompt_tokens": 3, "completion_tokens": 4})
    prompt_progress: tuple = ()  # `prompt_progress` objects sent first when asked (return_progress)
    progress_pause: float = 0.0  # seconds between them
    requests: list = field(default_factory=list)
    routes: dict = field(default_factory=dict)  # POST path -> answer(handler, raw body), before the rest
    get_paths: list = field(default_factory=list)
    streaming: int = 0  # streams being sent now (ended when the client hangs up)
    first_token_gate: threading.Barrier | None = None  # streams wait here for each other before answering
    gate_broken: int = 0  # how many streams gave up waiting at the gate
    connections: list = field(default_factory=list)
    server: http.server.ThreadingHTTPServer | None = None
    _count_lock: threading.Lock = field(default_factory=threading.Lock)

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

    def media_refusal(self, prompt: dict) -> str | None:
        """llama-server's refusal of a prompt object with images (tools/mtmd/mtmd.cpp), or None: markers
        (/props' media_marker) not one per image, or an image that is not base64."""
        images = prompt.get("multimodal_data") or []
        if not (self.props_extra.get("modalities") or {}).get("vision"):
            return "Multimodal data provided, but model does not support multimodal requests."
        markers = prompt.get("prompt_string", "").count(self.props_extra.get("media_marker", "<__media__>"))
        if markers != len(images):
            return f"number of media markers in text ({markers}) does not match number of bitmaps ({len(images)})"
        try:
            decoded = [base64.b64decode(image, validate=True) for image in images]
        except ValueError:
            return UNDECODABLE
        if any(data.startswith(b"\xff\xd8") and not data.endswith(b"\xff\xd9") for data in decoded):
            return UNDECODABLE  # a JPEG cut short: stb_image finds no end of image
        return None

    def count_stream(self, delta: int) -> None:
        with self._count_lock:
            self.streaming += delta

    def deltas(self) -> list[dict]:
        return self.openai_deltas if self.openai_deltas is not None else [{"content": t} for t in self.tokens]

    def openai_chunks(self, body: dict) -> list[dict]:
        """A chat completion stream's chunks: the role, each delta, the finish, and usage if asked for."""

        def chunk(delta: dict | None, finish_reason: str | None = None, usage: dict | None = None) -> dict:
            choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
            if finish_reason and self.openai_stop_reason:
                choices[0]["stop_reason"] = self.openai_stop_reason
            return {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": body.get("model"),
                "choices": choices,
                **({"usage": usage} if usage else {}),
            }

        chunks = [chunk({"role": "assistant", "content": ""}), *map(chunk, self.deltas()), chunk({}, self.openai_finish)]
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append(chunk(None, usage={**self.openai_usage, "total_tokens": sum(self.openai_usage.values())}))
        return chunks

    def openai_completion(self, model: str | None) -> dict:
        """The deltas assembled into one chat completion, as a non-streamed answer."""
        message, calls = {"role": "assistant", "content": None}, {}
        for delta in self.deltas():
            if delta.get("content"):
                message["content"] = (message["content"] or "") + delta["content"]
            for call in delta.get("tool_calls") or ():
                whole = calls.setdefault(
                    call["index"], {"id": call.get("id"), "type": "function", "function": {"name": "", "arguments": ""}}
                )
                whole["function"]["name"] += call.get("function", {}).get("name") or ""
                whole["function"]["arguments"] += call.get("function", {}).get("arguments") or ""
        if calls:
            message["tool_calls"] = [calls[index] for index in sorted(calls)]
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 1,
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": self.openai_finish}],
            "usage": {**self.openai_usage, "total_tokens": sum(self.openai_usage.values())},
        }

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
