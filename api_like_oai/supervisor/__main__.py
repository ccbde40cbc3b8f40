"""`python -m api_like_oai.supervisor SETTINGS_JSON SOCKET LOG_LEVEL`: the supervisor process (launch.py starts it)."""

from __future__ import annotations

import asyncio
import json
import logging
import sys

from .listener import run
from .spec import SupervisorSettings


def main(argv: list[str]) -> int:
    settings_path, socket_path, log_level = argv
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with open(settings_path, encoding="utf-8") as file:
        settings = SupervisorSettings.from_dict(json.load(file))
    asyncio.run(run(settings, socket_path))  # it answers at once; the models' estimates follow (estimate_all)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
