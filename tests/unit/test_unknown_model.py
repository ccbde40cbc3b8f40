"""One rule for a model name the proxy does not know (issue 53), the same in the code and in
docs/errors.md ("Unknown model names"): with one model every name reaches it, as the original script and
llama-server answer (agents send gpt-4o or claude-*); with named models (a config's `models:`,
--models-dir) an unknown name is a 404 `model_not_found` listing the names the key may use."""

from __future__ import annotations

import json
import re

from api_like_oai import create_app
from api_like_oai.app import build_registry
from api_like_oai.arguments import parse_settings

from ..servers import ROOT, free_port

PAGE = ROOT / "docs" / "errors.md"


def documented_404() -> dict:
    section = PAGE.read_text().split("## Unknown model names", 1)[1]
    return json.loads(re.search(r"```json\n(.*?)```", section, re.S).group(1))


def test_one_model_serves_any_name_and_answers_with_it():
    registry = build_registry(parse_settings(["--llama-api", f"http://127.0.0.1:{free_port()}"]))
    for name in ("gpt-4o", "claude-sonnet-4-5", "local"):
        model, answered_as = registry.lookup(name)
        assert answered_as == name and model is registry.default
    assert registry.lookup(None) == (registry.default, registry.default.name)
    assert "every\n  name is served by that one model" in PAGE.read_text()


def test_named_models_answer_the_documented_404(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(f"models:\n  smollm:\n    upstreams: [http://127.0.0.1:{free_port()}]\n    aliases: [smollm-alias]\n")
    app = create_app(parse_settings(["--config", str(config)]))
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    answer = app.test_client().post("/v1/chat/completions", json=body)
    assert answer.status_code == 404
    assert answer.get_json() == documented_404()


def test_a_models_folder_names_its_models(tmp_path):
    assert parse_settings(["--models-dir", str(tmp_path)]).strict_model_names
    assert not parse_settings(["--llama-api", "http://127.0.0.1:9"]).strict_model_names
