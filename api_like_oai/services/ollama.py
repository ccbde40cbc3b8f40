"""Ollama's API (routes/ollama.py): one more dialect, not a second engine. /api/chat and /api/generate
are translated into the chat request (or, for `raw` and `suffix`, the text completion) by
dialects/ollama.py, admitted (admission.py), generated as every chat is (chat.dialect_answer), and
written by dialects/ollama_shape.OllamaShape; the model listings are read from the registry, the
GGUF file (gguf_facts.py) and the supervisor.

`keep_alive` acts on a model the proxy starts itself (supervisor/): 0 unloads it once the answer is
closed (Ollama's "unload after the request"), a duration sets its idle time, a negative one keeps
it loaded; on an upstream someone else started, or from a caller who may not load and unload models
(a managed key that is not the admin's: `steers_models` false), it is accepted and changes nothing.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TypeVar

from pydantic import BaseModel

from ..dialects import ollama as dialect
from ..dialects.ollama_shape import CHAT, GENERATE, OllamaShape, created_at
from ..errors import InvalidRequest, ModelNotFound, ProxyError
from ..observability import stage
from ..protocol import ChatCompletionRequest
from ..reasoning import detect as detect_reasoning
from . import completions, generation, waiting
from .admission import Admission, client_request
from .chat import dialect_answer, routed
from .gguf_facts import ModelFile, model_file
from .models import ServedModel

log = logging.getLogger("api_like_oai")

VERSION = "0.12.6"  # the Ollama API this answers as (numeric: Copilot Chat compares it)
FOREVER = "2318-01-01T00:00:00Z"  # Ollama's expires_at of a model kept loaded for ever
_Upstream = TypeVar("_Upstream", bound=BaseModel)  # a chat or a completion request; the helper returns the kind it was given


def not_found(name: str) -> ModelNotFound:
    return ModelNotFound(f'model "{name}" not found, try pulling it first', param="model")


class Ollama:
    """The use cases of one request: its admission, what keeps a model alive, and its arrival time."""

    def __init__(
        self,
        admission: Admission,
        context: generation.Context,
        supervisor=None,
        on_close: Callable[[Callable], None] | None = None,
        steers_models: bool = True,
    ):
        self.admission = admission
        self.context = context
        self.supervisor = supervisor
        self.steers_models = steers_models  # whether this caller's keep_alive loads, pins or unloads
        self.on_close = on_close  # runs a callable once the answer is closed (after the lease)
        self.arrived_ns = time.monotonic_ns()

    # --- generating ---------------------------------------------------------------------------

    def chat(self, request: dialect.ChatRequest):
        """(answer, headers): /api/chat's one object, or its NDJSON lines when `request.stream`."""
        _note_ignored(request.options)
        if not request.messages:
            return self.load_only(request, CHAT), {}
        with client_request():
            chat = dialect.to_chat_request(request)
        return self._generated(request, chat, CHAT)

    def generate(self, request: dialect.GenerateRequest):
        """(answer, headers): /api/generate's, templated as a chat turn, or raw (or with a suffix) as a
        text completion."""
        _note_ignored(request.options)
        if request.prompt is None and request.suffix is None and not request.images:
            return self.load_only(request, GENERATE), {}
        if request.template:
            log.debug("ollama: /api/generate's template set aside; the model's own is used")
        if request.raw or request.suffix is not None:
            return self._completed(request)
        with client_request():
            chat = dialect.generate_to_chat_request(request)
        return self._generated(request, chat, GENERATE)

    def _generated(self, request, chat: ChatCompletionRequest, kind: str):
        with stage(self.context.record, "admission"):
            admitted = self._named(request.model, lambda: self.admission.dialect(request, chat, waits_later=True))
        model = admitted.model
        self._keep_alive(model, request.keep_alive)
        _check_num_ctx(request.options, model)
        admitted = dataclasses.replace(admitted, chat=_with_whole_context_penalty(admitted.chat, request.options, model))
        shape = OllamaShape(admitted.model_name, kind, self.arrived_ns)

        def answer():
            return dialect_answer(self._loaded(shape), admitted.chat, model, self.context, self._transform(shape, model))

        return waiting.after_wait(self.context, lambda: shape, answer)

    def _loaded(self, shape: OllamaShape) -> OllamaShape:
        """`shape` told the model's load time: from the request's arrival until its model was ready."""
        shape.load_ns = time.monotonic_ns() - self.arrived_ns
        return shape

    def _completed(self, request: dialect.GenerateRequest):
        with client_request():  # an option out of the completion's range is the client's 400, as for a chat
            completion = dialect.generate_to_completion(request)
        with stage(self.context.record, "admission"):
            completion, model, model_name = self._named(
                request.model, lambda: self.admission.admit(completion, bound=True, waits_later=True)
            )
        self._keep_alive(model, request.keep_alive)
        completion = _with_whole_context_penalty(completion, request.options, model)
        shape = OllamaShape(model_name, GENERATE, self.arrived_ns)
        return waiting.after_wait(
            self.context, lambda: shape, lambda: (self._completion(completion, model, self._loaded(shape)), {})
        )

    def _completion(self, completion, model: ServedModel, shape: OllamaShape):
        completion = model.adjust(completion)
        completions.check_supported(completion, [completion.prompt])
        upstream = self.context.door(model)
        if completion.token_limit() is None:
            room = completions.room_left(model, [completion.prompt], upstream)
            completion = completion.model_copy(update={"max_tokens": room})
        sent = completions.typed(*completions.upstream_request(completion, completion.prompt), self.context.session)
        events = generation.start(routed(upstream, self.context), [sent], self.context, folded=not completion.stream)
        return generation.answer(completion, events, shape, 1, self.context, transform=self._transform(shape, model))

    @staticmethod
    def _transform(shape: OllamaShape, model: ServedModel):
        """The events' first stamped (the durations); /api/generate's reply counted for its `context`."""
        if shape.kind != GENERATE:
            return shape.stamp_first_event
        return lambda events: with_reply_context(shape.stamp_first_event(events), shape, model)

    def load_only(self, request, kind: str) -> dict:
        """An empty request: the model loaded (done_reason "load"), or with keep_alive 0 unloaded at once,
        without loading it first ("unload")."""
        unloading = self.steers_models and dialect.keep_alive_seconds(request.keep_alive) == 0
        admission = dataclasses.replace(self.admission, hold=None) if unloading else self.admission
        model, model_name = self._named(request.model, lambda: admission.lookup_model(request.model))
        if unloading and self.supervisor is not None and model.settings.launch is not None:
            self.supervisor.ask("unload", model=model.name)
        else:
            self._keep_alive(model, request.keep_alive)
        body = {"response": ""} if kind == GENERATE else {"message": {"role": "assistant", "content": ""}}
        return {
            "model": model_name,
            "created_at": created_at(),
            **body,
            "done": True,
            "done_reason": "unload" if unloading else "load",
        }

    # --- embeddings ---------------------------------------------------------------------------

    def embed(self, request: dialect.EmbedRequest) -> dict:
        """/api/embed: one normalised vector per input (cut to `dimensions`, if given)."""
        model, model_name = self._named(request.model, lambda: self.admission.lookup_model(request.model))
        load_ns = time.monotonic_ns() - self.arrived_ns
        self._keep_alive(model, request.keep_alive)
        inputs = [request.input] if isinstance(request.input, str) else list(request.input)
        upstream = self.context.door(model)
        vectors = upstream.embeddings(inputs) if inputs else []
        counted = sum(len(upstream.tokenize(text)) for text in inputs)
        return {
            "model": model_name,
            "embeddings": [_normalised(vector[: request.dimensions]) for vector in vectors],
            "total_duration": time.monotonic_ns() - self.arrived_ns,
            "load_duration": load_ns,
            "prompt_eval_count": counted,
        }

    def embeddings(self, request: dialect.EmbeddingsRequest) -> dict:
        """/api/embeddings (the older route): one vector, as the model gives it."""
        model, _ = self._named(request.model, lambda: self.admission.lookup_model(request.model))
        self._keep_alive(model, request.keep_alive)
        return {"embedding": self.context.door(model).embeddings([request.prompt])[0] if request.prompt else []}

    # --- keep_alive ---------------------------------------------------------------------------

    def _keep_alive(self, model: ServedModel, keep_alive) -> None:
        seconds = dialect.keep_alive_seconds(keep_alive)
        if seconds is None or not self.steers_models or self.supervisor is None or model.settings.launch is None:
            return
        if seconds == 0 and self.on_close is not None:
            self.on_close(lambda: self.supervisor.ask("unload", model=model.name))
        elif seconds != 0:
            self.supervisor.ask("keep_alive", model=model.name, seconds=0.0 if seconds < 0 else seconds)

    def _named(self, name: str, look_up):
        """`look_up()`, its unknown model answered with Ollama's message."""
        try:
            return look_up()
        except ModelNotFound:
            raise not_found(name) from None


