"""A scripted fake llama.cpp per test module (`fake`), a proxy in front of it (`proxy`), and one with a
template that knows tools (qwen2.5, hermes format), for the tests of the APIs' exact answers.

A module says what its fake and its proxy are by module attributes: CHAT_TEMPLATE (what the fake's
/props reports as the model's template), FAKE_PROPS (more of its /props) and PROXY_FLAGS (the
proxy's flags after --llama-api)."""

from __future__ import annotations

import pytest

from ..fake_llamacpp import FakeLlamaCpp

# What a hermes-format model writes for one call, token by token, split inside markers, keys and strings.
HERMES_CALL = [
    "Let",
    " me",
    " check",
    ".",
    " <",
    "tool",
    "_c",
    "all",
    ">\n",
    '{"name": "get',
    '_weather", "arg',
    'uments": {"city": "Zür',
    'ich", "unit": "c"}}',
    "\n</",
    "tool_call",
    ">",
]
HERMES_ARGUMENTS = '{"city": "Zürich", "unit": "c"}'
FAKE_CONTEXT = 2048  # the fake's n_ctx; it counts a prompt's tokens as its words


@pytest.fixture(scope="module")
def fake(request, start_fake):
    """The module's scripted fake llama.cpp, stopped after it; /props reports the module's
    CHAT_TEMPLATE and FAKE_PROPS, if it has them."""
    return start_fake(
        chat_template=getattr(request.module, "CHAT_TEMPLATE", None), props_extra=dict(getattr(request.module, "FAKE_PROPS", {}))
    )


@pytest.fixture(scope="module")
def proxy(request, fake, start_proxy):
    """The proxy in front of the module's fake, with the module's PROXY_FLAGS."""
    return start_proxy("--llama-api", fake.url, *getattr(request.module, "PROXY_FLAGS", ()))


@pytest.fixture
def fakes():
    """Two fake upstreams for one test: a model's pool."""
    servers = [FakeLlamaCpp().start(), FakeLlamaCpp().start()]
    yield servers
    for server in servers:
        server.stop()


@pytest.fixture(scope="module")
def qwen_proxy(fake, start_proxy):
    return start_proxy("--llama-api", fake.url, "--chat-prompt-model", "qwen2.5")


@pytest.fixture
def replay(fake):
    """The fake, set back to its plain answer after each test."""
    yield fake
    fake.tokens, fake.behaviour = (" Hello", ",", " world", "!"), "ok"
    fake.stop_type, fake.stopping_word = "eos", ""
