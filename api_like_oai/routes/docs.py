"""/openapi.json made from the routes the app registered (app.url_map), each described by its declaration
(routes/declare.py: its summary, access, request and answer models, statuses), with the pydantic models of
requests and answers; and /docs (Swagger UI, offline). The document is made per app: which routes are
registered (the native API, the fleet's) and whether a key is asked are the app's.
tests/unit/test_openapi.py holds the document, the views and the declarations equal."""

from __future__ import annotations

import re
from importlib import import_module

from flask import Blueprint, Flask, Response, current_app, jsonify, send_from_directory
from openapi_ui_bundles import swagger_ui
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from .. import answers as o
from ..fleet.settings import SECRET_HEADER
from ..version import __version__
from . import state
from .apis import APIS, api_of
from .declare import ADMIN, ADMIN_KEY, DECLARATIONS, FLEET, KEY, OWN, POOL, PUBLIC, REFUSALS, Declaration, route

bp = Blueprint("docs", __name__)

UNDOCUMENTED = {"documented": False, "recorded": False}  # the document itself, its page and its files
DOCUMENT_KEY = "api_like_oai.openapi"
STREAM_MODELS = [o.ChatCompletionChunk]

# What each status means, and which a route answers by who may call it (beside its own, `statuses`).
# Any route: a web page's foreign Origin (403), a chunked body past --max-body-bytes (413), a bug (500).
# 405 (a method the path does not take) is the app's, for every path: not repeated per operation.
MEANINGS = {
    400: "Invalid request (the error names the field)",
    401: "Missing or wrong API key",
    403: "A route the key may not use, or a web page whose origin CORS does not allow",
    404: "Unknown model (or a model the key may not use), or unknown object",
    409: "The name is taken",
    413: "Body too large",
    429: "A key over one of its limits (Retry-After)",
    500: "Internal error",
    501: "Not supported by this model's llama-server",
    502: "Bad upstream answer",
    503: "Upstream unavailable or loading, or the store unreachable",
    504: "Upstream timeout",
}
ANY_ROUTE = (403, 413, 500)
UNAVAILABLE = 503  # written as the API's own (Anthropic's 529)
GENERATING = (400, 401, 404, 429, 502, UNAVAILABLE, 504)
BY_ACCESS = {
    PUBLIC: (),
    KEY: GENERATING,
    OWN: (400, 401, 404, 429, UNAVAILABLE),
    ADMIN: (400, 401, 404, 502, UNAVAILABLE, 504),
    ADMIN_KEY: (400, 401, 404, UNAVAILABLE),
    FLEET: (400, 401, 404, UNAVAILABLE, 504),
    POOL: (401, 404),
}
KEY_SCHEMES = {
    "bearer": {"type": "http", "scheme": "bearer", "description": "OpenAI's `Authorization: Bearer <key>`"},
    "x-api-key": {"type": "apiKey", "in": "header", "name": "x-api-key", "description": "Anthropic's header"},
}
FLEET_SCHEME = {"fleet": {"type": "apiKey", "in": "header", "name": SECRET_HEADER, "description": "the fleet's secret"}}


def openapi_path(rule: str) -> str:
    """A Flask rule as the document writes its path: `<path:name>` is `{name}`."""
    return re.sub(r"<(?:[^:<>]+:)?(\w+)>", r"{\1}", rule)


def registered(app: Flask) -> list[tuple[str, str, str]]:
    """(method, path as the document writes it, endpoint) of every documented route the app registered."""
    found = []
    for rule in app.url_map.iter_rules():
        declaration = DECLARATIONS.get(rule.endpoint)
        if declaration is None or declaration.documented:
            path = openapi_path(rule.rule)
            found += [(method.lower(), path, rule.endpoint) for method in sorted(rule.methods - {"HEAD", "OPTIONS"})]
    return found


def documentation(app: Flask) -> dict[tuple[str, str], tuple[Declaration | None, str | None]]:
    """Each documented route's (declaration, the path it is an alias of: None for its first path);
    (None, None) for a view nobody declared (tests/unit/test_openapi.py fails on one)."""
    found = {}
    for method, path, endpoint in registered(app):
        declaration = DECLARATIONS.get(endpoint)
        first = openapi_path(declaration.paths[0]) if declaration is not None else path
        found[method, path] = (declaration, None if first == path else first)
    return found


