"""The Files and Batch APIs end to end: the official `openai` SDK (strict validation) against the proxy in
front of the real llama-server with SmolLM2: files kept per key, a 200-line batch answered once per
line, bad lines in the error file, each endpoint a batch may name, cancel, list paging, and a restart
of the proxy mid-batch that loses no line and runs none twice."""

from __future__ import annotations

import io
import json
import time

import anthropic
import openai
import pytest

from ..conftest import openai_client
from ..servers import descendants_of, eventually, kill_instance

KEYS = ("sk-batch-first", "sk-batch-second")
FINISHED = ("completed", "failed", "expired", "cancelled")


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    return tmp_path_factory.mktemp("batches") / "store.sqlite3"


def proxy_flags(llama_url: str, store_path) -> list[str]:
    return ["--llama-api", llama_url, "--store", f"sqlite://{store_path}", "--api-key", KEYS[0], "--api-key", KEYS[1]]


@pytest.fixture(scope="module")
def batch_proxy(llama_server, start_proxy, store_path):
    return start_proxy(*proxy_flags(llama_server.url, store_path))


def client_of(proxy, key: str = KEYS[0]) -> openai.OpenAI:
    return openai_client(proxy.url, api_key=key)


def jsonl(rows: list) -> bytes:
    return b"".join((row if isinstance(row, bytes) else json.dumps(row).encode()) + b"\n" for row in rows)


def chat_line(n: int, url: str = "/v1/chat/completions") -> dict:
    body = {"model": "smollm", "messages": [{"role": "user", "content": f"Say {n}."}], "max_tokens": 3, "temperature": 0}
    return {"custom_id": f"request-{n}", "method": "POST", "url": url, "body": body}


def upload(client: openai.OpenAI, rows: list, purpose: str = "batch"):
    return client.files.create(file=("input.jsonl", io.BytesIO(jsonl(rows))), purpose=purpose)


def finished(client: openai.OpenAI, batch_id: str, timeout: float = 240.0):
    found = {}

    def done() -> bool:
        found["batch"] = client.batches.retrieve(batch_id)
        return found["batch"].status in FINISHED

    eventually(done, f"batch {batch_id} finished", timeout=timeout)
    return found["batch"]


def results(client: openai.OpenAI, file_id: str | None) -> list[dict]:
    if file_id is None:
        return []
    return [json.loads(line) for line in client.files.content(file_id).text.splitlines()]


def test_a_keys_files_are_its_own(batch_proxy):
    first, second = client_of(batch_proxy), client_of(batch_proxy, KEYS[1])
    content = "hello, files\n" * 3 + "é\n"
    made = [first.files.create(file=(f"notes-{n}.txt", content.encode()), purpose="user_data") for n in range(3)]
    assert made[0].bytes == len(content.encode()) and made[0].filename == "notes-0.txt" and made[0].purpose == "user_data"
    assert made[0].expires_at > made[0].created_at
    assert first.files.retrieve(made[1].id) == made[1]
    assert first.files.content(made[2].id).content == content.encode()
    page = first.files.list(limit=2, order="asc")
    assert [f.id for f in page.data] == [made[0].id, made[1].id] and page.has_more
    listed = [f.id for f in first.files.list(order="asc", purpose="user_data")]
    assert [f for f in listed if f in {m.id for m in made}] == [m.id for m in made]
    assert made[0].id not in {f.id for f in second.files.list()}
    with pytest.raises(openai.NotFoundError):
        second.files.retrieve(made[0].id)
    with pytest.raises(openai.NotFoundError):
        second.files.delete(made[0].id)
    assert first.files.delete(made[0].id).deleted
    with pytest.raises(openai.NotFoundError):
        first.files.content(made[0].id)
    assert made[0].id not in {f.id for f in first.files.list()}


def test_bytes_that_are_not_text_come_back_whole(batch_proxy):
    client = client_of(batch_proxy)
    data = bytes(range(256)) * 5
    made = client.files.create(
        file=("blob.bin", data), purpose="user_data", expires_after={"anchor": "created_at", "seconds": 3600}
    )
    assert made.expires_at == made.created_at + 3600
    assert client.files.content(made.id).content == data


