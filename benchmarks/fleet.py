"""The fleet rows (issue 37, section 6): what the front's hop adds, and what placement costs a front.

A box (the proxy in front of the instant fake upstream, `--advertise`) and a front (`--fleet`, no models)
over one Redis, asked in alternating windows (ABAB): the box directly, and the same requests through the
front, which places each and relays it to the box. Non-streamed latency and streamed time to the first
event, one client: the difference at p50 is the hop. Placement is then timed in this process: the
body's session key and `placement.place` over the records, per request (a warm model needs no Redis
round trip of its own: a front worker reads the records every 0.5 s, two round trips).

The rows with real models (affinity across two fronts, a swap workload over two boxes) are
fleet_workloads.py's, run after these when LLAMA_SERVER, MODEL and GEMMA_MODEL name them.

    scripts/bench --only fleet      # writes fleet-results.md and fleet-results.json beside results.md
"""

from __future__ import annotations

import http.client
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import fleet_workloads
from .fake_llamacpp import DEFAULT_PROPS
from .keys import BODY, KeysSample, _redis, _window
from .processes import Service, free_port

HERE = Path(__file__).resolve().parent
HOP_TARGET_MS = 1.0  # the front's hop, added to the first token at p50
PLACEMENT_TARGET_MS = 0.3  # placement and routing state, CPU per request on the front
STREAM_BODY = json.dumps({**json.loads(BODY), "stream": True}).encode()


@dataclass(frozen=True)
class FleetPlan:
    rounds: int = 6
    window_seconds: float = 3.0

    @classmethod
    def quick(cls) -> FleetPlan:
        return cls(rounds=2, window_seconds=1.0)


@dataclass
class FleetResult:
    plan: dict
    measured_at: str
    load_average: str
    samples: dict[str, KeysSample] = field(default_factory=dict)  # "direct"/"front" x "answer"/"first event"
    placement_us: float = 0.0
    affinity: list[fleet_workloads.AffinityRow] = field(default_factory=list)
    swaps: list[fleet_workloads.SwapRow] = field(default_factory=list)
    workloads_load_average: str = ""

    def added_ms(self, kind: str) -> float:
        return self.samples[f"front {kind}"].p50_ms - self.samples[f"direct {kind}"].p50_ms

    def markdown(self) -> str:
        lines = [
            "## A fleet: the front's hop (issue 37)",
            "",
            f"Measured {self.measured_at}, load average at the start {self.load_average}; "
            f"{self.plan['rounds']} alternating {self.plan['window_seconds']:g} s windows of each kind. One "
            "client, chat requests to the instant fake upstream behind a box, directly and through a front.",
            "",
            "| measured | p50 direct (ms) | p50 through the front (ms) | added at p50 (ms) | requests |",
            "|---|---:|---:|---:|---:|",
        ]
        for kind in ("answer", "first event"):
            direct, front = self.samples[f"direct {kind}"], self.samples[f"front {kind}"]
            lines.append(
                f"| {kind} | {direct.p50_ms:.2f} | {front.p50_ms:.2f} | {self.added_ms(kind):+.2f} | "
                f"{len(direct.latencies_ms)} + {len(front.latencies_ms)} |"
            )
        hop = self.added_ms("first event")
        lines += [
            "",
            f"Placement on the front (session key and `placement.place`, two boxes): "
            f"{self.placement_us:.1f} µs of CPU per request; Redis round trips per request for a loaded "
            "model: none of its own (each front worker reads the records every 0.5 s: SMEMBERS, MGET); "
            "one (`SET NX GET`) for a model loaded nowhere.",
            "",
            f"- time to the first event added by the front: {hop:+.2f} ms, "
            f"**{'met' if hop <= HOP_TARGET_MS else 'missed'}** (target {HOP_TARGET_MS:g} ms)",
            f"- placement: {self.placement_us / 1000:.3f} ms, "
            f"**{'met' if self.placement_us / 1000 <= PLACEMENT_TARGET_MS else 'missed'}** "
            f"(target {PLACEMENT_TARGET_MS:g} ms)",
        ]
        text = "\n".join(lines) + "\n"
        if self.affinity or self.swaps:
            text += fleet_workloads.markdown(self.affinity, self.swaps, self.workloads_load_average)
        return text


def measure(plan: FleetPlan, progress) -> FleetResult:
    result = FleetResult(
        asdict(plan), time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), ", ".join(f"{n:.2f}" for n in os.getloadavg())
    )
    work = Path(tempfile.mkdtemp(prefix="api-like-oai-bench-fleet-"))
    (work / "props.json").write_text(json.dumps({**DEFAULT_PROPS, "total_slots": 64}))
    (work / "secret").write_text("bench-fleet-secret-0123456789")
    upstream_port, box_port, front_port = free_port(), free_port(), free_port()
    upstream = Service(
        "fake-llamacpp",
        [sys.executable, str(HERE / "fake_llamacpp.py"), "--port", str(upstream_port), "--props", str(work / "props.json")],
        upstream_port,
    )
    redis = services = None
    try:
        upstream.start()
        redis = _redis()
        fleet = ["--fleet", f"redis://127.0.0.1:{redis[1]}/0", "--fleet-secret-file", str(work / "secret")]
        box = Service(
            "fleet-box",
            [
                sys.executable,
                "-m",
                "api_like_oai",
                "--llama-api",
                upstream.url,
                "--model-name",
                "bench",
                "--chat-prompt-model",
                "chatml",
                "--port",
                str(box_port),
                *fleet,
                "--advertise",
                f"http://127.0.0.1:{box_port}",
            ],
            box_port,
        )
        front = Service(
            "fleet-front",
            [sys.executable, "-m", "api_like_oai", "--port", str(front_port), *fleet],
            front_port,
            ready_path="/v1/models",
        )
        services = [box.start(), front.start()]
        _until_placed(front.url)
        progress("fleet rows: the box directly and through a front, alternating")
        result.samples = _alternating({"direct": box.url, "front": front.url}, plan)
        result.placement_us = _placement_us()
    finally:
        for service in services or ():
            service.stop()
        upstream.stop()
        if redis is not None:
            redis[0].terminate()
            redis[0].wait(10)
    return result


