"""`api-like-oai fleet status`: the fleet's boxes and models as Redis holds them (no server needed);
`api-like-oai fleet endpoints`: the endpoint picker's file of a model's boxes (discovery.py)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from .membership import Membership
from .placement import fleet_models
from .settings import FleetSettings


def fleet_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="api-like-oai fleet", description="The fleet's boxes and models.")
    parser.add_argument("command", choices=["status", "endpoints"])
    parser.add_argument(
        "--fleet",
        metavar="REDIS_URL",
        default=os.environ.get("API_LIKE_OAI_FLEET"),
        help="the fleet's Redis (default: $API_LIKE_OAI_FLEET)",
    )
    parser.add_argument("--json", action="store_true", help="the boxes' records as JSON")
    parser.add_argument("--model", help="endpoints: the model whose boxes are listed")
    parser.add_argument("--output", metavar="FILE", help="endpoints: the file the endpoint picker's file-discovery reads")
    parser.add_argument(
        "--every", type=float, metavar="SECONDS", help="endpoints: keep the file current, looking this often (default: once)"
    )
    args = parser.parse_args(argv)
    if not args.fleet:
        parser.error("--fleet redis://HOST:PORT/DB is needed")
    membership = Membership(FleetSettings(args.fleet))
    if args.command == "endpoints":
        if not args.model or not args.output:
            parser.error("endpoints needs --model and --output")
        return endpoints_main(membership, args.model, args.output, args.every)
    try:
        records = membership.current()
    except Exception as exc:  # noqa: BLE001 - a command: one line, no traceback
        print(f"api-like-oai fleet: {getattr(exc, 'message', exc)}", file=sys.stderr)
        return 1
    print(json.dumps({"boxes": records}, indent=2) if args.json else status_text(records))
    return 0


def endpoints_main(membership: Membership, model: str, output: str, every: float | None) -> int:
    """Write the model's endpoints file once, or (`every`) keep it current until stopped. A Redis that
    cannot be read leaves the file as it was (its boxes' records expire, the file does not guess)."""
    from .discovery import endpoints, write_if_changed

    while True:
        try:
            document = endpoints(membership.current(), model)
        except Exception as exc:  # noqa: BLE001 - a command: one line, no traceback
            print(f"api-like-oai fleet: {getattr(exc, 'message', exc)}", file=sys.stderr)
            if every is None:
                return 1
        else:
            if write_if_changed(output, document):
                print(f"{output}: {len(document['endpoints'])} endpoint(s) of {model}", file=sys.stderr, flush=True)
        if every is None:
            return 0
        time.sleep(every)


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