def statuses_of(declaration: Declaration, api_unavailable: int = 503) -> list[int]:
    """Every status the route answers: its answer's, those of its access kind, any route's, its own."""
    codes = {*ANY_ROUTE, *BY_ACCESS[declaration.access], *declaration.statuses}
    if declaration.body is not None:
        codes |= {400, 413}
    if declaration.success is not None:
        codes.add(declaration.success)
    return sorted(api_unavailable if code == UNAVAILABLE else code for code in codes)


def openapi_document(app: Flask) -> dict:
    """The document of `app`'s routes, made once per app."""
    if DOCUMENT_KEY not in app.extensions:
        app.extensions[DOCUMENT_KEY] = _document(documentation(app), keys_asked=state(app).gate.required)
    return app.extensions[DOCUMENT_KEY]


def _document(documented: dict, keys_asked: bool) -> dict:
    declarations = [declaration for declaration, _ in documented.values() if declaration is not None]
    models = {m for d in declarations for m in map(resolved, (d.request, d.answer)) if _is_model(m)}
    models |= {*(resolved(api.error_model) for api in APIS), *STREAM_MODELS}
    modes = [(m, "validation") for m in sorted(models, key=lambda m: m.__name__)]
    _, schemas = models_json_schema(modes, ref_template="#/components/schemas/{model}")
    paths: dict = {}
    for (method, path), (declaration, alias_of) in sorted(documented.items(), key=lambda item: item[0][1]):
        paths.setdefault(path, {})[method] = _operation(path, declaration, alias_of, keys_asked)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "api_like_oai",
            "version": __version__,
            "description": "OpenAI-, Anthropic- and Ollama-compatible API in front of llama.cpp's server. "
            "Any path answers 405 with `Allow` to a method it does not take.",
        },
        "paths": paths,
        "components": {"schemas": schemas.get("$defs", {}), "securitySchemes": {**KEY_SCHEMES, **FLEET_SCHEME}},
    }


def resolved(named):
    """A declaration's model: a class or a schema as it is, "module:attribute" imported (a function named
    so is called for its schema)."""
    if not isinstance(named, str):
        return named
    module, _, attribute = named.partition(":")
    found = import_module(module).__dict__[attribute]
    return found if _is_model(found) else found()


def _is_model(found) -> bool:
    return isinstance(found, type) and issubclass(found, BaseModel)


def _schema(named) -> dict:
    found = resolved(named)
    return {"$ref": f"#/components/schemas/{found.__name__}"} if _is_model(found) else found


def _operation(path: str, declaration: Declaration | None, alias_of: str | None, keys_asked: bool) -> dict:
    if declaration is None:  # a view without a declaration: tests/unit/test_openapi.py fails on it
        return {"summary": "Not declared", "responses": {"default": {"description": "Not declared"}}}
    summary = declaration.summary + (f" (the same as {alias_of})" if alias_of is not None else "")
    operation = {"summary": summary, "responses": _responses(path, declaration), "security": _security(declaration, keys_asked)}
    request_body = _request_body(declaration)
    if request_body is not None:
        operation["requestBody"] = request_body
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}} for name in re.findall(r"{(\w+)}", path)
    ]
    parameters += _query_parameters(resolved(declaration.query))
    if parameters:
        operation["parameters"] = parameters
    return operation


def _security(declaration: Declaration, keys_asked: bool) -> list[dict]:
    """Who the route asks for a credential: none for a public one, or when the proxy asks no key; the
    fleet's secret for the fleet's; else a key, OpenAI's way or Anthropic's."""
    if declaration.access == FLEET:
        return [{"fleet": []}]
    if declaration.access == PUBLIC or not keys_asked:
        return []
    return [{"bearer": []}, {"x-api-key": []}]


