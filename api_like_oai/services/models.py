"""The models this proxy serves: settings, an upstream pool, and a (lazily resolved) formatter."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ..access.gate import Ticket
from ..access.priority import SlotQueue
from ..backends.llamacpp import LLAMA_CPP_SAMPLING, SAMPLING_ECHOED, UpstreamProps
from ..backends.upstream import Renew, Upstream, not_supported
from ..backends.upstream_facts import UpstreamFacts
from ..errors import ModelNotFound, UpstreamError
from ..prompts import ChatFormatter, FormatterOptions, resolve_formatter
from ..prompts.capabilities import TemplateCapabilities
from ..prompts.tools import formatter_capabilities
from ..reasoning import THINK, ReasoningMarkers
from ..reasoning import detect as detect_reasoning
from ..settings import ImageLimits, ModelSettings
from .door import Door
from .fitting import TOKEN_FIELDS, schema_fields

log = logging.getLogger("api_like_oai")

# OpenAI's documented defaults: what an OpenAI-compatible upstream is assumed to use when not told.
RERANK_FLAGS = ("--reranking", "--rerank")  # llama-server's flag (and its alias) for a model's rank head
OPENAI_SAMPLING = {"temperature": 1.0, "top_p": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}


class ServedModel:
    def __init__(self, settings: ModelSettings, upstream: Upstream, image_limits: ImageLimits | None = None):
        self.settings = settings
        self.image_limits = image_limits or ImageLimits()
        self.name = settings.name
        self.upstream = upstream  # a pool of llama.cpp servers or an OpenAI-compatible server
        self.template_choice = settings.template
        self.created = int(time.time())
        # what the upstreams' /props say about the model, where they have one
        self.facts = UpstreamFacts(upstream) if upstream.capabilities.props else None
        self.places = SlotQueue()  # its generations, held to its servers' slots by priority
        self._formatter: ChatFormatter | None = None

    def door(self, ticket: Ticket | None = None, renewal: Callable[[], Renew | None] = lambda: None, asked=lambda: None) -> Door:
        """The upstream as one request goes through it: its key's limits and priority (or the lower one
        it `asked()` for), its lease's renewal."""
        return Door(self.upstream, self.places, ticket, renewal, asked)

    def formatter(self) -> ChatFormatter:
        """The chat formatter, resolved on first use (the upstream may start after the proxy). No lock
        is held across the upstream's answers: requests that meet an unresolved one each resolve it."""
        if self._formatter is None:
            formatter, complete = self._resolve()
            if not complete:
                return formatter  # made without the upstream's tokens: retry next time
            if self._formatter is None:
                self._formatter = formatter
                log.info("model %s: chat template %s", self.name, formatter.describe())
        return self._formatter

    def resolved_formatter(self) -> ChatFormatter | None:
        """The formatter if it is resolved already; None otherwise (nothing is asked of an upstream:
        Ollama's /api/show must not start a model)."""
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
            upstream_adds_bos=self.facts.adds_bos() if props and props.bos_token else False,
            response_role=choice.response_role,
        )
        formatter = resolve_formatter(choice, options, props.chat_template if props else None)
        needs_props = choice.uses_model_template() or bool(choice.chat_template or choice.chat_prompt_model)
        return formatter, props is not None or not needs_props

    def tool_capabilities(self) -> TemplateCapabilities | None:
        """What the chat template renders of tools (probed once per template); None for formatters
        that know nothing of them, unless a plug-in declares its own."""
        return formatter_capabilities(self.formatter())

    def tool_call_format(self) -> str:
        """How this model writes tool calls: configured, else the template's native format, else the
        proxy's own ("generic") which prompts/tools.py describes to the model."""
        if self.settings.tool_call_format != "auto":
            return self.settings.tool_call_format
        capabilities = self.tool_capabilities()
        if capabilities is not None and capabilities.supports_tools and capabilities.tool_call_format:
            return capabilities.tool_call_format
        return "generic"

    def reasoning_markers(self, requested_format: str | None) -> ReasoningMarkers | None:
        """The thought markers to split on: none when the format is "none"; the template's when it
        has them; with "deepseek", <think> even for a template that does not show them."""
        reasoning_format = requested_format or self.settings.reasoning_format
        if reasoning_format == "none":
            return None
        formatter = self.formatter()
        markers = detect_reasoning(getattr(formatter, "template_source", None))
        return markers or (THINK if reasoning_format == "deepseek" else None)

    def lazy_grammar(self) -> bool:
        """Whether the upstream holds tool calls to a grammar only once they begin."""
        return self.facts is not None and self.facts.lazy_grammar()

    def props(self) -> UpstreamProps:
        if self.facts is None:
            raise not_supported(self.name, "tell its chat template and context (it has no /props)")
        return self.facts.props()

    def check_health(self) -> dict[str, str]:
        """Each upstream's state: "ok" or why not (and, where /props tells, one serving another model)."""
        states = self.upstream.check()
        return states if self.facts is None else self.facts.check(states)

    def context_length(self) -> int | None:
        """Tokens one request may use: the configured length, else llama.cpp's per-slot context."""
        return self.settings.context_length or self.props().context_length

    def known_context_length(self) -> int | None:
        """The context length if it is known without waiting on a silent upstream: the configured
        one, else llama.cpp's per slot once /props answered (asked again at most every 10 s)."""
        if self.settings.context_length or self.facts is None:
            return self.settings.context_length
        props = self.facts.known_soon()
        return props.context_length if props else None

    def capabilities(self) -> list[str]:
        """What /v1/models says the model can do: what its config declares; a reranker ranks only; the
        proxy formats chat and tool calls itself for a llama.cpp model; an OpenAI-compatible upstream
        gets chat and completions passed through."""
        if self.settings.capabilities:
            return list(self.settings.capabilities)
        if self.reranks():
            return ["rerank"]
        if self.upstream.capabilities.renders_prompts:
            return ["completion", "chat"]
        return ["completion", "chat", "tools", *(["vision"] if "image" in self.input_modalities() else [])]

    def reranks(self) -> bool | None:
        """Whether the model is a reranker: declared (`capabilities`), or started with --reranking (which
        supervisor/configure.py adds for a GGUF whose pooling type is rank); None when nothing says (an
        upstream the proxy does not start, no capabilities declared): its llama-server decides."""
        if self.settings.capabilities:
            return "rerank" in self.settings.capabilities
        if self.settings.launch is not None:
            return any(arg in RERANK_FLAGS for arg in self.settings.launch.args)
        return None

    def input_modalities(self) -> list[str]:
        """What /v1/models says the model reads: text, images and audio when its llama-server's projector
        reads them (as far as /props has told; an OpenAI-compatible upstream's are not known)."""
        props = self.facts.known_soon() if self.facts is not None else None
        if props is None:
            return ["text"]
        return ["text", *(["image"] if props.vision else []), *(["audio"] if props.audio else [])]

    def takes_audio(self) -> bool:
        """Whether the model's llama-server reads audio (a projector with an audio encoder), asking /props."""
        return self.props().audio

    def takes_images(self) -> bool:
        """Whether the model's llama-server reads images (started with --mmproj), asking /props if need be."""
        return self.props().vision

    def adjust(self, api_request):
        """The request with this model's defaults filled in and overrides applied; its max_tokens were
        decided at admission (fitting.effective_max_tokens, which applies the model's there)."""
        fields = schema_fields(api_request)
        update = {
            key: value
            for key, value in self.settings.defaults.items()
            if key in fields and key not in TOKEN_FIELDS and getattr(api_request, key) is None
        }
        update |= {key: value for key, value in self.settings.overrides.items() if key in fields and key not in TOKEN_FIELDS}
        if not update:
            return api_request
        # Not strict: config values come from YAML, not from a client's JSON.
        return type(api_request).model_validate({**api_request.model_dump(exclude_unset=True), **update}, strict=False)

    def sampling_used(self, api_request) -> dict[str, float]:
        """The values of SAMPLING_ECHOED `api_request` (a chat request) is generated with, as `adjust`
        sets them: this model's overrides, else the request's, else this model's defaults, else the
        upstream's own (llama.cpp's /props, asked once; its built-in defaults while no server answers
        it; OpenAI's documented ones for an OpenAI-compatible upstream)."""
        upstream = OPENAI_SAMPLING if self.facts is None else self._upstream_sampling()
        used = {}
        for key in SAMPLING_ECHOED:
            value = self.settings.overrides.get(key, getattr(api_request, key, None))
            value = self.settings.defaults.get(key) if value is None else value
            used[key] = float(upstream[key] if value is None else value)
        return used

    def _upstream_sampling(self) -> dict[str, float]:
        known = self.facts.known_soon()
        return LLAMA_CPP_SAMPLING | (known.sampling if known else {})

    def info(self) -> dict:
        """What /v1/internal/model/info reports."""
        info = {
            "model": self.name,
            "aliases": list(self.settings.aliases),
            "kind": self.settings.kind,
            "upstreams": self.upstream.listed(),
        }
        if self.upstream.capabilities.renders_prompts:
            return info | {"upstream_model": self.settings.upstream_model}
        known = self.facts.known() if self.facts is not None else None
        return info | {
            "template": self.formatter().describe(),
            "context_length": self.settings.context_length or (known.context_length if known else None),
        }


