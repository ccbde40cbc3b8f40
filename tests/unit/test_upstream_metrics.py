"""Several upstreams' metrics merged into one family per name, each sample labelled; what is not
Prometheus' text format, or does not answer, is left out."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from api_like_oai.upstream_metrics import _merge, upstream_metrics

TEXT = """# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total {value}
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 1
"""


def test_two_upstreams_make_one_family_per_name_with_their_labels():
    families = {}
    _merge(families, TEXT.format(value=10), {"model": "a", "upstream": "http://one"})
    _merge(families, TEXT.format(value=20), {"model": "b", "upstream": "http://two"})
    _merge(families, "this is { not metrics", {"model": "c", "upstream": "http://three"})
    counters = families["llamacpp:prompt_tokens"].samples
    assert [(sample.labels, sample.value) for sample in counters] == [
        ({"model": "a", "upstream": "http://one"}, 10.0),
        ({"model": "b", "upstream": "http://two"}, 20.0),
    ]
    assert len(families["llamacpp:requests_processing"].samples) == 2


def test_an_upstream_that_does_not_answer_is_left_out():
    assert upstream_metrics([("a", "http://127.0.0.1:9", "")], timeout=0.5) == b""


def test_what_is_written_reads_back():
    from prometheus_client.exposition import generate_latest

    from api_like_oai.observability import MadeFamilies

    families = {}
    _merge(families, TEXT.format(value=3), {"model": "a", "upstream": "http://one"})
    text = generate_latest(MadeFamilies(list(families.values()))).decode()
    [sample] = [
        s for family in text_string_to_metric_families(text) for s in family.samples if s.name == "llamacpp:prompt_tokens_total"
    ]
    assert (sample.labels, sample.value) == ({"model": "a", "upstream": "http://one"}, 3.0)
