"""Reranking through the proxy (`/v1/rerank` and its other paths), in front of a fake llama-server whose
`/v1/rerank` answers as the pinned one does (tools/server/server-common.cpp, format_response_rerank:
results sorted by score, top_n applied, documents as strings only, usage in tokens): the shapes Jina's,
Cohere's and LangChain's clients send and read, the capability checks, a key's models and token usage."""

from __future__ import annotations

import json

import cohere
import pytest
import requests

from ..fake_llamacpp import FakeLlamaCpp

ADMIN = {"Authorization": "Bearer rerank-admin-secret"}
QUERY = "what is a panda"
DOCUMENTS = ["hi", "a panda is a bear", "it is a giant panda of china", "pandas are bears"]


def llama_rerank(handler, raw: bytes) -> None:
    """llama-server's /v1/rerank: each document scored (here: the query's words it holds, less a tenth
    of its words), sorted best first, cut to top_n; a token per word of the query and the document."""
    body = json.loads(raw)
    handler.fake.requests.append(body)
    documents = body.get("documents")
    if not documents or not all(isinstance(document, str) for document in documents):
        return handler._json(
            400,
            {"error": {"code": 400, "message": '"documents" must be a non-empty string array', "type": "invalid_request_error"}},
        )
    words = set(body["query"].split())
    scored = [
        {"index": index, "relevance_score": len(words & set(text.split())) - len(text.split()) / 10}
        for index, text in enumerate(documents)
    ]
    scored.sort(key=lambda result: -result["relevance_score"])
    tokens = sum(len(body["query"].split()) + len(text.split()) for text in documents)
    handler._json(
        200,
        {
            "model": body.get("model", "ranker.gguf"),
            "object": "list",
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            "results": scored[: body.get("top_n", len(documents))],
        },
    )


def llama_refuses_rerank(handler, raw: bytes) -> None:
    """A llama-server started without --reranking."""
    handler._json(
        501,
        {
            "error": {
                "code": 501,
                "message": "This server does not support reranking. Start it with `--reranking`",
                "type": "not_supported_error",
            }
        },
    )


@pytest.fixture(scope="module")
def ranker():
    upstream = FakeLlamaCpp(routes={"/v1/rerank": llama_rerank}).start()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def chat_server():
    upstream = FakeLlamaCpp(routes={"/v1/rerank": llama_refuses_rerank}).start()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def proxy(ranker, chat_server, start_proxy, tmp_path_factory):
    folder = tmp_path_factory.mktemp("rerank")
    config = folder / "config.yaml"
    config.write_text(
        f"store: sqlite:///{folder}/store.sqlite3\nadmin_key: [{ADMIN['Authorization'].split()[1]}]\n"
        f"models:\n  ranker:\n    upstreams: [{ranker.url}]\n    capabilities: [rerank]\n"
        f"  chat:\n    upstreams: [{chat_server.url}]\n    chat_prompt_model: chatml\n"
        f"    capabilities: [chat, completion]\n"
        f"  plain:\n    upstreams: [{chat_server.url}]\n    chat_prompt_model: chatml\n"
        f"  remote-ranker:\n    kind: openai\n    upstreams: [{ranker.url}/v1]\n    upstream_model: ranker.gguf\n"
    )
    return start_proxy("--config", str(config))


def post(proxy, path: str, body: dict, headers: dict = ADMIN) -> requests.Response:
    return requests.post(proxy.url + path, json=body, headers=headers, timeout=30)


def test_jinas_request_gets_the_results_sorted_with_their_documents(proxy, ranker):
    """Jina's request (what LangChain's JinaRerank and Open WebUI's external reranker send): top_n applied,
    each result with its document, as Jina answers; llama-server is sent the query, texts and top_n."""
    answer = post(proxy, "/v1/rerank", {"model": "ranker", "query": QUERY, "documents": DOCUMENTS, "top_n": 2})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "model": "ranker",
        "object": "list",
        "usage": {"prompt_tokens": 32, "total_tokens": 32},
        "results": [
            {"index": 1, "relevance_score": 3 - 0.5, "document": {"text": DOCUMENTS[1]}},
            {"index": 2, "relevance_score": 3 - 0.7, "document": {"text": DOCUMENTS[2]}},
        ],
    }
    assert ranker.requests[-1] == {"query": QUERY, "documents": DOCUMENTS, "top_n": 2}


@pytest.mark.parametrize("path", ["/rerank", "/v1/reranking", "/v2/rerank"])
def test_documents_as_objects_without_their_text_back(proxy, ranker, path):
    objects = [{"text": text} for text in DOCUMENTS]
    answer = post(proxy, path, {"model": "ranker", "query": QUERY, "documents": objects, "return_documents": False})
    assert answer.status_code == 200, answer.text
    assert [result["index"] for result in answer.json()["results"]] == [1, 2, 0, 3]
    assert all("document" not in result for result in answer.json()["results"])
    assert ranker.requests[-1] == {"query": QUERY, "documents": DOCUMENTS}


