"""Images end to end (issue 27): the official SDKs against the proxy in front of a real llama-server that
runs SmolLM2 with a vision projector (`--mmproj`).

No package ships a vision GGUF small enough, so scripts/make_test_mmproj.py writes a random-weight one
for SmolLM2 (a 2-layer ViT on 32x32 pixels in 8x8 patches, a LLaVA MLP onto SmolLM2's 576 dimensions),
cached beside the provisioned model. What the model says about an image is nonsense, but everything
else is real: the media marker read from /props, multimodal_data, stb_image decoding, and llama.cpp's own
prompt token counts, in which each image is IMAGE_TOKENS tokens.
"""

from __future__ import annotations

import base64
import functools
import http.server
import io
import os
import threading
from pathlib import Path

import anthropic
import openai
import pytest
import requests
from PIL import Image

from ..conftest import openai_client
from ..servers import made_model
from .test_anthropic import claude_client

IMAGE_TOKENS = 16  # the test projector: (32 / 8) ** 2 patches, one token each
CLAUDE = {"model": "claude-sonnet-4-5", "max_tokens": 8}


def projector_path() -> Path:
    """The test projector, written once into the provisioning cache (about 1.5 MB, not in the repository)."""
    return made_model("test-mmproj-smollm2-135m.gguf", "make_test_mmproj.py")


def vision(**fields) -> dict:
    """The fields of a llama-server (LlamaServer's) with the test projector."""
    return {"context_size": 4096, "slots": 2, "extra_args": ("--mmproj", str(projector_path())), **fields}


@pytest.fixture(scope="module")
def llama_vision(start_llama_server):
    return start_llama_server(**vision())  # its marker is random, as llama-server's is by default


@pytest.fixture(scope="module")
def vision_proxy(llama_vision, start_proxy):
    return start_proxy("--llama-api", llama_vision.url, "--max-image-bytes", "200000")


@pytest.fixture(scope="module")
def gpt(vision_proxy) -> openai.OpenAI:
    return openai_client(vision_proxy.url)


@pytest.fixture(scope="module")
def claude(vision_proxy) -> anthropic.Anthropic:
    return claude_client(vision_proxy.url)


@functools.cache
def picture(image_format: str, size: tuple[int, int] = (48, 40), noise: bool = False) -> bytes:
    """A small picture (a gradient, or noise that compresses badly) as PNG or JPEG bytes, written by Pillow."""
    image = (
        Image.frombytes("RGB", size, os.urandom(size[0] * size[1] * 3))
        if noise
        else Image.linear_gradient("L").resize(size).convert("RGB")
    )
    buffer = io.BytesIO()
    image.save(buffer, format=image_format)
    return buffer.getvalue()


def data_url(image_format: str, data: bytes | None = None) -> str:
    encoded = base64.b64encode(data if data is not None else picture(image_format)).decode()
    return f"data:image/{image_format.lower()};base64,{encoded}"


def chat_content(*images: str, text: str = "Describe this picture.") -> list[dict]:
    return [{"type": "text", "text": text}, *({"type": "image_url", "image_url": {"url": url}} for url in images)]


def chat_prompt_tokens(gpt: openai.OpenAI, content, stream: bool = False) -> int:
    request = {"model": "smollm", "messages": [{"role": "user", "content": content}], "max_tokens": 4, "temperature": 0}
    if not stream:
        return gpt.chat.completions.create(**request).usage.prompt_tokens
    chunks = list(gpt.chat.completions.create(**request, stream=True, stream_options={"include_usage": True}))
    return chunks[-1].usage.prompt_tokens


# --- the three APIs -------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("image_format", ["PNG", "JPEG"])
def test_chat_completions_send_the_image_to_llama_server(gpt, image_format, stream):
    text_only = chat_prompt_tokens(gpt, chat_content())
    with_image = chat_prompt_tokens(gpt, chat_content(data_url(image_format)), stream)
    assert IMAGE_TOKENS <= with_image - text_only <= IMAGE_TOKENS + 2  # llama.cpp counted the image's tokens


def test_two_images_are_two_images(gpt):
    one = chat_prompt_tokens(gpt, chat_content(data_url("PNG")))
    two = chat_prompt_tokens(gpt, chat_content(data_url("PNG"), data_url("JPEG")))
    assert IMAGE_TOKENS <= two - one <= IMAGE_TOKENS + 2