def test_an_upload_without_a_purpose_is_refused(batch_proxy):
    with pytest.raises(openai.BadRequestError) as refused:
        client_of(batch_proxy).files.create(file=("x.jsonl", b"{}\n"), purpose="batch_output")
    assert refused.value.body["param"] == "purpose"


def test_two_hundred_lines_each_answered_once_and_bad_lines_apart(batch_proxy):
    client = client_of(batch_proxy)
    rows = [chat_line(n) for n in range(200)]
    rows += [b"not json", {"custom_id": "request-0", "url": "/v1/chat/completions", "body": {}}, chat_line(999, "/v1/embeddings")]
    rows += [{**chat_line(1000), "body": {"model": "smollm", "messages": "not a list"}}]
    batch = client.batches.create(input_file_id=upload(client, rows).id, endpoint="/v1/chat/completions", completion_window="24h")
    assert batch.status == "validating" and batch.request_counts.total == 0
    batch = finished(client, batch.id)
    assert batch.status == "completed" and batch.completed_at >= batch.in_progress_at >= batch.created_at
    assert (batch.request_counts.total, batch.request_counts.completed, batch.request_counts.failed) == (204, 200, 4)
    answers = results(client, batch.output_file_id)
    assert sorted(line["custom_id"] for line in answers) == sorted(f"request-{n}" for n in range(200))
    assert {line["response"]["status_code"] for line in answers} == {200}
    assert {line["response"]["body"]["object"] for line in answers} == {"chat.completion"}
    errors = results(client, batch.error_file_id)
    assert [line["error"]["code"] for line in errors if line["response"] is None] == [
        "invalid_json_line",
        "duplicate_custom_id",
        "mismatched_endpoint",
    ]
    refused = [line for line in errors if line["response"] is not None]
    assert [(line["custom_id"], line["response"]["status_code"]) for line in refused] == [("request-1000", 400)]
    assert refused[0]["response"]["body"]["error"]["param"].startswith("messages")
    assert batch.usage.input_tokens > 200 and batch.usage.output_tokens <= 600  # at most 3 tokens a line
    assert batch.usage.total_tokens == batch.usage.input_tokens + batch.usage.output_tokens
    output = client.files.retrieve(batch.output_file_id)
    assert output.purpose == "batch_output" and output.bytes == len(client.files.content(output.id).content)


@pytest.mark.parametrize(
    ("endpoint", "body", "answer_object"),
    [
        ("/v1/completions", {"model": "smollm", "prompt": "One, two,", "max_tokens": 3}, "text_completion"),
        ("/v1/responses", {"model": "smollm", "input": "Say hi.", "max_output_tokens": 16}, "response"),
    ],
)
def test_each_generation_endpoint_runs_as_a_batch(batch_proxy, endpoint, body, answer_object):
    client = client_of(batch_proxy)
    rows = [{"custom_id": f"line-{n}", "method": "POST", "url": endpoint, "body": body} for n in range(3)]
    batch = finished(
        client, client.batches.create(input_file_id=upload(client, rows).id, endpoint=endpoint, completion_window="24h").id
    )
    answers = results(client, batch.output_file_id)
    assert batch.status == "completed" and batch.error_file_id is None
    assert sorted(line["custom_id"] for line in answers) == ["line-0", "line-1", "line-2"]
    assert {line["response"]["body"]["object"] for line in answers} == {answer_object}
    if answer_object == "response":  # stored as the batch's key's own, as its requests' are
        stored = answers[0]["response"]["body"]
        retrieved = client.responses.retrieve(stored["id"])
        assert retrieved.id == stored["id"] and retrieved.status == stored["status"]
        with pytest.raises(openai.NotFoundError):
            client_of(batch_proxy, KEYS[1]).responses.retrieve(stored["id"])


