"""Start-up on an address beyond loopback with no API key: the proxy serves, and its log says so."""

from __future__ import annotations

import pytest
import requests

WARNING = "with no API key: anyone who can reach this address can use the models"


@pytest.mark.parametrize(
    "args, warned",
    [
        (["--host", "0.0.0.0"], True),
        (["--host", "0.0.0.0", "--api-key", "k-1"], False),
        (["--host", "127.0.0.1"], False),
    ],
)
def test_the_start_up_log_warns_of_an_open_address(fake, start_proxy, args, warned):
    proxy = start_proxy("--llama-api", fake.url, "--chat-prompt-model", "chatml", *args)
    assert requests.get(proxy.url + "/health", timeout=10).status_code == 200
    log = proxy.log()
    assert (f"WARNING api_like_oai: api-like-oai listens on 0.0.0.0 port {proxy.port} {WARNING}" in log) is warned
    assert (WARNING in log) is warned