def claude_input_tokens(claude: anthropic.Anthropic, messages: list[dict], stream: bool = False, **fields) -> int:
    if stream:
        with claude.messages.stream(messages=messages, **CLAUDE, **fields) as events:
            usage = events.get_final_message().usage
    else:
        usage = claude.messages.create(messages=messages, **CLAUDE, **fields).usage
    return usage.input_tokens + (usage.cache_read_input_tokens or 0)


def anthropic_image(image_format: str) -> dict:
    return {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": f"image/{image_format.lower()}",
            "data": base64.b64encode(picture(image_format)).decode(),
        },
    }


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("image_format", ["PNG", "JPEG"])
def test_anthropic_image_blocks_reach_llama_server(claude, image_format, stream):
    question = {"type": "text", "text": "What is in this picture?"}
    text_only = claude_input_tokens(claude, [{"role": "user", "content": [question]}])
    with_image = claude_input_tokens(claude, [{"role": "user", "content": [question, anthropic_image(image_format)]}], stream)
    assert IMAGE_TOKENS <= with_image - text_only <= IMAGE_TOKENS + 2


SCREENSHOT_TOOL = {"name": "screenshot", "description": "Take a screenshot.", "input_schema": {"type": "object"}}


def test_an_image_in_an_anthropic_tool_result_reaches_llama_server(claude):
    def conversation(result: list[dict]) -> list[dict]:
        return [
            {"role": "user", "content": "Take a screenshot."},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "screenshot", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": result}]},
        ]

    caption = {"type": "text", "text": "The screen:"}
    text_only = claude_input_tokens(claude, conversation([caption]), tools=[SCREENSHOT_TOOL])
    with_image = claude_input_tokens(claude, conversation([caption, anthropic_image("PNG")]), tools=[SCREENSHOT_TOOL])
    assert IMAGE_TOKENS <= with_image - text_only <= IMAGE_TOKENS + 2


def responses_input_tokens(gpt: openai.OpenAI, items: list[dict], stream: bool = False, **fields) -> int:
    request = {"model": "smollm", "input": items, "max_output_tokens": 16, "store": False, **fields}
    if not stream:
        return gpt.responses.create(**request).usage.input_tokens
    events = list(gpt.responses.create(**request, stream=True))
    assert events[-1].type in ("response.completed", "response.incomplete")  # incomplete: max_output_tokens
    return events[-1].response.usage.input_tokens


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("image_format", ["PNG", "JPEG"])
def test_responses_input_images_reach_llama_server(gpt, image_format, stream):
    question = {"type": "input_text", "text": "What is in this picture?"}
    image = {"type": "input_image", "image_url": data_url(image_format), "detail": "auto"}
    text_only = responses_input_tokens(gpt, [{"role": "user", "content": [question]}])
    with_image = responses_input_tokens(gpt, [{"role": "user", "content": [question, image]}], stream)
    assert IMAGE_TOKENS <= with_image - text_only <= IMAGE_TOKENS + 2