def test_an_embeddings_batch(start_llama_server, start_proxy, tmp_path):
    server = start_llama_server(context_size=1024, slots=1, extra_args=("--embeddings", "--pooling", "mean"))
    proxy = start_proxy("--llama-api", server.url, "--store", f"sqlite://{tmp_path / 'store.sqlite3'}")
    client = openai_client(proxy.url)
    rows = [
        {"custom_id": f"e{n}", "method": "POST", "url": "/v1/embeddings", "body": {"model": "m", "input": f"text {n}"}}
        for n in range(3)
    ]
    batch = finished(
        client,
        client.batches.create(input_file_id=upload(client, rows).id, endpoint="/v1/embeddings", completion_window="24h").id,
    )
    vectors = {
        line["custom_id"]: line["response"]["body"]["data"][0]["embedding"] for line in results(client, batch.output_file_id)
    }
    assert sorted(vectors) == ["e0", "e1", "e2"] and len({len(vector) for vector in vectors.values()}) == 1


def test_cancel_stops_a_batch_and_keeps_what_was_answered(batch_proxy):
    client = client_of(batch_proxy)
    rows = [{**chat_line(n), "body": {**chat_line(n)["body"], "max_tokens": 32}} for n in range(400)]
    batch = client.batches.create(input_file_id=upload(client, rows).id, endpoint="/v1/chat/completions", completion_window="24h")
    eventually(lambda: client.batches.retrieve(batch.id).request_counts.completed > 0, "a line answered", timeout=120)
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status == "cancelling" and cancelling.cancelling_at is not None
    batch = finished(client, batch.id)
    assert batch.status == "cancelled" and batch.cancelled_at is not None
    answered = results(client, batch.output_file_id)
    assert 0 < len(answered) == batch.request_counts.completed < 400
    assert client.batches.cancel(batch.id).status == "cancelled"  # a finished batch stays as it is


def test_batches_are_listed_newest_first_a_page_at_a_time_and_per_key(batch_proxy):
    first, second = client_of(batch_proxy), client_of(batch_proxy, KEYS[1])
    file_id = upload(first, [chat_line(0)]).id
    made = [
        first.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h") for _ in range(3)
    ]
    page = first.batches.list(limit=2)
    assert [b.id for b in page.data] == [made[2].id, made[1].id] and page.has_more
    assert [b.id for b in first.batches.list(limit=2, after=made[1].id).data][0] == made[0].id
    assert not {b.id for b in second.batches.list()} & {b.id for b in made}
    with pytest.raises(openai.NotFoundError):
        second.batches.retrieve(made[0].id)
    with pytest.raises(openai.NotFoundError):
        second.batches.cancel(made[0].id)
    with pytest.raises(openai.NotFoundError):  # another key's file is no file
        second.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h")
    for batch in made:
        assert finished(first, batch.id).request_counts.completed == 1


def test_a_restart_mid_batch_loses_no_line_and_runs_none_twice(llama_server, start_proxy, tmp_path):
    flags = proxy_flags(llama_server.url, tmp_path / "store.sqlite3")
    proxy = start_proxy(*flags)
    client = client_of(proxy)
    rows = [{**chat_line(n), "body": {**chat_line(n)["body"], "max_tokens": 24}} for n in range(60)]
    batch = client.batches.create(input_file_id=upload(client, rows).id, endpoint="/v1/chat/completions", completion_window="24h")
    eventually(lambda: client.batches.retrieve(batch.id).request_counts.completed >= 2, "some lines answered", timeout=120)
    proxy.stop()
    before = time.time()
    restarted = client_of(start_proxy(*flags))
    assert restarted.batches.retrieve(batch.id).status == "in_progress"
    batch = finished(restarted, batch.id)
    answers = results(restarted, batch.output_file_id)
    assert batch.status == "completed" and batch.completed_at >= before
    assert sorted(line["custom_id"] for line in answers) == sorted(f"request-{n}" for n in range(60))
    assert batch.request_counts.completed == 60 and batch.request_counts.failed == 0


