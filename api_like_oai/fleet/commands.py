"""`api-like-oai fleet status`: the fleet's boxes and models as Redis holds them (no server needed)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from .membership import Membership
from .placement import fleet_models
from .settings import FleetSettings


def fleet_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="api-like-oai fleet", description="The fleet's boxes and models.")
    parser.add_argument("command", choices=["status"])
    parser.add_argument(
        "--fleet",
        metavar="REDIS_URL",
        default=os.environ.get("API_LIKE_OAI_FLEET"),
        help="the fleet's Redis (default: $API_LIKE_OAI_FLEET)",
    )
    parser.add_argument("--json", action="store_true", help="the boxes' records as JSON")
    args = parser.parse_args(argv)
    if not args.fleet:
        parser.error("--fleet redis://HOST:PORT/DB is needed")
    membership = Membership(FleetSettings(args.fleet))
    try:
        records = membership.current()
    except Exception as exc:  # noqa: BLE001 - a command: one line, no traceback
        print(f"api-like-oai fleet: {getattr(exc, 'message', exc)}", file=sys.stderr)
        return 1
    print(json.dumps({"boxes": records}, indent=2) if args.json else status_text(records))
    return 0


def status_text(records: list[dict]) -> str:
    """One line per box (address, budget used, in flight, queued), then one per model and where it is."""
    from .membership import box_of

    boxes = [box_of(record) for record in records]
    lines = [f"{len(boxes)} box{'es' if len(boxes) != 1 else ''}"]
    for record, box in zip(records, boxes, strict=True):
        lines.append(
            f"  {box.address}  {box.used_mib}/{box.budget_mib} MiB  in flight {record['in_flight']}  queued {record['queued']}"
        )
    for name, where in sorted(fleet_models(boxes).items()):
        lines.append(f"{name}: " + ", ".join(f"{address} {on_box.state}" for address, on_box in where))
    return "\n".join(lines)
