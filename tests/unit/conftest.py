from __future__ import annotations

import pytest

from api_like_oai import create_app
from api_like_oai.arguments import build_parser, settings_from_args

from ..servers import free_port


def make_app(*args: str):
    """The app as the CLI would build it; the default upstream is a port where nothing listens."""
    argv = ["--llama-api", f"http://127.0.0.1:{free_port()}", *args]
    return create_app(settings_from_args(build_parser().parse_args(argv)))


@pytest.fixture
def app_client():
    """A test client of an app whose upstream is down; legacy flags, so no upstream is needed to format."""
    return make_app("--chat-prompt-model", "chatml").test_client()
