"""The supervisor's decisions (supervisor/plan.py): state in, actions out."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from api_like_oai.supervisor.plan import FAILED, HOLDING_MEMORY, LOADED, LOADING, STOPPING, UNLOADED, Budget, ModelState, decide


def model(name, footprint=100, **state) -> ModelState:
    return ModelState(name, footprint, **state)


def test_a_waiting_model_that_fits_is_started():
    actions = decide([model("a", waiting_since=1.0)], Budget(1000), now=2.0)
    assert actions.start == ["a"] and not actions.stop and not actions.drain


def test_an_idle_model_is_stopped_to_make_room_least_recently_used_first():
    models = [
        model("old", 400, status=LOADED, last_used=1.0),
        model("recent", 400, status=LOADED, last_used=5.0),
        model("new", 400, waiting_since=6.0),
    ]
    actions = decide(models, Budget(1000), now=7.0)
    assert actions.stop == ["old"] and actions.evicted == ["old"] and actions.start == []


def test_a_busy_model_is_drained_not_stopped():
    models = [model("a", 600, status=LOADED, in_flight=2, last_used=1.0), model("b", 600, waiting_since=2.0)]
    actions = decide(models, Budget(1000), now=3.0)
    assert actions.drain == ["a"] and actions.stop == [] and actions.start == []


def test_idle_models_are_evicted_before_busy_ones_even_if_used_more_recently():
    models = [
        model("busy", 400, status=LOADED, in_flight=1, last_used=1.0),
        model("idle", 400, status=LOADED, last_used=9.0),
        model("new", 400, waiting_since=10.0),
    ]
    assert decide(models, Budget(1000), now=11.0).stop == ["idle"]


def test_while_a_model_drains_nothing_else_starts_and_its_end_stops_it():
    draining = [model("a", 600, status=LOADED, in_flight=1, draining=True), model("b", 600, waiting_since=2.0)]
    assert decide(draining, Budget(1000), now=3.0).start == []
    drained = [model("a", 600, status=LOADED, in_flight=0, draining=True), model("b", 600, waiting_since=2.0)]
    actions = decide(drained, Budget(1000), now=3.0)
    assert actions.stop == ["a"] and actions.start == []


def test_the_oldest_waiting_request_decides_which_model_comes_next():
    models = [model("a", 600, waiting_since=5.0), model("b", 600, waiting_since=2.0)]
    assert decide(models, Budget(1000), now=6.0).start == ["b"]


def test_a_model_larger_than_the_budget_is_refused_with_both_numbers():
    actions = decide([model("huge", 5000, waiting_since=1.0)], Budget(1000), now=2.0)
    assert actions.start == [] and "5000 MiB" in actions.refuse["huge"] and "1000 MiB" in actions.refuse["huge"]


def test_pinned_models_are_never_evicted_and_a_model_they_leave_no_room_for_is_refused():
    models = [model("pin", 700, status=LOADED, pinned=True), model("b", 400, waiting_since=1.0)]
    actions = decide(models, Budget(1000), now=2.0)
    assert actions.stop == [] and "pin" in actions.refuse["b"]


def test_max_loaded_counts_models():
    models = [model("a", 10, status=LOADED, last_used=1.0), model("b", 10, waiting_since=2.0)]
    assert decide(models, Budget(1000, max_loaded=1), now=3.0).stop == ["a"]
    assert decide(models, Budget(1000, max_loaded=2), now=3.0).start == ["b"]


def test_an_idle_model_past_its_ttl_is_stopped_and_not_before():
    idle = model("a", status=LOADED, last_used=100.0, ttl=60.0)
    assert decide([idle], Budget(1000), now=159.0).stop == []
    assert decide([idle], Budget(1000), now=160.0).stop == ["a"]
    assert decide([model("a", status=LOADED, last_used=0.0, ttl=0.0)], Budget(1000), now=1e9).stop == []


def test_a_failed_model_is_restarted_only_after_its_backoff():
    failed = model("a", status=FAILED, waiting_since=1.0, retry_at=10.0)
    assert decide([failed], Budget(1000), now=5.0).start == []
    assert decide([failed], Budget(1000), now=10.0).start == ["a"]


def test_a_model_loading_elsewhere_in_the_budget_makes_the_next_wait():
    models = [model("a", 600, status=LOADING), model("b", 600, waiting_since=1.0)]
    actions = decide(models, Budget(1000), now=2.0)
    assert actions.start == [] and actions.stop == [] and actions.refuse == {}


states = st.builds(
    ModelState,
    name=st.sampled_from("abcdef"),
    footprint_mib=st.integers(1, 800),
    status=st.sampled_from([UNLOADED, LOADING, LOADED, STOPPING, FAILED]),
    in_flight=st.integers(0, 3),
    last_used=st.floats(0, 100),
    waiting_since=st.one_of(st.none(), st.floats(0, 100)),
    draining=st.booleans(),
    pinned=st.booleans(),
    ttl=st.sampled_from([0.0, 10.0]),
    retry_at=st.floats(0, 200),
)


@given(st.lists(states, max_size=6, unique_by=lambda m: m.name), st.integers(100, 2000), st.floats(0, 200))
def test_no_decision_stops_a_busy_model_evicts_a_pinned_one_or_overruns_the_budget(models, budget_mib, now):
    by_name = {m.name: m for m in models}
    actions = decide(models, Budget(budget_mib), now)
    assert all(by_name[name].in_flight == 0 and by_name[name].status == LOADED for name in actions.stop)
    assert not any(by_name[name].pinned for name in actions.evicted)
    assert all(by_name[name].in_flight > 0 for name in actions.drain)
    assert set(actions.start).isdisjoint(actions.refuse)
    if actions.start:
        holding = sum(m.footprint_mib for m in models if m.status in HOLDING_MEMORY and m.name not in actions.stop)
        assert holding + sum(by_name[name].footprint_mib for name in actions.start) <= budget_mib
