"""The wheel installs only `api_like_oai` (the shipped templates inside it), and the container image
builds the same llama.cpp as scripts/provision."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# what a wheel is built from (setup.cfg's long_description reads README.md)
SOURCES = ("setup.py", "setup.cfg", "pyproject.toml", "README.md", "api_like_oai", "conversation_templates")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel pip builds from a copy of the sources (building in place would leave build/ in the tree)."""
    source = tmp_path_factory.mktemp("source")
    for name in SOURCES:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy2
        kwargs = {"ignore": shutil.ignore_patterns("__pycache__")} if (ROOT / name).is_dir() else {}
        copy(ROOT / name, source / name, **kwargs)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(source)],
        check=True,
        capture_output=True,
        text=True,
    )
    return next(out.glob("api_like_oai-*.whl"))


def wheel_names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def test_the_wheel_installs_nothing_but_the_package(wheel):
    top_level = {name.split("/")[0] for name in wheel_names(wheel)}
    assert {name for name in top_level if not name.endswith(".dist-info")} == {"api_like_oai"}


def test_the_wheel_ships_every_template_inside_the_package(wheel):
    shipped = {
        name.removeprefix("api_like_oai/conversation_templates/")
        for name in wheel_names(wheel)
        if name.startswith("api_like_oai/conversation_templates/")
    }
    in_repository = {path.name for path in (ROOT / "conversation_templates").iterdir() if path.suffix in (".jinja", ".yaml")}
    assert in_repository <= shipped
    assert "index.yaml" in shipped


INSTALLED_CHECK = """
import api_like_oai
from api_like_oai import render_chat
from api_like_oai.arguments import parse_settings
from api_like_oai.prompts import shipped

settings = parse_settings(["--chat-prompt-model", "llama-2"])
print(api_like_oai.__file__)
print(shipped.folder())
print(settings.models[0].template.chat_prompt_model)
messages = [{"role": "user", "content": "Hi"}]
print(repr(render_chat(messages, chat_prompt_model="llama-2").text))
print(repr(render_chat(messages, chat_prompt_model="vicuna_v1.1").text))
"""


def test_the_installed_wheel_finds_shipped_and_fastchat_templates(wheel, tmp_path):
    site = tmp_path / "site-packages"
    with zipfile.ZipFile(wheel) as archive:  # a pure-Python wheel installs by unpacking
        archive.extractall(site)
    elsewhere = tmp_path / "cwd"  # not the repository: its top-level folder must not be what is found
    elsewhere.mkdir()
    answer = subprocess.run(
        [sys.executable, "-c", INSTALLED_CHECK],
        cwd=elsewhere,
        check=True,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
    )
    package, folder, choice, llama_2, vicuna = answer.stdout.splitlines()
    assert Path(package).is_relative_to(site)
    assert Path(folder) == site / "api_like_oai" / "conversation_templates"
    assert choice == "llama-2"
    assert llama_2 == "'[INST] Hi [/INST]'"
    assert "USER: Hi ASSISTANT:" in vicuna


def test_the_image_builds_the_llama_cpp_scripts_provision_builds():
    provision = (ROOT / "scripts" / "provision").read_text()
    containerfile = (ROOT / "Containerfile").read_text()
    pinned = re.search(r'^LLAMA_CPP_PYTHON_VERSION="([^"]+)"', provision, re.M).group(1)
    assert re.search(r"^ARG LLAMA_CPP_PYTHON_VERSION=(\S+)$", containerfile, re.M).group(1) == pinned
    provision_flags = re.search(r"CPU_FLAGS=\(([^)]*)\)", provision).group(1).split()
    image_flags = re.search(r'x86-64-v3\) cpu="([^"]*)"', containerfile).group(1).split()
    assert image_flags == provision_flags
