"""The whole surface against its own document (issue 48): schemathesis (pinned) generates requests for
every operation of /openapi.json and sends them to the real proxy in front of a real llama-server
(SmolLM2, started by the proxy), in the set-ups people run: no keys; managed keys, called with an
ordinary key; a fleet front over a box. Each answer must be one the document promises (status, content
type, body schema, headers), never a server error of the proxy's own; a schema-valid request is accepted
unless its 400 names a refusal the operation declares (`x-refusals`: what no schema can say), a
schema-breaking one refused; auth is not ignored; a 405 says what is allowed and an undeclared method is
refused. Calls are also chained along the links schemathesis infers (stateful). Afterwards the model
still answers. The seed is fixed (a failure here reproduces); `scripts/fuzz` runs it longer with a random
seed."""

from __future__ import annotations

import os

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, seed, settings
from hypothesis.errors import Flaky
from hypothesis.stateful import run_state_machine_as_test
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import Failure, FailureGroup
from schemathesis.specs.openapi.checks import (
    allow_header_conformance,
    content_type_conformance,
    ignored_auth,
    missing_required_header,
    negative_data_rejection,
    positive_data_acceptance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
    unsupported_method,
)

from api_like_oai.batch.batches import FINISHED

from ..servers import Proxy, eventually, fleet_box, fleet_redis, launch_all, llama_servers_on, stop

ADMIN = "sk-admin-contract"
EXAMPLES = int(os.environ.get("CONTRACT_EXAMPLES", "4"))  # scripts/fuzz asks for more
SEED = os.environ.get("CONTRACT_SEED")  # scripts/fuzz: a random one; here a fixed one
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    allow_header_conformance,
    unsupported_method,
]


def accepted_unless_refused(ctx, response, case):
    """schemathesis' positive_data_acceptance, read with the document's own refusals: a schema-valid
    request is accepted, unless its answer is a 400 whose code (X-Error-Code, every API) the operation's
    400 lists in `x-refusals` (what no schema can say: a chat model asked to rerank, audio that is not
    audio, a tool_choice naming no tool), or the operation documents no success at all (a route that
    only refuses, such as Ollama's /api/pull), and its answer is one of the refusals it documents."""
    responses = case.operation.definition.raw.get("responses", {})
    refusals = responses.get("400", {}).get("x-refusals", {})
    if response.status_code == 400 and response.headers.get("x-error-code", [None])[0] in refusals:
        return None
    if not any(code.startswith("2") for code in responses) and str(response.status_code) in responses:
        return None
    return positive_data_acceptance(ctx, response, case)


CHECKS += [
    accepted_unless_refused,
    negative_data_rejection,
    ignored_auth,
    missing_required_header,
    response_headers_conformance,
]
CONFIG = """
models:
  smol:
    model: {model}
    args: [--ctx-size, "1024", --parallel, "2", --threads, "1"]
    max_tokens: 8
"""
# Streams that never end by themselves (the models' and the dashboard's events) are read where they are tested.
ENDLESS = "^/v1/internal/(models/)?events$"


def _start(provisioned, folder, *flags: str) -> Proxy:
    (folder / "config.yaml").write_text(CONFIG.format(model=provisioned["MODEL"]))
    return Proxy(["--config", str(folder / "config.yaml"), "--llama-server", provisioned["LLAMA_SERVER"], *flags]).start()


def _stopped(proxy: Proxy, headers: dict) -> None:
    """The proxy stopped after checking that its model still answers; none of its llama-servers outlives it."""
    body = {"model": "smol", "messages": [{"role": "user", "content": "Say hi."}]}
    answer = requests.post(f"{proxy.url}/v1/chat/completions", json=body, headers=headers, timeout=120)
    status = requests.get(f"{proxy.url}/v1/models/smol", headers=headers, timeout=10).json().get("status", {})
    ports = [int(url.rsplit(":", 1)[1]) for url in status.get("upstreams") or []]
    stop(proxy.process)
    assert answer.status_code == 200, f"after the fuzzing the model does not answer: {answer.text}"
    assert [port for port in ports if llama_servers_on(port)] == []


