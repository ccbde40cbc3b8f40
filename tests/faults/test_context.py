"""Fitting a chat into the context as the upstream sees it: what is counted, and what is asked."""

from __future__ import annotations

import requests

from .conftest import FAKE_CONTEXT

PROXY_FLAGS = ("--chat-prompt-model", "chatml")


def tokenize_calls(fake) -> int:
    return sum(1 for body in fake.requests if "content" in body and "prompt" not in body)


def test_a_short_chat_without_max_tokens_is_not_counted_upstream(proxy, fake):
    before = tokenize_calls(fake)
    response = requests.post(
        proxy.url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}]}, timeout=30
    )
    assert response.status_code == 200
    assert tokenize_calls(fake) == before  # its bytes prove it fits: no /tokenize round trip
    sent = fake.requests[-1]
    assert sent["n_predict"] == FAKE_CONTEXT - len(sent["prompt"].encode())  # the room its bytes prove


def test_a_chat_too_long_in_bytes_to_tell_is_counted(proxy, fake):
    before = tokenize_calls(fake)
    long_words = " ".join(["word"] * 500)  # 2,500 bytes against 2,048 tokens of context: 500 tokens here
    response = requests.post(
        proxy.url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": long_words}]}, timeout=30
    )
    assert response.status_code == 200
    assert tokenize_calls(fake) == before + 1
    assert fake.requests[-1]["n_predict"] == FAKE_CONTEXT - len(fake.requests[-1]["prompt"].split())
