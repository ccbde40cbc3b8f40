"""Failover with real processes (issue 30): a model with two upstreams, one of them dead (from the start,
in either order; killed between two rounds of eight clients; then back). Every request is answered 200 on
all three APIs, streamed and not, through the official SDKs: a refused connection is retried on the
upstream that is up, whatever the routing reason, and for every call a request makes (/props, tokenize,
the generation)."""

from __future__ import annotations

import signal
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from api_like_oai.backends.routing import rendezvous

from ..conftest import openai_client
from ..servers import free_port, wait_until
from .test_anthropic import claude_client
from .test_prefix_routing import access_lines

MODEL = "pooled"
# Long enough (two 256-byte blocks) for its route to be learned: identical requests go by "prefix".
SAME = "The harbour log lists ships, cargo and crews; answer in one word. " * 9 + "Name one colour."
TOKENS = 4


def ask(proxy, api: str, stream: bool, prompt: str, session: str | None = None) -> str:
    """The answer's text to `prompt` through the official SDK of `api`, with the session key `session` if
    given (its route is "session"); the SDK raises on any status but 200."""
    if api == "chat":
        client = openai_client(proxy.url)
        request = {
            "model": MODEL,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": TOKENS,
            **({"user": session} if session else {}),
        }
        if stream:
            return "".join(
                chunk.choices[0].delta.content or ""
                for chunk in client.chat.completions.create(**request, stream=True)
                if chunk.choices
            )
        return client.chat.completions.create(**request).choices[0].message.content
    if api == "messages":
        claude = claude_client(proxy.url)
        request = {
            "model": MODEL,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": TOKENS,
            **({"metadata": {"user_id": session}} if session else {}),
        }
        if stream:
            with claude.messages.stream(**request) as events:
                return events.get_final_text()
        return "".join(block.text for block in claude.messages.create(**request).content if block.type == "text")
    client = openai_client(proxy.url)
    request = {
        "model": MODEL,
        "input": prompt,
        "max_output_tokens": TOKENS,
        "store": False,
        **({"user": session} if session else {}),
    }
    if stream:
        return "".join(
            event.delta for event in client.responses.create(**request, stream=True) if event.type == "response.output_text.delta"
        )
    return client.responses.create(**request).output_text


KINDS = [(api, stream) for api in ("chat", "messages", "responses") for stream in (False, True)]


def job(n: int, prompt: str) -> tuple:
    """Request n of a round: the APIs and modes in turn; a prompt other than SAME has a session key."""
    return (*KINDS[n % len(KINDS)], prompt, None if prompt == SAME else f"session-{n}")


def round_of(proxy, prompts: list[str], clients: int = 8) -> list[str]:
    """Each prompt asked once, `clients` at a time."""
    with ThreadPoolExecutor(clients) as executor:
        return list(executor.map(lambda n: ask(proxy, *job(n, prompts[n])), range(len(prompts))))


def different(words: str, count: int) -> list[str]:
    return [f"{words} {n}." for n in range(count)]


def pooled(start_proxy, tmp_path_factory, *urls: str):
    config = tmp_path_factory.mktemp("failover") / "config.yaml"
    config.write_text(f"models:\n  {MODEL}:\n    upstreams: [{', '.join(urls)}]\n")
    return start_proxy("--config", str(config))


def upstreams_of(proxy) -> dict[str, bool]:
    info = requests.get(proxy.url + "/v1/internal/model/info", params={"model": MODEL}, timeout=30).json()
    return {upstream["url"]: upstream["healthy"] for upstream in info["upstreams"]}


@pytest.mark.parametrize("dead_first", [True, False], ids=["dead-first", "dead-last"])
def test_an_upstream_dead_from_the_start_loses_no_request(llama_server, start_proxy, tmp_path_factory, dead_first):
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    order = (dead, llama_server.url) if dead_first else (llama_server.url, dead)
    proxy = pooled(start_proxy, tmp_path_factory, *order)
    # The first requests meet a pool that knows nothing yet: /props, the template and the route are all asked now.
    assert all(round_of(proxy, [SAME] * 8))  # identical, together
    assert all(ask(proxy, *job(n, prompt)) for n, prompt in enumerate(different("Name the number", 6)))  # one by one
    answers = [line for line in access_lines(proxy) if line["model"] == MODEL]
    assert len(answers) == 14 and {line["status"] for line in answers} == {"200"}
    assert {line["route"] for line in answers} >= {"prefix", "session"}
    # Marked down by a request that tried it, or else by the health poller within its 2 s.
    wait_until(lambda: upstreams_of(proxy) == {llama_server.url: True, dead: False}, proxy.process, "the dead mark")


@pytest.fixture(scope="module")
def doomed(start_llama_server):
    """A second llama-server, which the test kills and starts again on the same port."""
    return start_llama_server(context_size=2048, slots=4)


def test_an_upstream_killed_between_rounds_loses_no_request_and_is_used_again_once_back(
    llama_server, doomed, start_proxy, tmp_path_factory
):
    proxy = pooled(start_proxy, tmp_path_factory, doomed.url, llama_server.url)
    prompts = [prompt for pair in zip([SAME] * 4, different("Name the number", 4), strict=True) for prompt in pair]
    assert all(round_of(proxy, prompts))  # both serve; routes are learned for both
    assert doomed.url in {line["upstream"] for line in access_lines(proxy)}

    for n, prompt in enumerate(prompts):  # one client: the kill falls between two requests
        if n == len(prompts) // 2:
            doomed.process.send_signal(signal.SIGKILL)
            doomed.process.wait()
        assert ask(proxy, *job(n, prompt))
    assert all(round_of(proxy, prompts))  # eight clients, the learned routes of the dead one moved

    doomed.start()  # on the same port; stopped with the module
    wait_until(lambda: upstreams_of(proxy)[doomed.url], proxy.process, "the health poller", timeout=60)
    # Sessions whose key hashes to it come back to it (the others stay where they are).
    homing = [
        key for key in (f"home-{n}" for n in range(100)) if rendezvous(key, [doomed.url, llama_server.url])[0] == doomed.url
    ][: len(KINDS)]
    served_before = len(access_lines(proxy))
    for n, (kind, key) in enumerate(zip(KINDS, homing, strict=True)):
        assert ask(proxy, *kind, f"Spell the number {n}.", key)
    assert {(line["upstream"], line["route"]) for line in access_lines(proxy)[served_before:] if line["model"] == MODEL} == {
        (doomed.url, "session")
    }
