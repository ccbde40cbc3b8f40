"""Images in prompts (prompts/media.py, prompts/render.py): placeholders, the templates' own image parts,
the upstream's marker, neutralised marker text, and the checks on the bytes."""

from __future__ import annotations

import base64
import zlib

import pytest

from api_like_oai.errors import InvalidRequest
from api_like_oai.prompts import JinjaFormatter, normalise_messages
from api_like_oai.prompts.media import (
    DEFAULT_MARKER,
    Image,
    checked_image,
    inline_image_bytes,
    media_prompt,
    placeholders_in,
)
from api_like_oai.prompts.render import render_messages

# The image branches of the Hugging Face chat templates of four vision model families, as the models ship them.
QWEN25_VL = (
    "{% set image_count = namespace(value=0) %}{% for message in messages %}{% if loop.first and message['role'] "
    "!= 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}<|im_start|>"
    "{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n{% else %}"
    "{% for content in message['content'] %}{% if content['type'] == 'image' or 'image' in content or 'image_url' "
    "in content %}{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture "
    "{{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>{% elif 'text' in content %}"
    "{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}"
    "<|im_start|>assistant\n{% endif %}"
)
GEMMA3 = (
    "{{ bos_token }}{%- for message in messages -%}{%- if (message['role'] == 'assistant') -%}{%- set role = "
    "\"model\" -%}{%- else -%}{%- set role = message['role'] -%}{%- endif -%}{{ '<start_of_turn>' + role + '\\n' }}"
    "{%- if message['content'] is string -%}{{ message['content'] | trim }}{%- elif message['content'] is iterable -%}"
    "{%- for item in message['content'] -%}{%- if item['type'] == 'image' -%}{{ '<start_of_image>' }}{%- elif "
    "item['type'] == 'text' -%}{{ item['text'] | trim }}{%- endif -%}{%- endfor -%}{%- endif -%}"
    "{{ '<end_of_turn>\\n' }}{%- endfor -%}{%- if add_generation_prompt -%}{{'<start_of_turn>model\\n'}}{%- endif -%}"
)
SMOLVLM = (
    "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}{% if message['content'][0]['type'] "
    "== 'image' %}{{':'}}{% else %}{{': '}}{% endif %}{% for line in message['content'] %}{% if line['type'] == "
    "'text' %}{{line['text']}}{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}"
    "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)
LLAVA = (
    "{% for message in messages %}{% if message['role'] != 'system' %}{{ message['role'].upper() + ': '}}{% endif %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}{{ '<image>\\n' }}{% endfor %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}{{ content['text'] + ' '}}"
    "{% endfor %}{% endfor %}{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"
)
CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def png(width: int = 2, height: int = 2) -> bytes:
    """A valid RGB PNG of the given size (grey), built by hand."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return len(data).to_bytes(4, "big") + kind + data + zlib.crc32(kind + data).to_bytes(4, "big")

    header = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([8, 2, 0, 0, 0])
    rows = b"".join(b"\x00" + b"\x80" * (3 * width) for _ in range(height))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


FIRST, SECOND = Image(png(2, 2), "png"), Image(png(3, 3), "png")


def rendered(template: str, content: str) -> str:
    messages = normalise_messages([{"role": "user", "content": content}])
    return render_messages(JinjaFormatter(template), messages).text


@pytest.mark.parametrize(
    ("template", "markup"),
    [(QWEN25_VL, "<|vision_start|>"), (GEMMA3, "<start_of_image>"), (SMOLVLM, "<image>"), (LLAVA, "<image>")],
)
def test_a_template_that_renders_image_parts_gets_them_and_each_is_replaced_by_its_placeholder(template, markup):
    text = rendered(template, f"Compare {FIRST.placeholder} with {SECOND.placeholder} please")
    assert placeholders_in(text) == [FIRST.digest, SECOND.digest]  # two images, in order
    assert markup not in text  # mtmd writes the model's own image tokens
    assert "Compare" in text and "please" in text


def test_qwen_places_each_image_where_it_was_in_the_text():
    text = rendered(QWEN25_VL, f"Compare {FIRST.placeholder} with {SECOND.placeholder}")
    assert f"<|im_start|>user\nCompare {FIRST.placeholder} with {SECOND.placeholder}<|im_end|>" in text


def test_llava_writes_the_images_before_the_text_as_its_processor_expects():
    text = rendered(LLAVA, f"Compare {FIRST.placeholder} with {SECOND.placeholder}")
    assert text.startswith(f"USER: {FIRST.placeholder}{SECOND.placeholder}Compare   with  ")


def test_a_template_that_knows_no_parts_gets_the_placeholders_in_the_text():
    text = rendered(CHATML, f"What is {FIRST.placeholder}?")
    assert text == f"<|im_start|>user\nWhat is {FIRST.placeholder}?<|im_end|>\n<|im_start|>assistant\n"


def test_the_templates_own_markup_typed_by_the_user_is_not_taken_for_an_image():
    text = rendered(SMOLVLM, f"an <image> tag and {FIRST.placeholder}")
    assert placeholders_in(text) == [FIRST.digest]
    assert "<\u200bimage>" in text


def test_the_upstream_prompt_has_one_marker_per_image_and_their_data_in_order():
    marker = "<__media_abcdefghijklmnopqrstuvwxyz012345__>"
    prompt = media_prompt(
        f"A {SECOND.placeholder} B {FIRST.placeholder} C {SECOND.placeholder}", {FIRST.digest: FIRST, SECOND.digest: SECOND}
    ).upstream(marker)
    assert prompt["prompt_string"] == f"A {marker} B {marker} C {marker}"
    assert [base64.b64decode(data) for data in prompt["multimodal_data"]] == [SECOND.data, FIRST.data, SECOND.data]


@pytest.mark.parametrize("typed", ["<__media__>", "<__media_ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ__>", "MARKER"])
def test_marker_text_in_the_conversation_is_neutralised(typed):
    prompt = media_prompt(f"say {typed} {FIRST.placeholder}", {FIRST.digest: FIRST}).upstream("MARKER")
    assert prompt["prompt_string"].count("MARKER") == 1 and len(prompt["multimodal_data"]) == 1
    assert prompt["prompt_string"].replace("\u200b", "") == f"say {typed} MARKER"


def test_a_placeholder_the_client_typed_is_text_not_an_image():
    forged = "\x00image:" + "0" * 32 + "\x00"
    prompt = media_prompt(f"{forged} {FIRST.placeholder}", {FIRST.digest: FIRST}).upstream(DEFAULT_MARKER)
    assert prompt["prompt_string"].count(DEFAULT_MARKER) == 1 and len(prompt["multimodal_data"]) == 1


def test_images_are_data_urls_or_bare_base64_and_urls_are_left_to_fetch():
    encoded = base64.b64encode(FIRST.data).decode()
    assert inline_image_bytes(f"data:image/png;base64,{encoded}", "p") == FIRST.data
    assert inline_image_bytes(encoded, "p") == FIRST.data
    assert inline_image_bytes("https://example.com/cat.png", "p") is None
    for bad in ("data:image/png,rawbytes", "ftp://example.com/cat.png", "data:image/png;base64,@@@"):
        with pytest.raises(InvalidRequest):
            inline_image_bytes(bad, "p")


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"\x89PNG\r\n\x1a\n" + b"0" * 200, "image_too_large"),
        (b"RIFF\x00\x00\x00\x00WEBPVP8 ", "invalid_image_format"),
        (b"%PDF-1.7", "invalid_image_format"),
    ],
)
def test_images_too_large_or_in_formats_llama_cpp_does_not_read_are_refused(data, code):
    with pytest.raises(InvalidRequest) as refused:
        checked_image(data, "messages.0.content.1", max_bytes=100)
    assert refused.value.code == code and refused.value.param == "messages.0.content.1"


def test_two_prompts_with_different_images_differ_in_the_text_routing_digests():
    assert FIRST.placeholder != SECOND.placeholder
    assert rendered(CHATML, FIRST.placeholder) != rendered(CHATML, SECOND.placeholder)


@pytest.mark.parametrize("cut", [1, 12, 30])
def test_a_png_cut_short_is_refused_naming_its_part(cut):
    with pytest.raises(InvalidRequest) as refused:
        checked_image(png(4, 4)[:-cut], "messages.0.content.1", max_bytes=1000)
    assert refused.value.code == "invalid_image" and refused.value.param == "messages.0.content.1"


@pytest.mark.parametrize(
    ("data", "image_format"), [(png(), "png"), (b"\xff\xd8\xff\xe0rest", "jpeg"), (b"GIF89a...", "gif"), (b"BM....", "bmp")]
)
def test_the_formats_stb_image_reads_are_taken(data, image_format):
    assert checked_image(data, "p", max_bytes=1000).format == image_format
