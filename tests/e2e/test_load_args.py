"""A load's `args` against real llama-servers the proxy starts (issue 48): what anyone reaching the port
could once do with them (read a file, run commands, write a file, listen on every interface, add a
key) is refused through every route that loads and every set-up of keys, and from a web page; a load
whose llama-server fails leaves the model on its last good launch; a plain load is the configured one."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest
import requests

from api_like_oai.supervisor.launch_rules import BY_NAME

from ..servers import Proxy, command_line, llama_servers_on, stop

ADMIN, FILE_KEY = "sk-admin-load-args", "sk-file-load-args"
CONFIG = """
models:
  smol:
    model: {model}
    args: [--ctx-size, "1024", --parallel, "1", --threads, "1"]
"""
LOAD_ROUTES = ("/models/load", "/v1/internal/model/load")
SETUPS = ("no keys", "an api key file", "managed keys")


def attacks(secret: Path, written: Path) -> list[tuple[list[str], str]]:
    """issue 48's reproductions: each load's args, and the flag its refusal must name."""
    return [
        (["--chat-template-file", str(secret)], "--chat-template-file"),
        (["--tools", "exec_shell_command"], "--tools"),
        (["--tools", "all", "--cors-origins", "*"], "--tools"),
        (["--log-file", str(written)], "--log-file"),
        (["--host", "0.0.0.0"], "--host"),
        (["--port", "1"], "--port"),
        (["--api-key", "the-callers-own"], "--api-key"),
        (["--ctx-size", "512", "--chat-template-file=" + str(secret)], "--chat-template-file"),
        (["--no-such-flag"], "--no-such-flag"),
    ]


@pytest.fixture(scope="module", params=SETUPS)
def setup(request, provisioned, tmp_path_factory):
    """A proxy starting SmolLM2 as `smol`, with no keys, a key file, or managed keys (admin key); its
    headers for a caller who may load; afterwards, no llama-server it started outlives it."""
    folder = tmp_path_factory.mktemp("load-args")
    (folder / "config.yaml").write_text(CONFIG.format(model=provisioned["MODEL"]))
    (folder / "keys").write_text(FILE_KEY + "\n")
    flags, key = {
        "no keys": ([], None),
        "an api key file": (["--api-key-file", str(folder / "keys")], FILE_KEY),
        "managed keys": (["--admin-key", ADMIN, "--store", f"sqlite:///{folder / 'store.db'}"], ADMIN),
    }[request.param]
    proxy = Proxy(["--config", str(folder / "config.yaml"), "--llama-server", provisioned["LLAMA_SERVER"], *flags]).start()
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    yield proxy, headers, folder
    ports = [int(url.rsplit(":", 1)[1]) for url in status(proxy, headers)["upstreams"]]
    stop(proxy.process)
    deadline = time.monotonic() + 10
    while any(llama_servers_on(port) for port in ports) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [port for port in ports if llama_servers_on(port)] == [], "a llama-server outlived the proxy"


def status(proxy: Proxy, headers: dict) -> dict:
    return requests.get(f"{proxy.url}/v1/models/smol", headers=headers, timeout=10).json()["status"]


def chat(proxy: Proxy, headers: dict) -> requests.Response:
    body = {"model": "smol", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4}
    return requests.post(f"{proxy.url}/v1/chat/completions", json=body, headers=headers, timeout=120)


def test_no_load_can_choose_a_file_address_key_or_tool_and_the_model_still_answers(setup):
    proxy, headers, folder = setup
    secret, written = folder / "secret.txt", folder / "written.log"
    secret.write_text("the-contents-of-a-secret-file")
    assert chat(proxy, headers).status_code == 200
    [pid] = llama_servers_on(int(status(proxy, headers)["upstreams"][0].rsplit(":", 1)[1]))
    for route in LOAD_ROUTES:
        for args, flag in attacks(secret, written):
            answer = requests.post(f"{proxy.url}{route}", json={"model": "smol", "args": args}, headers=headers, timeout=30)
            assert answer.status_code == 400, (route, args, answer.text)
            assert answer.json()["error"]["message"].startswith(f"{flag} may not be set on a load"), answer.text
            assert answer.json()["error"]["param"] == "args"
    assert chat(proxy, headers).status_code == 200
    now = status(proxy, headers)
    assert now["loads"] == 1 and "args" not in now  # never restarted: the same child, with the operator's flags
    [still] = llama_servers_on(int(now["upstreams"][0].rsplit(":", 1)[1]))
    argv = command_line(still)
    assert still == pid and not {"--chat-template-file", "--tools", "--log-file", "--api-key"} & set(argv)
    assert argv[argv.index("--host") + 1] == "127.0.0.1" and not written.exists()
    props = requests.get(f"{proxy.url}/props", params={"model": "smol"}, headers=headers, timeout=10)
    assert "the-contents-of-a-secret-file" not in props.text


def test_a_web_page_cannot_load_or_chat_but_curl_without_a_content_type_can(setup):
    proxy, headers, _ = setup
    body = b'{"model": "smol", "args": ["--ctx-size", "768"]}'
    page = {**headers, "Origin": "http://page.example", "Content-Type": "text/plain"}  # no preflight for a browser
    for route in LOAD_ROUTES:
        refused = requests.post(f"{proxy.url}{route}", data=body, headers=page, timeout=30)
        assert refused.status_code == 403 and refused.json()["error"]["type"], refused.text
        assert "page.example" in refused.json()["error"]["message"]
    chat_body = b'{"model": "smol", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}'
    assert requests.post(f"{proxy.url}/v1/chat/completions", data=chat_body, headers=page, timeout=30).status_code == 403
    assert "args" not in status(proxy, headers)
    curl = requests.Request("POST", f"{proxy.url}/models/load", data=body, headers=headers).prepare()
    assert "Content-Type" not in curl.headers  # as `curl -d` without -H sends it, bar curl's form default
    with requests.Session() as session:
        loaded = session.send(curl, timeout=120)
    assert loaded.status_code == 200 and loaded.json()["status"]["args"] == ["--ctx-size", "768"], loaded.text
    plain = requests.post(f"{proxy.url}/models/load", json={"model": "smol"}, headers=headers, timeout=120).json()
    assert "args" not in plain["status"]  # a plain load is the configured launch
    own = {**headers, "Origin": proxy.url}  # the proxy's own pages (the dashboard, the docs) are not foreign
    assert requests.get(f"{proxy.url}/v1/models", headers=own, timeout=10).status_code == 200


def test_a_page_whose_name_was_pointed_at_the_proxy_is_refused_unless_keys_guard_it(setup, request):
    """DNS rebinding: a page of rebound.example, whose name now resolves to 127.0.0.1, is of the same
    origin as the proxy to its browser (and a same-origin GET carries no Origin at all); its Host header
    still names it. With no keys only localhost and addresses are served; with keys the key guards."""
    proxy, headers, _ = setup
    port = proxy.url.rsplit(":", 1)[1]
    rebound = {**headers, "Host": f"rebound.example:{port}"}
    chat_body = b'{"model": "smol", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}'
    page = {**rebound, "Origin": f"http://rebound.example:{port}", "Content-Type": "text/plain"}
    answers = [
        requests.get(f"{proxy.url}/v1/models", headers=rebound, timeout=10),
        requests.post(f"{proxy.url}/v1/chat/completions", data=chat_body, headers=page, timeout=30),
        requests.post(f"{proxy.url}/models/load", data=b'{"model": "smol"}', headers=page, timeout=120),
    ]
    if request.node.callspec.params["setup"] == "no keys":
        assert [answer.status_code for answer in answers] == [403, 403, 403]
        assert "rebound.example" in answers[0].json()["error"]["message"]
        assert "--allowed-hosts" in answers[0].json()["error"]["message"]
    else:
        assert [answer.status_code for answer in answers] == [200, 200, 200]
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", "localhost"):
        assert requests.get(f"{proxy.url}/v1/models", headers={**headers, "Host": host}, timeout=10).status_code == 200


def test_a_load_whose_llama_server_fails_answers_why_and_the_model_goes_back_to_its_last_good_launch(setup):
    proxy, headers, _ = setup
    assert chat(proxy, headers).status_code == 200
    loads = status(proxy, headers)["loads"]
    failing = ["--cache-type-v", "q4_0", "--flash-attn", "off"]  # allowed knobs this build cannot start with
    answer = requests.post(f"{proxy.url}/models/load", json={"model": "smol", "args": failing}, headers=headers, timeout=120)
    assert answer.status_code == 400, answer.text
    message = answer.json()["error"]["message"]
    assert message.startswith("model 'smol' did not start with the requested args: ") and "model loading error" in message
    assert not re.search(r"127\.0\.0\.1|:[0-9]{4,5}\b", message)  # no address
    assert chat(proxy, headers).status_code == 200  # at once: no backoff, the last good launch
    now = status(proxy, headers)
    assert now["value"] == "loaded" and "args" not in now and now["loads"] >= loads + 1
    assert "--cache-type-v" not in command_line(llama_servers_on(int(now["upstreams"][0].rsplit(":", 1)[1]))[0])


def test_the_allowed_flags_are_flags_the_pinned_llama_server_knows(provisioned):
    """The allowlist names real flags: a name the build does not know would be refused by llama-server
    itself at start, a failed load for nothing."""
    usage = subprocess.run([provisioned["LLAMA_SERVER"], "--help"], capture_output=True, text=True, timeout=60).stdout
    known = set(re.findall(r"(?<![\w-])--?[A-Za-z][\w-]*", usage))
    assert sorted(name for name in BY_NAME if name not in known) == []


def tenant_of(proxy: Proxy, headers: dict, setup_name: str) -> dict | None:
    """With managed keys, an ordinary key's headers (made by the admin); else None (every caller of the
    other set-ups may load and unload, as on the load routes)."""
    if "managed" not in setup_name:
        return None
    made = requests.post(f"{proxy.url}/v1/internal/keys", json={"name": "tenant"}, headers=headers, timeout=10).json()
    return {"Authorization": f"Bearer {made['key']}"}


def test_ollamas_keep_alive_steers_a_shared_model_only_for_a_caller_who_may_unload_it(setup, request, provisioned):
    proxy, headers, _ = setup
    tenant = tenant_of(proxy, headers, request.node.callspec.params["setup"])
    assert chat(proxy, headers).status_code == 200
    if tenant is not None:
        for keep_alive in (0, -1):
            answer = requests.post(
                f"{proxy.url}/api/generate", json={"model": "smol", "keep_alive": keep_alive}, headers=tenant, timeout=60
            )
            assert answer.status_code == 200 and answer.json()["done_reason"] == "load", answer.text
        seen = status(proxy, tenant)
        assert seen["value"] == "loaded" and seen["ttl"] != 0  # not unloaded, not pinned for ever
        assert not any(seen.get(operators) for operators in ("args", "upstreams", "error"))
        shown = requests.post(f"{proxy.url}/api/show", json={"model": "smol"}, headers=tenant, timeout=30).json()
        assert provisioned["MODEL"] not in shown["modelfile"] and "FROM smol" in shown["modelfile"]
    shown = requests.post(f"{proxy.url}/api/show", json={"model": "smol"}, headers=headers, timeout=30).json()
    assert provisioned["MODEL"] in shown["modelfile"]  # the operator's own view
    answer = requests.post(f"{proxy.url}/api/generate", json={"model": "smol", "keep_alive": 0}, headers=headers, timeout=60)
    assert answer.json()["done_reason"] == "unload" and status(proxy, headers)["value"] == "unloaded"
