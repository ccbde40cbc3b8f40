"""Reranking end to end: the proxy in front of a real llama-server started with `--reranking`, and a model
the proxy starts itself from the same file (its GGUF's pooling type says rank: the proxy adds the flag).

No package ships a reranker GGUF, so scripts/make_test_reranker.py writes a random-weight one (a 2-layer
BERT cross-encoder with a rank head), cached beside the provisioned model. Its scores mean nothing; what
is checked is that the proxy's answer is llama-server's own for the same request (the same results, in
the same order, with the same scores and token counts), with the documents put back as Jina returns them."""

from __future__ import annotations

import os
import time
from pathlib import Path

import cohere
import pytest
import requests

from ..servers import LlamaServer, Proxy, descendants_of, made_model

QUERY = "what is a panda"
DOCUMENTS = ["hi", "the giant panda is a bear of china", "pandas eat bamboo", "a cat is an animal", "hello world"]


def reranker_path() -> Path:
    """The test reranker, written once into the provisioning cache (about 120 KB, not in the repository)."""
    return made_model("test-reranker-bert.gguf", "make_test_reranker.py")


@pytest.fixture(scope="module")
def llama_ranker(provisioned):
    server = LlamaServer(
        provisioned["LLAMA_SERVER"], str(reranker_path()), context_size=512, slots=2, extra_args=("--reranking",)
    )
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def proxy(llama_ranker, provisioned, tmp_path_factory):
    config = tmp_path_factory.mktemp("rerank") / "config.yaml"
    config.write_text(
        f"models:\n  ranker:\n    upstreams: [{llama_ranker.url}]\n    capabilities: [rerank]\n"
        f"  started-ranker:\n    model: {reranker_path()}\n    args: [--ctx-size, '512', --parallel, '1']\n"
    )
    proxy = Proxy(["--config", str(config), "--llama-server", provisioned["LLAMA_SERVER"]]).start()
    try:
        yield proxy
    finally:
        started = descendants_of(proxy.process.pid)  # its workers, its supervisor and the llama-server it started
        proxy.stop()
        deadline = time.monotonic() + 10
        while any(os.path.exists(f"/proc/{pid}") for pid in started) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in started if os.path.exists(f"/proc/{pid}")], "a process outlived the proxy"


def direct(llama_ranker, body: dict) -> dict:
    answer = requests.post(llama_ranker.url + "/v1/rerank", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.json()


def with_documents(results: list[dict]) -> list[dict]:
    return [{**result, "document": {"text": DOCUMENTS[result["index"]]}} for result in results]


@pytest.mark.parametrize("top_n", [None, 2])
def test_the_answer_is_llama_servers_with_the_documents(proxy, llama_ranker, top_n):
    body = {"query": QUERY, "documents": DOCUMENTS, **({"top_n": top_n} if top_n else {})}
    own = direct(llama_ranker, body)
    answer = requests.post(proxy.url + "/v1/rerank", json={"model": "ranker", **body}, timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "model": "ranker",
        "object": "list",
        "usage": own["usage"],
        "results": with_documents(own["results"]),
    }
    assert len(own["results"]) == (top_n or len(DOCUMENTS)) and own["usage"]["prompt_tokens"] > 0


def test_cohere_reads_the_same_ranking_from_documents_as_objects(proxy, llama_ranker):
    own = direct(llama_ranker, {"query": QUERY, "documents": DOCUMENTS, "top_n": 3})
    client = cohere.Client(api_key="none", base_url=proxy.url)
    ranked = client.rerank(model="ranker", query=QUERY, documents=[{"text": text} for text in DOCUMENTS], top_n=3)
    assert [(result.index, result.relevance_score) for result in ranked.results] == [
        (result["index"], result["relevance_score"]) for result in own["results"]
    ]


def test_a_started_model_whose_gguf_ranks_is_a_reranker(proxy, llama_ranker):
    """The proxy starts it with --reranking (its GGUF's pooling type is rank): the same answer as the server
    started by hand, and /v1/models says it ranks."""
    own = direct(llama_ranker, {"query": QUERY, "documents": DOCUMENTS})
    answer = requests.post(
        proxy.url + "/v1/rerank",
        json={"model": "started-ranker", "query": QUERY, "documents": DOCUMENTS, "return_documents": False},
        timeout=120,
    )
    assert answer.status_code == 200, answer.text
    # Another process with other threads and slots: the same ranking, scores equal to float32's last digits.
    results = answer.json()["results"]
    assert [result["index"] for result in results] == [result["index"] for result in own["results"]]
    assert [result["relevance_score"] for result in results] == pytest.approx(
        [result["relevance_score"] for result in own["results"]], rel=1e-5
    )
    assert answer.json()["usage"] == own["usage"]
    cards = {card["id"]: card for card in requests.get(proxy.url + "/v1/models", timeout=10).json()["data"]}
    assert cards["started-ranker"]["capabilities"] == ["rerank"] == cards["ranker"]["capabilities"]


def test_a_chat_request_to_the_reranker_is_a_400(proxy):
    answer = requests.post(
        proxy.url + "/v1/chat/completions", json={"model": "ranker", "messages": [{"role": "user", "content": "hi"}]}, timeout=30
    )
    assert answer.status_code == 400
    assert answer.json()["error"]["message"] == "model 'ranker' cannot generate text: its capabilities are rerank"
