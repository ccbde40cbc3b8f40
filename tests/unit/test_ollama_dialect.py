"""Ollama's dialect without a server (issue 38): keep_alive as Ollama reads it, the translation into
the chat request, the NDJSON shape's lines (the per-token fast path writes what the slow path
would), and the GGUF header reader."""

from __future__ import annotations

import json
import struct

import pytest

from api_like_oai.backends.events import GenerationEvent
from api_like_oai.dialects import ollama
from api_like_oai.dialects.ollama_shape import GENERATE, OllamaShape
from api_like_oai.errors import InvalidRequest
from api_like_oai.services.gguf_facts import model_file
from api_like_oai.tools.parser import ToolCallDelta

USAGE = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7, "prompt_tokens_details": {"cached_tokens": 0}}


@pytest.mark.parametrize(
    ("given", "seconds"),
    [
        (None, None),
        ("", None),
        (0, 0.0),
        ("0", 0.0),
        ("0s", 0.0),
        (300, 300.0),
        ("300s", 300.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("500ms", 0.5),
        (-1, -1.0),
        ("-1", -1.0),
        ("-1m", -1.0),
        (2.5, 2.5),
    ],
)
def test_keep_alive_as_ollama_reads_it(given, seconds):
    assert ollama.keep_alive_seconds(given) == seconds


@pytest.mark.parametrize("given", ["soon", "5 minutes", "1d", "m5"])
def test_a_keep_alive_that_is_no_duration_is_a_400(given):
    with pytest.raises(InvalidRequest, match="invalid duration"):
        ollama.keep_alive_seconds(given)


def test_chat_translation():
    request = ollama.ChatRequest.model_validate(
        {
            "model": "qwen3",
            "stream": False,
            "think": "high",
            "format": "json",
            "keep_alive": "5m",
            "options": {"num_predict": -1, "temperature": 0.1, "stop": ["END"], "num_gpu": 1, "num_thread": 8},
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
            "messages": [
                {"role": "user", "content": "look", "images": ["aGk="]},
                {
                    "role": "assistant",
                    "content": "",
                    "thinking": "hmm",
                    "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}],
                },
                {"role": "tool", "content": "42", "tool_name": "f"},
            ],
            "unknown_field": "ignored as Ollama ignores it",
        }
    )
    chat = ollama.to_chat_request(request)
    assert chat.stream is False and chat.temperature == 0.1 and chat.stop == ["END"] and chat.max_tokens is None
    assert chat.response_format.type == "json_object" and chat.reasoning_effort == "high"
    assert chat.chat_template_kwargs == {"enable_thinking": True}
    user, assistant, tool = (message.model_dump(exclude_none=True) for message in chat.messages)
    assert user["content"][0]["type"] == "image_url" and user["content"][1] == {"type": "text", "text": "look"}
    assert chat.image_param(0, "x") == "messages.0.images.0"
    assert assistant["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"x": 1}'}
    assert assistant["reasoning_content"] == "hmm"
    assert tool["tool_call_id"] == assistant["tool_calls"][0]["id"]
    assert ollama.ignored_options(request.options) == ["num_gpu", "num_thread"]


def test_a_schema_format_is_the_grammar_path_and_a_bad_one_names_format():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    chat = ollama.to_chat_request(ollama.ChatRequest(model="m", messages=[{"role": "user", "content": "x"}], format=schema))
    assert chat.response_format.to_llamacpp() == {"json_schema": schema}
    with pytest.raises(InvalidRequest) as refused:
        ollama.to_chat_request(
            ollama.ChatRequest(model="m", messages=[{"role": "user", "content": "x"}], format={"type": "banana"})
        )
    assert refused.value.param == "format"


def test_generate_translations():
    templated = ollama.generate_to_chat_request(ollama.GenerateRequest(model="m", prompt="p", system="s"))
    assert [(m.role, m.content) for m in templated.messages] == [("system", "s"), ("user", "p")]
    fim = ollama.generate_to_completion(ollama.GenerateRequest(model="m", prompt="a", suffix="b", options={"num_predict": 9}))
    assert (fim.prompt, fim.suffix, fim.max_tokens) == ("a", "b", 9)


def lines(shape: OllamaShape, events: list[GenerationEvent]) -> list[dict]:
    frames = []
    for event in events:
        frame = shape.content_frame(event)
        frames += [frame] if frame is not None else [shape.frame(chunk) for chunk in shape.chunks(event)]
    frames += [shape.frame(chunk) for chunk in shape.closings(USAGE)]
    assert all(frame.endswith(b"\n") and frame.count(b"\n") == 1 for frame in frames)
    return [json.loads(frame) for frame in frames]


def test_the_stream_lines_and_the_fast_path():
    shape = OllamaShape("m")
    streamed = lines(
        shape, [GenerationEvent(text="Hel"), GenerationEvent(text='lo "x"\n'), GenerationEvent(finish_reason="length")]
    )
    assert [line["message"] for line in streamed[:2]] == [
        {"role": "assistant", "content": "Hel"},
        {"role": "assistant", "content": 'lo "x"\n'},
    ]
    assert list(streamed[1]) == ["model", "created_at", "message", "done"]  # the fast path: Ollama's key order
    last = streamed[-1]
    assert last["done"] is True and last["done_reason"] == "length" and last["message"]["content"] == ""
    assert (last["prompt_eval_count"], last["eval_count"]) == (5, 2) and last["total_duration"] >= 0


def test_thoughts_and_whole_tool_calls():
    shape = OllamaShape("m")
    call = [
        GenerationEvent(tool_calls=(ToolCallDelta(0, "call_1", "f", '{"a":'),)),
        GenerationEvent(tool_calls=(ToolCallDelta(0, None, None, " 1}"),)),
    ]
    streamed = lines(shape, [GenerationEvent(reasoning="think"), *call, GenerationEvent(finish_reason="tool_calls")])
    assert streamed[0]["message"] == {"role": "assistant", "content": "", "thinking": "think"}
    calls = [line["message"]["tool_calls"] for line in streamed if "tool_calls" in line["message"]]
    assert calls == [[{"id": "call_1", "function": {"index": 0, "name": "f", "arguments": {"a": 1}}}]]
    assert streamed[-1]["done_reason"] == "stop"


def test_generate_lines_say_response():
    streamed = lines(OllamaShape("m", GENERATE), [GenerationEvent(text="a"), GenerationEvent(text="b")])
    assert [line["response"] for line in streamed] == ["a", "b", ""]


def test_a_stream_error_is_an_error_line():
    assert OllamaShape("m").error_chunk(InvalidRequest("bad", param="format")) == {"error": "format: bad"}


def gguf(values: dict) -> bytes:
    """A GGUF header with `values` and a string array (skipped), no tensors."""
    body = b""
    for key, value in values.items():
        body += struct.pack("<Q", len(key)) + key.encode()
        if isinstance(value, str):
            body += struct.pack("<IQ", 8, len(value)) + value.encode()
        else:
            body += struct.pack("<I", 4) + struct.pack("<I", value)
    array_key = b"tokenizer.ggml.tokens"
    body += struct.pack("<Q", len(array_key)) + array_key + struct.pack("<IIQ", 9, 8, 2)
    body += b"".join(struct.pack("<Q", len(token)) + token for token in (b"<s>", b"hi"))
    return b"GGUF" + struct.pack("<IQQ", 3, 0, len(values) + 1) + body


def test_a_models_file_is_described_from_its_gguf_header(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(
        gguf(
            {"general.architecture": "qwen3", "qwen3.context_length": 40960, "general.file_type": 15, "general.size_label": "4B"}
        )
    )
    described = model_file(str(path))
    assert described.metadata == {
        "general.architecture": "qwen3",
        "qwen3.context_length": 40960,
        "general.file_type": 15,
        "general.size_label": "4B",
    }  # the vocabulary skipped
    details = described.details()
    assert details["family"] == "qwen3" and details["quantization_level"] == "Q4_K_M" and details["parameter_size"] == "4B"
    (tmp_path / "not.gguf").write_bytes(b"not a model")
    assert model_file(str(tmp_path / "not.gguf")).metadata == {}


def test_types_are_strict_and_unknown_fields_ignored():
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        ollama.GenerateRequest.model_validate({"model": "m", "options": {"num_predict": "5"}})
    with pytest.raises(ValidationError):
        ollama.ChatRequest.model_validate({"model": "m", "stream": "yes"})
    assert ollama.ChatRequest.model_validate({"model": "m", "newer_field": 1}).model == "m"


def test_the_ollama_listeners_from_the_flags():
    from api_like_oai.arguments import parse_settings

    settings = parse_settings(["--host", "0.0.0.0", "--ollama-port", "11434", "--ollama-listen", "[::1]:11435"])
    assert settings.ollama_listen == ("0.0.0.0:11434", "[::1]:11435")
    assert parse_settings([]).ollama_listen == ()


def test_an_ollama_listener_beyond_loopback_without_a_key_is_warned_of(caplog):
    import logging

    from api_like_oai.arguments import parse_settings
    from api_like_oai.server import warn_if_open_to_the_network

    with caplog.at_level(logging.WARNING, logger="api_like_oai"):
        warn_if_open_to_the_network(parse_settings(["--ollama-listen", "0.0.0.0:11434"]))
        warn_if_open_to_the_network(parse_settings(["--ollama-listen", "0.0.0.0:11434", "--api-key", "k"]))
    assert [record.getMessage()[:45] for record in caplog.records] == ["api-like-oai listens on 0.0.0.0 port 11434 wi"]
