"""The routing decisions of backends/routing.py: prefix, session, least busy, bounded load, failover."""

from __future__ import annotations

import pytest

from api_like_oai.backends.routing import (
    BLOCK_BYTES,
    Affinity,
    PrefixTable,
    Router,
    RoutingPolicy,
    UpstreamLoad,
    rendezvous,
    session_key,
    wants_probabilities,
)

A, B, C = "http://a:8080", "http://b:8080", "http://c:8080"
CONVERSATION = "".join(f"turn {n}: " + "the quick brown fox jumps over the lazy dog. " * 12 for n in range(10))


def loads(**in_flight) -> list[UpstreamLoad]:
    """Upstreams a, b, c with the given requests in flight; a negative count means unhealthy."""
    urls = {"a": A, "b": B, "c": C}
    return [UpstreamLoad(urls[name], count >= 0, max(count, 0)) for name, count in in_flight.items()]


def learned(router: Router, prompt: str, url: str) -> Router:
    router.learn(Affinity(prompt), url)
    return router


# --- digests -------------------------------------------------------------------------------------


def test_a_prompt_and_its_continuation_share_the_digests_of_their_common_whole_blocks():
    turn_1, turn_2 = Affinity(CONVERSATION[:2000]), Affinity(CONVERSATION)
    assert len(turn_1.digests) == 2000 // BLOCK_BYTES  # the last, partial block is not counted
    assert turn_2.digests[: len(turn_1.digests)] == turn_1.digests


def test_block_k_stands_for_every_block_before_it():
    changed_first_block = Affinity("X" + CONVERSATION[1:])
    assert set(changed_first_block.digests).isdisjoint(Affinity(CONVERSATION).digests)


def test_token_id_prompts_have_prefix_digests_too():
    tokens = list(range(1000))
    assert Affinity(tokens + [5, 6, 7] * 100).digests[: len(Affinity(tokens).digests)] == Affinity(tokens).digests
    assert Affinity(tokens).digests


# --- prefix ------------------------------------------------------------------------------------


def test_the_next_turn_goes_where_the_conversation_was_answered():
    router = learned(Router(), CONVERSATION[:4000], B)
    route = router.route(loads(a=0, b=1), Affinity(CONVERSATION))
    assert route.order == (B, A) and route.reason == "prefix" and route.hit


def test_the_longest_prefix_wins():
    router = learned(learned(Router(), CONVERSATION[:3000], A), CONVERSATION[:4500], B)
    assert router.route(loads(a=0, b=0), Affinity(CONVERSATION)).order[0] == B


def test_a_match_of_less_than_half_the_prompt_does_not_decide():
    """A shared system prompt should not pull every new conversation onto one server."""
    router = learned(Router(), CONVERSATION[:1000], B)
    route = router.route(loads(a=0, b=0), Affinity(CONVERSATION))
    assert route.reason == "least-busy"


def test_a_prompt_shorter_than_a_block_is_never_a_hit():
    router = learned(Router(), "Hi", B)
    assert router.route(loads(a=0, b=0), Affinity("Hi")).reason == "least-busy"


@pytest.mark.parametrize(("busy", "expected"), [(2, "prefix"), (3, "overloaded")])
def test_bounded_load_sends_the_request_to_the_least_busy_beyond_the_margin(busy, expected):
    router = learned(Router(RoutingPolicy(load_margin=2)), CONVERSATION[:4000], B)
    route = router.route(loads(a=0, b=busy, c=1), Affinity(CONVERSATION))
    assert route.reason == expected
    assert route.order[0] == (B if expected == "prefix" else A)


def test_a_dead_upstreams_prefix_is_passed_over_and_its_session_moves():
    router = learned(Router(), CONVERSATION[:4000], B)
    moved = router.route(loads(a=0, b=-1), Affinity(CONVERSATION))
    assert moved.order == (A, B) and moved.reason == "least-busy"  # the dead one stays a last resort
    router.learn(Affinity(CONVERSATION), A)
    back = router.route(loads(a=0, b=0), Affinity(CONVERSATION + " and more"))
    assert back.order[0] == A and back.hit  # the next turn follows it to where it moved


