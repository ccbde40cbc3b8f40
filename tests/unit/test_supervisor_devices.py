"""A budget per device (issue 42, point 4): a model's estimate spread over its GPUs and the CPU
(supervisor/footprint.py's arithmetic) and the plan's evictions per device (supervisor/plan.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from api_like_oai.supervisor.configure import launch_spec
from api_like_oai.supervisor.footprint import COMPUTE_RESERVE_MIB as RESERVE
from api_like_oai.supervisor.footprint import per_device_mib
from api_like_oai.supervisor.plan import HOLDING_MEMORY, LOADED, LOADING, STOPPING, UNLOADED, Budget, ModelState, decide

BUDGETS = {"gpu0": 8000, "gpu1": 4000, "cpu": 16000}


def split(args=(), devices=None, total=1096, layers=None) -> dict[str, int]:
    return per_device_mib(launch_spec("m", "/m.gguf", args=list(args), devices=devices), total, BUDGETS, layers)


def test_all_layers_go_to_the_gpus_in_proportion_to_their_budgets_by_default():
    assert split() == {"gpu0": 667 + RESERVE, "gpu1": 333 + RESERVE, "cpu": RESERVE}


def test_tensor_split_and_devices_say_which_gpu_takes_what():
    assert split(["--tensor-split", "3,1"]) == {"gpu0": 750 + RESERVE, "gpu1": 250 + RESERVE, "cpu": RESERVE}
    assert split(devices=(1,)) == {"gpu1": 1000 + RESERVE, "cpu": RESERVE}
    assert split(["-ts", "0,1"]) == {"gpu1": 1000 + RESERVE, "cpu": RESERVE}
    assert split(["--split-mode", "none", "--main-gpu", "1"]) == {"gpu1": 1000 + RESERVE, "cpu": RESERVE}


def test_layers_left_on_the_cpu_are_counted_there():
    # of 9 layers and the output layer, 10 parts: 10 (or more) offloads all, 4 four tenths
    assert split(["--n-gpu-layers", "99"], devices=(0,), layers=9) == {"gpu0": 1000 + RESERVE, "cpu": RESERVE}
    assert split(["-ngl", "4"], devices=(0,), layers=9) == {"gpu0": 400 + RESERVE, "cpu": 600 + RESERVE}
    # no layer offloaded: llama.cpp still computes large batches on the GPU, in its compute buffers
    assert split(["-ngl", "0"], devices=(0,), layers=9) == {"gpu0": RESERVE, "cpu": 1000 + RESERVE}
    assert split(devices=(5,)) == {"cpu": 1000 + RESERVE}  # a GPU nvidia-smi does not list: the CPU


def test_the_device_variable_names_the_models_gpus():
    assert launch_spec("m", "/m.gguf", devices=[1, 0]).environment() == {"CUDA_VISIBLE_DEVICES": "1,0"}
    assert launch_spec("m", "/m.gguf", env={"CUDA_VISIBLE_DEVICES": "2"}, devices=[1]).environment() == {
        "CUDA_VISIBLE_DEVICES": "2"
    }
    assert launch_spec("m", "/m.gguf").environment() == {}


def on(name: str, per_device: dict, **state) -> ModelState:
    return ModelState(name, sum(per_device.values()), per_device=per_device, **state)


def test_a_model_is_placed_by_each_device_not_by_the_sum():
    budget = Budget(3000, devices={"gpu0": 1000, "gpu1": 1000, "cpu": 1000})
    # 1,500 MiB in all fits the sum of the budgets, but not gpu0's
    actions = decide([on("big", {"gpu0": 1400, "cpu": 100}, waiting_since=1.0)], budget, now=2.0)
    assert actions.start == [] and "on gpu0" in actions.refuse["big"]


def test_eviction_makes_room_only_on_the_device_that_lacks_it():
    budget = Budget(3000, devices={"gpu0": 1000, "gpu1": 1000, "cpu": 1000})
    models = [
        on("on-gpu1-old", {"gpu1": 800, "cpu": 100}, status=LOADED, last_used=1.0),
        on("on-gpu0", {"gpu0": 800, "cpu": 100}, status=LOADED, last_used=5.0),
        on("new-gpu0", {"gpu0": 800, "cpu": 100}, waiting_since=6.0),
    ]
    actions = decide(models, budget, now=7.0)
    assert actions.stop == ["on-gpu0"] and actions.evicted == ["on-gpu0"]  # not the older one on gpu1
    room_on_gpu1 = [
        on("a", {"gpu1": 500, "cpu": 100}, status=LOADED),
        on("b", {"gpu0": 800, "cpu": 100}, status=LOADED),
        on("c", {"gpu1": 400, "cpu": 100}, waiting_since=6.0),
    ]
    assert decide(room_on_gpu1, budget, now=7.0).start == ["c"]


def test_the_cpu_is_a_device_with_a_budget_too():
    budget = Budget(3000, devices={"gpu0": 2000, "cpu": 1000})
    models = [
        on("cpu-heavy", {"cpu": 900}, status=LOADED, last_used=1.0),
        on("gpu-light", {"gpu0": 500, "cpu": 100}, status=LOADED, last_used=0.5),
        on("new", {"gpu0": 500, "cpu": 200}, waiting_since=2.0),
    ]
    assert decide(models, budget, now=3.0).stop == ["cpu-heavy"]


DEVICES = ("gpu0", "gpu1", "cpu")
per_device_states = st.builds(
    lambda name, mibs, **state: ModelState(name, sum(mibs), per_device=dict(zip(DEVICES, mibs, strict=True)), **state),
    name=st.sampled_from("abcdef"),
    mibs=st.tuples(*(st.integers(0, 600) for _ in DEVICES)),
    status=st.sampled_from([UNLOADED, LOADING, LOADED, STOPPING]),
    in_flight=st.integers(0, 2),
    last_used=st.floats(0, 100),
    waiting_since=st.one_of(st.none(), st.floats(0, 100)),
    pinned=st.booleans(),
)


@given(st.lists(per_device_states, max_size=6, unique_by=lambda m: m.name), st.tuples(*(st.integers(100, 1500) for _ in DEVICES)))
def test_no_start_overruns_a_device_and_every_eviction_frees_a_device_the_waiter_lacks(models, limits):
    budget = Budget(sum(limits), devices=dict(zip(DEVICES, limits, strict=True)))
    by_name = {m.name: m for m in models}
    actions = decide(models, budget, now=200.0)
    staying = [m for m in models if m.status in HOLDING_MEMORY and m.name not in actions.stop]
    for device, limit in budget.devices.items() if actions.start else ():
        assert (
            sum(m.per_device[device] for m in staying) + sum(by_name[name].per_device[device] for name in actions.start) <= limit
        )
    assert not any(by_name[name].pinned for name in actions.evicted)
    if actions.evicted:
        waiter = min((m for m in models if m.waiting_since is not None and m.status == UNLOADED), key=lambda m: m.waiting_since)
        holding = [m for m in models if m.status in HOLDING_MEMORY]
        short = {d for d in DEVICES if sum(m.per_device[d] for m in holding) + waiter.per_device[d] > budget.devices[d]}
        assert all(any(by_name[name].per_device[d] > 0 for d in short) for name in actions.evicted)


def test_a_draft_is_passed_with_a_speculation_type_unless_one_is_given():
    assert "--metrics" in launch_spec("m", "/m.gguf").argv("llama-server", 0)  # its counters, draft or not
    argv = launch_spec("m", "/m.gguf", draft="/d.gguf", draft_args="--spec-draft-n-max 4").argv("llama-server", 0)
    assert argv[argv.index("--model-draft") :] == [
        "--model-draft",
        "/d.gguf",
        "--spec-draft-n-max",
        "4",
        "--spec-type",
        "draft-simple",
    ]
    chosen = launch_spec("m", "/m.gguf", draft="/d.gguf", args=["--spec-type", "draft-eagle3"]).argv("llama-server", 0)
    assert chosen.count("--spec-type") == 1 and "draft-simple" not in chosen
