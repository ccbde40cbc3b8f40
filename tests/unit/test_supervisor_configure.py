"""What the flags say to launch (supervisor/configure.py): discovery, the default budget."""

from __future__ import annotations

import os

from api_like_oai.supervisor import configure


def test_models_dir_names_models_by_stem_and_finds_their_projectors(tmp_path):
    (tmp_path / "qwen.gguf").write_bytes(b"")
    (tmp_path / "mmproj-qwen-f16.gguf").write_bytes(b"")
    (tmp_path / "plain.gguf").write_bytes(b"")
    (tmp_path / "gemma").mkdir()
    (tmp_path / "gemma" / "gemma-3-4b.gguf").write_bytes(b"")
    (tmp_path / "gemma" / "mmproj-model-f16.gguf").write_bytes(b"")
    found = configure.discover(str(tmp_path))
    assert found == {"qwen": (str(tmp_path / "qwen.gguf"), str(tmp_path / "mmproj-qwen-f16.gguf")),
                     "plain": (str(tmp_path / "plain.gguf"), None),
                     "gemma-3-4b": (str(tmp_path / "gemma" / "gemma-3-4b.gguf"),
                                    str(tmp_path / "gemma" / "mmproj-model-f16.gguf"))}


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
    given = configure.supervisor_settings([], "llama-server", 5000, None, None)   # --memory-budget: one pool
    assert (given.memory_budget_mib, given.device_budgets) == (5000, None)


def test_without_gpus_the_default_budget_is_the_available_memory_less_a_reserve(monkeypatch):
    monkeypatch.setattr(configure, "gpu_free_mib", lambda: [])
    available = next(int(line.split()[1]) // 1024 for line in open("/proc/meminfo") if line.startswith("MemAvailable:"))
    total, devices = configure.default_budget()
    assert abs(total - (available - configure.RESERVE_MIB)) < 512 and devices is None
