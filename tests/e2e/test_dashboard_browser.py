"""The dashboard in a real browser (Debian's Chromium, headless, driven by Playwright's Python API:
scripts/setup installs both, no browser is downloaded) against the real proxy and a real llama-server:
the page takes the key, shows a long streamed request moving from prefill to generating, stops it
with its button, lists an error whose text is markup (shown as text, never run), and draws a chart.
Screenshots are kept in the test's temporary folder; the manual's picture of the dashboard
(docs/dashboard.png, on docs/operations.md) is the one taken while generating, copied there when
DASHBOARD_SCREENSHOT names it: `DASHBOARD_SCREENSHOT=docs/dashboard.png scripts/test tests/e2e/test_dashboard_browser.py`."""

from __future__ import annotations

import json
import os
import shutil
import threading

import pytest
import requests
from playwright.sync_api import expect, sync_playwright

from ..servers import ROOT, LlamaServer

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ADMIN_KEY = "dashboard-admin-secret"
AUTH = {"Authorization": f"Bearer {ADMIN_KEY}"}
MARKUP_MODEL = '<img src=x onerror="window.__injected = 1">'
WAIT_MS = 45_000
SCREENSHOT_FOR_THE_MANUAL = os.environ.get("DASHBOARD_SCREENSHOT")  # relative to the checkout


@pytest.fixture(scope="module")
def slow_prefill_server(provisioned):
    """One slot, one thread, small batches: a prompt of a few thousand tokens is read in steps the
    dashboard sees (llama.cpp reports progress after each batch)."""
    server = LlamaServer(
        provisioned["LLAMA_SERVER"],
        provisioned["MODEL"],
        slots=1,
        context_size=8192,
        extra_args=("--threads", "1", "--batch-size", "64", "--ubatch-size", "64"),
    ).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def dashboard_proxy(slow_prefill_server, start_proxy, tmp_path_factory):
    folder = tmp_path_factory.mktemp("dashboard")
    config = folder / "config.yaml"  # a config's model names are strict: an unknown one is a 404
    config.write_text(f"models:\n  smollm:\n    upstreams: [{slow_prefill_server.url}]\n")
    return start_proxy("--config", str(config), "--admin-key", ADMIN_KEY, "--store", f"sqlite:///{folder}/store.sqlite3")


@pytest.fixture
def page(tmp_path):
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        page.console_messages = []
        page.on("console", lambda message: page.console_messages.append(message.text))
        yield page
        browser.close()


class LongStream(threading.Thread):
    """A streamed chat with a long prompt and a long answer, read to its end in the background."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url, self.finish_reasons, self.chunks = url, [], 0
        self.items = 60  # about 600 prompt tokens: a few seconds of prefill on one thread, batches of 64

    def run(self) -> None:
        prompt = " ".join(f"item {number} is a small blue stone." for number in range(self.items))
        body = {
            "model": "smollm",
            "stream": True,
            "max_tokens": 3000,
            "ignore_eos": True,
            "temperature": 0,
            "messages": [{"role": "user", "content": prompt + "\nCount the stones, one line each."}],
        }
        with requests.post(self.url + "/v1/chat/completions", json=body, headers=AUTH, stream=True, timeout=120) as answer:
            assert answer.status_code == 200, answer.text
            for line in answer.iter_lines():
                if line.startswith(b"data: {"):
                    chunk = json.loads(line[6:])
                    self.chunks += 1
                    self.finish_reasons += [c["finish_reason"] for c in chunk["choices"] if c.get("finish_reason")]


def test_the_dashboard_follows_a_request_stops_it_lists_an_error_and_draws_a_chart(dashboard_proxy, page, tmp_path):
    page.goto(dashboard_proxy.url + "/ui")
    expect(page.locator("#connection")).to_have_text("this proxy needs an API key", timeout=WAIT_MS)
    page.fill("#key", ADMIN_KEY)
    page.click("#key-form button[type=submit]")
    expect(page.locator("#connection")).to_have_text("live", timeout=WAIT_MS)
    expect(page.locator("#upstreams tbody tr")).to_have_count(1, timeout=WAIT_MS)
    expect(page.locator("#upstreams tbody td").nth(2)).to_have_text("ok", timeout=WAIT_MS)

    stream = LongStream(dashboard_proxy.url)
    stream.start()
    row = page.locator("#requests tbody tr")
    expect(row.locator(".phase-prefill")).to_contain_text("prefill", timeout=WAIT_MS)
    page.screenshot(path=tmp_path / "1-prefill.png", full_page=True)
    expect(row.locator(".phase-generating")).to_contain_text("generating", timeout=WAIT_MS)
    expect(row.locator(".phase-generating")).to_contain_text("tok/s", timeout=WAIT_MS)
    page.screenshot(path=tmp_path / "2-generating.png", full_page=True)
    if SCREENSHOT_FOR_THE_MANUAL:
        shutil.copyfile(tmp_path / "2-generating.png", ROOT / SCREENSHOT_FOR_THE_MANUAL)

    row.get_by_role("button", name="Stop").click()
    expect(row).to_have_count(0, timeout=WAIT_MS)
    stream.join(60)
    assert not stream.is_alive() and stream.finish_reasons == ["stop"] and stream.chunks < 3000

    refused = requests.post(
        dashboard_proxy.url + "/v1/embeddings",
        json={"model": MARKUP_MODEL, "input": "x"},
        headers={"Authorization": "Bearer not-a-key"},
        timeout=30,
    )
    assert refused.status_code == 401
    missing = requests.post(dashboard_proxy.url + "/v1/internal/requests/no-such-request/stop", headers=AUTH, timeout=30)
    assert missing.status_code == 404
    errors = page.locator("#errors tbody")
    expect(errors).to_contain_text("invalid_api_key", timeout=WAIT_MS)
    expect(errors).to_contain_text("no-such-request", timeout=WAIT_MS)

    expect(page.locator("#chart-requests canvas")).to_have_count(1, timeout=WAIT_MS)
    expect(page.locator("#chart-requests")).not_to_have_attribute("data-points", "0", timeout=WAIT_MS)
    page.screenshot(path=tmp_path / "3-dashboard.png", full_page=True)
    assert not [text for text in page.console_messages if "Content Security Policy" in text or "Refused" in text]


def test_markup_in_names_and_errors_is_shown_as_text_and_never_runs(dashboard_proxy, page, tmp_path):
    requests.post(
        dashboard_proxy.url + "/v1/chat/completions",
        headers=AUTH,
        timeout=30,
        json={"model": MARKUP_MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1},
    )
    page.goto(dashboard_proxy.url + "/ui")
    page.fill("#key", ADMIN_KEY)
    page.click("#key-form button[type=submit]")
    expect(page.locator("#errors tbody")).to_contain_text(MARKUP_MODEL, timeout=WAIT_MS)
    assert page.locator("#errors img").count() == 0
    assert page.evaluate("window.__injected") is None
    page.screenshot(path=tmp_path / "errors.png", full_page=True)