def _until_placed(front_url: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        connection = http.client.HTTPConnection(front_url.removeprefix("http://"), timeout=10)
        connection.request("POST", "/v1/chat/completions", BODY, {"Content-Type": "application/json"})
        answer = connection.getresponse()
        answer.read()
        connection.close()
        if answer.status == 200:
            return
        time.sleep(0.2)
    raise RuntimeError("the front never placed a request on the box")


def _alternating(urls: dict[str, str], plan: FleetPlan) -> dict[str, KeysSample]:
    samples = {f"{where} {kind}": KeysSample(where, 1, kind, [], 0.0) for where in urls for kind in ("answer", "first event")}
    for round_number in range(plan.rounds):
        for where in ("direct", "front") if round_number % 2 == 0 else ("front", "direct"):
            _window(urls[where], "no-key", 1, plan.window_seconds, samples[f"{where} answer"])
            _first_events(urls[where], plan.window_seconds, samples[f"{where} first event"])
    return samples


def _first_events(url: str, seconds: float, sample: KeysSample) -> None:
    """Streamed requests in a loop for `seconds`: each one's time to its first `data:` line."""
    connection = http.client.HTTPConnection(url.removeprefix("http://"), timeout=60)
    began = stop_at = time.perf_counter()
    stop_at += seconds
    while time.perf_counter() < stop_at:
        start = time.perf_counter()
        connection.request("POST", "/v1/chat/completions", STREAM_BODY, {"Content-Type": "application/json"})
        answer = connection.getresponse()
        first = answer.readline()
        while first and not first.startswith(b"data:"):
            first = answer.readline()
        sample.latencies_ms.append((time.perf_counter() - start) * 1000)
        answer.read()
        sample.errors += answer.status != 200
    connection.close()
    sample.seconds += time.perf_counter() - began


def _placement_us(rounds: int = 2000) -> float:
    """p50 CPU of placing one agent turn: its body's session key and the choice over two loaded boxes."""
    from api_like_oai.fleet.affinity import session_key
    from api_like_oai.fleet.membership import box_of, box_record
    from api_like_oai.fleet.placement import place

    status = {
        "memory_budget_mib": 8000,
        "models": {"bench": {"value": "loaded", "memory_mib": 300, "in_flight": 1, "queued": 0, "pinned": False}},
    }
    boxes = [box_of(box_record(f"http://10.0.0.{n}:8081", status, [], [], 0.0)) for n in (2, 3)]
    body = {
        "model": "bench",
        "messages": [{"role": "system", "content": "x" * 8000}, *({"role": "user", "content": f"turn {n}"} for n in range(20))],
    }
    spent = []
    for _ in range(rounds):
        began = time.process_time_ns()
        place("bench", boxes, session=session_key(body))
        spent.append((time.process_time_ns() - began) / 1000)
    return statistics.median(spent)


def write(result: FleetResult, output_dir: Path) -> str:
    text = result.markdown()
    (output_dir / "fleet-results.md").write_text(text)
    raw = {
        **{k: v for k, v in asdict(result).items() if k not in ("samples", "affinity", "swaps")},
        "affinity": [_summary(row) for row in result.affinity],
        "swaps": [_summary(row) for row in result.swaps],
        "samples": {
            name: {"requests": len(s.latencies_ms), "p50_ms": round(s.p50_ms, 3), "errors": s.errors}
            for name, s in result.samples.items()
        },
        "added_p50_ms": {kind: round(result.added_ms(kind), 3) for kind in ("answer", "first event")},
    }
    (output_dir / "fleet-results.json").write_text(json.dumps(raw, indent=1) + "\n")
    return text


def _summary(row) -> dict:
    """A row without its list of latencies: its counts and its p50."""
    return {**{k: v for k, v in asdict(row).items() if k != "ttft_ms" and k != "latencies_ms"}, "p50_ms": round(row.p50_ms, 1)}


def fleet_part(output_dir: Path, quick: bool, progress) -> int:
    """`scripts/bench --only fleet`: the rows measured and written beside results.md."""
    result = measure(FleetPlan.quick() if quick else FleetPlan(), progress)
    if all(os.environ.get(name) for name in ("LLAMA_SERVER", "MODEL", "GEMMA_MODEL")):
        plan = fleet_workloads.WorkloadPlan.quick() if quick else fleet_workloads.WorkloadPlan()
        result.workloads_load_average = ", ".join(f"{n:.2f}" for n in os.getloadavg())
        result.affinity = fleet_workloads.affinity_rows(os.environ["LLAMA_SERVER"], os.environ["MODEL"], plan, progress)
        result.swaps = fleet_workloads.swap_rows(
            os.environ["LLAMA_SERVER"], os.environ["MODEL"], os.environ["GEMMA_MODEL"], plan, progress
        )
    print(write(result, output_dir))
    return 0
