"""The Jinja templates shipped in `conversation_templates/`, by name or alias (index.yaml)."""

from __future__ import annotations

import functools
from importlib import resources

import yaml


@functools.lru_cache(maxsize=1)
def _index() -> dict[str, dict]:
    text = resources.files("conversation_templates").joinpath("index.yaml").read_text("utf-8")
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
    return resources.files("conversation_templates").joinpath(file_name).read_text("utf-8")
