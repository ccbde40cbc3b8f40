"""What the flags say to launch (supervisor/configure.py): discovery, the default budget, the replicas' ports
held and their key."""

from __future__ import annotations

import errno
import os
import socket

import pytest

from api_like_oai.supervisor import configure


def test_models_dir_names_models_by_stem_and_finds_their_projectors(tmp_path):
    (tmp_path / "qwen.gguf").write_bytes(b"")
    (tmp_path / "mmproj-qwen-f16.gguf").write_bytes(b"")
    (tmp_path / "plain.gguf").write_bytes(b"")
    (tmp_path / "gemma").mkdir()
    (tmp_path / "gemma" / "gemma-3-4b.gguf").write_bytes(b"")
    (tmp_path / "gemma" / "mmproj-model-f16.gguf").write_bytes(b"")
    found = configure.discover(str(tmp_path))
    assert found == {
        "qwen": (str(tmp_path / "qwen.gguf"), str(tmp_path / "mmproj-qwen-f16.gguf")),
        "plain": (str(tmp_path / "plain.gguf"), None),
        "gemma-3-4b": (str(tmp_path / "gemma" / "gemma-3-4b.gguf"), str(tmp_path / "gemma" / "mmproj-model-f16.gguf")),
    }


def test_where_nvidia_smi_reports_gpus_each_has_a_budget_and_the_cpu_one_of_its_own(tmp_path, monkeypatch):
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\nprintf '20000\\n4000\\n'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(configure, "available_mib", lambda: 30000)
    assert configure.gpu_free_mib() == [20000, 4000]
    reserve = configure.GPU_RESERVE_MIB
    devices = {"gpu0": 20000 - reserve, "gpu1": 4000 - reserve, "cpu": 30000}
    assert configure.default_budget() == (sum(devices.values()), devices)
    settings = configure.supervisor_settings([], "llama-server", None, None, None)
    assert settings.device_budgets == devices
    given = configure.supervisor_settings([], "llama-server", 5000, None, None)  # --memory-budget: one pool
    assert (given.memory_budget_mib, given.device_budgets) == (5000, None)


def test_without_gpus_the_default_budget_is_the_available_memory_less_a_reserve(monkeypatch):
    monkeypatch.setattr(configure, "gpu_free_mib", lambda: [])
    available = next(int(line.split()[1]) // 1024 for line in open("/proc/meminfo") if line.startswith("MemAvailable:"))
    total, devices = configure.default_budget()
    assert abs(total - (available - configure.RESERVE_MIB)) < 512 and devices is None


def test_a_replicas_port_is_held_so_no_other_program_can_bind_it():
    port = configure.free_port()
    try:
        with socket.socket() as intruder, pytest.raises(OSError) as refused:
            intruder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            intruder.bind(("127.0.0.1", port))
        assert refused.value.errno == errno.EADDRINUSE
        with socket.socket() as replica:  # llama-server --reuse-port, as the same user: binds and listens
            replica.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            replica.bind(("127.0.0.1", port))
            replica.listen()
    finally:
        configure.HELD_PORTS.pop(port).close()


def test_a_replica_never_gets_the_proxys_own_port(monkeypatch):
    ports = iter([8081, 8081, 40001])

    class Kernel(socket.socket):  # the ephemeral ports the kernel happens to hand out
        def getsockname(self):
            return ("127.0.0.1", next(ports))

    monkeypatch.setattr(configure.socket, "socket", Kernel)
    spec = configure.launch_spec("a", "/models/a.gguf", avoid_port=8081)
    assert spec.ports == (40001,)
    configure.HELD_PORTS.pop(40001).close()


def test_a_child_answers_only_the_proxys_random_key_and_no_web_page():
    spec = configure.launch_spec("a", "/models/a.gguf")
    first = configure.supervisor_settings([spec], "llama-server", 1024, None, None)
    second = configure.supervisor_settings([spec], "llama-server", 1024, None, None)
    assert len(first.api_key) >= 32 and first.api_key != second.api_key and first.api_key not in repr(first)
    argv = spec.argv("llama-server", 0)
    assert argv[argv.index("--cors-origins") + 1] == "none" and "--no-cors-credentials" in argv
    assert "--reuse-port" in argv and argv[argv.index("--host") + 1] == "127.0.0.1"
    assert not any(first.api_key in arg for arg in argv)  # the key goes in its environment, not in `ps`
    configure.HELD_PORTS.pop(spec.ports[0]).close()
