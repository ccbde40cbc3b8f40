"""/openapi.json against the routes the app registered (issue 41): every public route documented,
nothing documented that is not registered; and the API descriptors (routes/apis.py) name what exists."""

from __future__ import annotations

import importlib
import inspect

import pytest
from pydantic import BaseModel

from api_like_oai.dialects.shape import Shape
from api_like_oai.routes.apis import ANTHROPIC, APIS, OLLAMA, OPENAI, RESPONSES, api_of
from api_like_oai.routes.docs import UNDOCUMENTED, documentation, endpoints, registered

from .conftest import make_app

REDIS = "redis://127.0.0.1:1/0"  # never reached: the fleet's routes are registered without it


@pytest.fixture(scope="module")
def apps(tmp_path_factory):
    secret = tmp_path_factory.mktemp("fleet") / "secret"
    secret.write_text("s3cret-of-the-fleet-0123456789\n")
    return {
        "default": make_app("--chat-prompt-model", "chatml"),
        "no native API": make_app("--chat-prompt-model", "chatml", "--no-native-api"),
        "fleet": make_app("--chat-prompt-model", "chatml", "--fleet", REDIS, "--fleet-secret-file", str(secret)),
    }


def document_paths(app) -> set[tuple[str, str]]:
    paths = app.test_client().get("/openapi.json").get_json()["paths"]
    return {(method, path) for path, operations in paths.items() for method in operations}


@pytest.mark.parametrize("name", ["default", "no native API", "fleet"])
def test_the_document_lists_exactly_the_registered_public_routes(apps, name):
    app = apps[name]
    routes = {(method, path) for method, path, _ in registered(app)}
    assert document_paths(app) == routes
    assert "/openapi.json" not in {path for _, path in routes} and ("post", "/v1/chat/completions") in routes
    assert [route for route, (entry, _) in documentation(app).items() if entry is None] == []  # each one described
    rules = {rule.rule for rule in app.url_map.iter_rules()}
    assert {"/static/<path:filename>", "/docs", "/ui/<path:name>"} <= rules  # what UNDOCUMENTED leaves out exists


def test_the_native_api_is_documented_only_where_it_is_registered(apps):
    assert ("get", "/props") in document_paths(apps["default"])
    assert ("get", "/props") not in document_paths(apps["no native API"])
    assert ("get", "/v1/fleet/status") in document_paths(apps["fleet"])
    assert ("get", "/v1/fleet/status") not in document_paths(apps["default"])


def test_nothing_is_documented_that_no_app_registers(apps):
    registered_anywhere = {(method, path) for app in apps.values() for method, path, _ in registered(app)}
    stale = [(method, path) for method, path, *_ in endpoints() if (method, path) not in registered_anywhere]
    assert stale == []
    assert not UNDOCUMENTED & {path for _, path, *_ in endpoints()}


def test_an_alias_is_documented_as_its_route(apps):
    documented = documentation(apps["default"])
    entry, alias_of = documented["post", "/chat/completions"]
    assert alias_of == "/v1/chat/completions" and entry is documented["post", "/v1/chat/completions"][0]
    paths = apps["default"].test_client().get("/openapi.json").get_json()["paths"]
    assert paths["/chat/completions"]["post"]["summary"].endswith("(the same as /v1/chat/completions)")
    assert paths["/chat/completions"]["post"]["requestBody"] == paths["/v1/chat/completions"]["post"]["requestBody"]


def test_each_api_documents_its_errors_its_own_way(apps):
    paths = apps["default"].test_client().get("/openapi.json").get_json()["paths"]
    assert "529" in paths["/v1/messages"]["post"]["responses"] and "503" not in paths["/v1/messages"]["post"]["responses"]
    error = paths["/api/chat"]["post"]["responses"]["404"]["content"]["application/json"]["schema"]
    assert error == {"$ref": "#/components/schemas/ErrorBody"}
    assert paths["/v1/responses"]["post"]["responses"]["503"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorResponse"
    }


@pytest.mark.parametrize(
    ("path", "api"),
    [
        ("/v1/chat/completions", OPENAI),
        ("/v1/messages", ANTHROPIC),
        ("/v1/messages/count_tokens", ANTHROPIC),
        ("/v1/messagesx", OPENAI),
        ("/v1/responses", RESPONSES),
        ("/v1/responses/resp_1/input_items", RESPONSES),
        ("/api/chat", OLLAMA),
        ("/api/hello", OPENAI),
        ("/", OPENAI),
        ("/v1/conversations", OPENAI),
    ],
)
def test_a_path_is_the_api_whose_prefix_it_has(path, api):
    assert api_of(path) is api


def resolved(name: str):
    module, _, attribute = name.partition(":")
    found = importlib.import_module(module)
    for part in attribute.split("."):
        found = getattr(found, part)
    return found


@pytest.mark.parametrize("api", APIS, ids=[api.name for api in APIS])
def test_a_descriptor_names_what_exists(api, apps):
    app = apps["default"]
    blueprint = importlib.import_module(api.blueprint).bp
    assert app.blueprints[blueprint.name] is blueprint
    assert all(callable(resolved(service)) for service in api.services)
    for name in api.shapes:
        shape = resolved(name)
        assert inspect.isclass(shape) and all(hasattr(shape, member) for member in ("frame", "error_chunk", "keepalive"))
        assert set(vars(Shape)) & {"openings", "chunks", "closings", "response"} <= set(dir(shape))
    assert issubclass(resolved(api.error_model), BaseModel)
    # every route under its prefix is its own and documented by it (an alias of one of its own included)
    own = {endpoint[1] for endpoint in api.endpoints()}
    for (method, path), (entry, _) in documentation(app).items():
        if api.owns(path):
            assert entry is not None and entry[1] in own, (method, path)
