"""Images against the scripted fake llama.cpp: the exact /completion body (one marker per image, the
images' base64 in order), the marker read from /props and read again when it changes, and refusals
in each API's own error shape."""

from __future__ import annotations

import base64

import pytest

from api_like_oai.backends.routing import Affinity

from ..fake_llamacpp import FakeLlamaCpp
from ..unit.conftest import make_app
from ..unit.test_media import png

MARKER = "<__media_0123456789abcdefghijABCDEFGHIJ__>"
RED, BLUE = png(2, 2), png(3, 1)


def data_url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


@pytest.fixture
def vision():
    fake = FakeLlamaCpp(props_extra={"modalities": {"vision": True}, "media_marker": MARKER}).start()
    yield fake
    fake.stop()


@pytest.fixture
def app(vision):
    return make_app("--llama-api", vision.url, "--chat-prompt-model", "chatml", "--max-image-bytes", "4000")


def chat(app, *parts, text: str = "Compare", stream: bool = False):
    content = [
        {"type": "text", "text": text},
        *({"type": "image_url", "image_url": {"url": data_url(part) if isinstance(part, bytes) else part}} for part in parts),
    ]
    return app.test_client().post(
        "/v1/chat/completions", json={"messages": [{"role": "user", "content": content}], "max_tokens": 5, "stream": stream}
    )


def sent_prompt(fake: FakeLlamaCpp) -> dict:
    [completion] = [body for body in fake.requests if "n_predict" in body]
    return completion["prompt"]


@pytest.mark.parametrize("stream", [False, True])
def test_the_images_go_upstream_with_one_marker_each_in_order(app, vision, stream):
    assert chat(app, BLUE, RED, BLUE, stream=stream).status_code == 200
    prompt = sent_prompt(vision)
    assert prompt["prompt_string"] == f"<|im_start|>user\nCompare{MARKER}{MARKER}{MARKER}<|im_end|>\n<|im_start|>assistant\n"
    assert [base64.b64decode(data) for data in prompt["multimodal_data"]] == [BLUE, RED, BLUE]


def test_marker_text_the_user_wrote_is_neutralised(app, vision):
    assert chat(app, RED, text=f"What do {MARKER} and <__media__> mean?").status_code == 200
    prompt = sent_prompt(vision)
    assert prompt["prompt_string"].count(MARKER) == 1 and len(prompt["multimodal_data"]) == 1


def test_a_new_marker_after_a_restart_is_read_again(app, vision):
    assert chat(app, RED).status_code == 200
    vision.props_extra["media_marker"] = "<__media_after_the_restart__>"
    vision.requests.clear()
    assert chat(app, RED).status_code == 200
    refused, resent = [body["prompt"] for body in vision.requests if "n_predict" in body]
    assert MARKER in refused["prompt_string"]
    assert "<__media_after_the_restart__>" in resent["prompt_string"] and MARKER not in resent["prompt_string"]
    assert vision.get_paths.count("/props") >= 2


def test_a_server_without_a_media_marker_in_props_gets_the_old_fixed_one(vision):
    del vision.props_extra["media_marker"]
    app = make_app("--llama-api", vision.url, "--chat-prompt-model", "chatml")
    assert chat(app, RED).status_code == 200
    assert "<__media__>" in sent_prompt(vision)["prompt_string"]


