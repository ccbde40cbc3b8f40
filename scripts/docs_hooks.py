"""mkdocs hooks (mkdocs.yml): the site's pages that live outside docs/, brought in as they are, so that
each text has one copy that GitHub and the site both show.

- README.md is the site's home page (index.md); its links into the manual, `docs/PAGE.md`, become `PAGE.md`.
- DESIGN.md and the benchmark reports keep their repository paths; a manual page links them as GitHub
  resolves it, `../DESIGN.md`, which becomes `DESIGN.md`.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
HOME = "index.md"
FROM_REPOSITORY = {
    HOME: "README.md",
    "DESIGN.md": "DESIGN.md",
    "benchmarks/results.md": "benchmarks/results.md",
    "benchmarks/quick.md": "benchmarks/quick.md",
    "benchmarks/PROFILE.md": "benchmarks/PROFILE.md",
    "benchmarks/fleet-results.md": "benchmarks/fleet-results.md",
    "benchmarks/keys-results.md": "benchmarks/keys-results.md",
}


def on_files(files, config):
    for site_path, repository_path in FROM_REPOSITORY.items():
        files.append(File.generated(config, site_path, abs_src_path=str(ROOT / repository_path)))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    source = page.file.src_uri
    if source == HOME:
        return re.sub(r"\]\(docs/", "](", markdown)
    if source not in FROM_REPOSITORY:
        return re.sub(r"\]\(\.\./", "](", markdown)
    return markdown