def with_reply_context(events, shape: OllamaShape, model: ServedModel):
    """`events` as they are, /api/generate's `context` put on the shape with the last (the one with a
    finish reason; a fold reads no further): the reply's text as llama.cpp's /tokenize gives its tokens
    (one call; none for an empty reply). A server that cannot count them leaves it empty: a client
    resending `context` loses nothing, it is set aside."""
    pieces = []
    for event in events:
        pieces.append(getattr(event, "text", ""))
        if getattr(event, "finish_reason", None):
            _count_context(shape, model, "".join(pieces))
        yield event


def _count_context(shape: OllamaShape, model: ServedModel, reply: str) -> None:
    try:
        shape.context = model.upstream.tokenize(reply) if reply else []
    except ProxyError as exc:
        log.debug("ollama: the reply's context was not counted: %s", exc.message)


def _note_ignored(options: dialect.Options | None) -> None:
    ignored = dialect.ignored_options(options)
    if ignored:
        log.debug("ollama: options llama.cpp cannot honour per request, set aside: %s", ", ".join(ignored))


def _check_num_ctx(options: dialect.Options | None, model: ServedModel) -> None:
    """num_ctx is llama-server's --ctx-size, fixed when it starts: one past the model's is clamped to it
    (a debug line says so); the prompt is fitted to the model's context either way."""
    if options is None or options.num_ctx is None:
        return
    context_length = model.known_context_length()
    if context_length is not None and options.num_ctx > context_length:
        log.debug("ollama: num_ctx %d clamped to the model's context, %d", options.num_ctx, context_length)


