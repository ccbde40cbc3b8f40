"""fleet/placement.py and fleet/affinity.py: which box a request goes to, decided without I/O."""

from __future__ import annotations

import json

import pytest

from api_like_oai.fleet.affinity import session_key
from api_like_oai.fleet.membership import box_of, box_record
from api_like_oai.fleet.placement import Box, Candidate, ModelOnBox, Pool, fleet_models, place, pool, replica_start
from api_like_oai.fleet.usage import StreamUsage, counts_in, prompt_bound, reply_bound

A, B, C = "http://127.0.0.2:8081", "http://127.0.0.3:8081", "http://127.0.0.4:8081"


def box(address, budget=1000, saved=(), **models) -> Box:
    return Box(
        address,
        budget,
        {name: ModelOnBox(*state) if isinstance(state, tuple) else state for name, state in models.items()},
        frozenset(saved),
    )


def routes(candidates: list[Candidate]) -> list[tuple[str, str]]:
    return [(c.address, c.route) for c in candidates]


def test_a_session_goes_to_the_same_loaded_box_whatever_the_order_of_the_boxes():
    boxes = [box(A, m=("loaded", 300)), box(B, m=("loaded", 300)), box(C, m=("loaded", 300))]
    chosen = {place("m", order, session="session-1")[0].address for order in (boxes, boxes[::-1], boxes[1:] + boxes[:1])}
    assert len(chosen) == 1
    assert place("m", boxes, session="session-1")[0].route == "prefix"


def test_sessions_spread_over_the_loaded_boxes():
    boxes = [box(A, m=("loaded", 300)), box(B, m=("loaded", 300))]
    chosen = [place("m", boxes, session=f"session-{n}")[0].address for n in range(200)]
    assert 60 < chosen.count(A) < 140


def test_a_box_leaving_moves_only_its_own_sessions():
    three = [box(A, m=("loaded", 300)), box(B, m=("loaded", 300)), box(C, m=("loaded", 300))]
    before = {n: place("m", three, session=f"s{n}")[0].address for n in range(100)}
    after = {n: place("m", three[:2], session=f"s{n}")[0].address for n in range(100)}
    assert all(after[n] == before[n] for n in before if before[n] != C)


def test_without_a_session_the_least_busy_loaded_box_first():
    boxes = [box(A, m=("loaded", 300, 3)), box(B, m=("loaded", 300, 1))]
    assert routes(place("m", boxes)) == [(B, "loaded"), (A, "loaded")]


def test_an_overloaded_box_comes_after_a_cold_one_that_fits():
    boxes = [box(A, m=("loaded", 300, 8)), box(B, m=("unloaded", 300))]
    assert routes(place("m", boxes, session="s")) == [(B, "fits"), (A, "busy")]


def test_a_loading_box_is_joined_before_any_box_starts_a_second_copy():
    boxes = [box(A, m=("unloaded", 300)), box(B, m=("loading", 300, 0, 2))]
    assert routes(place("m", boxes)) == [(B, "loading"), (A, "fits")]


def test_the_cold_start_locks_box_comes_first_among_cold_ones():
    boxes = [box(A, budget=2000, m=("unloaded", 300)), box(B, m=("unloaded", 300))]
    assert routes(place("m", boxes)) == [(A, "fits"), (B, "fits")]  # most free first
    assert routes(place("m", boxes, starting_on=B)) == [(B, "loading"), (A, "fits")]


def test_cold_order_saved_slot_then_fits_then_evicting_idle_models():
    boxes = [
        box(A, m=("unloaded", 600), other=("loaded", 600)),  # must evict `other`
        box(B, m=("unloaded", 600)),  # fits
        box(C, saved={"m"}, m=("unloaded", 600)),
    ]  # fits, and has a saved slot
    assert routes(place("m", boxes)) == [(C, "restored"), (B, "fits"), (A, "evict")]


def test_a_box_whose_pinned_models_leave_no_room_is_no_candidate_one_whose_busy_models_do_is_waited_on():
    boxes = [
        box(A, m=("unloaded", 600), busy=("loaded", 600, 1)),
        box(B, m=("unloaded", 600), pinned=ModelOnBox("loaded", 600, pinned=True)),
    ]
    assert routes(place("m", boxes)) == [(A, "wait")]
    assert place("m", boxes[1:]) == []


