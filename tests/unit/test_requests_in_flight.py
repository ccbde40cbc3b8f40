"""Requests being answered now (api_like_oai_requests_in_flight): what the chart's HPA scales fronts by,
counted from a request's record opening to its closing, whatever the API (a front's relays too)."""

from __future__ import annotations

from api_like_oai.observability import LiveRequests, Metrics, RequestRecord


def in_flight(metrics: Metrics) -> float:
    return metrics.registry.get_sample_value("api_like_oai_requests_in_flight")


def test_a_request_counts_from_its_record_opening_to_its_closing_once():
    metrics, live = Metrics(), LiveRequests()
    first = RequestRecord("/v1/chat/completions", metrics, live_requests=live)
    second = RequestRecord("/v1/messages", metrics, live_requests=live)
    assert in_flight(metrics) == 2
    first.close()
    first.close()  # only the first close counts
    assert in_flight(metrics) == 1
    second.close()
    assert in_flight(metrics) == 0


def test_a_record_made_outside_the_app_is_not_a_request_in_flight():
    metrics = Metrics()
    RequestRecord("/v1/chat/completions", metrics)
    assert in_flight(metrics) == 0
