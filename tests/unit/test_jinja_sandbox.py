"""Jinja templates are untrusted code: they render in the immutable sandbox, with HF's helpers."""

from __future__ import annotations

import pytest

from api_like_oai.errors import TemplateError
from api_like_oai.prompts import FormatterOptions, JinjaFormatter

HI = [{"role": "user", "content": "Hi"}]

INJECTIONS = [
    "{{ ''.__class__.__mro__ }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ cycler.__init__.__globals__.os.popen('touch MARKER').read() }}",
    "{{ self.__init__.__globals__.__builtins__.__import__('os').system('touch MARKER') }}",
    "{{ joiner.__init__.__globals__ }}",
    "{% set x = messages.append({'role': 'user', 'content': 'x'}) %}{{ messages }}",
    "{{ raise_exception.__globals__ }}",
]


@pytest.mark.parametrize("payload", INJECTIONS)
def test_injection_payloads_raise_a_clean_error_and_execute_nothing(payload, tmp_path):
    marker = tmp_path / "pwned"
    with pytest.raises(TemplateError) as caught:
        JinjaFormatter(payload.replace("MARKER", str(marker))).render(HI)
    assert caught.value.status == 400
    assert not marker.exists()


def test_raise_exception_becomes_the_message_of_a_400():
    template = "{% if messages[0]['role'] != 'system' %}{{ raise_exception('Need a system message') }}{% endif %}"
    with pytest.raises(TemplateError, match="Need a system message") as caught:
        JinjaFormatter(template).render(HI)
    assert caught.value.status == 400


def test_hf_helpers_and_settings():
    template = (
        "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}\n"
        "  {{ m | tojson }}|{{ strftime_now('%Y') | length }}\n"
        "{% endfor %}"
    )
    text = JinjaFormatter(template).render([{"role": "user", "content": "é<b>"}, HI[0]]).text
    # lstrip_blocks/trim_blocks remove the indentation and newlines around tags; tojson keeps UTF-8
    # and does not HTML-escape (Jinja's own tojson would write \u003cb\u003e).
    assert text == '  {"role": "user", "content": "é<b>"}|4\n'


def test_tools_variable_is_absent_unless_given():
    template = "{% if tools is defined %}tools:{{ tools | length }}{% else %}none{% endif %}"
    assert JinjaFormatter(template).render(HI).text == "none"
    assert JinjaFormatter(template).render(HI, tools=[{"type": "function"}]).text == "tools:1"


BOS_TEMPLATE = "{{ bos_token }}{% for m in messages %}[{{ m['content'] }}]{{ bos_token }}{% endfor %}"


@pytest.mark.parametrize("upstream_adds_bos, expected", [(True, "[Hi]<s>[Yo]<s>"), (False, "<s>[Hi]<s>[Yo]<s>")])
def test_leading_bos_is_dropped_only_when_llama_cpp_adds_its_own(upstream_adds_bos, expected):
    options = FormatterOptions(bos_token="<s>", eos_token="</s>", upstream_adds_bos=upstream_adds_bos)
    prompt = JinjaFormatter(BOS_TEMPLATE, options).render([HI[0], {"role": "user", "content": "Yo"}])
    assert prompt.text == expected
    assert prompt.stop == ("</s>",)


def test_a_template_that_does_not_parse_fails_at_construction():
    with pytest.raises(TemplateError, match="does not parse"):
        JinjaFormatter("{% for %}")


def test_hf_generation_tag_renders_its_body():
    """LFM2.5's and Laguna's templates mark assistant turns with {% generation %} for training masks."""
    from api_like_oai.prompts import JinjaFormatter

    source = (
        "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}A: {{ m.content }}"
        "{% endgeneration %}{% else %}U: {{ m.content }}{% endif %}\n{% endfor %}"
    )
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    assert JinjaFormatter(source).render(messages, add_generation_prompt=False).text == "U: HiA: Hello"