def test_a_model_no_box_lists_has_no_candidate():
    assert place("m", [box(A, other=("loaded", 300))]) == []


def test_fleet_models_says_where_each_model_is():
    found = fleet_models([box(B, m=("loaded", 300)), box(A, m=("unloaded", 300), n=("loading", 100))])
    assert {name: [(address, on.state) for address, on in where] for name, where in found.items()} == {
        "m": [(A, "unloaded"), (B, "loaded")],
        "n": [(A, "loading")],
    }


def test_a_record_made_from_the_supervisors_status_reads_back_as_the_box():
    status = {
        "memory_budget_mib": 1000,
        "models": {
            "m": {"value": "loaded", "memory_mib": 300, "in_flight": 2, "queued": 0, "pinned": False},
            "n": {"value": "unloaded", "memory_mib": 500, "in_flight": 0, "queued": 1, "pinned": True},
        },
    }
    record = box_record(A, status, ["static"], ["m"], 12.0)
    assert (record["in_flight"], record["queued"]) == (2, 1)
    parsed = box_of(record)
    assert (parsed.budget_mib, parsed.used_mib, parsed.free_mib, parsed.saved) == (1000, 300, 700, frozenset({"m"}))
    assert parsed.models["static"] == ModelOnBox("loaded", 0, pinned=True)


CHAT_TURN_1 = {"model": "m", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]}
CHAT_TURN_2 = {
    "model": "m",
    "max_tokens": 9,
    "messages": [*CHAT_TURN_1["messages"], {"role": "assistant", "content": "yo"}, {"role": "user", "content": "more"}],
}


@pytest.mark.parametrize(
    "first, later",
    [
        (CHAT_TURN_1, CHAT_TURN_2),
        (
            {"model": "m", "system": "s", "messages": [{"role": "user", "content": "a"}]},
            {
                "model": "m",
                "system": "s",
                "messages": [
                    {"role": "user", "content": "a"},
                    {"role": "assistant", "content": "b"},
                    {"role": "user", "content": "c"},
                ],
            },
        ),
        (
            {"model": "m", "instructions": "i", "input": [{"role": "user", "content": "a"}]},
            {"model": "m", "instructions": "i", "input": [{"role": "user", "content": "a"}, {"type": "function_call_output"}]},
        ),
    ],
)
def test_every_turn_of_a_conversation_has_its_first_turns_session_key(first, later):
    assert session_key(first) == session_key(later) is not None


def test_another_conversation_has_another_key_and_the_clients_own_key_wins():
    other = {**CHAT_TURN_1, "messages": [CHAT_TURN_1["messages"][0], {"role": "user", "content": "bye"}]}
    assert session_key(other) != session_key(CHAT_TURN_1)
    assert session_key({**CHAT_TURN_1, "prompt_cache_key": "k1"}) == "k1"
    assert session_key({"model": "m", "metadata": {"user_id": "u_session_1"}, "messages": []}) == "u_session_1"
    assert session_key({"model": "m"}) is None