def _responses(path: str, declaration: Declaration) -> dict:
    api = api_of(path)
    error = {"application/json": {"schema": _schema(api.error_model)}}
    responses = {}
    for code in statuses_of(declaration, api.unavailable_status):
        if code == declaration.success:
            responses[str(code)] = _answer(declaration)
        elif declaration.relayed and code not in (401, 403, 413):  # llama-server's too, in its own shape
            responses[str(code)] = {"description": MEANINGS.get(code, "Unavailable")}
        else:
            responses[str(code)] = {"description": MEANINGS.get(code, "Unavailable"), "content": error}
    if declaration.refusals:
        responses["400"]["x-refusals"] = {code: REFUSALS[code] for code in declaration.refusals}
    if declaration.relayed:
        responses["default"] = {"description": "llama-server's answer, relayed as it is"}
    return responses


def _answer(declaration: Declaration) -> dict:
    answer: dict = {"description": "OK" if declaration.success == 200 else "Created"}
    content = {media: {} for media in declaration.media}
    if declaration.answer is not None:
        content["application/json"] = {"schema": _schema(declaration.answer)}
    if declaration.stream is not None:
        content[declaration.stream] = {"schema": {"type": "string"}}
    if content:
        answer["content"] = content
    return answer


def _request_body(declaration: Declaration) -> dict | None:
    if declaration.body is None:
        return None
    if declaration.body == "multipart":
        return {"required": True, "content": {"multipart/form-data": {"schema": _form_schema(resolved(declaration.request))}}}
    schema = _schema(declaration.request) if declaration.request is not None else {"type": "object"}
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def _form_schema(form_model) -> dict:
    """A multipart form's fields (the model's, by their form names) and its `file`, required."""
    schema = form_model.model_json_schema(by_alias=True)
    schema.pop("title", None)
    nested = schema.pop("$defs", {})
    fields, together = {}, {}
    for name, field in schema["properties"].items():
        named = _form_fields(name, field, nested)
        fields |= named
        if len(named) > 1:  # an object's fields: given all, or none
            together |= {one: [other for other in named if other != one] for one in named}
    schema["properties"] = {"file": {"type": "string", "format": "binary"}, **fields}
    if together:
        schema["dependentRequired"] = together
    schema["required"] = ["file", *schema.get("required", [])]
    return schema


def _form_fields(name: str, field: dict, nested: dict) -> dict:
    """A form field's schema by its form name; an object's fields as the SDKs send them, one form field
    each (`expires_after[seconds]`), optional as the object is."""
    refs = [option["$ref"] for option in field.get("anyOf", [field]) if "$ref" in option]
    if not refs:
        return {name: _plain(field)}  # a form field is left out, never null
    inner = nested[refs[0].rsplit("/", 1)[1]]["properties"]
    return {f"{name}[{key}]": {k: v for k, v in sub.items() if k != "title"} for key, sub in inner.items()}


def _query_parameters(query_model) -> list[dict]:
    if query_model is None:
        return []
    schema = query_model.model_json_schema()
    required = set(schema.get("required", ()))
    return [
        {"name": name, "in": "query", "required": name in required, "schema": _plain(field)}
        for name, field in schema["properties"].items()
    ]


def _plain(field_schema: dict) -> dict:
    """A query field's schema without its title, an optional string as a plain string."""
    field_schema = {
        key: value for key, value in field_schema.items() if key != "title" and not (key == "default" and value is None)
    }
    options = field_schema.pop("anyOf", None)
    return field_schema | (next(o for o in options if o.get("type") != "null") if options else {})


@route(bp, "/openapi.json", methods=("GET",), summary="This document", access=PUBLIC, **UNDOCUMENTED)
def openapi_json():
    return jsonify(openapi_document(current_app))


DOCS_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>api_like_oai</title>
<link rel="stylesheet" href="/docs/static/swagger-ui.css"></head>
<body><div id="swagger-ui"></div>
<script src="/docs/static/swagger-ui-bundle.js"></script>
<script>window.ui = SwaggerUIBundle({url: "/openapi.json", dom_id: "#swagger-ui"});</script>
</body></html>"""


@route(bp, "/docs", methods=("GET",), summary="The document's page (Swagger UI)", access=PUBLIC, **UNDOCUMENTED)
def docs_page():
    return Response(DOCS_PAGE, mimetype="text/html")


@route(bp, "/docs/static/<path:filename>", methods=("GET",), summary="The page's files", access=PUBLIC, **UNDOCUMENTED)
def docs_static(filename: str):
    return send_from_directory(swagger_ui.static_path, filename)
