"""One config, several aliases over several real llama-server processes (the same small model)."""

from __future__ import annotations

import signal
from concurrent.futures import ThreadPoolExecutor

import anthropic
import openai
import pytest
import requests

from ..conftest import openai_client

HELLO = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="module")
def second_server(start_llama_server):
    return start_llama_server(context_size=2048, slots=2)


@pytest.fixture(scope="module")
def doomed_server(start_llama_server):
    """A server the tests kill."""
    return start_llama_server(context_size=1024, slots=1)


@pytest.fixture(scope="module")
def routed_proxy(llama_server, second_server, doomed_server, start_proxy, tmp_path_factory):
    config = tmp_path_factory.mktemp("config") / "config.yaml"
    config.write_text(f"""
default_model: chatml-model
models:
  chatml-model:
    aliases: [gpt-3.5-turbo]
    upstreams: [{llama_server.url}]
    template: auto
  vicuna-model:
    upstreams: [{second_server.url}]
    chat_prompt_model: vicuna_v1.1
  pooled:
    upstreams: [{doomed_server.url}, {second_server.url}]
  tiny-context:
    upstreams: [{second_server.url}]
    context_length: 160
  tiny-strict:
    upstreams: [{second_server.url}]
    context_length: 160
    context_overflow: error
  remote:
    kind: openai
    upstreams: [{llama_server.url}/v1]
    upstream_model: smollm2
""")
    return start_proxy("--config", str(config))


def chat_prompt(proxy, model: str, messages=HELLO) -> str:
    response = requests.post(proxy.url + "/v1/internal/chat-prompt", json={"model": model, "messages": messages}, timeout=30)
    return response.json()["prompt"]


def test_each_alias_answers_through_its_own_template(routed_proxy):
    assert chat_prompt(routed_proxy, "chatml-model").endswith("<|im_start|>user\nSay hello.<|im_end|>\n<|im_start|>assistant\n")
    assert chat_prompt(routed_proxy, "vicuna-model").endswith("USER: Say hello. ASSISTANT:")
    client = openai_client(routed_proxy.url)
    for model in ("chatml-model", "vicuna-model"):
        reply = client.chat.completions.create(model=model, messages=HELLO, max_tokens=8)
        assert reply.model == model and reply.choices[0].message.content


def test_a_familiar_name_resolves_to_its_alias(routed_proxy):
    client = openai_client(routed_proxy.url)
    reply = client.chat.completions.create(model="gpt-3.5-turbo", messages=HELLO, max_tokens=4)
    assert reply.model == "gpt-3.5-turbo" and reply.choices[0].message.content
    assert {"chatml-model", "gpt-3.5-turbo", "vicuna-model", "pooled", "tiny-context", "tiny-strict", "remote"} == {
        m.id for m in client.models.list().data
    }
    no_model = requests.post(routed_proxy.url + "/v1/chat/completions", json={"messages": HELLO, "max_tokens": 4}, timeout=60)
    assert no_model.json()["model"] == "chatml-model"


def test_unknown_model_is_a_404_listing_the_names(routed_proxy):
    with pytest.raises(openai.NotFoundError) as caught:
        openai_client(routed_proxy.url).chat.completions.create(model="gpt-17", messages=HELLO)
    assert caught.value.body["code"] == "model_not_found"
    assert "vicuna-model" in caught.value.body["message"] and "gpt-3.5-turbo" in caught.value.body["message"]


def test_model_info_and_health_report_upstreams(routed_proxy, second_server, doomed_server):
    info = requests.get(routed_proxy.url + "/v1/internal/model/info", params={"model": "vicuna-model"}, timeout=30).json()
    assert info["template"]["name"] == "fastchat:vicuna_v1.1"
    assert info["upstreams"] == [{"url": second_server.url, "healthy": True}]
    health = requests.get(routed_proxy.url + "/health", timeout=30).json()
    assert health["upstreams"][doomed_server.url] == "ok"


