"""The manual's generated references held to the code (issue 53): docs/configuration.md's flags and
docs/endpoints.md's routes are what api_like_oai/reference.py makes from argparse and the app now.
When this fails, run `python -m api_like_oai.reference` and commit the pages it rewrites."""

from __future__ import annotations

import re

import pytest

from api_like_oai import reference
from api_like_oai.arguments import FLAG_GROUPS, build_parser, flag_actions
from api_like_oai.routes.docs import registered

from ..servers import ROOT
from .conftest import make_app


def test_the_pages_are_what_the_code_makes_now():
    assert reference.stale_pages(ROOT) == []


def test_every_flag_is_in_the_reference_under_its_group():
    text = (ROOT / "docs" / "configuration.md").read_text()
    flags = [action.option_strings[0] for action in flag_actions(build_parser())]
    assert len(flags) > 70
    assert [flag for flag in flags if not re.search(rf"^\| `{re.escape(flag)}[ `,]", text, re.M)] == []
    assert [title for title, _ in FLAG_GROUPS if title not in reference.GROUP_PAGES] == []
    assert "| `--routing {prefix,least-busy}` | which of a model's upstreams" in text


def test_every_registered_route_is_in_the_endpoint_table(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("s3cret-of-the-fleet-0123456789\n")
    fleet = make_app("--chat-prompt-model", "chatml", "--fleet", "redis://127.0.0.1:1/0", "--fleet-secret-file", str(secret))
    routes = {(method, path) for app in (make_app("--chat-prompt-model", "chatml"), fleet) for method, path, _ in registered(app)}
    listed = {(method.lower(), path) for method, path, *_ in reference.endpoint_rows()}
    listed |= {(method.lower(), other) for method, _, others, *_ in reference.endpoint_rows() for other in others}
    assert routes == listed
    assert ("post", "/v1/chat/completions") in routes and ("get", "/v1/fleet/status") in routes
    table = (ROOT / "docs" / "endpoints.md").read_text()
    assert "| POST | `/v1/chat/completions` | `/chat/completions` |" in table


def test_a_page_behind_the_code_is_seen_and_rewritten(tmp_path):
    for page in reference.BLOCKS:
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / page).write_text((ROOT / page).read_text())
    page = tmp_path / "docs" / "configuration.md"
    page.write_text(page.read_text().replace("`--max-loaded N`", "`--max-loaded COUNT`"))
    assert reference.stale_pages(tmp_path) == ["docs/configuration.md"]
    assert reference.stale_pages(tmp_path, write=True) == ["docs/configuration.md"]
    assert reference.stale_pages(tmp_path) == []
    assert "`--max-loaded N`" in page.read_text()


def test_a_page_without_its_markers_is_an_error():
    with pytest.raises(ValueError, match="generated: flags"):
        reference.refreshed("# Configuration\n", {"flags": reference.flag_reference})


def test_the_environment_does_not_change_the_reference(monkeypatch):
    clean = reference.flag_reference()
    monkeypatch.setenv("API_LIKE_OAI_PORT", "9999")
    assert reference.flag_reference() == clean
