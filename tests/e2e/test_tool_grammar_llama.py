"""The grammars of tools' schemas against the real llama-server: it accepts them, and SmolLM2 sampled
under them writes JSON valid for the schema, then stops because the grammar is complete."""

from __future__ import annotations

import json

import jsonschema_rs  # schemathesis's validator, installed with the test extras
import pytest
import requests

from api_like_oai.tools.grammar import MAX_REPEAT, WS, GrammarBuilder, json_literal

PROMPT = (
    "<|im_start|>system\nYou call tools by writing their arguments as JSON.<|im_end|>\n"
    "<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
)
SEEDS = [1, 2, 3]
# Strings and arrays are bounded so that every answer fits in n_predict even if the model rambles.
NAME = {"type": "string", "maxLength": 24}
TOOL_SCHEMAS = {
    "weather": (
        "What is the weather in Paris?",
        {
            "type": "object",
            "properties": {
                "city": {**NAME, "description": "The city"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    ),
    "nested": (
        "Plan a trip to Rome and Milan with two friends.",
        {
            "type": "object",
            "properties": {
                "trip": {
                    "type": "object",
                    "properties": {
                        "cities": {"type": "array", "items": NAME, "minItems": 1, "maxItems": 3},
                        "days": {"type": "integer", "minimum": 1},
                    },
                    "required": ["cities", "days"],
                },
                "travellers": {
                    "type": "array",
                    "maxItems": 3,
                    "items": {"type": "object", "properties": {"name": NAME, "age": {"type": "integer"}}, "required": ["name"]},
                },
            },
            "required": ["trip"],
        },
    ),
    "optional-only": (
        "Search my notes.",
        {
            "type": "object",
            "properties": {
                "query": NAME,
                "limit": {"type": "integer"},
                "tags": {"type": "array", "items": NAME, "maxItems": 2},
                "exact": {"type": "boolean"},
            },
        },
    ),
    "any-of-null": (
        "Set a reminder for tomorrow.",
        {
            "type": "object",
            "properties": {
                "text": NAME,
                "when": {"anyOf": [{**NAME, "format": "date-time"}, {"type": "null"}], "default": None},
                "priority": {"type": ["integer", "null"]},
            },
            "required": ["text", "when"],
        },
    ),
    "defs-ref": (
        "Create a user named Ada with the admin role.",
        {  # as pydantic writes it
            "$defs": {
                "Role": {"enum": ["admin", "user", "guest"], "title": "Role", "type": "string"},
                "Address": {
                    "type": "object",
                    "title": "Address",
                    "properties": {"street": NAME, "zip": NAME},
                    "required": ["street"],
                },
            },
            "type": "object",
            "title": "CreateUser",
            "properties": {
                "name": {**NAME, "title": "Name"},
                "role": {"$ref": "#/$defs/Role"},
                "address": {"anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}], "default": None},
            },
            "required": ["name", "role"],
        },
    ),
    "no-parameters": ("What time is it?", {"type": "object", "properties": {}}),
}


def complete(llama_server, prompt: str, grammar: str, seed: int, n_predict: int = 300) -> dict:
    response = requests.post(
        llama_server.url + "/completion",
        timeout=120,
        json={"prompt": prompt, "grammar": grammar, "n_predict": n_predict, "temperature": 0.8, "seed": seed},
    )
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("tool", list(TOOL_SCHEMAS))
def test_sampled_arguments_are_valid_for_the_schema(llama_server, tool, seed):
    question, schema = TOOL_SCHEMAS[tool]
    builder = GrammarBuilder()
    answer = complete(llama_server, PROMPT.format(question=question), builder.render(builder.schema(schema, tool)), seed)
    assert answer["stop_type"] == "eos", answer["content"]  # the grammar was complete, so only EOS was left
    jsonschema_rs.validate(schema, json.loads(answer["content"]))


@pytest.mark.parametrize("seed", SEEDS)
def test_a_wrapped_tool_call_names_the_tool_and_its_arguments(llama_server, seed):
    question, schema = TOOL_SCHEMAS["weather"]
    builder = GrammarBuilder()
    call = builder.rule(
        "call",
        f'"{{" {WS} "\\"name\\":" {WS} {json_literal("get_weather")} "," {WS} '
        f'"\\"arguments\\":" {WS} {builder.schema(schema, "weather")} {WS} "}}"',
    )
    answer = complete(
        llama_server, PROMPT.format(question=question), builder.render(f'"<tool_call>" {WS} {call} {WS} "</tool_call>"'), seed
    )
    content = answer["content"]
    assert content.startswith("<tool_call>") and content.endswith("</tool_call>")
    call_json = json.loads(content.removeprefix("<tool_call>").removesuffix("</tool_call>"))
    assert call_json["name"] == "get_weather"
    jsonschema_rs.validate(schema, call_json["arguments"])


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "maxLength": 10 * MAX_REPEAT},
        {"type": "array", "items": {"type": "integer"}, "minItems": MAX_REPEAT, "maxItems": MAX_REPEAT},
        {"type": "object", "properties": {f"option_{index}": {"type": "boolean"} for index in range(100)}},
        {
            "$defs": {"Tree": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/Tree"}}}}},
            "$ref": "#/$defs/Tree",
        },
        {},
        {"type": "array", "prefixItems": [{"type": "integer"}] * 3000},  # MAX_REPEAT optional groups, nested
    ],
    ids=["longest-string", "most-items", "100-optional", "recursive", "any-value", "longest-prefix"],
)
def test_llama_server_accepts_the_largest_and_recursive_grammars(llama_server, schema):
    builder = GrammarBuilder()
    answer = complete(llama_server, "JSON:", builder.render(builder.schema(schema, "big")), seed=1, n_predict=8)
    assert answer["tokens_predicted"] > 0
