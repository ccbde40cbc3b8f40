"""The managed keys' HTTP API fuzzed from /openapi.json (schemathesis), with an admin key, on a SQLite
store: whatever is sent, the answer is the documented one or an OpenAI error with a 4xx, never a 5xx,
and a body that breaks the schema is always refused."""

from __future__ import annotations

import tempfile

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.core.parameters import ParameterLocation
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

from api_like_oai import create_app
from api_like_oai.arguments import parse_settings

from ..servers import free_port

ADMIN = {"Authorization": "Bearer fuzzing-admin-key"}
STORE = tempfile.TemporaryDirectory(prefix="api-like-oai-keys-fuzz-")
APP = create_app(
    parse_settings(
        [
            "--llama-api",
            f"http://127.0.0.1:{free_port()}",
            "--admin-key",
            "fuzzing-admin-key",
            "--store",
            f"sqlite:///{STORE.name}/store.sqlite3",
        ]
    )
)
KEY_ROUTES = "^/v1/(internal/(keys|usage)|organization/usage)"


def load_schema(mode: str, **only):
    config = schemathesis.Config.from_dict(
        {
            "seed": 25,
            "suppress-health-check": ["too_slow", "filter_too_much"],
            "generation": {"mode": mode, "max-examples": 15, "database": "none"},
            "phases": {"stateful": {"enabled": False}},
        }
    )
    return schemathesis.openapi.from_wsgi("/openapi.json", APP, config=config).include(path_regex=KEY_ROUTES, **only)


def check_answer(case, response) -> None:
    bad_body = case.meta is not None and case.meta.is_negative_at(ParameterLocation.BODY)
    status = response.status_code
    assert status < 500, f"{status} {response.content[:300]!r} for {case.method} {case.path}"
    if status >= 300:
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}
        assert status in (400, 401, 404, 405, 409), f"unexpected {status}: {response.content[:300]!r}"
    else:
        assert not bad_body, f"a body that breaks the schema was accepted: {response.request.body!r}"
        case.validate_response(response, checks=[response_schema_conformance, content_type_conformance])


@load_schema("positive").parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck))
def test_fuzz_key_routes_with_valid_data(case):
    check_answer(case, case.call(headers=ADMIN))


@load_schema("negative", method=["POST", "PATCH"]).parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck))
def test_fuzz_key_routes_with_schema_breaking_bodies(case):
    check_answer(case, case.call(headers=ADMIN))
