"""Reasoning split from the answer, fed whole and split at every position."""

from __future__ import annotations

import pytest

from api_like_oai.backends.events import GenerationEvent
from api_like_oai.reasoning import THINK, ReasoningSplitter, detect, prompt_opens_thought, split_reasoning

CASES = {
    "thought then answer": ("<think>\nLet me see: 2 + 2.\n</think>\n\nIt is 4.", False, "Let me see: 2 + 2.", "It is 4."),
    "prompt opened the thought": ("Let me see.\n</think>\n\nIt is 4.", True, "Let me see.", "It is 4."),
    "no thought": ("It is 4.", False, "", "It is 4."),
    "leading whitespace then thought": ("\n <think>hm</think>4", False, "hm", "4"),
    "marker later is text": ("It is 4. <think>no</think>", False, "", "It is 4. <think>no</think>"),
    "unfinished thought": ("<think>still thinking", False, "still thinking", ""),
    "empty thought (thinking off)": ("<think>\n\n</think>\n\nIt is 4.", False, "", "It is 4."),
    "marker-like text": ("<thin ice", False, "", "<thin ice"),
    "thought with lookalikes": ("<think>a </thin b</think>c", False, "a </thin b", "c"),
}


def run(text_pieces, opened: bool) -> tuple[str, str]:
    splitter = ReasoningSplitter(THINK, opened=opened)
    pieces = [p for piece in text_pieces for p in splitter.feed(piece)] + splitter.finish()
    assert all(text for _, text in pieces), "no empty pieces"
    return (
        "".join(text for kind, text in pieces if kind == "reasoning"),
        "".join(text for kind, text in pieces if kind == "content"),
    )


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_whole_and_split_at_every_position_agree(case):
    text, opened, reasoning, content = case
    assert run([text], opened) == (reasoning, content)
    for cut in range(1, len(text)):
        assert run([text[:cut], text[cut:]], opened) == (reasoning, content), cut
    assert run(list(text), opened) == (reasoning, content)


def test_no_marker_leaks_into_either_part_however_split():
    text = "<think>plan</think>answer"
    for cut in range(1, len(text)):
        splitter = ReasoningSplitter(THINK)
        for kind, piece in splitter.feed(text[:cut]) + splitter.feed(text[cut:]) + splitter.finish():
            assert "<" not in piece and ">" not in piece, (cut, kind, piece)


def test_answer_text_passes_straight_through_once_the_thought_is_over():
    splitter = ReasoningSplitter(THINK)
    splitter.feed("<think>x</think>Hi")
    assert splitter.feed(" there") == [("content", " there")]


@pytest.mark.parametrize(
    "source, expected",
    [
        ("{{ message.content.split('</think>')[-1] }}", THINK),
        ("{{ '<think>\\n' if add_generation_prompt }}{{ '</think>' }}", THINK),
        ("<|im_start|>{{ message.role }}", None),
        (None, None),
    ],
)
def test_markers_are_detected_from_the_template(source, expected):
    assert detect(source) == expected


def test_a_prompt_ending_in_an_open_thought_is_noticed():
    assert prompt_opens_thought("<|im_start|>assistant\n<think>\n", THINK)
    assert not prompt_opens_thought("<|im_start|>assistant\n<think>\n\n</think>\n\n", THINK)


def test_the_transformation_keeps_logprobs_counts_and_finish():
    events = [
        GenerationEvent(text="<think>a", index=0, logprobs=("lp1",)),
        GenerationEvent(text="</think>b", index=0, logprobs=("lp2",), prompt_tokens=3, completion_tokens=2),
        GenerationEvent(finish_reason="stop", index=0, prompt_tokens=3, completion_tokens=2),
    ]
    out = list(split_reasoning(THINK, opened=False)(iter(events)))
    assert [(e.reasoning, e.text) for e in out if e.reasoning or e.text] == [("a", ""), ("", "b")]
    assert out[0].logprobs == ("lp1",) and out[-1].finish_reason == "stop"
    assert out[-1].completion_tokens == 2


def test_the_stop_word_survives_a_final_event_that_carries_text():
    """The stop word tells a request's stop sequence from the end of turn (Anthropic's stop_sequence)."""
    events = [
        GenerationEvent(text="<think>a", index=0),
        GenerationEvent(text="</think>b", index=0, finish_reason="stop", stop_word="END"),
    ]
    out = list(split_reasoning(THINK, opened=False)(iter(events)))
    assert out[-1].finish_reason == "stop" and out[-1].stop_word == "END"
