"""probe() tells what a chat template renders: tools, tool calls and results, the system role, late system messages."""

from __future__ import annotations

import pytest

from api_like_oai.prompts import shipped
from api_like_oai.prompts.capabilities import TemplateCapabilities, probe
from api_like_oai.tools.formats import detect as tool_call_format


def caps(*flags: str, tool_call_format: str | None = None) -> TemplateCapabilities:
    """Capabilities with exactly `flags` true."""
    names = [
        "supports_tools",
        "supports_tool_calls",
        "supports_tool_responses",
        "supports_parallel_tool_calls",
        "supports_system_role",
        "requires_object_arguments",
        "requires_short_ids",
        "supports_late_system",
    ]
    unknown = set(flags) - set(names)
    assert not unknown, unknown
    return TemplateCapabilities(**{name: name in flags for name in names}, tool_call_format=tool_call_format)


PLAIN = caps("supports_system_role")
# Templates that write every message where it stands, a system message after the first turn too.
IN_PLACE = caps("supports_system_role", "supports_late_system")
# Templates that write any role as a turn of its own also write role "tool" messages.
PLAIN_ANY_ROLE = caps("supports_system_role", "supports_tool_responses", "supports_late_system")
FULL_TOOLS = (
    "supports_tools",
    "supports_tool_calls",
    "supports_tool_responses",
    "supports_system_role",
    "requires_object_arguments",
)

SHIPPED = {
    # Alpaca and Inkbot write the last system message first; Llama 2 and Mistral raise on a late one
    # (their user/assistant alternation); Vicuna leaves it out.
    "alpaca": PLAIN,
    "chatml": PLAIN_ANY_ROLE,
    # Gemma refuses a system message; a tool message after the user is a turn like any other.
    "gemma": caps("supports_tool_responses"),
    "inkbot": PLAIN,
    "llama-2": PLAIN,
    "llama-3": PLAIN_ANY_ROLE,
    "mistral": PLAIN,
    "phi-3": IN_PLACE,
    "vicuna": PLAIN,
    "zephyr": IN_PLACE,
    "qwen2.5": caps(*FULL_TOOLS, "supports_parallel_tool_calls", "supports_late_system", tool_call_format="hermes"),
    # One call per assistant message, or the template raises.
    "llama-3.1": caps(*FULL_TOOLS, "supports_late_system", tool_call_format="llama3"),
    # A system message other than the first raises ("Only user and assistant roles are supported, ...").
    "mistral-v3": caps(*FULL_TOOLS, "supports_parallel_tool_calls", "requires_short_ids", tool_call_format="mistral"),
}

# The BOS and EOS tokens each model's tokenizer declares (probe results do not depend on them here).
TOKENS = {"llama-3.1": ("<|begin_of_text|>", "<|eot_id|>"), "mistral-v3": ("<s>", "</s>"), "gemma": ("<bos>", "<eos>")}


def shipped_files() -> set[str]:
    return {path.name for path in shipped.folder().iterdir() if path.name.endswith(".jinja")}


def test_every_shipped_template_has_expected_capabilities():
    assert {f"{name}.jinja" for name in SHIPPED} == shipped_files()


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_template_capabilities(name):
    bos, eos = TOKENS.get(name, ("", ""))
    assert probe(shipped.load(name), bos, eos) == SHIPPED[name]


_PLAIN_ROLES = (
    "{% for m in messages %}{% if m.role in ['system', 'user', 'assistant'] %}"
    "<{{ m.role }}>{{ m.content }}{% endif %}{% endfor %}"
)
_NO_SYSTEM = "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}" + _PLAIN_ROLES


