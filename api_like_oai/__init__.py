"""api_like_oai: an OpenAI-compatible API in front of llama.cpp's server."""

from .version import __version__

__all__ = ["create_app", "render_chat", "__version__"]


def __getattr__(name):
    # Lazy, so `import api_like_oai` stays cheap and the prompt layer works without Flask loaded.
    if name == "create_app":
        from .app import create_app

        return create_app
    if name == "render_chat":
        from .prompts.render import render_chat

        return render_chat
    raise AttributeError(name)
