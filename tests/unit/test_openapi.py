"""/openapi.json against the routes the app registered (issue 41) and their declarations (issue 48): every
view declared and every declaration registered, every documented route in the document and nothing else,
the document true to what the views take and answer; and the API descriptors (routes/apis.py) name what exists."""

from __future__ import annotations

import importlib
import inspect

import pytest
from pydantic import BaseModel

from api_like_oai.dialects.shape import Shape
from api_like_oai.routes import declare
from api_like_oai.routes.apis import ANTHROPIC, APIS, OLLAMA, OPENAI, RESPONSES, api_of
from api_like_oai.routes.declare import ADMIN, ADMIN_KEY, DECLARATIONS, PUBLIC, all_declarations
from api_like_oai.routes.docs import documentation, openapi_path, registered

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
    assert [route for route, (entry, _) in documentation(app).items() if entry is None] == []  # each one declared
    rules = {rule.rule for rule in app.url_map.iter_rules()}
    assert {"/static/<path:filename>", "/docs", "/ui/<path:name>"} <= rules  # what is declared undocumented exists
    assert not {path for _, path in routes} & {"/docs", "/ui", "/static/{filename}"}


def declared_routes(declarations) -> set[tuple[str, str, str]]:
    return {(d.endpoint, method, path) for d in declarations for path in d.paths for method in d.methods}


def registered_views(app) -> set[tuple[str, str, str]]:
    return {(rule.endpoint, method, rule.rule) for rule in app.url_map.iter_rules() for method in rule.methods - {"OPTIONS"}}


@pytest.mark.parametrize("name", ["default", "no native API", "fleet"])
def test_every_view_is_declared_as_it_is_registered(apps, name):
    views = registered_views(apps[name])
    undeclared = sorted(view for view in views if view[0] not in DECLARATIONS)
    assert undeclared == []
    declared = declared_routes(DECLARATIONS[endpoint] for endpoint in {view[0] for view in views})
    implicit_heads = {(endpoint, "HEAD", path) for endpoint, method, path in declared if method == "GET"}
    assert views - implicit_heads == declared - implicit_heads  # paths and methods exactly as declared


def test_every_declaration_names_a_registered_view(apps):
    registered_anywhere = set().union(*(registered_views(app) for app in (apps["default"], apps["fleet"])))
    missing = sorted(declared_routes(all_declarations()) - registered_anywhere)
    assert missing == []


def test_a_view_without_a_declaration_fails_the_check(apps):
    app = make_app("--chat-prompt-model", "chatml")
    app.add_url_rule("/v1/forgotten", "forgotten", lambda: "", methods=["GET"])
    assert ("forgotten", "GET", "/v1/forgotten") in registered_views(app) and "forgotten" not in DECLARATIONS
    assert documentation(app)["get", "/v1/forgotten"] == (None, None)


def test_the_native_api_is_documented_only_where_it_is_registered(apps):
    assert ("get", "/props") in document_paths(apps["default"])
    assert ("get", "/props") not in document_paths(apps["no native API"])
    assert ("get", "/v1/fleet/status") in document_paths(apps["fleet"])
    assert ("get", "/v1/fleet/status") not in document_paths(apps["default"])


def test_nothing_is_documented_that_no_app_registers(apps):
    registered_anywhere = {(method, path) for app in apps.values() for method, path, _ in registered(app)}
    documented = {
        (method.lower(), openapi_path(path))
        for d in all_declarations()
        if d.documented
        for path in d.paths
        for method in d.methods
        if method != "HEAD"
    }
    assert sorted(documented - registered_anywhere) == []


def test_an_alias_is_documented_as_its_route(apps):
    documented = documentation(apps["default"])
    entry, alias_of = documented["post", "/chat/completions"]
    assert alias_of == "/v1/chat/completions" and entry is documented["post", "/v1/chat/completions"][0]
    assert documented["post", "/v1/chat/completions"][1] is None
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
    # every route under its prefix is a view of its own blueprint, declared there
    for (method, path), (declaration, _) in documentation(app).items():
        if api.owns(path):
            assert declaration is not None and declaration.endpoint.startswith(blueprint.name + "."), (method, path)


@pytest.fixture(scope="module")
def keyed_document():
    """The document of a proxy that asks for keys (a flag's key and an admin key)."""
    return make_app("--chat-prompt-model", "chatml", "--api-key", "sk-flag", "--admin-key", "sk-admin").test_client()


def operation(client, method: str, path: str) -> dict:
    return client.get("/openapi.json").get_json()["paths"][path][method]


@pytest.mark.parametrize("path", ["/v1/audio/transcriptions", "/audio/translations"])
def test_speech_to_text_is_documented_as_the_multipart_form_it_takes(apps, path):
    body = operation(apps["default"].test_client(), "post", path)["requestBody"]["content"]
    schema = body["multipart/form-data"]["schema"]
    assert list(body) == ["multipart/form-data"] and schema["required"] == ["file"]
    assert schema["properties"]["file"] == {"type": "string", "format": "binary"}
    assert {"model", "language", "prompt", "response_format", "temperature", "timestamp_granularities[]"} <= set(
        schema["properties"]
    )
    assert schema["additionalProperties"] is False  # the form refuses a field it does not know


def test_ollamas_show_requires_a_model_as_its_view_does(apps):
    client = apps["default"].test_client()
    schema = client.get("/openapi.json").get_json()["paths"]["/api/show"]["post"]["requestBody"]["content"]
    schema = schema["application/json"]["schema"]
    assert [option["required"] for option in schema["anyOf"]] == [["model"], ["name"]]
    refused = client.post("/api/show", json={"verbose": True})
    assert refused.status_code == 400 and refused.get_json() == {"error": "model is required"}


