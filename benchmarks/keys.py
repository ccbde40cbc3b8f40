"""The keys row (issue 25): what a managed key with limits adds to a request, on SQLite and on Redis.

One proxy per store in front of the instant fake upstream, asked two ways in alternating windows
(ABAB, so that the machine's other load falls on both alike): with a key from --api-key (no limits:
the key compared in memory, nothing read or written) and with a managed key that has every limit
(requests and tokens per minute, tokens per day, requests in flight): its record read by digest,
its admission (one atomic write), its prompt's reservation before generation (one atomic write) and
its usage at the end (one write). Non-streamed chat requests, one client in a loop (the p50 the
target is about) and 16 at once (p50 and throughput). The limits are far above what the run uses:
nothing is refused, the cost measured is the checking.

    scripts/bench --only keys       # writes keys-results.md and keys-results.json beside results.md
"""

from __future__ import annotations

import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .fake_llamacpp import DEFAULT_PROPS
from .processes import Service, free_port

HERE = Path(__file__).resolve().parent
TARGET_MS = 0.3  # what a key with limits may add to a non-streamed request at p50, one client
ADMIN, PLAIN = "bench-admin-key", "bench-plain-key"
BODY = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 16}).encode()
GENEROUS = {"rpm": 10**9, "tpm": 10**12, "tokens_per_day": 10**12, "max_parallel": 10**6}
STORES = ("sqlite", "redis")


@dataclass(frozen=True)
class KeysPlan:
    rounds: int = 6  # ABAB windows of each kind, per store and client count
    window_seconds: float = 3.0
    client_counts: tuple[int, ...] = (1, 16)

    @classmethod
    def quick(cls) -> KeysPlan:
        return cls(rounds=2, window_seconds=1.0)


@dataclass
class KeysSample:
    store: str  # "sqlite" or "redis"
    clients: int
    limits: str  # "off" (a --api-key key) or "on" (a managed key with every limit)
    latencies_ms: list[float]
    seconds: float  # the windows' wall time in all
    errors: int = 0

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.latencies_ms)

    @property
    def requests_per_second(self) -> float:
        return len(self.latencies_ms) / self.seconds