@pytest.mark.parametrize("store", ["sqlite", "redis"])
def test_a_batch_stopped_gracefully_is_resumed_at_once_after_a_restart(llama_server, start_proxy, tmp_path, request, store):
    """SIGTERM gives the batch's claim back: the instance restarted on the same store resumes it at once,
    not once the claim has gone CLAIM_SECONDS (10 s) unrenewed, and every line is answered once. The
    instance is stopped just after it renewed its claim (it writes the counts then), so that claim would
    hold the batch 10 s after the stop; the resume is read from the answers' `created` (whole seconds)."""
    flags = ["--llama-api", llama_server.url, "--store", _store_place(store, tmp_path, request), "--api-key", KEYS[0]]
    proxy = start_proxy(*flags)
    client = client_of(proxy)
    rows = [{**chat_line(n), "body": {**chat_line(n)["body"], "max_tokens": 24}} for n in range(60)]
    batch = client.batches.create(input_file_id=upload(client, rows).id, endpoint="/v1/chat/completions", completion_window="24h")
    # the first counts above 0, written just after a renewal (every 2 s); seen within 0.1 s
    eventually(lambda: client.batches.retrieve(batch.id).request_counts.completed > 0, "the claim renewed", timeout=120)
    stopped_at = time.time()
    proxy.stop()  # SIGTERM, and waits for its exit
    restarted_at = time.time()
    restarted = client_of(start_proxy(*flags))
    batch = finished(restarted, batch.id)
    answers = results(restarted, batch.output_file_id)
    assert batch.status == "completed" and batch.request_counts.completed == 60 and batch.request_counts.failed == 0
    assert sorted(line["custom_id"] for line in answers) == sorted(f"request-{n}" for n in range(60))
    resumed = [line["response"]["body"]["created"] for line in answers if line["response"]["body"]["created"] > restarted_at]
    assert resumed and min(resumed) - stopped_at < 7.0  # the old claim: not before 9 (10, less a second's rounding)


def _store_place(kind: str, tmp_path, request) -> str:
    """The --store of an empty store of `kind` for one test."""
    if kind == "sqlite":
        return f"sqlite://{tmp_path / 'store.sqlite3'}"
    import redis

    place = request.getfixturevalue("redis_server").url.rsplit("/", 1)[0] + "/7"
    redis.Redis.from_url(place).flushdb()
    return place


def test_anthropic_message_batches_run_on_the_same_engine(batch_proxy):
    client = anthropic.Anthropic(base_url=batch_proxy.url, api_key=KEYS[0], max_retries=0)
    params = {"model": "smollm", "max_tokens": 4, "messages": [{"role": "user", "content": "Say hi."}]}
    requests = [{"custom_id": f"ask-{n}", "params": params} for n in range(3)]
    requests.append({"custom_id": "bad", "params": {"model": "smollm", "max_tokens": 4, "messages": "not a list"}})
    batch = client.messages.batches.create(requests=requests)
    assert batch.processing_status == "in_progress" and batch.results_url is None
    assert batch.id not in {b.id for b in openai_client(batch_proxy.url, api_key=KEYS[0]).batches.list()}

    def ended() -> bool:
        return client.messages.batches.retrieve(batch.id).processing_status == "ended"

    eventually(ended, "the message batch ended", timeout=120)
    batch = client.messages.batches.retrieve(batch.id)
    counts = batch.request_counts
    assert (counts.succeeded, counts.errored, counts.processing, counts.canceled) == (3, 1, 0, 0) and batch.ended_at
    found = {row.custom_id: row.result for row in client.messages.batches.results(batch.id)}
    assert sorted(found) == ["ask-0", "ask-1", "ask-2", "bad"]
    assert {found[f"ask-{n}"].type for n in range(3)} == {"succeeded"} and found["ask-0"].message.role == "assistant"
    assert found["bad"].type == "errored" and found["bad"].error.error.type == "invalid_request_error"
    assert batch.id in {b.id for b in client.messages.batches.list()}
    with pytest.raises(anthropic.NotFoundError):
        anthropic.Anthropic(base_url=batch_proxy.url, api_key=KEYS[1], max_retries=0).messages.batches.retrieve(batch.id)
    assert client.messages.batches.delete(batch.id).type == "message_batch_deleted"
    with pytest.raises(anthropic.NotFoundError):
        client.messages.batches.retrieve(batch.id)