def test_least_busy_mode_ignores_prefixes_and_sessions():
    router = learned(Router(RoutingPolicy(mode="least-busy")), CONVERSATION[:4000], B)
    route = router.route(loads(a=0, b=1), Affinity(CONVERSATION, session="s-1"))
    assert route.order == (A, B) and route.reason == "least-busy"
    assert router.table.entries == {}  # nothing learned either


# --- sessions ------------------------------------------------------------------------------------


def test_a_new_prompt_with_a_session_key_goes_where_the_key_hashes():
    router = Router()
    for session in ("alpha", "beta", "gamma", "delta"):
        expected = rendezvous(session, [A, B, C])[0]
        route = router.route(loads(a=1, b=0, c=2), Affinity(f"a new prompt of {session}", session))
        assert route.order[0] == expected and route.reason == "session"


def test_session_keys_spread_new_sessions_over_the_upstreams():
    router = Router()
    chosen = {router.route(loads(a=0, b=0, c=0), Affinity("hello", f"session-{n}")).order[0] for n in range(30)}
    assert chosen == {A, B, C}


def test_a_dead_upstream_moves_only_its_own_sessions():
    router = Router()
    sessions = [f"session-{n}" for n in range(60)]
    before = {s: router.route(loads(a=0, b=0, c=0), Affinity("hi", s)).order[0] for s in sessions}
    after = {s: router.route(loads(a=0, b=-1, c=0), Affinity("hi", s)).order[0] for s in sessions}
    assert all(after[s] != B for s in sessions)
    assert all(after[s] == before[s] for s in sessions if before[s] != B)
    assert any(before[s] == B for s in sessions)


def test_a_known_prefix_wins_over_the_session_key():
    router = learned(Router(), CONVERSATION[:4000], B)
    session = next(s for s in (f"s{n}" for n in range(100)) if rendezvous(s, [A, B])[0] == A)
    assert router.route(loads(a=0, b=0), Affinity(CONVERSATION, session)).order[0] == B


def test_a_session_upstream_beyond_the_margin_gives_way():
    session = next(s for s in (f"s{n}" for n in range(100)) if rendezvous(s, [A, B])[0] == B)
    route = Router(RoutingPolicy(load_margin=1)).route(loads(a=0, b=2), Affinity("hi", session))
    assert route.order[0] == A and route.reason == "overloaded"


def test_session_key_takes_the_first_key_given():
    assert session_key(None, "", "header-id", "user-1") == "header-id"
    assert session_key(None, None) is None


# --- least busy -----------------------------------------------------------------------------------


def test_without_prefix_or_session_the_least_busy_healthy_upstream_is_first():
    route = Router().route(loads(a=-1, b=3, c=1), Affinity("a prompt nobody has seen"))
    assert route.order == (C, B, A) and route.reason == "least-busy"


def test_new_prompts_spread_over_equally_idle_upstreams():
    router = Router()
    chosen = {router.route(loads(a=0, b=0, c=0), Affinity(f"prompt {n}")).order[0] for n in range(30)}
    assert chosen == {A, B, C}


def test_without_an_affinity_or_a_healthy_upstream_the_order_is_least_in_flight():
    assert Router().route(loads(a=2, b=1, c=2)).order == (B, A, C)
    assert Router().route(loads(a=-1, b=-1), Affinity(CONVERSATION, "s")).order == (A, B)


# --- the table -------------------------------------------------------------------------------------


def test_the_table_is_bounded_and_forgets_the_least_recently_learned():
    table = PrefixTable(capacity=3)
    table.learn([1, 2], A)
    table.learn([3], B)
    table.learn([1], C)  # learned again: now the most recent
    table.learn([4], A)
    assert dict(table.entries) == {3: B, 1: C, 4: A}


def test_a_forgotten_prefix_is_no_longer_a_hit():
    router = Router(table=PrefixTable(capacity=4))
    router.learn(Affinity(CONVERSATION[:4000]), B)
    router.learn(Affinity("other " * 200), A)
    assert router.route(loads(a=0, b=0), Affinity(CONVERSATION)).reason == "least-busy"


# --- health: a route never puts an unhealthy upstream before a healthy one -----------------------


def _session_hashing_to(url: str) -> str:
    return next(s for s in (f"s{n}" for n in range(200)) if rendezvous(s, [A, B, C])[0] == url)


