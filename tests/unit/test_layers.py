"""The direction of the imports, read from the code with `ast`: entry -> app -> routes -> services ->
dashboard -> settings -> dialects -> fleet -> backends -> access -> parts -> tools -> foundation, no
module imports a layer above its own, and no two rooms (the package's top-level modules and packages) import each other
round a circle, even within one layer (`api-like-oai keys` and cli.py once did).

Every import counts, at the top of a module or inside a function (the lazy ones that keep a worker's
idle memory small), and those under TYPE_CHECKING: a name a module needs, even only to type it, is a
dependency of that module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "api_like_oai"

# The layers, top to bottom. A module belongs to the layer of the longest prefix listed for it, and may
# import its own layer and those below. Why each sits where it does:
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # What starts the proxy: the console scripts and their dispatch (cli), the gunicorn server and its
    # worker, and the commands beside it (`api-like-oai keys`, `fleet`; the manual's references). Nothing below reaches them.
    # The package root only exports create_app and render_chat, lazily.
    (
        "entry",
        (
            "api_like_oai",
            "api_like_oai.__main__",
            "api_like_oai.cli",
            "api_like_oai.keys_command",
            "api_like_oai.reference",
            "api_like_oai.server",
            "api_like_oai.worker",
            "api_like_oai.supervisor.__main__",
            "api_like_oai.fleet.__main__",
            "api_like_oai.fleet.commands",
        ),
    ),
    # create_app wires everything one app shares (AppState): it builds the registry, the store, the
    # gate, the supervisor's client, the other workers' channel (siblings), traces and /metrics; on
    # ProxyFlask, Flask with what it works out anew on every request remembered (flask_app).
    (
        "app",
        (
            "api_like_oai.app",
            "api_like_oai.flask_app",
            "api_like_oai.siblings",
            "api_like_oai.tracing",
            "api_like_oai.upstream_metrics",
        ),
    ),
    # Thin Flask views: parse, call a service, wrap its answer.
    ("routes", ("api_like_oai.routes",)),
    # The Files and Batch APIs and the batch runner: stored objects (services' scope) and, for the
    # runner, the app itself, which the entry hands it to run each line through as any request.
    ("batch", ("api_like_oai.batch",)),
    # The use cases, no Flask: one entry per API, the generation path, admission, the stored objects.
    ("services", ("api_like_oai.services",)),
    # The dashboard's history buckets and live view, read by its routes and flushed by the app.
    ("dashboard", ("api_like_oai.dashboard",)),
    # What the operator said: flags, environment and YAML merged once into Settings (arguments, config),
    # gathering each subsystem's own declared part (RoutingPolicy, StoreSettings, LaunchSpec, ...) from
    # below. The services read Settings; the subsystems below get only their own part. And where this
    # installation keeps its files and its key (installation: the data dir, the seal's secret).
    ("settings", ("api_like_oai.arguments", "api_like_oai.config", "api_like_oai.settings", "api_like_oai.installation")),
    # The APIs' schemas, translations and shapes, and the thought split out of a model's text: they
    # write the backends' events.
    ("dialects", ("api_like_oai.dialects", "api_like_oai.reasoning")),
    # Many instances, one API: membership in Redis, placement (the router's hash), the relay to a box.
    ("fleet", ("api_like_oai.fleet",)),
    # The upstream clients and the pool: metering and priority at its door come from access.
    ("backends", ("api_like_oai.backends",)),
    # Keys, limits and usage, counted on the storage seam.
    ("access", ("api_like_oai.access",)),
    # Each one kind of I/O or pure: the store (and the storage seam), the supervisor's processes, the MCP
    # clients and policy, the prompt layer, the chat request every dialect becomes (protocol) and
    # OpenAI's answers. None imports another today; one that comes to need another gets a layer above it.
    (
        "parts",
        (
            "api_like_oai.store",
            "api_like_oai.supervisor",
            "api_like_oai.mcp",
            "api_like_oai.prompts",
            "api_like_oai.protocol",
            "api_like_oai.answers",
        ),
    ),
    # Model text -> tool calls, and the grammars that hold a model to them: pure.
    ("tools", ("api_like_oai.tools",)),
    # What every layer may use: errors, event-stream framing and its JSON, digests, work off the event
    # loop, the seal, the request's record (observability), the WSGI middleware both routes and app use,
    # the one GGUF header reader (the supervisor's estimate, a reranker's pooling, Ollama's model facts), the version.
    (
        "foundation",
        (
            "api_like_oai.errors",
            "api_like_oai.sse",
            "api_like_oai.compact_json",
            "api_like_oai.digests",
            "api_like_oai.offload",
            "api_like_oai.sealing",
            "api_like_oai.observability",
            "api_like_oai.middleware",
            "api_like_oai.gguf_header",
            "api_like_oai.version",
        ),
    ),
]
# Apart, whatever their layers: the prompt layer and the upstream clients know nothing of each other (DESIGN.md).
APART = [("api_like_oai.prompts", "api_like_oai.backends"), ("api_like_oai.backends", "api_like_oai.prompts")]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    """The package's modules `path` imports, absolute (a `from . import x` names the module x)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == "api_like_oai"}
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module or ""
            else:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [node.module or ""])
                base = base.rstrip(".")
            if base.split(".")[0] != "api_like_oai":
                continue
            for alias in node.names:  # `from . import routes` imports the module api_like_oai.routes
                submodule = f"{base}.{alias.name}"
                found.add(submodule if _is_module(submodule) else base)
    return found


