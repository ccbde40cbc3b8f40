"""The fleet as a front sees it, in Prometheus' text format at scrape time (from the records it read
last; nothing on the request path): each box's budget, memory used, requests in flight and queued,
and each model's state per box."""

from __future__ import annotations

from ..observability import MadeFamilies
from .membership import box_of


def fleet_metrics(records: list[dict]) -> bytes:
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.exposition import generate_latest

    per_box = [
        ("budget_mib", "A box's memory budget"),
        ("used_mib", "Memory its loaded and loading models hold"),
        ("in_flight", "Requests in flight on the box"),
        ("queued", "Requests queued on the box for a model"),
    ]
    families = [GaugeMetricFamily(f"api_like_oai_fleet_box_{name}", text, labels=["box"]) for name, text in per_box]
    loaded = GaugeMetricFamily("api_like_oai_fleet_model_loaded", "1 if the model is loaded on the box", labels=["box", "model"])
    for record in records:
        box = box_of(record)
        for family, value in zip(families, (box.budget_mib, box.used_mib, record["in_flight"], record["queued"]), strict=True):
            family.add_metric([box.address], float(value))
        for name, model in box.models.items():
            loaded.add_metric([box.address, name], float(model.state == "loaded"))
    boxes = GaugeMetricFamily("api_like_oai_fleet_boxes", "Boxes in the fleet (records not expired)")
    boxes.add_metric([], float(len(records)))
    return generate_latest(MadeFamilies([boxes, *families, loaded]))