def _calls_template(arguments: str, *, check_id: bool = False, first_call_only: bool = False) -> str:
    """Renders tools by name, each tool call as {"name", "arguments"} with `arguments` (a Jinja
    expression of `c`), and tool results; optionally raising on ids that are not 9 characters."""
    calls = "[m.tool_calls[0]]" if first_call_only else "m.tool_calls"
    id_check = (
        "{% if c.id | length != 9 %}{{ raise_exception('Tool call ids must have 9 characters') }}{% endif %}" if check_id else ""
    )
    return (
        "{% for t in tools or [] %}[tool {{ t.function.name }}]{% endfor %}"
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
        "{% if m.tool_calls %}{% for c in "
        + calls
        + " %}"
        + id_check
        + '<call>{"name": "{{ c.function.name }}", "arguments": {{ '
        + arguments
        + " }}}</call>"
        "{% endfor %}{% endif %}{% endfor %}"
    )


INLINE = [
    ("plain roles only", _PLAIN_ROLES, IN_PLACE),
    ("raises on a system message", _NO_SYSTEM, caps()),
    # Arguments written as given: OpenAI's JSON string reads right, so no object is needed.
    (
        "raw arguments",
        _calls_template("c.function.arguments"),
        caps(
            "supports_tools",
            "supports_tool_calls",
            "supports_tool_responses",
            "supports_parallel_tool_calls",
            "supports_system_role",
            "supports_late_system",
        ),
    ),
    # `| tojson` double-encodes a JSON string: the template needs an object.
    (
        "tojson arguments",
        _calls_template("c.function.arguments | tojson"),
        caps(
            "supports_tools",
            "supports_tool_calls",
            "supports_tool_responses",
            "supports_parallel_tool_calls",
            "supports_system_role",
            "requires_object_arguments",
            "supports_late_system",
        ),
    ),
    (
        "raises on ids that are not 9 characters",
        _calls_template("c.function.arguments | tojson", check_id=True),
        caps(
            "supports_tools",
            "supports_tool_calls",
            "supports_tool_responses",
            "supports_parallel_tool_calls",
            "supports_system_role",
            "requires_object_arguments",
            "requires_short_ids",
            "supports_late_system",
        ),
    ),
    (
        "raises on result ids that are not 9 characters",
        _calls_template("c.function.arguments").replace(
            "<{{ m.role }}>",
            "{% if m.tool_call_id is defined and m.tool_call_id | length != 9 %}"
            "{{ raise_exception('bad id') }}{% endif %}<{{ m.role }}>",
        ),
        caps(
            "supports_tools",
            "supports_tool_calls",
            "supports_tool_responses",
            "supports_parallel_tool_calls",
            "supports_system_role",
            "requires_short_ids",
            "supports_late_system",
        ),
    ),
    (
        "writes only the first call",
        _calls_template("c.function.arguments", first_call_only=True),
        caps("supports_tools", "supports_tool_calls", "supports_tool_responses", "supports_system_role", "supports_late_system"),
    ),
    ("does not parse", "{% for m in messages %}", caps()),
    ("raises on everything", "{{ raise_exception('no') }}", caps()),
    ("unsafe", "{{ ''.__class__.__mro__ }}{% for m in messages %}{{ m.content }}{% endfor %}", caps()),
    ("undefined variable", "{{ messages[0].content + undefined_thing.attribute }}", caps()),
    ("type error", "{{ messages | length + 'x' }}", caps()),
]


@pytest.mark.parametrize(("source", "expected"), [case[1:] for case in INLINE], ids=[case[0] for case in INLINE])
def test_inline_template_capabilities(source, expected):
    assert probe(source) == expected


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('<tool_call>\n{"name": ...}\n</tool_call>', "hermes"),
        ("[TOOL_CALLS] [", "mistral"),
        ("<|python_tag|>", "llama3"),
        ('<|start_header_id|>ipython<|end_header_id|> {"name": "x", "parameters": {}}', "llama3"),
        ("ipython", None),
        ("<|im_start|>tool", None),
    ],
)
def test_tool_call_format_is_read_from_the_template_text(source, expected):
    assert tool_call_format(source) == expected


def test_probe_is_cached_by_source():
    source = _calls_template("c.function.arguments")
    assert probe(source) is probe(source)