def test_a_text_only_model_refuses_images_in_each_apis_error_shape(vision):
    vision.props_extra["modalities"] = {"vision": False}
    client = make_app("--llama-api", vision.url, "--chat-prompt-model", "chatml").test_client()
    answer = client.post(
        "/v1/chat/completions",
        json={
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "Hi"}, {"type": "image_url", "image_url": {"url": data_url(RED)}}],
                }
            ]
        },
    )
    assert answer.status_code == 400
    assert answer.get_json()["error"]["param"] == "messages.0.content.1"
    assert answer.get_json()["error"]["code"] == "image_not_supported"
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": base64.b64encode(RED).decode()}}
    answer = client.post(
        "/v1/messages",
        json={"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}, image]}]},
    )
    assert answer.status_code == 400 and answer.get_json()["type"] == "error"
    assert answer.get_json()["error"]["message"].startswith("messages.0.content.1: model 'llama.cpp' does not take images")
    answer = client.post(
        "/v1/responses",
        json={"model": "m", "input": [{"role": "user", "content": [{"type": "input_image", "image_url": data_url(RED)}]}]},
    )
    assert answer.status_code == 400 and answer.get_json()["error"]["param"] == "input.0.content.0"
    assert not [body for body in vision.requests if "n_predict" in body]  # nothing went upstream


@pytest.mark.parametrize(
    ("image", "code"),
    [
        (png(60, 60) + b"\x00" * 4000, "image_too_large"),
        (png(8, 8)[:-20], "invalid_image"),  # a truncated upload
        (b"%PDF-1.4 not an image", "invalid_image_format"),
        ("data:image/png;base64,***", "invalid_image"),
        ("file:///etc/passwd", "invalid_image"),
    ],
)
def test_images_the_limits_refuse_never_reach_the_upstream(app, vision, image, code):
    answer = chat(app, image)
    assert answer.status_code == 400 and answer.get_json()["error"]["code"] == code
    assert answer.get_json()["error"]["param"].startswith("messages.0.content.1")
    assert not [body for body in vision.requests if "n_predict" in body]


def test_two_prompts_with_different_images_do_not_share_a_routing_prefix(app, vision):
    chat(app, RED)
    chat(app, BLUE)
    first, second = [body["prompt"] for body in vision.requests if "n_predict" in body]
    assert first["prompt_string"] == second["prompt_string"]  # the same text upstream, other images ...
    # ... but the prompts the router keys on name the images' digests, so their prefixes part at the image
    after = " and then some more words" * 200
    rendered = [
        app.test_client()
        .post(
            "/v1/internal/chat-prompt",
            json={
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": {"url": data_url(image)}},
                            {"type": "text", "text": after},
                        ],
                    }
                ]
            },
        )
        .get_json()["prompt"]
        for image in (RED, BLUE)
    ]
    red, blue = Affinity(rendered[0]).digests, Affinity(rendered[1]).digests
    assert len(red) == len(blue) > 1 and red[0] != blue[0]


def test_images_count_as_image_tokens_each_in_the_token_count_and_the_context_fit(vision):
    app = make_app("--llama-api", vision.url, "--chat-prompt-model", "chatml", "--image-tokens", "300")

    def counted(*images: bytes) -> int:
        content = [
            {"type": "text", "text": "Compare"},
            *(
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": base64.b64encode(image).decode()},
                }
                for image in images
            ),
        ]
        reply = app.test_client().post(
            "/v1/messages/count_tokens", json={"model": "m", "messages": [{"role": "user", "content": content}]}
        )
        assert reply.status_code == 200, reply.json
        return reply.json["input_tokens"]

    assert counted(RED, BLUE) - counted(RED) >= 300  # one more image: its tokens, not its placeholder's few
    vision.props_extra["default_generation_settings"] = {"n_ctx": 500}
    two_images = {
        "max_tokens": 5,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Compare"},
                    *({"type": "image_url", "image_url": {"url": data_url(image)}} for image in (RED, BLUE)),
                ],
            }
        ],
    }
    for image_tokens, status in (("10", 200), ("300", 400)):  # 2 x 300 does not fit 500 tokens
        fitted = make_app(
            "--llama-api",
            vision.url,
            "--chat-prompt-model",
            "chatml",
            "--image-tokens",
            image_tokens,
            "--context-overflow",
            "error",
        )
        reply = fitted.test_client().post("/v1/chat/completions", json=two_images)
        assert reply.status_code == status, reply.json
    assert reply.json["error"]["code"] == "context_length_exceeded"


@pytest.mark.parametrize("stream", [False, True])
def test_an_image_llama_cpp_cannot_decode_is_the_clients_400_not_a_502(app, vision, stream):
    cut_jpeg = b"\xff\xd8\xff\xe0" + b"\x00\x10JFIF" + b"\x01" * 40  # passes the sniff, no end of image
    answer = chat(app, cut_jpeg, stream=stream)
    assert answer.status_code == 400, answer.get_data(as_text=True)
    error = answer.get_json()["error"]
    assert error["code"] == "invalid_image" and "could not decode" in error["message"]