def _with_whole_context_penalty(upstream: _Upstream, options: dialect.Options | None, model: ServedModel) -> _Upstream:
    """`upstream` (the chat or the raw completion going to llama-server) with Ollama's `repeat_last_n: -1`
    made the number llama-server takes; the one place both generation paths apply it, so they cannot
    drift apart. Unchanged when the option was not asked or the context is not known yet."""
    looking_back = _whole_context_penalty(options, model)
    return upstream if looking_back is None else upstream.model_copy(update={"repeat_last_n": looking_back})


def _whole_context_penalty(options: dialect.Options | None, model: ServedModel) -> int | None:
    """Ollama's `repeat_last_n: -1` (the repeat penalty looks back over num_ctx) as llama-server takes it:
    the model's context, or num_ctx when that is smaller; None when not asked, or when the context is not
    known yet (llama-server's default then)."""
    if options is None or options.repeat_last_n != dialect.WHOLE_CONTEXT:
        return None
    context = model.known_context_length()
    if options.num_ctx:
        return min(options.num_ctx, context) if context else options.num_ctx
    return context


def _normalised(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(value * value for value in vector))
    return [value / norm for value in vector] if norm > 0 else vector


# --- what the models are ----------------------------------------------------------------------


def model_path(model: ServedModel) -> str | None:
    """The model's GGUF file: the one the proxy starts, else the path its llama-server reports."""
    if model.settings.launch is not None:
        return model.settings.launch.model_path
    if model.facts is None:  # an upstream without /props says nothing of its file
        return None
    props = model.facts.known_soon()
    return props.model_path if props is not None else None


def _modified_at(file: ModelFile) -> str:
    stamp = file.modified or time.time()
    return datetime.fromtimestamp(stamp, UTC).isoformat().replace("+00:00", "Z")


def tag(name: str, model: ServedModel) -> dict:
    """/api/tags's entry of one name of a model."""
    file = model_file(model_path(model))
    return {
        "name": name,
        "model": name,
        "modified_at": _modified_at(file),
        "size": file.size,
        "digest": file.digest,
        "details": file.details(),
    }


