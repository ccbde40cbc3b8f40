"""The models this proxy serves: a name, an upstream client, and its (lazily resolved) formatter."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from ..backends.llamacpp import LlamaCppClient, UpstreamProps
from ..errors import ModelNotFound, UpstreamError
from ..prompts import ChatFormatter, FormatterOptions, TemplateChoice, resolve_formatter

log = logging.getLogger("api_like_oai")


@dataclass
class ServedModel:
    name: str
    client: LlamaCppClient
    template_choice: TemplateChoice
    created: int = 0

    def __post_init__(self):
        self.created = self.created or int(time.time())
        self._formatter: ChatFormatter | None = None
        self._props: UpstreamProps | None = None
        self._lock = threading.Lock()

    def formatter(self) -> ChatFormatter:
        """The chat formatter, resolved on first use (the upstream may start after the proxy)."""
        if self._formatter is None:
            with self._lock:
                if self._formatter is None:
                    formatter, complete = self._resolve()
                    if not complete:
                        return formatter  # made without the upstream's tokens: retry next time
                    self._formatter = formatter
                    log.info("model %s: chat template %s", self.name, formatter.describe())
        return self._formatter

    def _resolve(self) -> tuple[ChatFormatter, bool]:
        """(formatter, whether it had everything it needs from the upstream)."""
        choice = self.template_choice
        props = None
        if choice.uses_model_template():
            props = self.props()  # nothing to fall back on: UpstreamUnavailable goes to the client
        elif choice.chat_template or choice.chat_prompt_model:
            try:
                props = self.props()  # only for bos_token/eos_token, which Jinja templates use
            except UpstreamError:
                pass
        options = FormatterOptions(
            bos_token=props.bos_token if props else "",
            eos_token=props.eos_token if props else "",
            upstream_adds_bos=self.client.adds_bos() if props and props.bos_token else False,
            response_role=choice.response_role)
        formatter = resolve_formatter(choice, options, props.chat_template if props else None)
        needs_props = choice.uses_model_template() or bool(choice.chat_template or choice.chat_prompt_model)
        return formatter, props is not None or not needs_props

    def props(self) -> UpstreamProps:
        if self._props is None:
            self._props = self.client.props()
        return self._props

    def info(self) -> dict:
        """What /v1/internal/model/info reports."""
        formatter = self.formatter()
        props = self._props
        return {"model": self.name, "template": formatter.describe(),
                "context_length": props.context_length if props else None,
                "upstreams": [self.client.base_url]}


class ModelRegistry:
    """Looks up the model a request names. With one model and no config, any name is accepted
    (the original script ignored `model`), and the answer echoes the name the client sent."""

    def __init__(self, models: list[ServedModel], *, strict: bool = False):
        self.models = {model.name: model for model in models}
        self.default = models[0]
        self.strict = strict

    def lookup(self, requested: str | None) -> tuple[ServedModel, str]:
        """(the model, the name to answer with); ModelNotFound for an unknown name when strict."""
        if not requested:
            return self.default, self.default.name
        if requested in self.models:
            return self.models[requested], requested
        if self.strict:
            raise ModelNotFound(f"model {requested!r} does not exist; known models: "
                                f"{', '.join(sorted(self.models))}", param="model")
        return self.default, requested