def test_cohere_clients_read_the_ranking(proxy):
    """Cohere's own client (v1 and v2, as LangChain's CohereRerank uses it) against the proxy."""
    v1 = cohere.Client(api_key=ADMIN["Authorization"].split()[1], base_url=proxy.url)
    ranked = v1.rerank(model="ranker", query=QUERY, documents=DOCUMENTS, top_n=3, return_documents=True)
    assert [(result.index, result.document.text) for result in ranked.results] == [
        (1, DOCUMENTS[1]),
        (2, DOCUMENTS[2]),
        (0, DOCUMENTS[0]),
    ]
    v2 = cohere.ClientV2(api_key=ADMIN["Authorization"].split()[1], base_url=proxy.url)
    ranked = v2.rerank(model="ranker", query=QUERY, documents=DOCUMENTS, top_n=1)
    assert [(result.index, result.relevance_score) for result in ranked.results] == [(1, 2.5)]


def test_models_list_says_which_model_ranks(proxy):
    cards = {card["id"]: card for card in requests.get(proxy.url + "/v1/models", headers=ADMIN, timeout=10).json()["data"]}
    assert cards["ranker"]["capabilities"] == ["rerank"]
    assert cards["chat"]["capabilities"] == ["chat", "completion"]


def test_a_chat_request_to_a_reranker_is_a_400_naming_its_capabilities(proxy, ranker):
    sent = len(ranker.requests)
    answer = post(proxy, "/v1/chat/completions", {"model": "ranker", "messages": [{"role": "user", "content": "hi"}]})
    assert answer.status_code == 400
    assert answer.json()["error"]["message"] == "model 'ranker' cannot generate text: its capabilities are rerank"
    anthropic = post(proxy, "/v1/messages", {"model": "ranker", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})
    assert anthropic.status_code == 400 and anthropic.json()["type"] == "error"
    assert len(ranker.requests) == sent


def test_a_rerank_to_a_chat_model_is_a_400_naming_its_capabilities(proxy, chat_server):
    sent = len(chat_server.requests)
    answer = post(proxy, "/v1/rerank", {"model": "chat", "query": QUERY, "documents": DOCUMENTS})
    assert answer.status_code == 400
    assert answer.json()["error"]["message"] == "model 'chat' cannot rerank: its capabilities are chat, completion"
    assert len(chat_server.requests) == sent


def test_a_model_that_declares_nothing_is_asked_and_its_refusal_is_a_400(proxy):
    """A llama-server the proxy does not start and whose config says nothing: it decides (501 there)."""
    answer = post(proxy, "/v1/rerank", {"model": "plain", "query": QUERY, "documents": DOCUMENTS})
    assert answer.status_code == 400
    assert "does not support reranking" in answer.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "ranker", "query": QUERY, "documents": []}, "documents"),
        ({"model": "ranker", "query": QUERY}, "documents"),
        ({"model": "ranker", "documents": DOCUMENTS}, "query"),
        ({"model": "ranker", "query": QUERY, "documents": [{"title": "x"}]}, "documents.0.text"),
        ({"model": "ranker", "query": QUERY, "documents": DOCUMENTS, "top_n": 0}, "top_n"),
    ],
)
def test_bad_requests_are_400s_before_anything_is_sent(proxy, ranker, body, param):
    sent = len(ranker.requests)
    answer = post(proxy, "/v1/rerank", body)
    assert answer.status_code == 400 and answer.json()["error"]["param"] == param, answer.text
    assert len(ranker.requests) == sent


def test_a_kind_openai_model_gets_the_request_as_it_is(proxy, ranker):
    answer = post(proxy, "/v1/rerank", {"model": "remote-ranker", "query": QUERY, "documents": DOCUMENTS, "top_n": 1})
    assert answer.status_code == 200, answer.text
    assert answer.json()["model"] == "remote-ranker"
    assert ranker.requests[-1] == {"model": "ranker.gguf", "query": QUERY, "documents": DOCUMENTS, "top_n": 1}


def test_a_key_without_the_model_gets_a_404_and_a_rankers_tokens_are_its_usage(proxy):
    created = requests.post(
        proxy.url + "/v1/internal/keys", json={"name": "ranking-user", "models": ["ranker"]}, headers=ADMIN, timeout=10
    )
    assert created.status_code == 201, created.text
    key = {"Authorization": f"Bearer {created.json()['key']}"}
    outside = post(proxy, "/v1/rerank", {"model": "remote-ranker", "query": QUERY, "documents": DOCUMENTS}, key)
    assert outside.status_code == 404
    ranked = post(proxy, "/v1/rerank", {"model": "ranker", "query": QUERY, "documents": DOCUMENTS}, key)
    assert ranked.status_code == 200
    usage = requests.get(proxy.url + "/v1/internal/usage", headers=key, params={"by": "key,model"}, timeout=10).json()
    rows = [row for row in usage["data"] if row["model"] == "ranker"]
    assert [(row["requests"], row["prompt_tokens"], row["completion_tokens"]) for row in rows] == [(1, 32, 0)], usage


def test_open_webuis_external_reranker_reads_a_score_per_document(proxy):
    """Open WebUI's ExternalReranker (retrieval/models/external.py), replayed: every document, top_n their
    count, and the scores read back in the documents' order by `index`."""
    answer = post(proxy, "/v1/rerank", {"model": "ranker", "query": QUERY, "documents": DOCUMENTS, "top_n": len(DOCUMENTS)})
    scores = [result["relevance_score"] for result in sorted(answer.json()["results"], key=lambda r: r["index"])]
    words = set(QUERY.split())
    assert scores == [len(words & set(text.split())) - len(text.split()) / 10 for text in DOCUMENTS]
