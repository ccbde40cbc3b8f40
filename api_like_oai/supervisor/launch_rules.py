"""The llama-server flags a caller may ask for on a load (`args` of `/models/load`), and their values
(pure: no I/O). Everything else is the operator's, in the config file.

A load's `args` come from the network: with no keys configured, from anyone who reaches the port. A
llama-server flag can name a file it reads (`--chat-template-file`, `--lora`), a file it writes
(`--log-file`, `--slot-save-path`), an address (`--host`, `--port`, `--rpc`), a key (`--api-key`), a
tool that runs commands (`--tools`) or a web root (`--path`). So the rule is an allowlist, not a
denylist: a flag is taken only if it is listed here as a tuning knob whose value is a number in a
range or a word from a short list, and nothing else on the line may stand as a value. The reasons for
each group are in DESIGN.md ("Models on demand: what a load may change").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_ARGS = 64
RPC_ENDPOINT = re.compile(r"[A-Za-z0-9.\-]+:[0-9]{1,5}")  # a fleet pool's helper (host:port), never a caller's flag
MAX_ARG_CHARS = 128


class DisallowedFlag(ValueError):
    """A requested flag (or its value) that a caller may not set; the message names it and says why."""


@dataclass(frozen=True)
class Knob:
    """One allowed flag: its names, and its value's kind: None (a switch, no value), an integer range,
    a float range, a set of words, or a comma-separated list of non-negative floats (a split)."""

    names: tuple[str, ...]
    kind: str  # "switch", "int", "float", "word", "split"
    low: float = 0
    high: float = 0
    words: frozenset[str] = frozenset()


def _int(names: str, low: int, high: int) -> Knob:
    return Knob(tuple(names.split()), "int", low, high)


def _float(names: str, low: float, high: float) -> Knob:
    return Knob(tuple(names.split()), "float", low, high)


def _word(names: str, words: str) -> Knob:
    return Knob(tuple(names.split()), "word", words=frozenset(words.split()))


def _switch(names: str) -> Knob:
    return Knob(tuple(names.split()), "switch")


CACHE_TYPES = "f32 f16 bf16 q8_0 q4_0 q4_1 iq4_nl q5_0 q5_1"
KNOBS: tuple[Knob, ...] = (
    # Context, batching and slots: how much of the budget one copy uses and how many requests it runs.
    _int("-c --ctx-size", 0, 1 << 20),
    _int("-b --batch-size", 1, 1 << 16),
    _int("-ub --ubatch-size", 1, 1 << 16),
    _int("-np --parallel", 1, 256),
    _int("--keep", -1, 1 << 20),
    _int("--cache-reuse", 0, 1 << 20),
    _switch("-cb --cont-batching -nocb --no-cont-batching"),
    _switch("-kvu --kv-unified -no-kvu --no-kv-unified --swa-full"),
    _float("-dt --defrag-thold", -1, 1),
    # CPU threads (the operator's budget of cores is not a caller's to widen beyond the machine).
    _int("-t --threads -tb --threads-batch", -1, 1024),
    # GPU placement: layers, split and the main device; the devices themselves stay the operator's.
    Knob(("-ngl", "--gpu-layers", "--n-gpu-layers"), "int", -1, 10_000, frozenset({"auto", "all"})),
    Knob(("-ts", "--tensor-split"), "split"),
    _word("-sm --split-mode", "none layer row tensor"),
    _int("-mg --main-gpu", 0, 64),
    _switch("-nkvo --no-kv-offload -kvo --kv-offload -nr --no-repack --repack"),
    # KV cache types and flash attention: memory against quality.
    _word("-ctk --cache-type-k -ctv --cache-type-v -ctkd --cache-type-k-draft -ctvd --cache-type-v-draft", CACHE_TYPES),
    Knob(("-fa", "--flash-attn"), "word", words=frozenset({"on", "off", "auto"})),
    # Memory fitting.
    _word("-fit --fit", "on off"),
    _int("-fitt --fit-target", 0, 1 << 24),
    # RoPE scaling: a longer context for models trained for it.
    _word("--rope-scaling", "none linear yarn"),
    _float("--rope-scale --rope-freq-base --rope-freq-scale", 0, 1e9),
    _float("--yarn-ext-factor --yarn-attn-factor --yarn-beta-slow --yarn-beta-fast", -1, 1e4),
    _int("--yarn-orig-ctx", 0, 1 << 20),
    # Sampling defaults (a request's own fields override them).
    _float("--temp --top-p --min-p --typical --top-nsigma --xtc-probability --xtc-threshold", -1, 100),
    _float("--repeat-penalty --presence-penalty --frequency-penalty --dry-multiplier --dry-base", -100, 100),
    _int("--top-k --repeat-last-n --dry-allowed-length --dry-penalty-last-n", -1, 1 << 20),
    _int("-n --n-predict --predict", -2, 1 << 20),
    _int("-s --seed", -1, (1 << 32) - 1),
    # Speculative decoding's depth, when the operator configured a draft.
    _int("--draft --draft-n --draft-max --draft-min --draft-n-min --spec-draft-n-max --spec-draft-n-min", 0, 256),
    _float("--draft-p-min --spec-draft-p-min", 0, 1),
)
BY_NAME: dict[str, Knob] = {name: knob for knob in KNOBS for name in knob.names}
NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?")


def check_requested(args: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """`args` as given, if every flag is a listed knob with a value it takes; else DisallowedFlag naming
    the first flag or value refused. `--flag=value` is read as `--flag value`."""
    if len(args) > MAX_ARGS:
        raise DisallowedFlag(f"at most {MAX_ARGS} args on a load")
    position = 0
    while position < len(args):
        flag, value, inline = _split(args, position)
        knob = BY_NAME.get(flag)
        if knob is None:
            raise DisallowedFlag(_refusal(flag))
        if knob.kind == "switch":
            if inline:
                raise DisallowedFlag(f"{flag} takes no value")
            position += 1
            continue
        if value is None:
            raise DisallowedFlag(f"{flag} needs a value")
        _check_value(knob, flag, value)
        position += 1 if inline else 2
    return tuple(args)


def _split(args, position: int) -> tuple[str, str | None, bool]:
    """The flag at `position`, its value (inline after `=`, else the next arg) and whether it was inline."""
    arg = args[position]
    if not isinstance(arg, str) or len(arg) > MAX_ARG_CHARS or not arg.startswith("-"):
        shown = arg[:40] if isinstance(arg, str) else type(arg).__name__
        raise DisallowedFlag(f"{shown!r} is not a flag: args are llama-server flags, each followed by its value")
    if arg.startswith("--") and "=" in arg:
        flag, value = arg.split("=", 1)
        return flag, value, True
    following = args[position + 1] if position + 1 < len(args) else None
    return arg, following if isinstance(following, str) else None, False


def _check_value(knob: Knob, flag: str, value: str) -> None:
    if len(value) > MAX_ARG_CHARS:
        raise DisallowedFlag(f"the value of {flag} is too long")
    if value in knob.words:
        return
    if knob.kind == "word":
        raise DisallowedFlag(f"{flag} takes one of {', '.join(sorted(knob.words))}, not {value[:40]!r}")
    if knob.kind == "split":
        parts = value.split(",")
        if len(parts) > 64 or not all(NUMBER.fullmatch(part) and float(part) >= 0 for part in parts):
            raise DisallowedFlag(f"{flag} takes a comma-separated list of non-negative numbers")
        return
    if not NUMBER.fullmatch(value) or (knob.kind == "int" and not re.fullmatch(r"-?[0-9]+", value)):
        raise DisallowedFlag(f"{flag} takes {'an integer' if knob.kind == 'int' else 'a number'}, not {value[:40]!r}")
    if not knob.low <= float(value) <= knob.high:
        raise DisallowedFlag(f"{flag} takes a value from {knob.low:g} to {knob.high:g}")


def _refusal(flag: str) -> str:
    return (
        f"{flag[:40]} may not be set on a load: a load's args take only tuning flags (context, batch, parallel, "
        "GPU layers and split, cache types, flash attention, sampling defaults; see the README's 'Load and unload'); "
        "files, addresses, keys and tools are the operator's, in the config file"
    )