def test_an_image_in_a_function_call_output_reaches_llama_server(gpt):
    def items(output: list[dict]) -> list[dict]:
        return [
            {"role": "user", "content": "Take a screenshot."},
            {"type": "function_call", "call_id": "call_1", "name": "screenshot", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": output},
        ]

    tools = [{"type": "function", "name": "screenshot", "parameters": {"type": "object", "properties": {}}}]
    caption = {"type": "input_text", "text": "The screen:"}
    text_only = responses_input_tokens(gpt, items([caption]), tools=tools)
    with_image = responses_input_tokens(
        gpt, items([caption, {"type": "input_image", "image_url": data_url("JPEG")}]), tools=tools
    )
    assert IMAGE_TOKENS <= with_image - text_only <= IMAGE_TOKENS + 2


def test_a_resent_image_comes_from_llama_cpps_cache(claude):
    messages = [{"role": "user", "content": [{"type": "text", "text": "Remember this picture."}, anthropic_image("PNG")]}]
    claude.messages.create(messages=messages, **CLAUDE)
    again = claude.messages.create(messages=messages, **CLAUDE).usage
    assert again.cache_read_input_tokens >= IMAGE_TOKENS  # llama.cpp matched the image by its bytes' hash


# --- markers ------------------------------------------------------------------------------------------


def test_marker_text_in_the_users_message_does_not_break_the_request(gpt, llama_vision):
    marker = requests.get(llama_vision.url + "/props", timeout=10).json()["media_marker"]
    assert marker.startswith("<__media_") and marker != "<__media__>"  # random per start since PR #21962
    text = f"Is {marker} a tag? And <__media__>?"
    assert chat_prompt_tokens(gpt, chat_content(data_url("PNG"), text=text)) > IMAGE_TOKENS


def test_an_upstream_restarted_with_a_new_marker_still_takes_images(start_llama_server, start_proxy):
    first = start_llama_server(**vision(slots=1, env={"LLAMA_MEDIA_MARKER": "<__media_first_start__>"}))
    gpt = openai_client(start_proxy("--llama-api", first.url).url)
    assert chat_prompt_tokens(gpt, chat_content(data_url("PNG"))) > IMAGE_TOKENS
    first.stop()
    start_llama_server(**vision(slots=1, port=first.port, env={"LLAMA_MEDIA_MARKER": "<__media_second__>"}))
    assert chat_prompt_tokens(gpt, chat_content(data_url("PNG"))) > IMAGE_TOKENS


# --- refusals -----------------------------------------------------------------------------------------


def test_a_text_only_model_refuses_images_naming_the_part(client):
    with pytest.raises(openai.BadRequestError) as refused:
        chat_prompt_tokens(client, chat_content(data_url("PNG")))
    error = refused.value.body
    assert error["param"] == "messages.0.content.1" and error["code"] == "image_not_supported"
    assert "does not take images" in error["message"] and "--mmproj" in error["message"]


@pytest.mark.parametrize(
    ("data", "code", "words"),
    [
        (picture("PNG", (400, 400), noise=True), "image_too_large", "--max-image-bytes"),
        (b"not an image at all", "invalid_image_format", "not an image llama.cpp reads"),
        (picture("PNG")[:60], "invalid_image", "cut short"),  # a PNG cut short: refused before llama.cpp sees it
    ],
)
def test_oversized_and_corrupt_images_are_a_400(gpt, data, code, words):
    with pytest.raises(openai.BadRequestError) as refused:
        chat_prompt_tokens(gpt, chat_content(data_url("PNG", data)))
    assert refused.value.body["code"] == code and words in refused.value.body["message"]


# --- images at URLs -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def image_site():
    """A local web server with /cat.png, /cat.jpg and /moved (a redirect to /cat.png)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):  # noqa: N802 - http.server's naming
            if self.path == "/moved":
                self.send_response(302)
                self.send_header("Location", "/cat.png")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = {"/cat.png": picture("PNG"), "/cat.jpg": picture("JPEG")}.get(self.path)
            self.send_response(200 if body else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def test_an_image_url_is_fetched_by_the_proxy_when_private_addresses_are_allowed(llama_vision, start_proxy, image_site):
    gpt = openai_client(start_proxy("--llama-api", llama_vision.url, "--allow-private-image-urls").url)
    text_only = chat_prompt_tokens(gpt, chat_content())
    for path in ("/cat.png", "/cat.jpg", "/moved"):
        assert IMAGE_TOKENS <= chat_prompt_tokens(gpt, chat_content(image_site + path)) - text_only <= IMAGE_TOKENS + 2
    with pytest.raises(openai.BadRequestError) as refused:
        chat_prompt_tokens(gpt, chat_content(image_site + "/missing.png"))
    assert "HTTP 404" in refused.value.body["message"]


def test_an_image_url_at_a_private_address_is_refused_by_default(gpt, image_site):
    with pytest.raises(openai.BadRequestError) as refused:
        chat_prompt_tokens(gpt, chat_content(image_site + "/cat.png"))
    assert refused.value.body["code"] == "invalid_image_url" and "private" in refused.value.body["message"]
    assert refused.value.body["param"] == "messages.0.content.1.image_url.url"


def test_a_png_cut_short_is_a_400_naming_the_image_not_a_502(gpt):
    """A truncated upload is caught before sending (its chunks do not reach IEND). (A JPEG cut short is
    decoded by llama.cpp's stb_image as far as it goes, so it is no error; a refusal of its decoder is a 400
    too: tests/faults/test_images.py.)"""
    whole = picture("PNG", noise=True)
    with pytest.raises(openai.BadRequestError) as refused:
        gpt.chat.completions.create(
            model="smollm",
            max_tokens=4,
            messages=[{"role": "user", "content": chat_content(data_url("PNG", whole[: len(whole) // 2]))}],
        )
    assert refused.value.status_code == 400
    assert refused.value.body["code"] == "invalid_image" and refused.value.body["param"] == "messages.0.content.1"
