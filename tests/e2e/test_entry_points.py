"""The same CLI three ways, each serving the real model."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ..conftest import openai_client
from ..servers import ROOT

COMMANDS = {
    "console script": (str(Path(sys.executable).parent / "api-like-oai"),),
    "python -m": (sys.executable, "-m", "api_like_oai"),
    "original script name": (sys.executable, str(ROOT / "api_like_oai.py")),
}


@pytest.mark.parametrize("way", COMMANDS)
def test_each_way_to_start_serves_chat(way, llama_server, start_proxy):
    proxy = start_proxy("--llama-api", llama_server.url, command=COMMANDS[way])
    reply = openai_client(proxy.url).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
    assert reply.choices[0].message.content


def test_legacy_flags_format_the_prompt_as_the_original_script(llama_server, start_proxy):
    import requests

    proxy = start_proxy("--llama-api", llama_server.url, "--chat-prompt", "Rules follow.\\n",
                        "--user-name", "\\nUSER: ", "--ai-name", "\\nASSISTANT: ", "--stop", "\\n")
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}]
    prompt = requests.post(proxy.url + "/v1/internal/chat-prompt", json={"messages": messages}, timeout=10)
    assert prompt.json()["prompt"] == (
        "Rules follow.\nASSISTANT's RULE: Be brief.\nUSER: Hi\nASSISTANT: Hello!\n\nUSER: Bye\nASSISTANT:")
    reply = openai_client(proxy.url).chat.completions.create(model="m", messages=messages, max_tokens=8)
    assert "\n" not in reply.choices[0].message.content  # the --stop marker ends the answer
