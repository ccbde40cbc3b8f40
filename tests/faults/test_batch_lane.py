"""The batch lane against a fake llama.cpp with one slot and slow tokens: an interactive request that
finds the slot busy with a batch's line is let in at once (the line is preempted and run again, once
into the output), never queued behind the batch's lines; a batch past its completion window expires
with its unrun lines failed; the Files and Batch APIs' refusals are OpenAI's errors."""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import os
import re
import sqlite3
import threading
import time
from pathlib import Path

import anthropic
import openai
import pytest
import requests

from ..conftest import openai_client
from ..fake_llamacpp import FakeLlamaCpp
from ..servers import eventually, server_processes

BATCH_TOKENS = 12  # a batch line's answer, at 0.15 s a token


def answers(body: dict) -> list[str]:
    """The fake's tokens: a batch line's long answer, an interactive request's short one."""
    return [" b"] * BATCH_TOKENS if "long" in body["prompt"] else [" hi"]


@contextlib.contextmanager
def slow_lane_fake(slots: int):
    upstream = FakeLlamaCpp(props_extra={"total_slots": slots}, script=answers, behaviour="slow_tokens", token_interval=0.15)
    upstream.start()
    try:
        yield upstream
    finally:
        upstream.stop()


@pytest.fixture(scope="module")
def slow_fake():
    with slow_lane_fake(1) as upstream:
        yield upstream


@pytest.fixture(scope="module")
def proxy(slow_fake, start_proxy, tmp_path_factory):
    store = tmp_path_factory.mktemp("lane") / "store.sqlite3"
    return start_proxy("--llama-api", slow_fake.url, "--chat-prompt-model", "chatml", "--store", f"sqlite:///{store}")


def batch_of(client: openai.OpenAI, count: int, window: str = "24h"):
    rows = [
        {"custom_id": f"line-{n}", "method": "POST", "url": "/v1/chat/completions", "body": chat(f"long batch line {n}")}
        for n in range(count)
    ]
    data = b"".join(json.dumps(row).encode() + b"\n" for row in rows)
    uploaded = client.files.create(file=("lines.jsonl", io.BytesIO(data)), purpose="batch")
    return client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window=window)


def chat(text: str) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": 32}


def prompts(fake: FakeLlamaCpp) -> list[str]:
    """What each request the fake received asked, in arrival order: "line-N" (a batch's), else the word
    after "question" in its prompt (an interactive request's)."""
    said = []
    for body in fake.requests:
        prompt = body.get("prompt", "")
        if "batch line" in prompt:
            said.append(f"line-{prompt.split('batch line ')[1][0]}")
        else:
            said.append(re.search(r"question (\w+)", prompt)[1])
    return said


def finished(client: openai.OpenAI, batch_id: str):
    found = {}

    def done() -> bool:
        found["batch"] = client.batches.retrieve(batch_id)
        return found["batch"].status in ("completed", "failed", "expired", "cancelled")

    eventually(done, "the batch finished", timeout=60)
    return found["batch"]


def test_an_interactive_request_preempts_a_batch_line_and_the_line_runs_again_once(proxy, slow_fake):
    client = openai_client(proxy.url)
    slow_fake.requests.clear()
    batch = batch_of(client, 3)
    eventually(lambda: slow_fake.streaming == 1 and prompts(slow_fake) == ["line-0"], "the first line generating")
    answer = client.chat.completions.create(**chat("an interactive question person"))
    assert answer.choices[0].message.content == " hi"
    # the interactive request came right after the line it preempted, before any other line of the batch
    assert prompts(slow_fake)[:2] == ["line-0", "person"]
    batch = finished(client, batch.id)
    assert batch.status == "completed" and batch.request_counts.completed == 3
    assert prompts(slow_fake).count("line-0") == 2  # preempted, then run again
    output = [json.loads(row) for row in client.files.content(batch.output_file_id).text.splitlines()]
    assert sorted(row["custom_id"] for row in output) == ["line-0", "line-1", "line-2"]
    assert {row["response"]["body"]["choices"][0]["message"]["content"] for row in output} == {" b" * BATCH_TOKENS}
    metrics = requests.get(proxy.url + "/metrics", timeout=10).text
    assert 'api_like_oai_batch_lines_total{outcome="preempted"} 1.0' in metrics
    assert 'api_like_oai_batch_lines_total{outcome="completed"} 3.0' in metrics
    assert "api_like_oai_batch_lines_pending 0.0" in metrics


