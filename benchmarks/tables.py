"""The report's Markdown cells: shared by report.py and the parts' own sections (ratios, swaps,
Ollama's rows), which report.py puts together."""

from __future__ import annotations

import math


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def number(value: float | None, digits: int = 1) -> str:
    return "–" if value is None or math.isnan(value) else f"{value:,.{digits}f}"


def percent(value: float, digits: int = 0) -> str:
    return "–" if math.isnan(value) else f"{value:.{digits}%}"
