"""Prefix-aware routing over two real llama-servers: a session's next turn lands where its prompt is
cached and says how much came from the cache; when that server dies the session moves, unrefused."""

from __future__ import annotations

import re
import signal
from concurrent.futures import ThreadPoolExecutor

import pytest

from ..conftest import openai_client

SYSTEM = (
    "You are the ship's navigator. Answer in one short sentence. The ship sails from Bergen to Reykjavik "
    "in early spring; the crew is twelve; the cargo is dried fish, wool and timber. "
) * 6


@pytest.fixture(scope="module")
def pool(start_llama_server):
    return [start_llama_server(context_size=4096, slots=2) for _ in range(2)]


@pytest.fixture(scope="module")
def pooled_proxy(pool, start_proxy, tmp_path_factory):
    config = tmp_path_factory.mktemp("routing") / "config.yaml"
    config.write_text(f"models:\n  pooled:\n    upstreams: [{pool[0].url}, {pool[1].url}]\n    template: auto\n")
    return start_proxy("--config", str(config))


def access_lines(proxy) -> list[dict[str, str]]:
    return [dict(re.findall(r"(\w+)=(\S+)", line)) for line in proxy.log().splitlines() if "request_id=" in line]


class Session:
    """A multi-turn chat as an agent holds it: the whole history each turn, and its session key."""

    def __init__(self, proxy, key: str):
        self.client, self.proxy, self.key = openai_client(proxy.url), proxy, key
        self.messages = [{"role": "system", "content": SYSTEM}]

    def turn(self, question: str):
        """(the answer's usage, the access log's line for it)"""
        self.messages.append({"role": "user", "content": question})
        reply = self.client.chat.completions.create(
            model="pooled", messages=self.messages, max_tokens=12, temperature=0, user=self.key
        )
        self.messages.append({"role": "assistant", "content": reply.choices[0].message.content})
        return reply.usage, access_lines(self.proxy)[-1]


def test_the_next_turn_is_served_from_the_cache_and_survives_its_server(pooled_proxy, pool):
    session = Session(pooled_proxy, "voyage-1")
    _, first = session.turn("Where do we sail from?")
    usage, second = session.turn("And where to?")
    assert second["upstream"] == first["upstream"] and second["route"] == "prefix"
    assert usage.prompt_tokens_details.cached_tokens > 0
    assert int(second["cached_tokens"]) == usage.prompt_tokens_details.cached_tokens

    doomed = next(server for server in pool if server.url == first["upstream"])
    doomed.process.send_signal(signal.SIGKILL)
    doomed.process.wait()
    _, moved = session.turn("How many crew?")
    assert moved["status"] == "200" and moved["upstream"] != first["upstream"]
    usage, settled = session.turn("What cargo?")
    assert settled["upstream"] == moved["upstream"] and settled["route"] == "prefix"
    assert usage.prompt_tokens_details.cached_tokens > 0


def test_with_one_server_dead_no_session_is_refused(pooled_proxy):
    """Runs after the kill above: every new session lands on the server left, whatever its key."""
    with ThreadPoolExecutor(4) as executor:
        usages = list(executor.map(lambda n: Session(pooled_proxy, f"crew-{n}").turn("Where do we sail from?")[0], range(6)))
    assert all(usage.completion_tokens > 0 for usage in usages)