@dataclass
class KeysResult:
    plan: dict
    measured_at: str
    load_average: str
    samples: list[KeysSample] = field(default_factory=list)
    steps_ms: dict = field(default_factory=dict)  # store -> step -> p50 ms, in-process (no HTTP, no proxy)

    def sample(self, store: str, clients: int, limits: str) -> KeysSample:
        return next(s for s in self.samples if (s.store, s.clients, s.limits) == (store, clients, limits))

    def added_ms(self, store: str, clients: int) -> float:
        return self.sample(store, clients, "on").p50_ms - self.sample(store, clients, "off").p50_ms

    def markdown(self) -> str:
        lines = [
            "## Keys with limits (issue 25)",
            "",
            f"Measured {self.measured_at}, load average at the start {self.load_average}; "
            f"{self.plan['rounds']} alternating {self.plan['window_seconds']:g} s windows of each kind per row. "
            "Non-streamed chat requests to the instant fake upstream; *off*: a key from `--api-key`, "
            "*on*: a managed key with rpm, tpm, tokens per day and max parallel set (none reached).",
            "",
            "| store | clients | p50 off (ms) | p50 on (ms) | added at p50 (ms) | req/s off | req/s on | "
            "throughput on/off | errors |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for store in STORES:
            for clients in self.plan["client_counts"]:
                off, on = self.sample(store, clients, "off"), self.sample(store, clients, "on")
                lines.append(
                    f"| {store} | {clients} | {off.p50_ms:.2f} | {on.p50_ms:.2f} | "
                    f"{self.added_ms(store, clients):+.2f} | {off.requests_per_second:.0f} | "
                    f"{on.requests_per_second:.0f} | {on.requests_per_second / off.requests_per_second:.2f}x | "
                    f"{off.errors + on.errors} |"
                )
        if self.steps_ms:
            steps = list(next(iter(self.steps_ms.values())))
            lines += [
                "",
                "The key book's steps alone, in this process (p50 of 300, ms): what the proxy adds "
                "per request beyond them is the rest of the difference above.",
                "",
                "| store | " + " | ".join(steps) + " | all |",
                "|---|" + "---:|" * (len(steps) + 1),
            ]
            for store, by_step in self.steps_ms.items():
                lines.append(
                    f"| {store} | " + " | ".join(f"{by_step[step]:.3f}" for step in steps) + f" | {sum(by_step.values()):.3f} |"
                )
        lines += ["", "Target: a key with limits adds at most 0.3 ms to a non-streamed request at p50 (one client):"]
        for store in STORES:
            added = self.added_ms(store, 1)
            lines.append(f"- {store}: {added:+.2f} ms, **{'met' if added <= TARGET_MS else 'missed'}**")
        return "\n".join(lines) + "\n"


def measure(plan: KeysPlan, progress) -> KeysResult:
    result = KeysResult(
        asdict(plan), time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), ", ".join(f"{n:.2f}" for n in os.getloadavg())
    )
    props = Path(tempfile.gettempdir()) / f"api-like-oai-bench-keys-props-{os.getpid()}.json"
    # slots enough for every client: the row measures the key's checks, not waiting for a slot
    props.write_text(json.dumps({**DEFAULT_PROPS, "total_slots": 64}))
    port = free_port()
    upstream = Service(
        "fake-llamacpp", [sys.executable, str(HERE / "fake_llamacpp.py"), "--port", str(port), "--props", str(props)], port
    )
    redis = None
    try:
        upstream.start()
        redis = _redis()
        for store in STORES:
            url = (
                f"sqlite:///{tempfile.mkdtemp(prefix='api-like-oai-bench-keys-')}/store.sqlite3"
                if store == "sqlite"
                else f"redis://127.0.0.1:{redis[1]}/0"
            )
            port = free_port()
            proxy = Service(
                "proxy",
                [
                    sys.executable,
                    "-m",
                    "api_like_oai",
                    "--llama-api",
                    upstream.url,
                    "--port",
                    str(port),
                    "--store",
                    url,
                    "--admin-key",
                    ADMIN,
                    "--api-key",
                    PLAIN,
                    "--chat-prompt-model",
                    "chatml",
                ],
                port,
            )
            result.steps_ms[store] = _steps(store, url)
            try:
                proxy.start()
                managed = _managed_key(proxy.url)
                for clients in plan.client_counts:
                    progress(f"keys row: {store}, {clients} client(s), limits off and on alternating")
                    result.samples += _alternating(proxy.url, {"off": PLAIN, "on": managed}, store, clients, plan)
            finally:
                proxy.stop()
    finally:
        upstream.stop()
        props.unlink(missing_ok=True)
        if redis is not None:
            redis[0].terminate()
            redis[0].wait(10)
    return result


def _steps(store: str, url: str, rounds: int = 300) -> dict[str, float]:
    """p50 of each step a managed key with every limit takes per request, on the key book directly."""
    from api_like_oai.access import manage
    from api_like_oai.access.book import open_book
    from api_like_oai.access.usage import UsageEntry
    from api_like_oai.store import open_store
    from api_like_oai.store.settings import StoreSettings

    opened = open_store(StoreSettings(store, url.removeprefix("sqlite://") if store == "sqlite" else url), 1 << 20)
    book = open_book(opened)
    key, _ = manage.create_key(book, "bench-steps", manage.KeyChanges(**GENEROUS))
    times: dict[str, list[float]] = {"identify": [], "admit": [], "reserve prompt": [], "finish": []}
    for n in range(rounds):
        began = time.perf_counter()
        record = book.by_digest(book.digest(key))
        marks = [began, time.perf_counter()]
        book.admit(record, f"steps-{n}", time.time(), 16)
        marks.append(time.perf_counter())
        book.reserve(record, f"steps-{n}", time.time(), 40)
        marks.append(time.perf_counter())
        book.finish(
            record,
            f"steps-{n}",
            time.time(),
            UsageEntry(
                time.strftime("%Y-%m-%d", time.gmtime()), "bench-steps", "bench", "/v1/chat/completions", 1, 24, 0, 16, 0, 0.01
            ),
        )
        marks.append(time.perf_counter())
        for spent, start, end in zip(times.values(), marks, marks[1:], strict=False):
            spent.append((end - start) * 1000)
    opened.close()
    return {step: round(statistics.median(spent), 3) for step, spent in times.items()}