class ModelRegistry:
    """Looks up the model a request names. With one model and no config, any name is accepted
    (the original script ignored `model`), and the answer echoes the name the client sent."""

    def __init__(self, models: list[ServedModel], *, strict: bool = False, default: str | None = None):
        self.models = {model.name: model for model in models}
        self.by_name = {name: model for model in models for name in (model.name, *model.settings.aliases)}
        # None: a fleet's front with no models of its own (every name is the fleet's to place)
        self.default = self.by_name[default] if default else (models[0] if models else None)
        self.strict = strict or not models

    def lookup(self, requested: str | None, allows=None) -> tuple[ServedModel, str]:
        """(the model, the name to answer with); ModelNotFound for an unknown name when strict (the models
        are named: a config's `models:`, --models-dir), naming the known models `allows(name, alias)` lets
        the caller see (every one without it). With one model any name is served by it and answered
        with, as the original script and llama-server do: agents send names like gpt-4o
        (docs/errors.md, "Unknown model names")."""
        if self.default is None:
            raise self.not_found(requested or "", allows)
        if not requested:
            return self.default, self.default.name
        if requested in self.by_name:
            return self.by_name[requested], requested
        if self.strict:
            raise self.not_found(requested, allows)
        return self.default, requested

    def not_found(self, requested: str, allows=None) -> ModelNotFound:
        """The 404 of a model the caller cannot have: it lists only the names `allows` lets it see, so an
        error never tells one tenant another's models."""
        visible = sorted(name for name, model in self.by_name.items() if allows is None or allows(model.name, name))
        return ModelNotFound(f"model {requested!r} does not exist; known models: {', '.join(visible)}", param="model")