@pytest.fixture(scope="module")
def open_proxy(provisioned, tmp_path_factory):
    proxy = _start(provisioned, tmp_path_factory.mktemp("contract-open"))
    yield proxy
    _stopped(proxy, {})


@pytest.fixture(scope="module")
def keyed_proxy(provisioned, tmp_path_factory):
    """Managed keys: (the proxy, an ordinary key's headers, the admin's headers)."""
    folder = tmp_path_factory.mktemp("contract-keys")
    proxy = _start(provisioned, folder, "--admin-key", ADMIN, "--store", f"sqlite:///{folder / 'store.db'}")
    admin = {"Authorization": f"Bearer {ADMIN}"}
    made = requests.post(f"{proxy.url}/v1/internal/keys", json={"name": "tenant"}, headers=admin, timeout=10).json()
    yield proxy, {"Authorization": f"Bearer {made['key']}"}, admin
    _stopped(proxy, admin)


@pytest.fixture(scope="module")
def fleet_front(provisioned, tmp_path_factory):
    """A fleet front (no models of its own, no keys) over one box serving the model, sharing one Redis."""
    folder = tmp_path_factory.mktemp("contract-fleet")
    redis_server, common = fleet_redis(folder, "a-fleet-secret-for-the-contract-tests-0123456789")
    box = fleet_box(folder, 0, common, provisioned, config=CONFIG.format(model="$MODEL") + "    memory: 300\n")
    front = Proxy(common, host="127.0.0.4")
    try:
        launch_all([box, front])
        eventually(lambda: _models(front) == ["smol"], "the box's model listed by the front")
        yield front
        _stopped(front, {})
    finally:
        stop(*(proxy.process for proxy in (box, front) if proxy.process and proxy.process.poll() is None))
        redis_server.stop()


def _models(proxy: Proxy) -> list[str]:
    return [card["id"] for card in requests.get(f"{proxy.url}/v1/models", timeout=10).json()["data"]]


_LEARNING = {} if SEED else {"extra-data-sources": {"responses": False}, "error-feedback": {"enabled": False}}
SEED_OR_FIXED = int(SEED) if SEED else 48
# Built once for the module and shared by the stateless and the stateful runs. The stateful phase is on
# because the state machine leaves out the rules of operations whose phase is off (it is this module,
# not schemathesis' runner, that decides which runs happen).
SCHEMATHESIS = schemathesis.Config.from_dict(
    {
        "seed": SEED_OR_FIXED,
        "suppress-health-check": ["too_slow", "filter_too_much", "data_too_large", "large_base_example"],
        "generation": {"mode": "all", "max-examples": EXAMPLES, "database": "none", "deterministic": not SEED},
        # CI's fixed seed draws the same requests whatever the proxy answered before (scripts/fuzz learns from answers)
        "phases": {"stateful": {"enabled": True}, "fuzzing": _LEARNING},
        "request-timeout": 120,
    }
)


def _schema(url: str):
    return schemathesis.openapi.from_url(f"{url}/openapi.json", config=SCHEMATHESIS).exclude(path_regex=ENDLESS)


def _failures(url: str, headers: dict) -> list[str]:
    """Every operation's examples sent with `headers`; what failed, one line per operation (its first
    failure, as schemathesis explains it)."""
    failures = []
    for result in _schema(url).get_all_operations():
        operation = result.ok()

        @seed(SEED_OR_FIXED)
        @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(case=operation.as_strategy())
        def sent(case):
            case.call_and_validate(checks=CHECKS, headers=headers)

        try:
            sent()
        except (Failure, FailureGroup) as failure:  # schemathesis' own, one group per operation
            failures.append(f"{operation.method.upper()} {operation.path}: {str(failure)[:1500]}")
        except Exception as failure:  # noqa: BLE001 - no answer at all (a timeout), named with its operation
            failures.append(f"{operation.method.upper()} {operation.path}: {type(failure).__name__}: {str(failure)[:1500]}")
    return failures