def _redis() -> tuple[subprocess.Popen, int]:
    port = free_port()
    process = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            tempfile.gettempdir(),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            connection.connect()
            connection.close()
            return process, port
        except OSError:
            time.sleep(0.05)
    process.terminate()
    raise RuntimeError("redis-server did not start")


def _managed_key(url: str) -> str:
    connection = http.client.HTTPConnection(url.removeprefix("http://"), timeout=30)
    connection.request(
        "POST",
        "/v1/internal/keys",
        json.dumps({"name": "bench", **GENEROUS}),
        {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"},
    )
    answer = connection.getresponse()
    created = json.loads(answer.read())
    connection.close()
    if answer.status != 201:
        raise RuntimeError(f"creating the bench key: {answer.status} {created}")
    return created["key"]


def _alternating(url: str, keys: dict[str, str], store: str, clients: int, plan: KeysPlan) -> list[KeysSample]:
    samples = {limits: KeysSample(store, clients, limits, [], 0.0) for limits in keys}
    _window(url, keys["off"], clients, 0.5, KeysSample(store, clients, "warm-up", [], 0.0))
    for round_number in range(plan.rounds):
        order = ("off", "on") if round_number % 2 == 0 else ("on", "off")
        for limits in order:
            _window(url, keys[limits], clients, plan.window_seconds, samples[limits])
    return list(samples.values())


def _window(url: str, key: str, clients: int, seconds: float, sample: KeysSample) -> None:
    """`clients` threads, each asking in a loop over its own keep-alive connection for `seconds`."""
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    lock = threading.Lock()
    stop_at = time.perf_counter() + seconds

    def client() -> None:
        connection = http.client.HTTPConnection(url.removeprefix("http://"), timeout=60)
        latencies, errors = [], 0
        while time.perf_counter() < stop_at:
            began = time.perf_counter()
            connection.request("POST", "/v1/chat/completions", BODY, headers)
            answer = connection.getresponse()
            answer.read()
            if answer.status == 200:
                latencies.append((time.perf_counter() - began) * 1000)
            else:
                errors += 1
        connection.close()
        with lock:
            sample.latencies_ms.extend(latencies)
            sample.errors += errors

    began = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sample.seconds += time.perf_counter() - began


def write(result: KeysResult, output_dir: Path) -> str:
    """keys-results.md and keys-results.json (latencies summarised) in `output_dir`; the markdown."""
    text = result.markdown()
    (output_dir / "keys-results.md").write_text(text)
    raw = {
        **asdict(result),
        "samples": [
            {
                "store": s.store,
                "clients": s.clients,
                "limits": s.limits,
                "requests": len(s.latencies_ms),
                "p50_ms": round(s.p50_ms, 3),
                "p90_ms": round(statistics.quantiles(s.latencies_ms, n=10)[-1], 3),
                "requests_per_second": round(s.requests_per_second, 1),
                "errors": s.errors,
            }
            for s in result.samples
        ],
        "added_p50_ms": {
            f"{store}/{clients}": round(result.added_ms(store, clients), 3)
            for store in STORES
            for clients in result.plan["client_counts"]
        },
    }
    (output_dir / "keys-results.json").write_text(json.dumps(raw, indent=1) + "\n")
    return text


def keys_part(output_dir: Path, quick: bool, progress) -> int:
    """`scripts/bench --only keys`: the row measured and written beside results.md."""
    print(write(measure(KeysPlan.quick() if quick else KeysPlan(), progress), output_dir))
    return 0
