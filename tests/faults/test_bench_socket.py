"""The benchmark's WebSocket row (benchmarks/socket_turns.py, issue 50) against its fake upstream: both
sessions are whole working sessions (every turn completed, the socket's chained on it), so what the
row compares is the same work. The measuring itself is `scripts/bench`."""

from __future__ import annotations

import sys

import pytest

from benchmarks.capacity import CapacityRig
from benchmarks.processes import Service, free_port
from benchmarks.servers import HERE, proxy
from benchmarks.socket_turns import SESSION_TURNS, http_session, socket_row, socket_session
from benchmarks.workload import Plan


@pytest.fixture(scope="module")
def rig():
    port = free_port()
    fake = Service("fake-llamacpp", [sys.executable, str(HERE / "fake_llamacpp.py"), "--port", str(port)], port).start()
    served = proxy(fake.url, "--chat-prompt-model", "chatml").start()
    yield CapacityRig(served, fake, Plan.quick())
    served.stop()
    fake.stop()


@pytest.mark.parametrize("session", [http_session, socket_session])
def test_a_session_completes_every_turn(rig, session):
    firsts, failed = session(rig.proxy.url)
    assert len(firsts) == SESSION_TURNS and failed == 0 and all(seconds > 0 for seconds in firsts)


def test_the_row_has_both_transports_numbers(rig):
    row = socket_row(rig)
    assert row.turns == SESSION_TURNS and row.errors == 0
    assert row.http_first_event_p50_ms > 0 and row.socket_first_event_p50_ms > 0
    assert row.http_cpu_us_per_turn > 0 and row.socket_cpu_us_per_turn > 0