def test_an_anthropic_batch_cancelled_says_which_requests_were_canceled(batch_proxy):
    client = anthropic.Anthropic(base_url=batch_proxy.url, api_key=KEYS[0], max_retries=0)
    params = {"model": "smollm", "max_tokens": 32, "messages": [{"role": "user", "content": "Count to ten."}]}
    batch = client.messages.batches.create(requests=[{"custom_id": f"c{n}", "params": params} for n in range(200)])
    canceling = client.messages.batches.cancel(batch.id)
    assert canceling.processing_status in ("canceling", "ended") and canceling.cancel_initiated_at is not None
    eventually(lambda: client.messages.batches.retrieve(batch.id).processing_status == "ended", "ended", timeout=120)
    counts = client.messages.batches.retrieve(batch.id).request_counts
    kinds = [row.result.type for row in client.messages.batches.results(batch.id)]
    assert len(kinds) == 200 and kinds.count("canceled") == counts.canceled > 0
    assert kinds.count("succeeded") == counts.succeeded
    with pytest.raises(anthropic.BadRequestError):  # a running batch cannot be deleted; an ended one can
        client.messages.batches.delete(client.messages.batches.create(requests=[{"custom_id": "x", "params": params}]).id)


def test_a_fleet_sharing_redis_runs_a_batch_once_and_survives_the_death_of_its_runner(llama_server, redis_server, start_proxies):
    """Two instances share one Redis: the batch is run by one of them; that box dies (SIGKILL); the other
    takes the batch over once the claim is stale, and every line is answered once."""
    import redis

    url = redis_server.url.rsplit("/", 1)[0] + "/5"
    redis.Redis.from_url(url).flushdb()
    flags = ["--llama-api", llama_server.url, "--store", url, "--api-key", KEYS[0]]
    proxies = start_proxies(flags, flags)
    client = client_of(proxies[0])
    rows = [{**chat_line(n), "body": {**chat_line(n)["body"], "max_tokens": 24}} for n in range(40)]
    batch = client.batches.create(input_file_id=upload(client, rows).id, endpoint="/v1/chat/completions", completion_window="24h")
    eventually(lambda: client.batches.retrieve(batch.id).request_counts.completed >= 2, "some lines answered", timeout=120)
    claim = json.loads(redis.Redis.from_url(url).hget(f"api-like-oai:{{{batch.id}-claim}}:object", "document"))
    runner_pid = int(claim["holder"].split("-")[0])
    running, other = sorted(proxies, key=lambda proxy: runner_pid not in [proxy.process.pid, *descendants_of(proxy.process.pid)])
    assert runner_pid in descendants_of(running.process.pid)  # a worker of the instance that runs it
    kill_instance(running.process)
    survivor = client_of(other)
    batch = finished(survivor, batch.id)
    answers = results(survivor, batch.output_file_id)
    assert batch.status == "completed" and batch.request_counts.completed == 40
    assert sorted(line["custom_id"] for line in answers) == sorted(f"request-{n}" for n in range(40))
    assert survivor.files.content(batch.output_file_id).content.count(b"\n") == 40


def test_a_batch_on_a_model_the_proxy_starts_loads_it_and_runs(provisioned, start_proxy, tmp_path):
    """The lines of a model the proxy starts take its lease in-process like any request: the first loads it."""
    proxy = start_proxy(
        "--model",
        provisioned["MODEL"],
        "--model-name",
        "smol",
        "--llama-server",
        provisioned["LLAMA_SERVER"],
        "--llama-args",
        "--ctx-size 1024 --parallel 2 --threads 1",
        "--store",
        f"sqlite://{tmp_path / 'store.sqlite3'}",
    )
    client = openai_client(proxy.url)
    rows = [{**chat_line(n), "body": {**chat_line(n)["body"], "model": "smol"}} for n in range(4)]
    batch = finished(
        client,
        client.batches.create(input_file_id=upload(client, rows).id, endpoint="/v1/chat/completions", completion_window="24h").id,
    )
    assert batch.status == "completed" and batch.request_counts.completed == 4
    assert sorted(line["custom_id"] for line in results(client, batch.output_file_id)) == [f"request-{n}" for n in range(4)]
