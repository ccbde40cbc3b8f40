"""Items as they are stored and listed: ids, statuses, a message's text as content parts."""

from __future__ import annotations

import re

from api_like_oai.dialects.responses import ResponsesRequest
from api_like_oai.services.stored_items import input_items, item_list, stored_item
from api_like_oai.store import Page


def test_a_string_input_is_one_user_message_with_an_id():
    [item] = input_items("Hi")
    assert re.fullmatch(r"msg_[0-9a-f]{32}", item["id"])
    assert item == {
        "id": item["id"],
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "Hi"}],
        "status": "completed",
    }


def test_items_keep_their_ids_and_get_their_kind_of_id_otherwise():
    request = ResponsesRequest.model_validate(
        {
            "input": [
                {"role": "assistant", "content": "Sure.", "id": "msg_given"},
                {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "42"},
                {"type": "reasoning", "summary": []},
            ]
        }
    )
    assistant, call, output, thought = input_items(request.input)
    assert assistant == {
        "id": "msg_given",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Sure.", "annotations": []}],
    }
    assert call["id"].startswith("fc_") and call["status"] == "completed"
    assert output["id"].startswith("fco_") and output["output"] == "42"
    assert thought["id"].startswith("rs_") and "status" not in thought


def test_an_output_item_is_stored_as_it_was_answered():
    answered = {
        "id": "msg_abc_0",
        "type": "message",
        "status": "incomplete",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Hel", "annotations": [], "logprobs": []}],
    }
    assert stored_item(answered) == answered


def test_lists_name_their_first_and_last_ids():
    assert item_list(Page([{"id": "a"}, {"id": "b"}], True)) == {
        "object": "list",
        "data": [{"id": "a"}, {"id": "b"}],
        "first_id": "a",
        "last_id": "b",
        "has_more": True,
    }
    assert item_list(Page([], False)) == {"object": "list", "data": [], "first_id": None, "last_id": None, "has_more": False}
