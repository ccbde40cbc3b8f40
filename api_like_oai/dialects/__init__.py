"""Other APIs spoken over the same generations as chat: Anthropic's Messages API and OpenAI's
Responses API; and the answers' shapes of all of them (OpenAI's chat and completions too).

Each API has, by job: its request models (`anthropic.py`, `responses.py`: pydantic, strict, documented
in /openapi.json), their translation into the internal `ChatCompletionRequest` (`*_translation.py`:
messages, tools, tool choice, sampling), the models of its answers (`*_answers.py`, only for
/openapi.json and the tests) and the shape that writes the generation events as that API's JSON and
event stream (`*_shape.py`, held to `shape.Shape`), driven by `generation.stream` / `generation.fold`.
`blocks.py` cuts one choice's output into ordered blocks for the shapes; `common.py` is what the
translations share. Templates, tool calling, context fitting, routing, keys, limits, logs and metrics
are the chat path's own (`services/chat.start_chat`); each API's entry is in services/.
"""
