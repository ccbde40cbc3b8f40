"""Every template source against the real llama-server and SmolLM2 (ChatML in its GGUF)."""

from __future__ import annotations

import http.server
import threading

import pytest
import requests

from ..conftest import openai_client

CONVERSATIONS = [
    [{"role": "user", "content": "Hi"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Bye"},
    ],
    [{"role": "user", "content": "Ünïcode ✓ and\nnewlines"}],
]
SHORT_TEMPLATE = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}<assistant>"
EXPECTED_SHORT = "<system>Be brief.\n<user>Hi\n<assistant>Hello!\n<user>Bye\n<assistant>"


def chat_prompt(proxy, messages, **body) -> requests.Response:
    return requests.post(proxy.url + "/v1/internal/chat-prompt", json={"messages": messages, **body}, timeout=30)


@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_default_is_the_models_own_template_byte_for_byte(proxy, llama_server, messages):
    ours = chat_prompt(proxy, messages).json()["prompt"]
    theirs = requests.post(llama_server.url + "/apply-template", json={"messages": messages}, timeout=30)
    assert ours == theirs.json()["prompt"]


def test_model_info_reports_the_source(proxy, llama_server):
    info = requests.get(proxy.url + "/v1/internal/model/info", timeout=10).json()
    assert info["template"]["source"] == "model"
    assert info["context_length"] == llama_server.context_size // llama_server.slots  # per slot
    assert info["upstreams"]


def test_chat_through_the_models_template_stops_at_its_eos(client):
    reply = client.chat.completions.create(model="m", messages=CONVERSATIONS[0], max_tokens=64, temperature=0)
    assert "<|im_end|>" not in reply.choices[0].message.content
    assert reply.choices[0].finish_reason == "stop"


def test_fastchat_template_by_name(llama_server, start_proxy):
    proxy = start_proxy("--llama-api", llama_server.url, "--chat-prompt-model", "vicuna_v1.1")
    assert chat_prompt(proxy, CONVERSATIONS[1]).json()["prompt"] == (
        "Be brief. USER: Hi ASSISTANT: Hello!</s>USER: Bye ASSISTANT:"
    )
    info = requests.get(proxy.url + "/v1/internal/model/info", timeout=10).json()
    assert info["template"] == {"source": "chat_prompt_model", "name": "fastchat:vicuna_v1.1"}


def test_template_file(llama_server, start_proxy, tmp_path):
    path = tmp_path / "short.jinja"
    path.write_text(SHORT_TEMPLATE)
    proxy = start_proxy("--llama-api", llama_server.url, "--chat-template", str(path))
    assert chat_prompt(proxy, CONVERSATIONS[1]).json()["prompt"] == EXPECTED_SHORT
    info = requests.get(proxy.url + "/v1/internal/model/info", timeout=10).json()
    assert info["template"] == {"source": "chat_template", "name": str(path)}


def test_inline_template_with_escapes_and_from_the_environment(llama_server, start_proxy):
    one_line = SHORT_TEMPLATE.replace("\n", "\\n")
    for proxy in (
        start_proxy("--llama-api", llama_server.url, "--chat-template", one_line),
        start_proxy("--llama-api", llama_server.url, env={"API_LIKE_OAI_CHAT_TEMPLATE": one_line}),
    ):
        assert chat_prompt(proxy, CONVERSATIONS[1]).json()["prompt"] == EXPECTED_SHORT


@pytest.fixture
def template_url():
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's naming
            body = SHORT_TEMPLATE.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/template.jinja"
    server.shutdown()


def test_template_url_is_fetched_once_at_start_up(llama_server, start_proxy, template_url):
    proxy = start_proxy("--llama-api", llama_server.url, "--chat-template", template_url)
    assert chat_prompt(proxy, CONVERSATIONS[1]).json()["prompt"] == EXPECTED_SHORT


def test_injection_in_a_template_flag_is_a_400_and_runs_nothing(llama_server, start_proxy):
    payload = "{{ cycler.__init__.__globals__.os.popen('id').read() }}"
    proxy = start_proxy("--llama-api", llama_server.url, "--chat-template", payload)
    response = chat_prompt(proxy, CONVERSATIONS[0])
    assert response.status_code == 400
    assert "unsafe" in response.json()["error"]["message"]
    assert "uid=" not in response.text


def test_raise_exception_reaches_the_sdk_as_a_400(llama_server, start_proxy):
    import openai

    template = "{% if messages|length > 1 %}{{ raise_exception('Only one message, please') }}{% endif %}x"
    proxy = start_proxy("--llama-api", llama_server.url, "--chat-template", template)
    with pytest.raises(openai.BadRequestError, match="Only one message, please"):
        openai_client(proxy.url).chat.completions.create(model="m", messages=CONVERSATIONS[1])
