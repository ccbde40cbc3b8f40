"""The Jinja templates shipped in `conversation_templates/`, by name or alias (index.yaml)."""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable


def folder() -> Traversable:
    """Where the templates are: inside the installed package (the wheel maps the repository's top-level
    folder to api_like_oai.conversation_templates, setup.py), else in the source checkout this package
    runs from (an editable install or the repository itself), beside the package."""
    installed = resources.files("api_like_oai").joinpath("conversation_templates")
    if installed.is_dir():
        return installed
    return Path(__file__).resolve().parents[2] / "conversation_templates"


@functools.lru_cache(maxsize=1)
def _index() -> dict[str, dict]:
    text = folder().joinpath("index.yaml").read_text("utf-8")
    return yaml.safe_load(text)["templates"]


@functools.lru_cache(maxsize=1)
def _by_alias() -> dict[str, str]:
    aliases = {}
    for name, entry in _index().items():
        for alias in [name, *entry.get("aliases", [])]:
            aliases[alias.lower()] = name
    return aliases


def names() -> list[str]:
    """Every shipped name and alias."""
    return sorted(_by_alias())


def canonical(name: str) -> str | None:
    """The template's own name for `name` (which may be an alias), or None if not shipped."""
    return _by_alias().get(name.lower())


def load(name: str) -> str | None:
    """The Jinja source shipped under `name` or an alias of it, or None."""
    canonical_name = canonical(name)
    if canonical_name is None:
        return None
    file_name = _index()[canonical_name]["file"]
    return folder().joinpath(file_name).read_text("utf-8")
