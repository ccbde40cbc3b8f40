"""DESIGN.md stays a map: short enough to read whole (at most 400 lines), and naming only files that exist,
so a rename that forgets the map fails here rather than misleading the next reader."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "DESIGN.md"
PACKAGE = ROOT / "api_like_oai"
# A path in backquotes ending in .py, possibly with a glob (`dialects/ollama*.py`).
PATH = re.compile(r"`([\w*/]+\.py)`")


def test_design_is_at_most_400_lines():
    assert len(DESIGN.read_text().splitlines()) <= 400


def _exists(named: str) -> bool:
    """A path is the repository's (`tests/...`, `benchmarks/...`), the package's (`api_like_oai/...`), or
    the package's without its name (`services/door.py`, `slots.py`), as DESIGN.md writes them."""
    candidates = [ROOT, PACKAGE, *[path for path in PACKAGE.iterdir() if path.is_dir()]]
    return any(any(base.glob(named)) for base in candidates)


def test_every_python_file_named_exists():
    named = set(PATH.findall(DESIGN.read_text()))
    assert len(named) > 30  # the pattern still finds DESIGN.md's paths
    assert sorted(path for path in named if not _exists(path)) == []
