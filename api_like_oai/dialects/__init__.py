"""Other APIs spoken over the same generations as chat: Anthropic's Messages API and OpenAI's
Responses API.

A dialect is two things: its request models (pydantic, strict, documented in /openapi.json) with a
translation into the internal `ChatCompletionRequest` (messages, tools, tool choice, sampling), and
an output shape that writes the generation events as that API's JSON and event stream, driven by
`generation.stream` / `generation.fold` exactly as `ChatShape` is. Templates, tool calling, context
fitting, routing, keys, limits, logs and metrics are the chat path's own (`services/chat.start_chat`).
"""
