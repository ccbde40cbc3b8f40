"""What gunicorn's master imports: nothing that the gevent worker must patch first, nor gevent."""

from __future__ import annotations

import subprocess
import sys

PATCH_FIRST = ("urllib3", "requests", "flask", "werkzeug", "prometheus_client", "api_like_oai.app", "gevent", "redis")


def test_the_master_imports_nothing_the_worker_must_patch_first():
    script = ("import sys, api_like_oai.cli, api_like_oai.server, api_like_oai.worker; "
              "from gunicorn.util import load_class; load_class('api_like_oai.worker.EventWorker'); "
              "api_like_oai.cli.parse_settings(['--workers', '2', '--store', 'redis://127.0.0.1:6379/0']); "
              f"print([m for m in {PATCH_FIRST!r} if m in sys.modules])")
    output = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert output.strip() == "[]"
