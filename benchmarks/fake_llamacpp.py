"""A minimal, instant stand-in for llama.cpp's server, so that the proxy is the bottleneck.

Raw HTTP/1.1 on asyncio with keep-alive: POST /completion (streamed as chunked
text/event-stream, or one JSON object), GET /health, GET /props, POST /tokenize, and POST
/v1/chat/completions as llama-server's OpenAI API answers it (for a front that speaks OpenAI upstream:
LiteLLM's proxy). Every
generation produces `n_predict` tokens (default 16) at once, or one every --token-interval-ms
when streamed; the events have the shape and size of today's llama-server events. Standard library only.

    python benchmarks/fake_llamacpp.py --port 8099 [--props props.json] [--token-interval-ms 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from functools import lru_cache
from pathlib import Path

DEFAULT_TOKENS = 16
DEFAULT_PROPS = {
    "chat_template": None,
    "bos_token": "",
    "eos_token": "",
    "default_generation_settings": {"n_ctx": 4096},
    "total_slots": 4,
    "model_path": "fake.gguf",
}
# The settings llama-server echoes in its final event (abridged but of a realistic size).
GENERATION_SETTINGS = {
    "seed": 42,
    "temperature": 0.0,
    "dynatemp_range": 0.0,
    "dynatemp_exponent": 1.0,
    "top_k": 40,
    "top_p": 0.95,
    "min_p": 0.05,
    "typical_p": 1.0,
    "repeat_last_n": 64,
    "repeat_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "mirostat": 0,
    "mirostat_tau": 5.0,
    "mirostat_eta": 0.1,
    "stop": [],
    "n_keep": 0,
    "n_discard": 0,
    "ignore_eos": False,
    "stream": True,
    "n_probs": 0,
    "min_keep": 0,
    "grammar": "",
    "samplers": ["penalties", "dry", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"],
}
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found"}


def token_event(position: int, content: str | None = None) -> dict:
    return {
        "index": 0,
        "content": f" w{position}" if content is None else content,
        "tokens": [1000 + position],
        "stop": False,
        "id_slot": -1,
        "tokens_predicted": position + 1,
        "tokens_evaluated": 5,
    }


def tool_call_pieces(token_count: int) -> list[str]:
    """A tool call as a model writes it, `token_count` tokens long: the markers and the call's head
    as tokens of their own, then the argument's words one token each."""
    words = [f" w{position}" for position in range(max(token_count - 4, 0))]
    return ["<tool_call>", '\n{"name": "search", "arguments": {"query": "', *words, '"}}', "\n</tool_call>"][:token_count]


def final_event(token_count: int, content: str) -> dict:
    return {
        "index": 0,
        "content": content,
        "tokens": [],
        "id_slot": 0,
        "stop": True,
        "model": "fake.gguf",
        "tokens_predicted": token_count,
        "tokens_evaluated": 5,
        "generation_settings": {**GENERATION_SETTINGS, "n_predict": token_count},
        "prompt": "",
        "has_new_line": False,
        "truncated": False,
        "stop_type": "limit",
        "stopping_word": "",
        "tokens_cached": token_count + 5,
        "timings": {"prompt_n": 5, "prompt_ms": 1.0, "predicted_n": token_count, "predicted_ms": 1.0},
    }


def compact_json(payload) -> bytes:
    """JSON as llama-server writes it: no spaces after separators."""
    return json.dumps(payload, separators=(",", ":")).encode()


def chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


@lru_cache(maxsize=64)
def streamed_chunks(token_count: int, tool_call: bool = False) -> tuple[bytes, ...]:
    """The chunked body of a streamed generation: one chunk per event; the last part also ends the
    body. With `tool_call`, the tokens write a call in the `<tool_call>` format."""
    contents = tool_call_pieces(token_count) if tool_call else [None] * token_count
    events = [token_event(position, content) for position, content in enumerate(contents)]
    events.append(final_event(len(events), ""))
    chunks = [chunk(b"data: " + compact_json(event) + b"\n\n") for event in events]
    chunks[-1] += b"0\r\n\r\n"
    return tuple(chunks)


def chat_chunk(delta: dict, finish_reason: str | None = None) -> dict:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "fake.gguf",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


def chat_usage(token_count: int) -> dict:
    return {"prompt_tokens": 5, "completion_tokens": token_count, "total_tokens": token_count + 5}


@lru_cache(maxsize=64)
def streamed_chat_chunks(token_count: int) -> tuple[bytes, ...]:
    """An OpenAI chat stream as llama-server's /v1/chat/completions sends it: the role, one chunk per
    token, the finish with the usage, then [DONE] (sent with the finish: paced, the stream takes as
    many intervals as one from /completion)."""
    events = [chat_chunk({"role": "assistant", "content": None})]
    events += [chat_chunk({"content": token_event(position)["content"]}) for position in range(token_count)]
    events.append({**chat_chunk({}, "length"), "usage": chat_usage(token_count)})
    chunks = [chunk(b"data: " + compact_json(event) + b"\n\n") for event in events]
    chunks[-1] += chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
    return tuple(chunks)


