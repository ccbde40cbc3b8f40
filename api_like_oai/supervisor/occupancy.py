"""How busy each loaded model is, in the terms of the Gateway API Inference Extension's model-server
protocol (requests waiting, requests running, KV-cache utilisation), from the supervisor's own state
and each replica's `/slots`; read only when asked (a scrape of the pool metrics), never per request.

- running: the replicas' slots that are processing a task (`is_processing`);
- waiting: requests the box holds that no slot runs yet: those waiting for the model's load (the
  supervisor's queue) and the leases held beyond the running slots (queued in a worker's slot queue
  or in llama-server's own deferred queue);
- KV utilisation: the tokens the slots hold in their KV cache over the cache's size. llama-server
  keeps a finished conversation's tokens in its slot for the next turn (they count, as its own former
  `kv_cache_usage_ratio` counted used cells). With a unified KV cache (`--kv-unified`, llama-server's
  default when it picks the number of slots) every slot reports the whole cache as its `n_ctx`, so the
  size is one slot's `n_ctx`; otherwise the slots split the cache and the size is their sum.

Design notes (moved from DESIGN.md, which points here):

- **Gauges for an inference pool's endpoint picker** (`/metrics/pool`, also in `/metrics`;
  `observability.pool_metrics`): per model, requests waiting and running and KV-cache use (the Gateway API
  Inference Extension's model-server protocol) under names the chart's EPP config maps. llama-server exports
  neither; the supervisor computes them (`supervisor/occupancy.py`, pure) from its state (load queue, leases)
  and each replica's `/slots` (processing slots; their tokens over the cache's size, unified or split per the
  command line), only when asked and at most every 0.1 s (an EPP scrapes every 50 ms): a scrape costs no
  request anything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

# llama.cpp has no paged KV blocks: a prefix is reused token by token. The endpoint picker's prefix
# producer hashes prompts in blocks and floors their size at 64 tokens, so 64 is the finest block
# that means anything to it; the cache's size is reported in blocks of it (cache_config_info).
BLOCK_TOKENS = 64


@dataclass(frozen=True)
class Occupancy:
    """One model's load on this box, summed over its replicas."""

    waiting: int
    running: int
    kv_used_tokens: int
    kv_size_tokens: int

    @property
    def kv_utilisation(self) -> float:
        """0..1: the KV cache's tokens in use over its size (0 with no replica answering)."""
        return min(1.0, self.kv_used_tokens / self.kv_size_tokens) if self.kv_size_tokens else 0.0

    def to_json(self) -> dict:
        return {
            "waiting": self.waiting,
            "running": self.running,
            "kv_used_tokens": self.kv_used_tokens,
            "kv_size_tokens": self.kv_size_tokens,
            "kv_utilisation": self.kv_utilisation,
            "block_tokens": BLOCK_TOKENS,
            "blocks": self.kv_size_tokens // BLOCK_TOKENS,
        }


def slot_tokens(slot: dict) -> int:
    """The tokens a slot holds in the KV cache: `n_past` where llama-server reports it (older builds),
    else `n_prompt_tokens` (the slot's cached tokens, its prompt and what it generated so far)."""
    for key in ("n_past", "n_prompt_tokens"):
        value = slot.get(key)
        if isinstance(value, int) and value >= 0:
            return value
    return 0


def kv_size(slots: list[dict], unified: bool) -> int:
    """The size in tokens of one replica's KV cache, from its slots' `n_ctx` (see the module's doc)."""
    sizes = [slot["n_ctx"] for slot in slots if isinstance(slot.get("n_ctx"), int)]
    if not sizes:
        return 0
    return max(sizes) if unified else sum(sizes)


def occupancy(in_flight: int, queued: int, replicas_slots: list[list[dict]], unified: bool) -> Occupancy:
    """The model's occupancy from its leases (`in_flight`), its queue for a load (`queued`) and the
    `/slots` answer of each replica that answered (pure)."""
    running = sum(1 for slots in replicas_slots for slot in slots if slot.get("is_processing"))
    return Occupancy(
        waiting=queued + max(0, in_flight - running),  # read apart from the slots: never below zero
        running=running,
        kv_used_tokens=sum(slot_tokens(slot) for slots in replicas_slots for slot in slots),
        kv_size_tokens=sum(kv_size(slots, unified) for slots in replicas_slots),
    )


def parse_slots(status: int, body: bytes) -> list[dict] | None:
    """A replica's `/slots` answer as its slots, or None for anything else (left out of the sums)."""
    if status != 200:
        return None
    try:
        slots = json.loads(body)
    except ValueError:
        return None
    if not isinstance(slots, list):
        return None
    return [slot for slot in slots if isinstance(slot, dict)]
