"""A model kept on two boxes, and a key's token limit, through a front (issue 37): two boxes
(127.0.0.2, 127.0.0.3), each starting SmolLM2 on demand within a budget for one copy, its config asking
`boxes: 2`; one front (127.0.0.4) with the clients' managed keys in the fleet's Redis (`--store redis://`:
SQLite is not shared). The processes are shared by the module's tests, which run in order."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from api_like_oai.backends.routing import rendezvous

from ..servers import FLEET_BOX_CONFIG as ONE_COPY_A_BOX
from ..servers import FLEET_MODEL as MODEL
from ..servers import Proxy, command_line, descendants_of, eventually, fleet_box, fleet_redis, launch_all, model_boxes, stop

SECRET = "a-fleet-secret-for-the-spread-tests-0123456789"
ADMIN = "sk-admin-of-the-spread-fleet"
BOX_CONFIG = ONE_COPY_A_BOX + "    boxes: 2\n"
SYSTEM = "You are a terse assistant. " + " ".join(f"Rule {n}: answer in one short line." for n in range(30))
# About 130 tokens of prompt: ten of these requests take more than the key's 1,000 tokens a day.
LONG_QUESTION = "The quick brown fox jumps over the lazy dog. " * 11 + "How many words is that?"
TOKENS_PER_DAY = 1000


@pytest.fixture(scope="module")
def fleet(provisioned, tmp_path_factory):
    directory = tmp_path_factory.mktemp("fleet-spread")
    redis_server, common = fleet_redis(directory, SECRET)
    boxes = [_box(directory, index, common, provisioned) for index in range(2)]
    front = Proxy([*common, "--admin-key", ADMIN, "--store", redis_server.url], host="127.0.0.4")
    try:
        launch_all([*boxes, front])
        eventually(lambda: len(_where(front)) == 2, "both boxes in the fleet")
        yield {"boxes": boxes, "front": front}
    finally:
        stop(*(proxy.process for proxy in [*boxes, front] if proxy.process and proxy.process.poll() is None))
        redis_server.stop()


def _box(directory, index: int, common: list[str], provisioned: dict) -> Proxy:
    return fleet_box(directory, index, common, provisioned, config=BOX_CONFIG)


def _where(front: Proxy) -> dict[str, str]:
    """{box: the model's state there}, as the front lists the model."""
    return {box: status["state"] for box, status in model_boxes(front, MODEL, ADMIN).items()}


def _llama_servers(proxy: Proxy) -> list[int]:
    return [
        pid
        for pid in descendants_of(proxy.process.pid)
        if command_line(pid)[:1] and command_line(pid)[0].endswith("llama-server")
    ]


def _chat(front: Proxy, messages: list[dict], key: str = ADMIN, **fields) -> requests.Response:
    return requests.post(
        front.url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        timeout=120,
        json={"model": MODEL, "messages": messages, "max_tokens": 8, "temperature": 0, **fields},
    )


def test_a_model_kept_on_two_boxes_gets_its_second_copy_once_the_first_is_loaded(fleet):
    front, boxes = fleet["front"], fleet["boxes"]
    first = _chat(front, [{"role": "user", "content": "Say hello."}])
    assert first.status_code == 200
    assert sum(len(_llama_servers(box)) for box in boxes) == 1  # a cold start: once, on one box

    def on_both() -> bool:  # the copy is started by a front, in the background, when a request comes
        assert _chat(front, [{"role": "user", "content": "Say hi."}]).status_code == 200
        return set(_where(front).values()) == {"loaded"}

    eventually(on_both, "the model loaded on both boxes", timeout=90)
    assert [len(_llama_servers(box)) for box in boxes] == [1, 1]
    assert "starting copy 2 of smol on" in front.log()


def test_sessions_spread_over_both_copies_each_staying_on_its_box_and_in_its_cache(fleet):
    front, urls = fleet["front"], [box.url for box in fleet["boxes"]]
    keys = {url: [key for key in (f"session-{n}" for n in range(100)) if rendezvous(key, urls)[0] == url][:2] for url in urls}
    prompt_tokens = cached_tokens = 0
    for url, sessions in keys.items():
        for session in sessions:
            messages = [
                {"role": "system", "content": f"{session}. {SYSTEM}"},
                {"role": "user", "content": "Name a prime number."},
            ]
            for turn in range(1, 5):
                answer = _chat(front, messages, prompt_cache_key=session)
                assert (answer.headers["X-Fleet-Box"], answer.headers["X-Fleet-Route"]) == (url, "prefix")
                usage = answer.json()["usage"]
                if turn > 1:
                    prompt_tokens += usage["prompt_tokens"]
                    cached_tokens += usage["prompt_tokens_details"]["cached_tokens"]
                messages += [
                    {"role": "assistant", "content": answer.json()["choices"][0]["message"]["content"]},
                    {"role": "user", "content": f"And {turn} more."},
                ]
    assert cached_tokens / prompt_tokens >= 0.9


def test_a_keys_token_limit_holds_across_boxes_reserved_at_the_front_and_settled_by_the_boxes_usage(fleet):
    front = fleet["front"]
    admin = {"Authorization": f"Bearer {ADMIN}"}
    made = requests.post(
        front.url + "/v1/internal/keys", headers=admin, timeout=10, json={"name": "daily", "tokens_per_day": TOKENS_PER_DAY}
    )
    key = made.json()["key"]

    def ask(n: int) -> requests.Response:  # a session each: spread over both boxes
        return _chat(front, [{"role": "user", "content": f"{n}. {LONG_QUESTION}"}], key=key, prompt_cache_key=f"burst-{n}")

    with ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(ask, range(10)))
    statuses = [answer.status_code for answer in answers]
    assert set(statuses) == {200, 429}, statuses
    refused = next(answer for answer in answers if answer.status_code == 429)
    assert refused.json()["error"]["type"] == "tokens" and refused.headers["Retry-After"]
    spent = sum(answer.json()["usage"]["total_tokens"] for answer in answers if answer.status_code == 200)
    assert spent <= TOKENS_PER_DAY

    def recorded() -> int:
        rows = requests.get(front.url + "/v1/internal/usage?key=daily", headers=admin, timeout=10).json()["data"]
        return sum(row["total_tokens"] for row in rows)

    eventually(lambda: recorded() == spent, "the key's usage: what the boxes reported, not the reservations")
    time.sleep(0.5)
    # the reservations were given back: a request that fits what is left is let through
    small = _chat(front, [{"role": "user", "content": "Hi"}], key=key, max_tokens=2)
    assert small.status_code == 200 or TOKENS_PER_DAY - spent < 60