def test_a_long_conversation_is_truncated_to_fit(routed_proxy):
    turns = []
    for n in range(8):
        turns += [
            {"role": "user", "content": f"Tell me fact number {n} about the sea, in detail."},
            {"role": "assistant", "content": f"Fact {n}: the sea is large, deep, salty and full of life."},
        ]
    conversation = [{"role": "system", "content": "Be brief."}, *turns, {"role": "user", "content": "Summarise."}]
    response = requests.post(
        routed_proxy.url + "/v1/chat/completions",
        timeout=60,
        json={"model": "tiny-context", "messages": conversation, "max_tokens": 8},
    )
    assert response.status_code == 200, response.text
    dropped = int(response.headers["X-Messages-Dropped"])
    assert 0 < dropped < len(turns)
    assert response.json()["usage"]["prompt_tokens"] + 8 <= 160
    assert response.headers["X-Max-Tokens-Effective"] == "8"


def test_a_max_tokens_larger_than_the_context_shortens_the_reply_not_the_conversation(routed_proxy):
    """As Claude Code and Cline ask: the reply gets what the context leaves, the history stays unless
    the prompt leaves less than the reserve (a quarter of the context here)."""
    conversation = [
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "Another one."},
    ]
    response = requests.post(
        routed_proxy.url + "/v1/chat/completions",
        timeout=60,
        json={"model": "tiny-context", "messages": conversation, "max_tokens": 32000},
    )
    assert response.status_code == 200, response.text
    assert "X-Messages-Dropped" not in response.headers
    usage = response.json()["usage"]
    effective = int(response.headers["X-Max-Tokens-Effective"])
    assert usage["prompt_tokens"] + effective == 160
    assert usage["completion_tokens"] <= effective


def test_context_overflow_error_is_openai_s_strict_400(routed_proxy):
    no_room = requests.post(
        routed_proxy.url + "/v1/chat/completions",
        timeout=60,
        json={"model": "tiny-strict", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 150},
    )
    assert no_room.status_code == 400
    error = no_room.json()["error"]
    assert error["code"] == "context_length_exceeded" and "160" in error["message"] and "150" in error["message"]


def test_killing_one_of_two_upstreams_loses_no_new_request(routed_proxy, doomed_server):
    client = openai_client(routed_proxy.url)
    doomed_server.process.send_signal(signal.SIGKILL)
    doomed_server.process.wait()
    with ThreadPoolExecutor(4) as pool:
        replies = list(
            pool.map(lambda _: client.chat.completions.create(model="pooled", messages=HELLO, max_tokens=4), range(12))
        )
    assert all(reply.choices[0].message.content for reply in replies)
    health = requests.get(routed_proxy.url + "/health", timeout=30)
    assert health.status_code == 503 and health.json()["upstreams"][doomed_server.url] != "ok"


def test_an_openai_compatible_upstream_is_passed_through(routed_proxy, llama_server):
    # llama-server's own /v1 API stands in for vLLM or a remote server; its answers are relayed as
    # they are, so they are checked with the SDK's default (non-strict) validation.
    client = openai_client(routed_proxy.url, strict=False)
    reply = client.chat.completions.create(model="remote", messages=HELLO, max_tokens=6)
    assert reply.model == "remote" and reply.choices[0].message.content
    pieces = [
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(model="remote", messages=HELLO, max_tokens=6, stream=True)
        if c.choices
    ]
    assert "".join(pieces)
    info = requests.get(routed_proxy.url + "/v1/internal/model/info", params={"model": "remote"}, timeout=30).json()
    assert info["kind"] == "openai" and info["upstreams"] == [{"url": llama_server.url + "/v1"}]


def test_claude_code_and_codex_apis_work_in_front_of_an_openai_compatible_upstream(routed_proxy):
    """The Messages and Responses APIs on a `kind: openai` model: chat requests streamed from
    llama-server's own /v1 API, written in each API's shape."""
    claude = anthropic.Anthropic(base_url=routed_proxy.url, api_key="k", max_retries=0)
    message = claude.messages.create(model="remote", max_tokens=8, messages=HELLO)
    with claude.messages.stream(model="remote", max_tokens=8, messages=HELLO) as stream:
        streamed = stream.get_final_message()
    for answer in (message, streamed):
        assert answer.model == "remote" and answer.content[0].type == "text" and answer.content[0].text
        assert answer.stop_reason in ("end_turn", "max_tokens") and answer.usage.output_tokens > 0
    response = openai_client(routed_proxy.url).responses.create(model="remote", input="Say hello.", max_output_tokens=8)
    assert response.output_text and response.usage.output_tokens > 0
