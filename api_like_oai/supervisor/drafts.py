"""A draft model's acceptance (speculative decoding), read from its llama-servers' own counters.

llama-server counts the tokens its draft proposed and those the target accepted
(`llamacpp:spec_decode_num_draft_tokens_total`, `..._accepted_tokens_total` on /metrics, which the
supervisor turns on for a model with `draft:`). Its counters start at zero with each process, so the
model's totals add what each replica gained since it was last read: they only grow, across restarts
and swaps, as Prometheus counters must.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DRAFTED = "llamacpp:spec_decode_num_draft_tokens_total"
ACCEPTED = "llamacpp:spec_decode_num_accepted_tokens_total"
READ_EVERY_SECONDS = 2.0


@dataclass
class DraftCounts:
    """One model's draft tokens proposed and accepted, all replicas and all their lives together."""

    drafted: int = 0
    accepted: int = 0
    _seen: dict = field(default_factory=dict)  # a process (pid) -> (drafted, accepted) when last read

    def update(self, pid: int, metrics_text: str) -> None:
        """Add what process `pid` counted since it was last read (its /metrics text)."""
        now = read_counts(metrics_text)
        if now is None:
            return
        before = self._seen.get(pid, (0, 0))
        self.drafted += max(now[0] - before[0], 0)
        self.accepted += max(now[1] - before[1], 0)
        self._seen[pid] = now

    def forget(self, live_pids: set[int]) -> None:
        """Drop the processes that are gone (their counts are in the totals already)."""
        self._seen = {pid: counts for pid, counts in self._seen.items() if pid in live_pids}

    def status(self) -> dict:
        rate = round(self.accepted / self.drafted, 4) if self.drafted else None
        return {"drafted_tokens": self.drafted, "accepted_tokens": self.accepted, "acceptance_rate": rate}


def read_counts(metrics_text: str) -> tuple[int, int] | None:
    """(drafted, accepted) from llama-server's Prometheus text; None if it carries neither."""
    values = {}
    for line in metrics_text.splitlines():
        name, _, value = line.partition(" ")
        if name in (DRAFTED, ACCEPTED):
            try:
                values[name] = int(float(value))
            except ValueError:
                return None
    if not values:
        return None
    return values.get(DRAFTED, 0), values.get(ACCEPTED, 0)
