"""`python -m api_like_oai.supervisor SETTINGS_JSON SOCKET LOG_LEVEL`: the supervisor process (launch.py starts it)."""

from __future__ import annotations

import asyncio
import json
import logging
import sys

from .footprint import device_split, estimate_mib
from .service import run
from .spec import SupervisorSettings


def main(argv: list[str]) -> int:
    settings_path, socket_path, log_level = argv
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with open(settings_path, encoding="utf-8") as file:
        settings = SupervisorSettings.from_dict(json.load(file))
    one_replica = {spec.name: spec.memory_mib or estimate_mib(spec) for spec in settings.models}
    footprints = {spec.name: one_replica[spec.name] * len(spec.ports) for spec in settings.models}
    per_device = None
    if settings.device_budgets is not None:
        per_device = {spec.name: {device: mib * len(spec.ports) for device, mib in
                                  device_split(spec, one_replica[spec.name], settings.device_budgets).items()}
                      for spec in settings.models}
    asyncio.run(run(settings, socket_path, footprints, per_device))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