def capabilities(model: ServedModel, file: ModelFile) -> list[str]:
    """What /api/show says the model can do, as far as the proxy and the file tell: a server the proxy
    starts with --embeddings only embeds (llama-server then refuses completions)."""
    launch = model.settings.launch
    if launch is not None and {"--embedding", "--embeddings"} & set(launch.args):
        return ["embedding"]
    found = ["completion"]
    if not model.upstream.capabilities.renders_prompts:  # the proxy renders: tools, its template's thinking
        found.append("tools")
        if file.has_key_ending(".pooling_type"):
            found.append("embedding")
        if _names_fim_tokens(model, file):
            found.append("insert")
        if model.settings.reasoning_format != "none" and detect_reasoning(chat_template(model, file)):
            found.append("thinking")
    if "image" in model.input_modalities():
        found.append("vision")
    return found


def context_length_of(model: ServedModel, file: ModelFile) -> int | None:
    """The context one request has: its server's per slot (known without waiting), else the --ctx-size
    the proxy starts it with shared by its --parallel slots (as llama-server shares it), else the one
    the model was trained for (the GGUF's)."""
    launch = model.settings.launch
    given = launch.arg_value("--ctx-size", "-c") if launch is not None else None
    slots = launch.arg_value("--parallel", "-np") if launch is not None else None
    started = int(given) // max(int(slots or 1), 1) if given else None
    return model.known_context_length() or started or file.metadata.get(f"{file.architecture}.context_length")


def chat_template(model: ServedModel, file: ModelFile) -> str | None:
    """The chat template in use if the model's formatter is resolved, else the GGUF's own; read without
    asking an upstream, so that listing a model the proxy starts does not start it."""
    resolved = model.resolved_formatter()
    if resolved is not None:
        return getattr(resolved, "template_source", None)
    return file.metadata.get("tokenizer.chat_template")


def _names_fim_tokens(model: ServedModel, file: ModelFile) -> bool:
    """Whether llama.cpp's /infill can run: the GGUF names fill-in-the-middle tokens, or the llama-server
    the proxy starts is given them (`--override-kv tokenizer.ggml.fim_pre_token_id=...`)."""
    launch = model.settings.launch
    overridden = launch is not None and any("fim_pre_token_id" in arg for arg in launch.args)
    return overridden or file.has_key_ending("fim_pre_token_id") or file.has_key_ending("prefix_token_id")


def show(name: str, model: ServedModel, with_path: bool = False) -> dict:
    """/api/show: capabilities, model_info (with `<arch>.context_length`), details, template, parameters;
    the modelfile's FROM the file's path `with_path` (where the operator keeps it), else the model's name."""
    file = model_file(model_path(model))
    arch = file.architecture
    context_length = context_length_of(model, file)
    info = {key: value for key, value in file.metadata.items() if not key.startswith("tokenizer.chat_template")}
    info |= {"general.architecture": arch, f"{arch}.context_length": context_length}
    info.setdefault("general.basename", name)  # Copilot Chat's display name
    template = None if model.upstream.capabilities.renders_prompts else chat_template(model, file)
    parameters = "\n".join(f"{key:<30} {value}" for key, value in model.settings.defaults.items())
    return {
        "license": "",
        "modelfile": f"# served by api-like-oai\nFROM {(with_path and file.path) or name}\n",
        "parameters": parameters,
        "template": template or "",
        "details": file.details(),
        "model_info": info,
        "capabilities": capabilities(model, file),
        "modified_at": _modified_at(file),
    }


def running(statuses: dict, registry) -> list[dict]:
    """/api/ps's entries: the loaded models the proxy starts (from the supervisor's `statuses`), and
    every model on upstreams someone else started (always loaded, as far as the proxy knows)."""
    entries = []
    for model in registry.models.values():
        status = statuses.get(model.name)
        if status is not None and status["value"] != "loaded":
            continue
        size = status["memory_mib"] * 1024 * 1024 if status else model_file(model_path(model)).size
        entries.append(
            {
                **tag(model.name, model),
                "size": size,
                "size_vram": 0,
                "expires_at": _expires_at(status),
                "context_length": context_length_of(model, model_file(model_path(model))) or 0,
            }
        )
    return entries


def _expires_at(status: dict | None) -> str:
    if status is None or not status.get("ttl"):
        return FOREVER
    stamp = time.time() + status["ttl"]
    return datetime.fromtimestamp(stamp, UTC).isoformat().replace("+00:00", "Z")


def refused(route: str) -> InvalidRequest:
    """pull, push, create, copy: no model hub is reachable; where models come from instead."""
    return InvalidRequest(
        f"{route} is not available here: this server serves llama.cpp models from its "
        "configuration (--model, --models-dir, or models: in the config file); no model "
        "hub is reached",
        param=route,
    )