def _is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def layer_of(module: str) -> int:
    """The index of `module`'s layer in LAYERS (0 is the top); the longest listed prefix decides."""
    best, best_length = None, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_length:
                best, best_length = index, len(prefix)
    if best is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS in {Path(__file__).name}, saying why")
    return best


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_every_module_has_a_layer():
    for path in _sources():
        layer_of(module_name(path))


def test_no_module_imports_a_layer_above_its_own():
    upward = []
    for path in _sources():
        importer = module_name(path)
        for imported in imported_modules(path):
            if layer_of(imported) < layer_of(importer):
                upward.append(
                    f"{importer} ({LAYERS[layer_of(importer)][0]}) imports {imported} ({LAYERS[layer_of(imported)][0]})"
                )
    assert upward == []


@pytest.mark.parametrize(("importer", "imported"), APART)
def test_prompts_and_backends_import_nothing_of_each_other(importer, imported):
    crossing = [
        f"{module_name(path)} imports {name}"
        for path in _sources()
        if module_name(path).startswith(importer + ".")
        for name in imported_modules(path)
        if name == imported or name.startswith(imported + ".")
    ]
    assert crossing == []


def test_the_walk_sees_relative_lazy_and_type_only_imports():
    """The test's own reading: relative imports, those inside a function and under TYPE_CHECKING count."""
    imports = imported_modules(PACKAGE / "routes" / "anthropic.py")
    assert "api_like_oai.routes.scope" in imported_modules(PACKAGE / "routes" / "responses.py")  # a sibling, relatively
    assert "api_like_oai.dialects.anthropic" in imports  # inside a view, lazily
    assert "api_like_oai.services.messages" in imports  # `from ..services import messages`: the module
    assert "api_like_oai.dialects.conversations" in imported_modules(PACKAGE / "routes" / "scope.py")  # TYPE_CHECKING


def room_of(module: str) -> str:
    """A room: the top-level module or package `module` is part of (the package root is its own)."""
    return ".".join(module.split(".")[:2])


def room_imports() -> dict[str, dict[str, list[str]]]:
    """{room: {room it imports: [the module imports that make the arrow]}}, between different rooms."""
    arrows: dict[str, dict[str, list[str]]] = {}
    for path in _sources():
        importer = module_name(path)
        for imported in imported_modules(path):
            if room_of(importer) != room_of(imported):
                arrows.setdefault(room_of(importer), {}).setdefault(room_of(imported), []).append(
                    f"{importer} imports {imported}"
                )
    return arrows


def circles(arrows: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The rooms that reach each other (strongly connected, more than one), found by Tarjan's walk."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(room: str) -> None:
        index[room] = low[room] = len(index)
        stack.append(room)
        for other in arrows.get(room, {}):
            if other not in index:
                visit(other)
                low[room] = min(low[room], low[other])
            elif other in stack:
                low[room] = min(low[room], index[other])
        if low[room] == index[room]:
            members = stack[stack.index(room) :]
            del stack[stack.index(room) :]
            if len(members) > 1:
                found.append(sorted(members))

    for room in sorted(arrows):
        if room not in index:
            visit(room)
    return found


def test_no_circle_between_rooms():
    """Layers let a layer's own modules import each other; rooms must still not go round a circle."""
    arrows = room_imports()
    described = [
        {room: {other: ties for other, ties in arrows[room].items() if other in circle} for room in circle}
        for circle in circles(arrows)
    ]
    assert described == []


def test_circles_are_found():
    """The walk itself: a circle of three, a room beside it, a dead end."""
    arrows = {"a": {"b": []}, "b": {"c": []}, "c": {"a": [], "d": []}, "e": {"a": []}}
    assert circles(arrows) == [["a", "b", "c"]]