@lru_cache(maxsize=64)
def whole_chat_body(token_count: int) -> bytes:
    text = "".join(token_event(position)["content"] for position in range(token_count))
    return compact_json(
        {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 0,
            "model": "fake.gguf",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}],
            "usage": chat_usage(token_count),
        }
    )


@lru_cache(maxsize=64)
def whole_body(token_count: int) -> bytes:
    text = "".join(token_event(position)["content"] for position in range(token_count))
    return compact_json(final_event(token_count, text))


def head(status: int, content_type: str, length: int | None) -> bytes:
    framing = f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    return (
        f"HTTP/1.1 {status} {REASONS[status]}\r\nServer: fake-llama.cpp\r\nContent-Type: {content_type}\r\n"
        f"{framing}\r\nKeep-Alive: timeout=5, max=100000\r\n\r\n"
    ).encode()


def json_response(status: int, payload) -> bytes:
    body = compact_json(payload)
    return head(status, "application/json", len(body)) + body


class FakeLlamaCpp:
    def __init__(self, props: dict, token_interval: float = 0.0, answer_tokens: int | None = None):
        self.props = props
        self.token_interval = token_interval  # seconds between streamed events; 0 sends them at once
        self.answer_tokens = answer_tokens  # every generation this long, whatever n_predict asks

    def answer(self, method: str, path: str, body: bytes) -> list[bytes]:
        """The HTTP response to one request, as the parts to send (one per event when streamed)."""
        if path == "/health":
            return [json_response(200, {"status": "ok"})]
        if path == "/props":
            return [json_response(200, self.props)]
        if method == "POST" and path == "/tokenize":
            content = json.loads(body or b"{}").get("content", "")
            return [json_response(200, {"tokens": list(range(max(1, len(content.split()))))})]
        if method == "POST" and path == "/completion":
            request = json.loads(body or b"{}")
            if self.answer_tokens is not None:
                request["n_predict"] = self.answer_tokens
            return self.completion(request)
        if method == "POST" and path == "/v1/chat/completions":
            request = json.loads(body or b"{}")
            return self.chat_completion(
                self.answer_tokens or request.get("max_tokens") or DEFAULT_TOKENS, bool(request.get("stream"))
            )
        return [json_response(404, {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}})]

    @staticmethod
    def completion(request: dict) -> list[bytes]:
        token_count = request.get("n_predict")
        token_count = DEFAULT_TOKENS if token_count is None or token_count < 0 else token_count
        if request.get("stream"):
            # A prompt that describes the <tool_call> format (a request with tools) is answered with a call.
            tool_call = "<tool_call>" in request.get("prompt", "")
            return [head(200, "text/event-stream", None), *streamed_chunks(token_count, tool_call)]
        body = whole_body(token_count)
        return [head(200, "application/json", len(body)) + body]

    @staticmethod
    def chat_completion(token_count: int, streamed: bool) -> list[bytes]:
        if streamed:
            role, *tokens = streamed_chat_chunks(token_count)
            return [head(200, "text/event-stream", None) + role, *tokens]
        body = whole_chat_body(token_count)
        return [head(200, "application/json", len(body)) + body]

    async def send(self, writer: asyncio.StreamWriter, parts: list[bytes]) -> None:
        if not self.token_interval:
            writer.write(b"".join(parts))
            return
        # On a fixed schedule (the k-th event at start + k * interval), so that a slow spell of the
        # fake itself is caught up and does not lower the rate the proxy is offered.
        loop = asyncio.get_running_loop()
        writer.write(parts[0])
        started = loop.time()
        for position, part in enumerate(parts[1:], 1):
            delay = started + position * self.token_interval - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            writer.write(part)

    async def serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Answer requests on one keep-alive connection until the client closes it."""
        try:
            while True:
                request_head = await reader.readuntil(b"\r\n\r\n")
                method, path, length = parse_head(request_head)
                body = await reader.readexactly(length) if length else b""
                await self.send(writer, self.answer(method, path, body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()


def parse_head(request_head: bytes) -> tuple[str, str, int]:
    """(method, path, content length) of a request head."""
    lines = request_head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    return method, target.split("?", 1)[0], length


async def serve(host: str, port: int, props: dict, token_interval: float, answer_tokens: int | None) -> None:
    fake = FakeLlamaCpp(props, token_interval, answer_tokens)
    server = await asyncio.start_server(fake.serve_connection, host, port, backlog=1024)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8099)
    parser.add_argument("--props", type=Path, help="JSON file to answer GET /props with (e.g. a real server's)")
    parser.add_argument(
        "--token-interval-ms",
        type=float,
        default=0.0,
        help="pause before each streamed event, as a real model paces tokens (default: none)",
    )
    parser.add_argument(
        "--answer-tokens",
        type=int,
        help="answer every generation with this many tokens, "
        "whatever n_predict asks (an agent's turn asks for the whole context)",
    )
    args = parser.parse_args()
    props = json.loads(args.props.read_text()) if args.props else DEFAULT_PROPS
    try:
        asyncio.run(serve(args.host, args.port, props, args.token_interval_ms / 1000, args.answer_tokens))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
