"""Request options that shape the prompt: generation prompt, continuing a message, content parts, roles."""

from __future__ import annotations

import pytest

from api_like_oai.errors import InvalidRequest
from api_like_oai.prompts import LegacyFormatter, merge_stops, normalise_messages

from .conftest import make_app

CONVERSATION = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]


def chat_prompt(app_client, **body):
    return app_client.post("/v1/internal/chat-prompt", json={"messages": CONVERSATION, **body})


def test_generation_prompt_on_by_default_and_off_on_request(app_client):
    with_prompt = chat_prompt(app_client).get_json()["prompt"]
    without = chat_prompt(app_client, add_generation_prompt=False).get_json()["prompt"]
    assert with_prompt == without + "<|im_start|>assistant\n"


def test_continue_final_message_leaves_the_last_message_open(app_client):
    body = {
        "messages": [*CONVERSATION, {"role": "assistant", "content": "Hello, I"}],
        "continue_final_message": True,
        "add_generation_prompt": False,
    }
    prompt = app_client.post("/v1/internal/chat-prompt", json=body).get_json()["prompt"]
    assert prompt.endswith("<|im_start|>assistant\nHello, I")


def test_continue_final_message_with_add_generation_prompt_is_a_400(app_client):
    response = chat_prompt(app_client, continue_final_message=True, add_generation_prompt=True)
    assert response.status_code == 400
    assert response.get_json()["error"]["param"] == "continue_final_message"


def test_text_parts_are_joined_and_other_parts_refused(app_client):
    parts = [{"role": "user", "content": [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}]}]
    assert "user\nHello<|im_end|>" in app_client.post("/v1/internal/chat-prompt", json={"messages": parts}).get_json()["prompt"]
    file = [{"role": "user", "content": [{"type": "file", "file": {"file_data": "AAAA", "filename": "a.pdf"}}]}]
    response = app_client.post("/v1/internal/chat-prompt", json={"messages": file})
    assert response.status_code == 400
    assert "file" in response.get_json()["error"]["message"]
    assert response.get_json()["error"]["param"] == "messages.0.content.0"
    audio = [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]}]
    response = app_client.post("/v1/internal/chat-prompt", json={"messages": audio})  # served: its bytes checked
    assert response.status_code == 400
    assert response.get_json()["error"]["param"] == "messages.0.content.0.input_audio.data"


def test_unusual_roles_reach_jinja_templates_unchanged(app_client):
    body = {"messages": [{"role": "meta-current_date", "content": "2026-11-30"}, *CONVERSATION]}
    assert (
        "<|im_start|>meta-current_date\n2026-11-30<|im_end|>"
        in app_client.post("/v1/internal/chat-prompt", json=body).get_json()["prompt"]
    )


def test_response_role_is_used_for_the_generation_prompt_and_answers():
    client = make_app("--chat-prompt-model", "chatml", "--response-role", "bot").test_client()
    prompt = client.post("/v1/internal/chat-prompt", json={"messages": CONVERSATION}).get_json()["prompt"]
    assert prompt.endswith("<|im_start|>bot\n")


def test_stop_strings_merge_in_order_without_duplicates():
    assert merge_stops(("</s>",), ["\n", "</s>", ""], "x") == ["</s>", "\n", "x"]


def test_legacy_format_is_the_original_scripts():
    prompt = LegacyFormatter().render(
        normalise_messages([*CONVERSATION, {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Bye"}])
    )
    assert prompt.text == (
        "A chat between a curious user and an artificial intelligence assistant. The assistant follows "
        "the given rules no matter what.ASSISTANT's RULE: Be brief.USER: HiASSISTANT: Hello</s>USER: Bye"
        "ASSISTANT:"
    )
    assert prompt.stop == ("</s>",)


def test_non_text_content_in_the_pure_layer_raises_invalid_request():
    with pytest.raises(InvalidRequest):
        normalise_messages([{"role": "user", "content": [{"type": "input_audio"}]}])