def preemptions(proxy) -> float:
    for row in requests.get(proxy.url + "/metrics", timeout=10).text.splitlines():
        if row.startswith('api_like_oai_batch_lines_total{outcome="preempted"}'):
            return float(row.rsplit(" ", 1)[1])
    return 0.0


def test_a_preempted_message_batch_request_runs_again_and_succeeds(proxy, slow_fake):
    """Anthropic's error shape has no code: a preempted line is known by its header, not its body."""
    client = anthropic.Anthropic(base_url=proxy.url, api_key="none", max_retries=0)
    before = preemptions(proxy)
    slow_fake.requests.clear()
    params = [
        {"model": "m", "max_tokens": 32, "messages": [{"role": "user", "content": f"long batch line {n}"}]} for n in range(2)
    ]
    batch = client.messages.batches.create(requests=[{"custom_id": f"m{n}", "params": params[n]} for n in range(2)])
    eventually(lambda: slow_fake.streaming == 1 and prompts(slow_fake) == ["line-0"], "the first request generating")
    openai_client(proxy.url).chat.completions.create(**chat("question urgent"))
    eventually(lambda: client.messages.batches.retrieve(batch.id).processing_status == "ended", "ended", timeout=60)
    results = {row.custom_id: row.result.type for row in client.messages.batches.results(batch.id)}
    assert results == {"m0": "succeeded", "m1": "succeeded"} and preemptions(proxy) == before + 1


@pytest.mark.parametrize("how", ["service_tier", "header"])
def test_a_request_asking_a_lower_priority_waits_behind_its_keys_own(proxy, slow_fake, how):
    client = openai_client(proxy.url)
    slow_fake.requests.clear()
    lower = {"service_tier": "flex"} if how == "service_tier" else {"extra_headers": {"priority": "low"}}
    higher = {"service_tier": "priority"} if how == "service_tier" else {"extra_headers": {"priority": "high"}}
    asked: list = []
    threads = [threading.Thread(target=lambda: client.chat.completions.create(**chat("a long question first")))]
    threads[0].start()
    eventually(lambda: slow_fake.streaming == 1, "the slot taken")
    # a flex request waits behind its key's own, and one asking above its key's (normal) is held to it:
    # it does not go before the plain request that came first
    for count, (word, options) in enumerate((("flexible", lower), ("plain", {}), ("capped", higher)), 1):
        threads.append(threading.Thread(target=ask, args=(client, word, options, asked)))
        threads[-1].start()
        eventually(lambda count=count: waiting(proxy) == count, f"{count} waiting for the slot")
    for thread in threads:
        thread.join(30)
    assert prompts(slow_fake) == ["first", "plain", "capped", "flexible"] and len(asked) == 3


def ask(client: openai.OpenAI, word: str, options: dict, answers: list) -> None:
    answers.append(client.chat.completions.create(**chat(f"question {word}"), **options))


def waiting(proxy) -> int:
    """Requests waiting for a slot in the proxy, by /metrics."""
    total = 0.0
    for row in requests.get(proxy.url + "/metrics", timeout=10).text.splitlines():
        if row.startswith("api_like_oai_slot_waiting{"):
            total += float(row.rsplit(" ", 1)[1])
    return int(total)


def test_the_dashboard_shows_a_running_batchs_progress(proxy):
    client = openai_client(proxy.url)
    batch = batch_of(client, 3)
    with requests.get(proxy.url + "/v1/internal/events", stream=True, timeout=60) as response:
        event, shown = None, None
        for line in response.iter_lines():
            if line.startswith(b"event: "):
                event = line[7:].decode()
            elif event == "live" and line.startswith(b"data: "):
                rows = {row["id"]: row for row in json.loads(line[6:])["batches"]}
                if batch.id in rows and rows[batch.id]["completed"] >= 1:
                    shown = rows[batch.id]
                    break
    assert shown["status"] == "in_progress" and shown["total"] == 3 and shown["endpoint"] == "/v1/chat/completions"
    assert shown["lines_per_minute"] > 0 and shown["eta_seconds"] is not None
    finished(client, batch.id)