@pytest.mark.parametrize(
    "document, counts",
    [
        ({"usage": {"prompt_tokens": 30, "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 20}}}, (30, 4, 20)),
        ({"usage": {"prompt_tokens": 7, "total_tokens": 7}}, (7, 0, 0)),  # embeddings
        (
            {"type": "message_delta", "usage": {"input_tokens": 10, "cache_read_input_tokens": 20, "output_tokens": 4}},
            (30, 4, 20),
        ),  # Anthropic: input excludes the cache
        (
            {
                "type": "response.completed",
                "response": {"usage": {"input_tokens": 30, "output_tokens": 4, "input_tokens_details": {"cached_tokens": 20}}},
            },
            (30, 4, 20),
        ),
        ({"choices": []}, None),
        ([1, 2], None),
    ],
)
def test_a_relayed_answers_tokens_are_read_from_its_usage_in_every_api(document, counts):
    assert counts_in(document) == counts


def test_a_relayed_streams_tokens_are_its_last_usage_events():
    usage = StreamUsage()
    for piece in (
        b'data: {"choices": [{"delta": {"content": "hi"}}]}\n\n',
        b'event: message_delta\ndata: {"usage": {"input_tokens": 1, "cache_read_input_tokens": 2, "output_tokens": 3}}\n\n',
        b"data: [DONE]\n\n",
    ):
        usage.feed(piece)
    assert usage.counts == (3, 3, 2)


def lender(address, lend, budget=100, **models) -> Box:
    return Box(
        address,
        budget,
        {name: ModelOnBox(*state) for name, state in models.items()},
        frozenset(),
        f"{address.removeprefix('http://').split(':')[0]}:50052",
        lend,
    )


def test_a_model_larger_than_any_box_is_pooled_on_the_roomiest_host_with_the_fewest_lenders():
    boxes = [
        box(A, budget=400, big=("unloaded", 600)),
        lender(B, 100, big=("unloaded", 600)),
        lender(C, 300, big=("unloaded", 600)),
    ]
    assert place("big", boxes) == []
    assert pool("big", boxes) == Pool(A, ("127.0.0.4:50052",), 300)  # C's 300 cover the 200 A lacks


def test_no_pool_when_the_loans_do_not_cover_it_or_when_it_fits_alone():
    assert pool("big", [box(A, budget=400, big=("unloaded", 600)), lender(B, 100)]) is None
    assert pool("big", [box(A, budget=800, big=("unloaded", 600)), lender(B, 300)]) is None


def test_a_loan_another_pool_holds_is_not_lent_twice():
    first_pool = ModelOnBox("loaded", 300, borrows=("127.0.0.4:50052",))
    boxes = [
        box(A, budget=400, big=("unloaded", 600)),
        lender(B, 300, big=("unloaded", 600)),
        lender(C, 300),
        box("http://127.0.0.5:8081", budget=400, other=first_pool),
    ]
    assert pool("big", boxes) == Pool(A, ("127.0.0.3:50052",), 300)  # C's loan is the other pool's
    assert pool("big", boxes[:1] + boxes[2:]) is None


def test_a_pooled_models_record_names_the_loans_it_took():
    status = {
        "memory_budget_mib": 400,
        "models": {
            "big": {
                "value": "loaded",
                "memory_mib": 300,
                "in_flight": 0,
                "queued": 0,
                "args": ["--rpc", "10.0.0.3:50052,10.0.0.4:50052"],
            }
        },
    }
    assert box_of(box_record(A, status, [], [], 0.0)).models["big"].borrows == ("10.0.0.3:50052", "10.0.0.4:50052")


def spread(state: str, memory: int = 300, boxes: int = 2, in_flight: int = 0) -> ModelOnBox:
    return ModelOnBox(state, memory, in_flight, boxes=boxes)


def test_a_model_kept_on_two_boxes_gets_its_second_copy_where_it_fits_a_saved_slot_first():
    boxes = [box(A, m=spread("loaded")), box(B, budget=2000, m=spread("unloaded")), box(C, saved=["m"], m=spread("unloaded"))]
    assert replica_start("m", boxes) == Candidate(C, "replica")
    assert replica_start("m", boxes[:2]) == Candidate(B, "replica")


def test_no_copy_started_when_enough_boxes_hold_it_or_none_has_it_loaded_or_none_has_room():
    assert replica_start("m", [box(A, m=spread("loaded")), box(B, m=spread("loading")), box(C, m=spread("unloaded"))]) is None
    assert replica_start("m", [box(A, m=spread("unloaded")), box(B, m=spread("unloaded"))]) is None  # a cold start's
    assert replica_start("m", [box(A, m=spread("loaded", boxes=1)), box(B, m=spread("unloaded", boxes=1))]) is None
    full = box(B, budget=400, m=spread("unloaded"), other=("loaded", 300))  # room only by evicting: not for a copy
    assert replica_start("m", [box(A, m=spread("loaded")), full]) is None


def test_once_the_copy_is_loaded_sessions_spread_over_both_boxes_each_staying_on_its_own():
    boxes = [box(A, m=spread("loaded")), box(B, m=spread("loaded"))]
    chosen = {n: place("m", boxes, session=f"s{n}")[0] for n in range(40)}
    assert {c.address for c in chosen.values()} == {A, B} and {c.route for c in chosen.values()} == {"prefix"}
    assert all(place("m", boxes[::-1], session=f"s{n}")[0] == chosen[n] for n in range(40))


def test_a_records_boxes_come_from_the_box_config():
    status = {"memory_budget_mib": 400, "models": {"m": {"value": "loaded", "memory_mib": 300, "in_flight": 0, "queued": 0}}}
    assert box_of(box_record(A, status, [], [], 0.0, spread={"m": 3})).models["m"].boxes == 3
    assert box_of(box_record(A, status, [], [], 0.0)).models["m"].boxes == 1


@pytest.mark.parametrize(
    ("body", "bound"),
    [
        ({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "héllo"}]}, len("user") + 6 + 8 * 2),
        ({"model": "m", "prompt": "abc", "max_completion_tokens": 5}, 3 + 8 * 2),
    ],
)
def test_a_relayed_prompt_is_bounded_by_its_texts_bytes_and_its_turns(body, bound):
    assert prompt_bound(body) == bound


def test_the_reply_bound_is_the_clients_own_in_every_api():
    assert [
        reply_bound(b)
        for b in (
            {"max_tokens": 8},
            {"max_completion_tokens": 4, "max_tokens": 9},
            {"max_output_tokens": 16},
            {},
            {"max_tokens": True},
        )
    ] == [8, 4, 16, None, None]


def test_a_box_whose_busy_models_must_finish_first_is_waited_on_rather_than_refused_or_pooled():
    busy = box(A, budget=450, m=("unloaded", 400), other=("loaded", 300, 2))
    pinned = box(B, budget=450, m=("unloaded", 400), other=ModelOnBox("loaded", 300, 0, pinned=True))
    assert routes(place("m", [busy, pinned])) == [(A, "wait")]
    busier = box(C, budget=450, m=("unloaded", 400), other=("loaded", 300, 5))
    assert routes(place("m", [busier, busy])) == [(A, "wait"), (C, "wait")]


class FlakyRedis:
    """Redis as membership reads it: the records, until `down`."""

    def __init__(self, record: dict):
        self.record, self.down = record, False
        self.connection_pool = type("Pool", (), {"connection_kwargs": {"host": "10.0.0.1", "port": 6379}})()

    def smembers(self, _key):
        if self.down:
            raise ConnectionError("Redis is down")
        return {self.record["address"].encode()}

    def mget(self, _keys):
        return [json.dumps(self.record)]


def test_a_front_idle_past_the_expiry_keeps_its_records_until_redis_has_failed_for_the_expiry():
    from api_like_oai.errors import FleetUnavailable
    from api_like_oai.fleet.membership import Membership
    from api_like_oai.fleet.settings import FleetSettings

    now = [0.0]
    redis = FlakyRedis(box_record(A, {"memory_budget_mib": 400, "models": {}}, ["m"], [], 0.0))
    membership = Membership(FleetSettings("redis://10.0.0.1:6379/0"), redis, clock=lambda: now[0])
    assert [box.address for box in membership.boxes()] == [A]
    now[0], redis.down = 60.0, True  # a minute without a request, then Redis fails once
    assert [box.address for box in membership.boxes()] == [A]
    now[0] = 64.0
    assert [box.address for box in membership.boxes()] == [A]
    now[0] = 65.5
    with pytest.raises(FleetUnavailable, match="10.0.0.1:6379"):
        membership.boxes()
    now[0], redis.down = 66.0, False
    assert [box.address for box in membership.boxes()] == [A]


def test_cold_models_spread_over_equally_free_boxes_by_their_own_hash():
    empty = [box(A, **{f"m{n}": ("unloaded", 300) for n in range(20)}), box(B, **{f"m{n}": ("unloaded", 300) for n in range(20)})]
    first = {place(f"m{n}", empty)[0].address for n in range(20)}
    assert first == {A, B}
    assert all(place(f"m{n}", empty)[0] == place(f"m{n}", empty[::-1])[0] for n in range(20))
