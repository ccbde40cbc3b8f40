"""UpstreamFacts: what a model's llama.cpp servers say about the model they serve.

/props (chat template, BOS and EOS, context length, lazy-grammar support) is asked once per server,
not once per pool: a pool's servers are compared, and one that serves another model is named (a
warning, and a "serves another model" state in /health). Whether llama.cpp adds BOS itself is asked
once. No lock is held while asking: two requests that both find a fact missing ask twice and agree.
"""

from __future__ import annotations

import logging
import os
import time

from ..errors import ProxyError, UpstreamError
from .llamacpp import LlamaCppClient, UpstreamProps
from .pool import UpstreamPool

log = logging.getLogger("api_like_oai")

PROPS_RETRY_SECONDS = 10  # how long /v1/models waits before asking a silent upstream for /props again


class UpstreamFacts:
    def __init__(self, pool: UpstreamPool):
        self.pool = pool
        self._props: dict[str, UpstreamProps] = {}  # by server URL
        self._adds_bos: bool | None = None
        self._retry_at = 0.0
        self.mismatches: dict[str, str] = {}  # server URL -> how its model differs from the pool's

    def props(self) -> UpstreamProps:
        """/props of a server that takes requests now (failing over as generations do); ProxyError
        when none answers."""
        return self.pool.ask(self.props_of)

    def props_of(self, client: LlamaCppClient) -> UpstreamProps:
        props = self._props.get(client.base_url)
        if props is None:
            props = client.props()
            self._props[client.base_url] = props
            if props.total_slots:
                self.pool.slots[client.base_url] = props.total_slots
            self._compare()
        return props

    def known(self) -> UpstreamProps | None:
        """/props as some server already told it, without asking."""
        return next(iter(self._props.values()), None)

    def known_soon(self) -> UpstreamProps | None:
        """`known()`, asking a server first unless one failed to answer in the last 10 s."""
        if not self._props and time.monotonic() >= self._retry_at:
            try:
                self.props()
            except ProxyError:
                self._retry_at = time.monotonic() + PROPS_RETRY_SECONDS
        return self.known()

    def lazy_grammar(self) -> bool:
        """Whether the upstream holds tool calls to a grammar only once they begin."""
        try:
            return self.props().lazy_grammar
        except UpstreamError:
            return False

    def adds_bos(self) -> bool:
        """Whether llama.cpp prepends BOS to a prompt itself (then a template's BOS is one too many)."""
        if self._adds_bos is None:
            self._adds_bos = self.pool.ask(LlamaCppClient.adds_bos)
        return self._adds_bos

    def check(self, states: dict[str, str]) -> dict[str, str]:
        """`states` (each server's health) with every healthy server's /props asked, and a server
        that serves another model than the pool's first one marked as such."""
        for client in self.pool.clients:
            if states.get(client.base_url) == "ok":
                try:
                    self.props_of(client)
                except ProxyError as exc:
                    states[client.base_url] = exc.message
        return states | self.mismatches

    def _compare(self) -> None:
        models = {url: _model_file(props) for url, props in self._props.items() if _model_file(props)}
        reference_url = next((client.base_url for client in self.pool.clients if client.base_url in models), None)
        for url, model_file in models.items():
            if model_file != models[reference_url] and url not in self.mismatches:
                self.mismatches[url] = f"serves {model_file}, not {models[reference_url]} as {reference_url} does"
                log.warning("upstream %s %s: a pool's servers must serve one model", url, self.mismatches[url])


def _model_file(props: UpstreamProps) -> str:
    """The served model's file name (its directory may differ from one machine to another)."""
    return os.path.basename(props.model_path or "")
