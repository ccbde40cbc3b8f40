"""OpenAI's response shapes for chat and text completions, built from GenerationEvents.

Plain dicts on purpose: this runs once per streamed token, where a pydantic round-trip per
chunk would cost more than the rest of the proxy (see benchmarks/).
"""

from __future__ import annotations

import time
import uuid

from ..backends.events import GenerationEvent


class ChatShape:
    object_name = "chat.completion.chunk"

    def __init__(self, model: str, role: str = "assistant", logprobs: bool = False, top_logprobs: int = 0):
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = model
        self.role = role
        self.logprobs = logprobs
        self.top_logprobs = top_logprobs

    def _chunk(self, choices: list) -> dict:
        return {"id": self.id, "object": self.object_name, "created": self.created,
                "model": self.model, "system_fingerprint": None, "choices": choices}

    def opening(self, index: int) -> dict:
        """The first chunk of a choice: the role alone, as OpenAI sends it."""
        return self._chunk([{"index": index, "delta": {"role": self.role, "content": ""},
                             "logprobs": None, "finish_reason": None}])

    def chunks(self, event: GenerationEvent) -> list[dict]:
        chunks = []
        if event.text:
            logprobs = chat_logprobs(event.logprobs, self.top_logprobs) if self.logprobs else None
            chunks.append(self._chunk([{"index": event.index, "delta": {"content": event.text},
                                        "logprobs": logprobs, "finish_reason": None}]))
        if event.finish_reason:
            chunks.append(self._chunk([{"index": event.index, "delta": {}, "logprobs": None,
                                        "finish_reason": event.finish_reason}]))
        return chunks

    def usage_chunk(self, usage: dict) -> dict:
        return {**self._chunk([]), "usage": usage}

    def response(self, choices: list[dict], usage: dict) -> dict:
        """The non-streamed answer from folded choices ({"index", "text", "finish_reason", "logprobs"})."""
        return {"id": self.id, "object": "chat.completion", "created": self.created,
                "model": self.model, "system_fingerprint": None,
                "choices": [{"index": c["index"],
                             "message": {"role": self.role, "content": c["text"], "refusal": None},
                             "logprobs": chat_logprobs(c["logprobs"], self.top_logprobs) if self.logprobs else None,
                             "finish_reason": c["finish_reason"]} for c in choices],
                "usage": usage}


class CompletionShape:
    object_name = "text_completion"

    def __init__(self, model: str, logprobs: int | None = None):
        self.id = f"cmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = model
        self.logprobs = logprobs
        self.text_offsets: dict[int, int] = {}

    def _chunk(self, choices: list) -> dict:
        return {"id": self.id, "object": self.object_name, "created": self.created,
                "model": self.model, "system_fingerprint": None, "choices": choices}

    def opening(self, index: int) -> dict | None:
        return None

    def chunks(self, event: GenerationEvent) -> list[dict]:
        if not event.text and not event.finish_reason:
            return []
        logprobs = None
        if self.logprobs is not None and event.logprobs:
            offset = self.text_offsets.get(event.index, 0)
            logprobs = legacy_logprobs(event.logprobs, offset)
            self.text_offsets[event.index] = offset + len(event.text)
        return [self._chunk([{"index": event.index, "text": event.text, "logprobs": logprobs,
                              "finish_reason": event.finish_reason}])]

    def usage_chunk(self, usage: dict) -> dict:
        return {**self._chunk([]), "usage": usage}

    def response(self, choices: list[dict], usage: dict) -> dict:
        return {"id": self.id, "object": "text_completion", "created": self.created,
                "model": self.model, "system_fingerprint": None,
                "choices": [{"index": c["index"], "text": c["text"],
                             "logprobs": legacy_logprobs(c["logprobs"], 0)
                             if self.logprobs is not None else None,
                             "finish_reason": c["finish_reason"]} for c in choices],
                "usage": usage}


def chat_logprobs(token_logprobs, top_count: int) -> dict:
    """OpenAI chat `logprobs`: {"content": [{token, logprob, bytes, top_logprobs}], "refusal": None}."""
    return {"content": [{"token": t.token, "logprob": t.logprob, "bytes": list(t.bytes),
                         "top_logprobs": [{"token": token, "logprob": logprob, "bytes": list(token_bytes)}
                                          for token, logprob, token_bytes in t.top[:top_count]]}
                        for t in token_logprobs or ()],
            "refusal": None}


def legacy_logprobs(token_logprobs, offset: int) -> dict:
    """The completions API's `logprobs`: tokens, token_logprobs, top_logprobs, text_offset."""
    tokens, offsets = [], []
    for t in token_logprobs or ():
        tokens.append(t.token)
        offsets.append(offset)
        offset += len(t.token)
    return {"tokens": tokens,
            "token_logprobs": [t.logprob for t in token_logprobs or ()],
            "top_logprobs": [{token: logprob for token, logprob, _ in t.top} for t in token_logprobs or ()],
            "text_offset": offsets}