def test_a_batch_past_its_window_expires_and_its_unrun_lines_fail(proxy):
    client = openai_client(proxy.url)
    batch = finished(client, batch_of(client, 4, window="3s").id)
    assert batch.status == "expired" and batch.expired_at is not None
    errors = [json.loads(row) for row in client.files.content(batch.error_file_id).text.splitlines()]
    answered = client.files.content(batch.output_file_id).text.splitlines() if batch.output_file_id else []
    assert len(answered) + len(errors) == 4 and len(errors) >= 1
    assert {row["error"]["code"] for row in errors} == {"batch_expired"}
    assert batch.request_counts.failed == len(errors) and batch.request_counts.completed == len(answered)


def test_refusals_are_openai_errors(proxy):
    client = openai_client(proxy.url)
    notes = client.files.create(file=("notes.txt", b"hello"), purpose="user_data")
    with pytest.raises(openai.BadRequestError) as wrong_purpose:
        client.batches.create(input_file_id=notes.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert wrong_purpose.value.body["param"] == "input_file_id"
    with pytest.raises(openai.BadRequestError) as wrong_endpoint:
        client.batches.create(input_file_id=notes.id, endpoint="/v1/moderations", completion_window="24h")
    assert wrong_endpoint.value.body["param"] == "endpoint"
    with pytest.raises(openai.NotFoundError) as unknown:
        client.batches.create(input_file_id="file-nothing", endpoint="/v1/chat/completions", completion_window="24h")
    assert unknown.value.body["param"] == "input_file_id"
    with pytest.raises(openai.NotFoundError):
        client.batches.retrieve("batch_nothing")
    with pytest.raises(openai.BadRequestError) as no_file:
        client.post("/files", body={"purpose": "batch"}, cast_to=object)
    assert no_file.value.body["param"] == "file"
    with pytest.raises(openai.BadRequestError) as short_expiry:
        client.files.create(file=("x.txt", b"x"), purpose="user_data", expires_after={"anchor": "created_at", "seconds": 60})
    assert short_expiry.value.body["param"] == "expires_after.seconds"


ADMIN = {"Authorization": "Bearer admin-of-the-batch-lane"}


@pytest.fixture(scope="module")
def keyed_proxy(slow_fake, start_proxy, tmp_path_factory):
    store = tmp_path_factory.mktemp("keyed") / "store.sqlite3"
    flags = ("--chat-prompt-model", "chatml", "--store", f"sqlite:///{store}", "--admin-key", ADMIN["Authorization"].split()[1])
    return start_proxy("--llama-api", slow_fake.url, *flags)


def managed_key(proxy, name: str, **limits) -> str:
    created = requests.post(proxy.url + "/v1/internal/keys", json={"name": name, **limits}, headers=ADMIN, timeout=10)
    assert created.status_code == 201, created.text
    return created.json()["key"]


def test_a_keys_batch_is_counted_apart_in_its_usage(keyed_proxy):
    client = openai_client(keyed_proxy.url, api_key=managed_key(keyed_proxy, "labelling"))
    client.chat.completions.create(**chat("question interactive"))
    batch = finished(client, batch_of(client, 2).id)
    assert batch.status == "completed"
    today = int(time.time()) // 86400 * 86400
    query = f"/v1/organization/usage/completions?start_time={today}&group_by=batch&group_by=api_key_id"
    buckets = requests.get(keyed_proxy.url + query, headers=ADMIN, timeout=10).json()["data"]
    rows = {(row["api_key_id"], row["batch"]): row for row in buckets[-1]["results"]}
    assert rows["labelling", True]["num_model_requests"] == 2 and rows["labelling", False]["num_model_requests"] == 1
    assert rows["labelling", True]["output_tokens"] == 2 * BATCH_TOKENS


def test_files_count_in_the_keys_storage_quota(keyed_proxy):
    client = openai_client(keyed_proxy.url, api_key=managed_key(keyed_proxy, "hoarder", max_stored_mib=1))
    part = b"x" * (600 * 1024)
    with pytest.raises(openai.APIStatusError) as too_large:
        client.files.create(file=("big.txt", part * 2), purpose="user_data")
    assert too_large.value.status_code == 413 and too_large.value.body["code"] == "storage_quota_exceeded"
    kept = [client.files.create(file=(f"part-{n}.txt", part), purpose="user_data") for n in range(2)]
    with pytest.raises(openai.RateLimitError) as full:
        client.files.create(file=("part-2.txt", part), purpose="user_data")
    assert full.value.body["code"] == "storage_quota_exceeded"
    client.files.delete(kept[0].id)
    client.files.create(file=("part-2.txt", part), purpose="user_data")  # room again


def test_with_several_workers_one_runs_the_instances_batches(slow_fake, start_proxy, tmp_path):
    """Each worker orders only its own requests: the instance's batches are run by one worker, so its
    lines never outnumber the slots that worker orders (a dead worker's role goes to another)."""
    store = tmp_path / "store.sqlite3"
    proxy = start_proxy(
        "--llama-api", slow_fake.url, "--chat-prompt-model", "chatml", "--store", f"sqlite:///{store}", "--workers", "2"
    )
    client = openai_client(proxy.url)
    holders = set()
    made = []
    for _ in range(4):  # one after another: without the lock each would go to whichever worker polled first
        made.append(batch_of(client, 2))
        eventually(lambda: client.batches.retrieve(made[-1].id).status == "in_progress", "the batch running")
        with sqlite3.connect(store) as db:
            (document,) = db.execute("SELECT document FROM objects WHERE key = ?", (f"{made[-1].id}-claim",)).fetchone()
        holders.add(json.loads(document)["holder"].split("-")[0])
    assert len(holders) == 1
    for batch in made:
        assert finished(client, batch.id).request_counts.completed == 2


def serving_worker(workers: list[int], port: int, connection: http.client.HTTPConnection) -> int | None:
    """Which of the proxy's `workers` (pids) holds the server's end of `connection` (open, to `port`),
    by the kernel's socket tables: a gunicorn worker keeps a kept-alive connection's requests."""
    client_port = connection.sock.getsockname()[1]
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            local, remote = (int(address.rsplit(":", 1)[1], 16) for address in fields[1:3])
            if local == port and remote == client_port:
                inodes.add(f"socket:[{fields[9]}]")
    for pid in workers:
        with contextlib.suppress(OSError):
            if inodes & {os.readlink(entry) for entry in Path(f"/proc/{pid}/fd").iterdir()}:
                return pid
    return None


def connection_to_a_worker_but(proxy, runner: int) -> http.client.HTTPConnection:
    """A kept-alive connection served by a worker of `proxy` other than the `runner`'s pid."""
    workers = [pid for pid in server_processes(proxy.process) if pid != proxy.process.pid]
    port = int(proxy.url.rsplit(":", 1)[1])
    for _ in range(50):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        connection.request("GET", "/health")
        connection.getresponse().read()
        if serving_worker(workers, port, connection) not in (None, runner):
            return connection
        connection.close()
    raise AssertionError("no connection reached the worker that does not run the batches")


def test_a_request_in_another_worker_preempts_the_runners_batch_line(slow_fake, start_proxy, tmp_path):
    """With --workers 2 the batch's lines run in one worker; a request the other worker takes tells it,
    and the line generating in the only slot is preempted and run again after the request."""
    store = tmp_path / "store.sqlite3"
    flags = ("--chat-prompt-model", "chatml", "--store", f"sqlite:///{store}", "--workers", "2")
    proxy = start_proxy("--llama-api", slow_fake.url, *flags)
    client = openai_client(proxy.url)
    before = preemptions(proxy)
    slow_fake.requests.clear()
    batch = batch_of(client, 3)
    eventually(lambda: slow_fake.streaming == 1, "a line generating")
    with sqlite3.connect(store) as db:
        (document,) = db.execute("SELECT document FROM objects WHERE key = ?", (f"{batch.id}-claim",)).fetchone()
    connection = connection_to_a_worker_but(proxy, int(json.loads(document)["holder"].split("-")[0]))
    eventually(lambda: slow_fake.streaming == 1, "a line generating")
    generating = prompts(slow_fake)[-1]
    connection.request(
        "POST",
        "/v1/chat/completions",
        json.dumps(chat("an interactive question elsewhere")),
        {"Content-Type": "application/json"},
    )
    answer = json.loads(connection.getresponse().read())
    assert answer["choices"][0]["message"]["content"] == " hi"
    assert finished(client, batch.id).request_counts.completed == 3
    said = prompts(slow_fake)
    # the line generating was stopped for the request (which came before it ran again), and ran twice
    runs = [position for position, prompt in enumerate(said) if prompt == generating]
    assert len(runs) == 2 and runs[0] < said.index("elsewhere") < runs[1]
    assert preemptions(proxy) == before + 1


def test_while_people_are_about_the_lane_keeps_a_slot_free_for_their_next_request(start_proxy, tmp_path):
    """Two slots, --batch-yield off (a GPU's way): the batch takes both while nobody is about; the first
    person's request preempts a line, and from then on the lane runs its lines in one slot, so the person's
    next request finds the other free (nothing preempted) while a line waits in the proxy; every line is
    still answered once."""
    with slow_lane_fake(2) as fake:
        proxy = lane_proxy(start_proxy, fake, tmp_path, "--batch-yield", "off")
        client = openai_client(proxy.url)
        batch = batch_of(client, 3)
        eventually(lambda: fake.streaming == 2, "the batch's lines in both slots")
        client.chat.completions.create(**chat("an interactive question first"))
        eventually(lambda: preemptions(proxy) == 1, "a line preempted for the first request")
        eventually(lambda: lines_waiting(proxy) == 1 and fake.streaming == 1, "a line waiting, a slot kept free")
        assert client.chat.completions.create(**chat("an interactive question next")).choices[0].message.content == " hi"
        done = finished(client, batch.id)
        assert done.status == "completed" and done.request_counts.completed == 3
        assert len(client.files.content(done.output_file_id).text.splitlines()) == 3
        assert preemptions(proxy) == 1  # the next request found the free slot: nothing was stopped for it


def lane_proxy(start_proxy, fake: FakeLlamaCpp, tmp_path: Path, *flags: str):
    store = f"sqlite:///{tmp_path / 'store.sqlite3'}"
    return start_proxy("--llama-api", fake.url, "--chat-prompt-model", "chatml", "--store", store, *flags)


def lines_waiting(proxy) -> int:
    """Batch lines waiting in the proxy for a slot, by /metrics."""
    for row in requests.get(proxy.url + "/metrics", timeout=10).text.splitlines():
        if row.startswith('api_like_oai_slot_waiting{priority="background"}'):
            return int(float(row.rsplit(" ", 1)[1]))
    return 0


def test_yielding_a_persons_request_stops_every_line_and_its_prompt_goes_before_any_again(start_proxy, tmp_path):
    """Three slots and --batch-yield on (a CPU box's default): the batch holds every slot; a person's request
    stops all three lines, reaches llama.cpp before any of them runs again (they wait for its first token),
    and every line is still answered once."""
    with slow_lane_fake(3) as fake:
        proxy = lane_proxy(start_proxy, fake, tmp_path, "--batch-yield", "on")
        client = openai_client(proxy.url)
        batch = batch_of(client, 4)
        eventually(lambda: fake.streaming == 3, "the batch's lines in every slot")
        assert client.chat.completions.create(**chat("an interactive question person")).choices[0].message.content == " hi"
        said = prompts(fake)
        assert sorted(said[:3]) == ["line-0", "line-1", "line-2"] and said[3] == "person" and preemptions(proxy) == 3
        done = finished(client, batch.id)
        assert done.status == "completed" and done.request_counts.completed == 4
        assert sorted(prompts(fake)) == sorted(["person", "line-3"] + ["line-0", "line-1", "line-2"] * 2)  # each stopped once
