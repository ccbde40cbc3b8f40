"""What waits for the first token (issue 54): on every API whose upstream request asks for llama.cpp's
progress events (the chat-like ones), the response's head reaches the client while llama.cpp is still
computing the first token, so the token's own frame is all that is left to write when it comes.

The fake plays llama-server with `return_progress`: a progress event as the prompt's last batch goes to
the model, then the first token a whole forward pass later. Here the token is held until the client has
the response's head. Before, the shapes with no frames before the first event (Anthropic's, Ollama's)
left the head to be written with the first token, on its way to the client."""

from __future__ import annotations

import json
import threading

import pytest
import requests

PROGRESS = ({"total": 3, "cache": 0, "processed": 3, "time_ms": 1},)
HI = [{"role": "user", "content": "Hi"}]
APIS = {
    "/v1/chat/completions": {"model": "m", "messages": HI, "max_tokens": 8, "stream": True},
    "/v1/messages": {"model": "m", "messages": HI, "max_tokens": 8, "stream": True},
    "/v1/responses": {"model": "m", "input": "Hi", "max_output_tokens": 8, "stream": True, "store": False},
    "/api/chat": {"model": "m", "messages": HI, "stream": True, "options": {"num_predict": 8}},
}


@pytest.fixture
def held_tokens(replay):
    """The fake sends its progress event, then holds the tokens until the test lets them go."""
    replay.prompt_progress, replay.token_hold, replay.tokens_sent = PROGRESS, threading.Event(), 0
    yield replay
    replay.token_hold.set()
    replay.prompt_progress, replay.token_hold = (), None


def answer_text(path: str, body: bytes) -> str:
    """The generated text of a whole stream, in the API's own words."""
    if path.startswith("/api/"):
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        return "".join(line.get("response") or (line.get("message") or {}).get("content", "") for line in lines)
    datas = [json.loads(line[6:]) for line in body.splitlines() if line.startswith(b"data: {")]
    if path == "/v1/messages":
        return "".join(d["delta"].get("text", "") for d in datas if d["type"] == "content_block_delta")
    if path == "/v1/responses":
        return "".join(d["delta"] for d in datas if d["type"] == "response.output_text.delta")
    choices = [d["choices"][0] for d in datas if d.get("choices")]
    return "".join(c.get("text") or (c.get("delta") or {}).get("content") or "" for c in choices)


@pytest.mark.parametrize("path", APIS)
def test_the_response_starts_before_the_first_token(proxy, held_tokens, path):
    with requests.post(proxy.url + path, json=APIS[path], stream=True, timeout=60) as response:
        tokens_before_the_head = held_tokens.tokens_sent  # requests returns once the head has come
        held_tokens.token_hold.set()
        body = response.raw.read()
    assert response.status_code == 200
    assert tokens_before_the_head == 0  # it did not wait for the first token (5 s of the fake's, then)
    assert held_tokens.requests[-1].get("return_progress") is True
    assert answer_text(path, body) == " Hello, world!"
