"""A saved slot's fingerprint (supervisor/slots.py), a draft model's counts (supervisor/drafts.py) and the
replicas that run it (`draft_replicas`)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from api_like_oai.config import ModelConfig
from api_like_oai.supervisor.drafts import DraftCounts, read_counts
from api_like_oai.supervisor.slots import fingerprint
from api_like_oai.supervisor.spec import LaunchSpec

ARGV = ["/bin/llama-server", "--model", "/m.gguf", "--host", "127.0.0.1", "--port", "8080", "--ctx-size", "2048"]


def test_a_fingerprint_is_the_command_line_less_its_port_and_host():
    assert fingerprint(ARGV) == fingerprint([*ARGV[:6], "9090", *ARGV[7:]])
    assert fingerprint(ARGV) != fingerprint([*ARGV[:-1], "4096"])
    assert fingerprint(ARGV) != fingerprint([*ARGV, "--cache-type-k", "q8_0"])


def test_a_fingerprint_changes_with_the_model_file(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"one")
    argv = ["/bin/llama-server", "--model", str(model)]
    before = fingerprint(argv)
    model.write_bytes(b"other")
    assert fingerprint(argv) != before


METRICS = """# HELP llamacpp:spec_decode_num_draft_tokens_total Speculative: Total draft tokens generated
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total {drafted}
llamacpp:spec_decode_num_accepted_tokens_total {accepted}
llamacpp:n_decode_total 7
"""


def test_draft_counts_add_each_process_since_it_was_last_read_across_restarts():
    counts = DraftCounts()
    assert counts.status() == {"drafted_tokens": 0, "accepted_tokens": 0, "acceptance_rate": None}
    counts.update(100, METRICS.format(drafted=40, accepted=30))
    counts.update(100, METRICS.format(drafted=60, accepted=40))
    counts.forget(set())  # the process ended
    counts.update(101, METRICS.format(drafted=20, accepted=20))  # its successor counts from zero
    assert counts.status() == {"drafted_tokens": 80, "accepted_tokens": 60, "acceptance_rate": 0.75}


def test_metrics_without_draft_counters_count_nothing():
    assert read_counts("llamacpp:n_decode_total 7\n") is None
    assert read_counts(METRICS.format(drafted="12", accepted="3")) == (12, 3)


def test_draft_replicas_gives_the_draft_to_the_first_replicas_only():
    spec = LaunchSpec("m", "/m.gguf", (8001, 8002, 8003), draft="/d.gguf", draft_replicas=1)
    argvs = [spec.argv("/bin/llama-server", replica) for replica in range(3)]
    assert ["--model-draft" in argv for argv in argvs] == [True, False, False]
    assert spec.drafting_urls == ("http://127.0.0.1:8001",)
    every = LaunchSpec("m", "/m.gguf", (8001, 8002), draft="/d.gguf")
    assert every.drafting_urls == every.urls
    assert LaunchSpec("m", "/m.gguf", (8001,)).drafting_urls == ()


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"replicas": 2, "draft": "/d.gguf", "draft_replicas": 1}, None),
        ({"replicas": 2, "draft_replicas": 1}, "draft_replicas needs draft"),
        ({"replicas": 2, "draft": "/d.gguf", "draft_replicas": 3}, "at most replicas"),
        ({"replicas": 2, "draft": "/d.gguf", "draft_replicas": 0}, "greater than or equal to 1"),
    ],
)
def test_draft_replicas_is_checked_against_draft_and_replicas(fields, error):
    if error is None:
        assert ModelConfig(model="/m.gguf", **fields).draft_replicas == 1
    else:
        with pytest.raises(ValidationError, match=error):
            ModelConfig(model="/m.gguf", **fields)