def _stateful_failures(url: str, headers: dict) -> list[str]:
    """Sequences of calls along the links schemathesis infers from the document (a conversation made,
    then read, its items added, listed and deleted; a file uploaded, then read and deleted; a batch made,
    then read and cancelled, ...), each answer held to the same checks; what failed, as one line.

    Hypothesis needs an example's draws to follow from its choices alone, but here they follow from the
    proxy's answers too: a listed file's id is used (so not drawn) only when the list has one, and a
    bundle's size and the rules open depend on the statuses answered. Those answers depended on what
    earlier examples and tests had left (files, batches still running, requests in flight), so an
    example replayed, or one sharing another's first choices, drew differently: FlakyStrategyDefinition,
    which also hid the failure being replayed. So every example starts from the same listed state, the
    seed is fixed, and a failure is kept where it is first seen, not where a replay would meet it."""
    machine = _schema(url).as_state_machine()
    found: list[str] = []

    class Calls(machine):
        def setup(self):
            _listed_state_reset(url, headers)

        def get_call_kwargs(self, case):
            return {"headers": headers}

        def validate_response(self, response, case, additional_checks=None, **kwargs):
            try:
                case.validate_response(response, checks=CHECKS)
            except (Failure, FailureGroup) as failure:
                found.append(str(failure)[:3000])
                raise

    examples = settings(
        max_examples=EXAMPLES * 10, stateful_step_count=6, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    try:
        run_state_machine_as_test(seed(SEED_OR_FIXED)(Calls), settings=examples)
    except (Failure, FailureGroup, Flaky):
        if not found:  # not a check's failure: generation itself differed, which the reset is to prevent
            raise
    return found[:1]


def _listed_state_reset(url: str, headers: dict) -> None:
    """What the listings schemathesis follows links from show, made the same for every example: the
    caller's batches ended (cancelled if running, as they write files and send requests in the
    background), nothing in flight, and none of its files left. Conversations and responses are not
    listed, and the models' list does not change."""
    batches = requests.get(f"{url}/v1/batches", params={"limit": 100}, headers=headers, timeout=30).json()["data"]
    for batch in batches:
        if batch["status"] not in (*FINISHED, "cancelling"):
            requests.post(f"{url}/v1/batches/{batch['id']}/cancel", headers=headers, timeout=30)
    eventually(lambda: _quiet(url, headers), "the caller's batches ended and its requests answered", timeout=120)
    files = requests.get(f"{url}/v1/files", params={"limit": 10000}, headers=headers, timeout=30).json()["data"]
    for file in files:
        requests.delete(f"{url}/v1/files/{file['id']}", headers=headers, timeout=30)


def _quiet(url: str, headers: dict) -> bool:
    batches = requests.get(f"{url}/v1/batches", params={"limit": 100}, headers=headers, timeout=30).json()["data"]
    in_flight = requests.get(f"{url}/v1/internal/requests", headers=headers, timeout=30).json()["data"]
    return in_flight == [] and all(batch["status"] in FINISHED for batch in batches)


def test_with_no_keys_every_answer_is_one_the_document_promises(open_proxy):
    failures = _failures(open_proxy.url, {})
    assert failures == [], "\n\n".join(failures)


def test_with_an_ordinary_managed_key_every_answer_is_one_the_document_promises(keyed_proxy):
    proxy, tenant, _ = keyed_proxy
    failures = _failures(proxy.url, tenant)
    assert failures == [], "\n\n".join(failures)


def test_through_a_fleet_front_every_answer_is_one_the_document_promises(fleet_front):
    failures = _failures(fleet_front.url, {})
    assert failures == [], "\n\n".join(failures)


@pytest.mark.parametrize("set_up", ["no keys", "an ordinary managed key", "a fleet front"])
def test_calls_along_the_documents_links_are_answered_as_it_promises(set_up, request):
    if set_up == "no keys":
        url, headers = request.getfixturevalue("open_proxy").url, {}
    elif set_up == "a fleet front":
        url, headers = request.getfixturevalue("fleet_front").url, {}
    else:
        proxy, headers, _ = request.getfixturevalue("keyed_proxy")
        url = proxy.url
    failures = _stateful_failures(url, headers)
    assert failures == [], "\n\n".join(failures)