# Each reason's would-be choice is B: (router, affinity, in flight of a, b, c when all are healthy).
REASONS = {
    "prefix": lambda: (learned(Router(), CONVERSATION[:4000], B), Affinity(CONVERSATION), (0, 0, 0)),
    "session": lambda: (Router(), Affinity("a new prompt", _session_hashing_to(B)), (0, 0, 0)),
    "least-busy": lambda: (Router(), Affinity("a prompt nobody has seen"), (2, 0, 1)),
    "overloaded": lambda: (
        learned(Router(RoutingPolicy(load_margin=0)), CONVERSATION[:4000], A),
        Affinity(CONVERSATION),
        (3, 0, 1),
    ),
    "least-busy mode": lambda: (Router(RoutingPolicy(mode="least-busy")), Affinity(CONVERSATION, "s"), (2, 0, 1)),
    "no affinity": lambda: (Router(), None, (2, 0, 1)),
}


@pytest.mark.parametrize("reason", REASONS)
def test_every_reason_names_its_choice_first_while_it_is_healthy_and_a_healthy_one_once_it_is_not(reason):
    router, affinity, (a, b, c) = REASONS[reason]()
    assert router.route(loads(a=a, b=b, c=c), affinity).order[0] == B
    for down in ({B}, {A, B}, {B, C}):
        upstreams = [UpstreamLoad(u.url, u.url not in down, u.in_flight) for u in loads(a=a, b=b, c=c)]
        order = router.route(upstreams, affinity).order
        assert set(order[: 3 - len(down)]).isdisjoint(down) and set(order) == {A, B, C}, (down, order)


def test_forgetting_an_upstream_drops_only_its_prefixes():
    router = learned(learned(Router(), CONVERSATION[:4000], B), "other " * 200, A)
    router.forget(B)
    assert router.route(loads(a=0, b=0), Affinity(CONVERSATION)).reason == "least-busy"
    assert router.route(loads(a=0, b=0), Affinity("other " * 200)).order[0] == A
    assert set(router.table.entries.values()) == {A}


# --- log probabilities and draft models --------------------------------------------------------


def drafting(in_flight: list[UpstreamLoad], *names: str) -> list[UpstreamLoad]:
    urls = {{"a": A, "b": B, "c": C}[name] for name in names}
    return [UpstreamLoad(u.url, u.healthy, u.in_flight, u.url in urls) for u in in_flight]


def test_a_request_for_logprobs_goes_to_an_upstream_without_a_draft_even_against_its_prefix():
    router = learned(Router(), CONVERSATION, A)
    upstreams = drafting(loads(a=0, b=3, c=0), "a", "c")
    route = router.route(upstreams, Affinity(CONVERSATION), exact_probabilities=True)
    assert route.order[0] == B and set(route.order[1:]) == {A, C}  # the drafting ones: its last resort
    assert router.route(upstreams, Affinity(CONVERSATION)).order[0] == A  # without logprobs: the prefix


def test_among_upstreams_without_a_draft_the_usual_rules_choose():
    router = learned(Router(), CONVERSATION, C)
    upstreams = drafting(loads(a=0, b=0, c=0), "a")
    route = router.route(upstreams, Affinity(CONVERSATION), exact_probabilities=True)
    assert route.order[0] == C and route.hit and route.order[-1] == A


def test_with_no_healthy_upstream_without_a_draft_a_drafting_one_answers():
    upstreams = drafting(loads(a=-1, b=0), "b")
    assert Router().route(upstreams, Affinity(CONVERSATION), exact_probabilities=True).order[0] == B
    every_one_drafts = drafting(loads(a=2, b=0), "a", "b")
    assert Router().route(every_one_drafts, None, exact_probabilities=True).order[0] == B


@pytest.mark.parametrize(
    ("body", "wants"),
    [
        ({"logprobs": True}, True),
        ({"logprobs": False}, False),
        ({"logprobs": None}, False),
        ({"logprobs": 0}, True),
        ({"logprobs": 3}, True),
        ({"top_logprobs": 2}, True),
        ({"top_logprobs": 0}, False),
        ({"n_probs": 5}, True),
        ({"n_probs": 0}, False),
        ({"n_probs": True}, False),
        ({}, False),
    ],
)
def test_which_requests_ask_for_log_probabilities(body, wants):
    assert wants_probabilities(body) is wants
