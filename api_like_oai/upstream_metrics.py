"""The upstreams' own Prometheus metrics, carried by the proxy's /metrics (--upstream-metrics).

Each llama-server (started with `--metrics`) is scraped when /metrics is scraped, all at once and
with a short timeout; its series get `model` and `upstream` labels, and series of the same name from
several upstreams are written as one family. An upstream that does not answer in time, or answers
something else than metrics, leaves its series out (a scrape of the proxy never fails for it)."""

from __future__ import annotations

import logging
import threading

from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from .backends import http
from .observability import MadeFamilies

log = logging.getLogger("api_like_oai")

SCRAPE_TIMEOUT_SECONDS = 2.0


def upstream_metrics(targets: list[tuple[str, str, str]], timeout: float = SCRAPE_TIMEOUT_SECONDS) -> bytes:
    """The metrics of every (model, upstream URL, its key) in `targets` that answered, relabelled, in Prometheus'
    text format (empty if none did)."""
    texts: dict[tuple[str, str, str], str] = {}
    threads = [threading.Thread(target=_scrape_into, args=(texts, target, timeout), daemon=True) for target in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout * 2)  # a scrape stuck past its own timeouts is left behind
    families: dict[str, Metric] = {}
    for (model, url, _), text in sorted(dict(texts).items()):
        _merge(families, text, {"model": model, "upstream": url})
    return generate_latest(MadeFamilies(list(families.values()))) if families else b""


def _scrape_into(texts: dict, target: tuple[str, str, str], timeout: float) -> None:
    _, url, api_key = target
    client = http.HTTPClient(url, connect_timeout=timeout, read_timeout=timeout, max_idle=0, api_key=api_key)
    try:
        response = client.request("GET", "/metrics")
        body = response.read()
    except (http.TransportError, OSError) as exc:
        log.debug("upstream metrics: %s did not answer (%s)", url, type(exc).__name__)
        return
    if response.status == 200:
        texts[target] = body.decode("utf-8", errors="replace")


def _merge(families: dict[str, Metric], text: str, labels: dict[str, str]) -> None:
    """Add the families of one upstream's `text` to `families`, each sample with `labels` added."""
    try:
        parsed = list(text_string_to_metric_families(text))
    except ValueError:
        log.warning("upstream metrics: %s sent something that is not Prometheus' text format", labels["upstream"])
        return
    for family in parsed:
        merged = families.get(family.name)
        if merged is None:
            merged = families[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
        merged.samples += [sample._replace(labels={**sample.labels, **labels}) for sample in family.samples]
