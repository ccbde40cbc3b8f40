"""Managed keys end to end: keys made with the CLI as the manual (docs/keys.md) writes it, used through the official
`openai` and `anthropic` SDKs against the real llama-server with SmolLM2: per-key models, tokens per
minute counted from llama.cpp's own usage, the SDKs' retry honouring Retry-After, usage matching the
answers' usage fields; and two proxy instances sharing a real Redis sharing the limits and revocation."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import anthropic
import httpx
import httpx2
import openai
import pytest
import requests

from ..conftest import openai_client
from ..servers import ROOT

ADMIN = "admin-e2e-secret"
SAMPLING = {"temperature": 0, "max_tokens": 4}
HELLO = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="module")
def config(llama_server, tmp_path_factory):
    """Two names over the one llama-server, and the store: what `keys` and the server both read."""
    directory = tmp_path_factory.mktemp("keys")
    path = directory / "config.yaml"
    path.write_text(
        f"store: sqlite://{directory}/store.sqlite3\nadmin_key: [{ADMIN}]\nmodels:\n"
        f"  smol:\n    upstreams: [{llama_server.url}]\n  other:\n    upstreams: [{llama_server.url}]\n"
    )
    return str(path)


@pytest.fixture(scope="module")
def proxy(config, start_proxy):
    return start_proxy("--config", config)


def cli(*args: str) -> str:
    """`api-like-oai ARGS` as a user runs it; its standard output."""
    done = subprocess.run([sys.executable, "-m", "api_like_oai", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def statuses_of(seen: list[int], http=httpx):
    """An HTTP client for an SDK (of its `http` package) that notes every status it receives, retries included."""
    return http.Client(event_hooks={"response": [lambda response: seen.append(response.status_code)]}, timeout=60)


def test_a_cli_key_uses_only_its_models_and_its_usage_matches_the_answers(proxy, config):
    key = cli("keys", "create", "--config", config, "--name", "writer", "--models", "smol").strip()
    client = openai_client(proxy.url, api_key=key)
    claude = anthropic.Anthropic(base_url=proxy.url, api_key=key, max_retries=0, timeout=120)
    assert [model.id for model in client.models.list()] == ["smol"]
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="other", messages=HELLO, **SAMPLING)
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.create(model="other", messages=HELLO, max_tokens=8)
    plain = client.chat.completions.create(model="smol", messages=HELLO, **SAMPLING).usage
    streamed = [
        chunk.usage
        for chunk in client.chat.completions.create(
            model="smol", messages=HELLO, stream=True, stream_options={"include_usage": True}, **SAMPLING
        )
        if chunk.usage
    ]
    message = claude.messages.create(model="smol", messages=HELLO, max_tokens=4).usage
    rows = list(csv.DictReader(io.StringIO(cli("usage", "--config", config, "--key", "writer", "--by", "key", "--csv"))))
    assert len(rows) == 1 and (rows[0]["requests"], rows[0]["errors"]) == ("3", "0")  # not the refused ones
    message_prompt = message.input_tokens + message.cache_read_input_tokens  # Anthropic's input excludes the cache's
    assert int(rows[0]["prompt_tokens"]) == plain.prompt_tokens + streamed[0].prompt_tokens + message_prompt
    assert int(rows[0]["cached_tokens"]) == (
        plain.prompt_tokens_details.cached_tokens
        + streamed[0].prompt_tokens_details.cached_tokens
        + message.cache_read_input_tokens
    )
    assert int(rows[0]["completion_tokens"]) == (plain.completion_tokens + streamed[0].completion_tokens + message.output_tokens)


def test_keys_changed_and_revoked_with_the_cli_hold_at_once_on_the_running_proxy(proxy, config):
    key = cli(
        "keys",
        "create",
        "--config",
        config,
        "--name",
        "short-lived",
        "--models",
        "smol",
        "--rpm",
        "60",
        "--tpm",
        "20000",
        "--tokens-per-day",
        "500000",
        "--max-parallel",
        "2",
        "--expires",
        "30d",
    ).strip()
    client = openai_client(proxy.url, api_key=key)
    answer = client.chat.completions.with_raw_response.create(model="smol", messages=HELLO, **SAMPLING)
    assert answer.headers["x-ratelimit-limit-requests"] == "60"
    cli("keys", "update", "short-lived", "--config", config, "--rpm", "0", "--models", "")
    assert "short-lived\tmodels=*\ttpm=20000 tokens_per_day=500000 max_parallel=2" in cli("keys", "list", "--config", config)
    assert [model.id for model in client.models.list()] == ["smol", "other"]
    cli("keys", "revoke", "short-lived", "--config", config)
    with pytest.raises(openai.AuthenticationError):
        client.models.list()


def test_tokens_per_minute_are_counted_from_llamacpps_usage(proxy):
    created = requests.post(
        proxy.url + "/v1/internal/keys",
        json={"name": "counted", "tpm": 400},
        headers={"Authorization": f"Bearer {ADMIN}"},
        timeout=10,
    ).json()
    client = openai_client(proxy.url, api_key=created["key"])
    first = client.chat.completions.with_raw_response.create(model="smol", messages=HELLO, **SAMPLING)
    used = first.parse().usage.total_tokens
    second = client.chat.completions.with_raw_response.create(model="smol", messages=HELLO, **SAMPLING)
    assert second.headers["x-ratelimit-remaining-tokens"] == str(400 - used)
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(model="smol", messages=HELLO, temperature=0, max_tokens=400 - used)
    assert refused.value.code == "rate_limit_exceeded" and refused.value.type == "tokens"
    assert 1 <= int(refused.value.response.headers["retry-after"]) <= 60


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_the_sdks_retry_after_a_429_when_retry_after_says(proxy, config, sdk):
    key = cli("keys", "create", "--config", config, "--name", f"one-at-a-time-{sdk}", "--max-parallel", "1").strip()
    seen: list[int] = []
    answered = threading.Event()

    def ask() -> None:
        if sdk == "openai":
            retrying = openai.OpenAI(base_url=proxy.url + "/v1", api_key=key, max_retries=10, http_client=statuses_of(seen))
            retrying.chat.completions.create(model="smol", messages=HELLO, **SAMPLING)
        else:
            retrying = anthropic.Anthropic(base_url=proxy.url, api_key=key, max_retries=10, http_client=statuses_of(seen, httpx2))
            retrying.messages.create(model="smol", messages=HELLO, max_tokens=4)
        answered.set()

    # long enough to be under way when the other request comes, however fast the machine
    holding = requests.post(
        proxy.url + "/v1/chat/completions",
        stream=True,
        timeout=60,
        headers={"Authorization": f"Bearer {key}"},
        json={"model": "smol", "messages": HELLO, "stream": True, "max_tokens": 2000, "ignore_eos": True},
    )
    lines = holding.iter_lines()
    next(lines)  # the stream has begun: it holds the key's one place
    asker = threading.Thread(target=ask)
    asker.start()
    while 429 not in seen and asker.is_alive():
        answered.wait(0.05)
    holding.close()  # the client leaves: the place is free for the retry
    asker.join(30)
    assert answered.is_set() and seen[0] == 429 and seen[-1] == 200, seen


@pytest.fixture(scope="module")
def redis_proxies(llama_server, start_proxies, redis_server):
    url = redis_server.url.rsplit("/", 1)[0] + "/3"
    return start_proxies(*[("--llama-api", llama_server.url, "--store", url, "--admin-key", ADMIN)] * 2)


def test_two_instances_on_one_redis_share_the_limits_and_revocation(redis_proxies):
    first, second = redis_proxies
    created = requests.post(
        first.url + "/v1/internal/keys",
        json={"name": "burst", "rpm": 20},
        headers={"Authorization": f"Bearer {ADMIN}"},
        timeout=10,
    ).json()

    def ask(index: int) -> int:
        proxy = redis_proxies[index % 2]
        return requests.post(
            proxy.url + "/v1/chat/completions",
            headers={"Authorization": f"Bearer {created['key']}"},
            json={"messages": HELLO, "max_tokens": 1},
            timeout=60,
        ).status_code

    with ThreadPoolExecutor(50) as pool:
        statuses = list(pool.map(ask, range(50)))
    assert statuses.count(200) == 20 and statuses.count(429) == 30
    requests.delete(second.url + "/v1/internal/keys/burst", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)
    refused = requests.get(first.url + "/v1/models", headers={"Authorization": f"Bearer {created['key']}"}, timeout=10)
    assert refused.status_code == 401


def test_a_stream_the_client_dropped_is_counted_with_what_was_generated(proxy):
    created = requests.post(
        proxy.url + "/v1/internal/keys", json={"name": "dropper"}, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10
    ).json()
    key = {"Authorization": f"Bearer {created['key']}"}
    stream = requests.post(
        proxy.url + "/v1/chat/completions",
        stream=True,
        timeout=60,
        headers=key,
        json={
            "model": "smol",
            "messages": [{"role": "user", "content": "Count from 1 to 100, one number a line."}],
            "stream": True,
            "temperature": 0,
            "max_tokens": 200,
        },
    )
    lines = stream.iter_lines()
    for _ in range(4):
        next(lines)  # the role, then a few tokens
    stream.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        rows = requests.get(proxy.url + "/v1/internal/usage", headers=key, timeout=10).json()["data"]
        if rows:
            break
        time.sleep(0.2)
    assert [(row["key"], row["requests"]) for row in rows] == [("dropper", 1)]
    assert 3 <= rows[0]["completion_tokens"] < 200 and rows[0]["prompt_tokens"] > 0
