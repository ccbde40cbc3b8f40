"""A key's token limits count a prompt's images (issue 41): an image is --image-tokens tokens of the
prompt, so a key whose limit an image exceeds gets a 429 before anything is generated, never a 500
(the pool once read a prompt with images as 0 tokens, and failed with a TypeError when it had to count)."""

from __future__ import annotations

import base64

import pytest
import requests

from ..fake_llamacpp import FakeLlamaCpp
from ..unit.test_media import png

ADMIN = {"Authorization": "Bearer admin-media-secret"}
MARKER = "<__media_0123456789abcdefghijABCDEFGHIJ__>"


@pytest.fixture(scope="module")
def vision():
    fake = FakeLlamaCpp(props_extra={"modalities": {"vision": True}, "media_marker": MARKER}).start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def proxy(vision, start_proxy, tmp_path_factory):
    store = tmp_path_factory.mktemp("media-keys") / "store.sqlite3"
    return start_proxy(
        "--llama-api",
        vision.url,
        "--chat-prompt-model",
        "chatml",
        "--store",
        f"sqlite:///{store}",
        "--image-tokens",
        "200",
        "--admin-key",
        ADMIN["Authorization"].split()[1],
    )


def key_with(proxy, name: str, tpm: int) -> dict:
    created = requests.post(proxy.url + "/v1/internal/keys", json={"name": name, "tpm": tpm}, headers=ADMIN, timeout=10)
    assert created.status_code == 201, created.text
    return {"Authorization": f"Bearer {created.json()['key']}"}


def chat_with_image(proxy, headers: dict, max_tokens: int = 2):
    image = "data:image/png;base64," + base64.b64encode(png(2, 2)).decode()
    content = [{"type": "text", "text": "What is it?"}, {"type": "image_url", "image_url": {"url": image}}]
    return requests.post(
        proxy.url + "/v1/chat/completions",
        headers=headers,
        timeout=60,
        json={"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens},
    )


def generations(fake: FakeLlamaCpp) -> int:
    return sum("n_predict" in body for body in fake.requests)


# (150, 2): the text and max_tokens fit, the image does not; (3, 5): not even max_tokens fits, so the
# prompt is counted by /tokenize (where a prompt with images once raised a TypeError: a 500)
@pytest.mark.parametrize(("tpm", "max_tokens"), [(150, 2), (3, 5)])
def test_an_image_beyond_what_is_left_of_a_keys_tokens_is_a_429_before_generation(proxy, vision, tpm, max_tokens):
    headers = key_with(proxy, f"small-{tpm}", tpm)
    sent_before = generations(vision)
    refused = chat_with_image(proxy, headers, max_tokens)
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert generations(vision) == sent_before


def test_an_image_within_a_keys_tokens_is_answered_and_counted(proxy, vision):
    headers = key_with(proxy, "roomy", 1000)
    sent_before = generations(vision)
    answered = chat_with_image(proxy, headers)
    assert answered.status_code == 200, answered.text
    assert generations(vision) == sent_before + 1