@pytest.mark.parametrize("path", ["/api/pull", "/api/push", "/api/create", "/api/copy", "/api/blobs/{digest}"])
def test_a_route_that_only_refuses_documents_its_refusal_and_no_success(apps, path):
    responses = operation(apps["default"].test_client(), "post", path)["responses"]
    assert "400" in responses and not [code for code in responses if code.startswith("2")]
    assert responses["400"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ErrorBody"}
    sent = apps["default"].test_client().post(path.replace("{digest}", "sha256-00"), json={"model": "m"})
    assert sent.status_code == 400


def test_every_operation_documents_the_statuses_of_who_may_call_it(keyed_document):
    paths = keyed_document.get("/openapi.json").get_json()["paths"]
    for path, operations in paths.items():
        for method, described in operations.items():
            codes = set(described["responses"])
            assert {"403", "413", "500"} <= codes, (method, path)  # a foreign web page, a chunked body, a bug
            if described["security"]:
                assert {"401", "404"} <= codes, (method, path)
    assert {"400", "401", "404", "429", "502", "503", "504"} <= set(paths["/v1/chat/completions"]["post"]["responses"])
    assert "529" in paths["/v1/messages"]["post"]["responses"]
    assert {"201", "409"} <= set(paths["/v1/internal/keys"]["post"]["responses"])
    assert "200" not in paths["/v1/internal/keys"]["post"]["responses"]
    assert "501" not in paths["/infill"]["post"]["responses"] and "default" in paths["/infill"]["post"]["responses"]
    assert "503" in paths["/health"]["get"]["responses"] and "401" not in paths["/health"]["get"]["responses"]


def test_security_follows_each_routes_access_and_the_proxys_keys(apps, keyed_document):
    keyed = keyed_document.get("/openapi.json").get_json()
    assert set(keyed["components"]["securitySchemes"]) == {"bearer", "x-api-key", "fleet"}
    assert keyed["paths"]["/health"]["get"]["security"] == [] and keyed["paths"]["/"]["get"]["security"] == []
    assert keyed["paths"]["/v1/chat/completions"]["post"]["security"] == [{"bearer": []}, {"x-api-key": []}]
    assert keyed["paths"]["/v1/internal/keys"]["get"]["security"] == [{"bearer": []}, {"x-api-key": []}]
    open_paths = apps["default"].test_client().get("/openapi.json").get_json()["paths"]
    assert open_paths["/v1/chat/completions"]["post"]["security"] == []  # no key asked: none documented
    fleet_paths = apps["fleet"].test_client().get("/openapi.json").get_json()["paths"]
    assert fleet_paths["/v1/fleet/status"]["get"]["security"] == [{"fleet": []}]
    assert "security" not in keyed  # per operation only


def test_the_admins_routes_refuse_any_other_key(keyed_document):
    guarded = [d for d in all_declarations() if d.access in (ADMIN, ADMIN_KEY)]
    assert {"/metrics", "/v1/internal/keys", "/models/load", "/api/delete", "/v1/internal/stop-generation"} <= {
        path for d in guarded for path in d.paths
    }
    for declaration in guarded:
        for path in declaration.paths:
            for method in set(declaration.methods) - {"HEAD"}:
                url = path.replace("<name>", "of-a").replace("<request_id>", "r1")
                answer = keyed_document.open(url, method=method, json={"model": "m"}, headers={"Authorization": "Bearer sk-flag"})
                assert answer.status_code == 403, (method, path)
                assert "needs an admin key" in answer.get_data(as_text=True)


def test_public_routes_ask_no_key_and_the_others_do(keyed_document):
    public = {path for d in all_declarations() if d.access == PUBLIC for path in d.paths if "<" not in path}
    assert {"/", "/api/version", "/health", "/api/hello", "/openapi.json", "/docs", "/ui"} <= public
    for path in public:
        assert keyed_document.get(path).status_code != 401, path
    assert keyed_document.post("/health").status_code == 405  # a method the public route does not take: no key asked
    assert keyed_document.get("/v1/models").status_code == 401


def test_the_fleet_relays_every_route_of_a_keys_model():
    from api_like_oai.routes.fleet import model_routes

    relayed = model_routes()
    before = {"/v1/chat/completions", "/chat/completions", "/v1/completions", "/completions", "/v1/embeddings", "/embeddings"}
    before |= {"/v1/messages", "/v1/messages/count_tokens", "/v1/responses", "/responses"}
    assert before <= relayed  # what it relayed when the list was written by hand
    assert {"/api/chat", "/api/generate", "/api/embed", "/v1/rerank", "/v2/rerank", "/completion", "/props"} <= relayed
    assert "/v1/audio/transcriptions" in relayed  # a form's model (tests/unit/test_fleet_routes.py: every one)
    assert not relayed & {"/models/load", "/v1/internal/model/load", "/api/delete", "/v1/fleet/load"}


def test_the_endpoint_table_has_a_row_per_documented_route():
    table = declare.endpoint_table_markdown().splitlines()
    assert table[0] == "| Method | Path | What it does | Access | Model named in |"
    rows = [row for row in table[2:] if "`/v1/chat/completions`<br>`/chat/completions`" in row]
    assert rows == [
        "| POST | `/v1/chat/completions`<br>`/chat/completions` | "
        + DECLARATIONS["completions.create_chat_completion"].summary
        + " | key | json |"
    ]
    assert len(table) - 2 == len([d for d in all_declarations() if d.documented])
    assert not [row for row in table if "/docs" in row or "/ui" in row]
