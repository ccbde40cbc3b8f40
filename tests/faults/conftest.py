"""A scripted fake llama.cpp per test module (`fake`), and a proxy in front of it with a template
that knows tools (qwen2.5, hermes format), for the tests of the APIs' exact answers."""

from __future__ import annotations

import pytest

from ..fake_llamacpp import FakeLlamaCpp

# What a hermes-format model writes for one call, token by token, split inside markers, keys and strings.
HERMES_CALL = ["Let", " me", " check", ".", " <", "tool", "_c", "all", ">\n", '{"name": "get', '_weather", "arg',
               'uments": {"city": "Zür', 'ich", "unit": "c"}}', "\n</", "tool_call", ">"]
HERMES_ARGUMENTS = '{"city": "Zürich", "unit": "c"}'
FAKE_CONTEXT = 2048   # the fake's n_ctx; it counts a prompt's tokens as its words


@pytest.fixture(scope="module")
def fake(request):
    """A scripted fake llama.cpp for one test module, stopped after it; /props reports the module's
    CHAT_TEMPLATE, if it has one."""
    upstream = FakeLlamaCpp(chat_template=getattr(request.module, "CHAT_TEMPLATE", None)).start()
    yield upstream
    upstream.stop()


@pytest.fixture
def fakes():
    """Two fake upstreams for one test: a model's pool."""
    servers = [FakeLlamaCpp().start(), FakeLlamaCpp().start()]
    yield servers
    for server in servers:
        server.stop()


@pytest.fixture(scope="module")
def replaying_upstream(fake):
    return fake


@pytest.fixture(scope="module")
def qwen_proxy(replaying_upstream, start_proxy):
    return start_proxy("--llama-api", replaying_upstream.url, "--chat-prompt-model", "qwen2.5")


@pytest.fixture
def replay(replaying_upstream):
    """The fake, set back to its plain answer after each test."""
    yield replaying_upstream
    replaying_upstream.tokens, replaying_upstream.behaviour = (" Hello", ",", " world", "!"), "ok"
    replaying_upstream.stop_type, replaying_upstream.stopping_word = "eos", ""
