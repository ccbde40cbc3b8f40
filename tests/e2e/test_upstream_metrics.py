"""--upstream-metrics against a real llama-server started with --metrics: the proxy's /metrics carries
its series labelled with model and upstream, leaves out an upstream that does not answer, and every
query of the shipped Grafana dashboard (contrib/grafana/) names series that a real /metrics has."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from ..servers import free_port

DASHBOARD = Path(__file__).resolve().parents[2] / "contrib" / "grafana" / "api_like_oai.json"
# PromQL words that are not metric names (functions are told by the parenthesis after them).
PROMQL_WORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "inf",
    "nan",
}


@pytest.fixture(scope="module")
def metered_server(start_llama_server):
    return start_llama_server(slots=1, extra_args=("--metrics",))


@pytest.fixture(scope="module")
def metered_proxy(metered_server, start_proxy, tmp_path_factory):
    config = tmp_path_factory.mktemp("config") / "config.yaml"
    config.write_text(f"""
models:
  smollm:
    upstreams: [{metered_server.url}]
  gone:
    upstreams: [http://127.0.0.1:{free_port()}]
""")
    proxy = start_proxy("--config", str(config), "--upstream-metrics")
    for stream in (False, True):  # every series of the proxy's own has a value (the prefill from a stream)
        answer = requests.post(
            proxy.url + "/v1/chat/completions",
            timeout=120,
            json={"model": "smollm", "max_tokens": 4, "stream": stream, "messages": [{"role": "user", "content": "Hi"}]},
        )
        assert answer.status_code == 200, answer.text
    return proxy


def scraped(proxy) -> list:
    response = requests.get(proxy.url + "/metrics", timeout=30)
    assert response.status_code == 200
    return list(text_string_to_metric_families(response.text))


def test_upstream_series_carry_model_and_upstream(metered_proxy, metered_server):
    samples = [sample for family in scraped(metered_proxy) for sample in family.samples]
    upstream = [sample for sample in samples if sample.name.startswith("llamacpp:")]
    assert {sample.name for sample in upstream} >= {
        "llamacpp:prompt_tokens_total",
        "llamacpp:tokens_predicted_total",
        "llamacpp:requests_processing",
    }
    assert {(sample.labels["model"], sample.labels["upstream"]) for sample in upstream} == {
        ("smollm", metered_server.url)
    }  # the unreachable upstream of "gone" is left out
    [predicted] = [sample for sample in upstream if sample.name == "llamacpp:tokens_predicted_total"]
    assert predicted.value >= 1
    assert any(sample.name == "api_like_oai_requests_total" for sample in samples)  # the proxy's own are still there


def test_the_real_llama_servers_prefill_progress_is_counted(metered_proxy):
    """Both chats asked llama-server for its prompt progress and got it: each prefill is in the histogram."""
    [count] = [
        sample.value
        for family in scraped(metered_proxy)
        for sample in family.samples
        if sample.name == "api_like_oai_prefill_seconds_count" and sample.labels["model"] == "smollm"
    ]
    assert count == 2


def test_every_dashboard_query_names_series_that_exist(metered_proxy):
    series = {name for family in scraped(metered_proxy) for name in series_names(family)}
    queries = dashboard_queries(json.loads(DASHBOARD.read_text()))
    assert len(queries) >= 15
    named = {name for query in queries for name in metric_names(query)}
    assert {"api_like_oai_prefill_seconds_bucket", "llamacpp:prompt_tokens_total"} <= named
    assert named - series == set()


def series_names(family) -> set[str]:
    """The series a /metrics family has or declares (a labelled counter not counted yet has only its TYPE line)."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}.get(family.type, ("",))
    return {sample.name for sample in family.samples} | {family.name + suffix for suffix in suffixes}


def dashboard_queries(dashboard: dict) -> list[str]:
    """The PromQL of every panel's target and of the query variables."""
    panels = [panel for top in dashboard["panels"] for panel in (top, *top.get("panels", ()))]
    queries = [target["expr"] for panel in panels for target in panel.get("targets", ())]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            queries.append(re.fullmatch(r"label_values\((.+), \w+\)", variable["query"]["query"]).group(1))
    return queries


def metric_names(query: str) -> set[str]:
    """The metric names a PromQL query reads: its identifiers that are not functions, keywords, label names
    (in braces or grouping clauses), strings, ranges or durations."""
    stripped = re.sub(r'"[^"]*"|\{[^}]*\}|\[[^\]]*\]|\b(?:by|without|on|ignoring)\s*\([^)]*\)|\$\w+', " ", query)
    names = re.findall(r"(?<![\w:.])([A-Za-z_:][\w:]*)(?![\w:]|\s*\()", stripped)
    return {name for name in names if name not in PROMQL_WORDS}


def test_the_query_parser_finds_names():
    query = 'histogram_quantile(0.95, sum by (le, model) (rate(a_b_bucket{model=~"$model"}[$__rate_interval]))) / llamacpp:x'
    assert metric_names(query) == {"a_b_bucket", "llamacpp:x"}
