"""OpenAIUpstream: any OpenAI-compatible server (vLLM, a remote llama-server's /v1), passed through."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..errors import InvalidRequest, ModelNotFound, ProxyError, UpstreamError, UpstreamTimeout, UpstreamUnavailable

if TYPE_CHECKING:
    import requests


class OpenAIUpstream:
    """Forwards request bodies to `base_url` (which ends in /v1) and relays the answers unchanged."""

    def __init__(self, base_url: str, *, connect_timeout: float = 5.0, read_timeout: float = 600.0):
        self.base_url = base_url.rstrip("/")
        self.timeouts = (connect_timeout, read_timeout)
        import requests  # here: only configs with an "openai" upstream pay for loading it (~5 MB per worker)

        self.session = requests.Session()

    def forward(self, path: str, body: dict) -> requests.Response:
        """The upstream's response to POST `path` (streamed when body["stream"]); errors mapped to ours."""
        return self._send("POST", path, json=body, stream=bool(body.get("stream")))

    def health(self) -> None:
        self._send("GET", "/models").close()

    def _send(self, method: str, path: str, **kwargs) -> requests.Response:
        import requests

        try:
            response = self.session.request(method, self.base_url + path, timeout=self.timeouts, **kwargs)
        except requests.exceptions.ConnectTimeout as exc:
            raise UpstreamUnavailable(f"{self.base_url} did not accept the connection in time") from exc
        except requests.exceptions.Timeout as exc:
            raise UpstreamTimeout(f"{self.base_url} did not answer in time") from exc
        except requests.exceptions.RequestException as exc:
            raise UpstreamUnavailable(f"{self.base_url} is unreachable ({type(exc).__name__})") from exc
        if response.status_code >= 400:
            with response:
                raise _error_from(response, self.base_url)
        return response


def relay(response: requests.Response) -> Iterator[bytes]:
    """The upstream's stream, byte for byte, closing it when the client goes away."""
    import requests

    try:
        yield from response.iter_content(chunk_size=None)
    except requests.exceptions.RequestException:
        yield b'data: {"error": {"message": "lost the connection to the upstream", "type": "upstream_error", ' \
              b'"param": null, "code": "upstream_unavailable"}}\n\n'
    finally:
        response.close()


def _error_from(response: requests.Response, base_url: str) -> ProxyError:
    try:
        error = response.json().get("error", {})
        message = error.get("message") if isinstance(error, dict) else str(error)
    except ValueError:
        message = response.text[:500]
    message = f"{base_url}: {message or response.reason}"
    by_status = {400: InvalidRequest, 404: ModelNotFound, 503: UpstreamUnavailable, 504: UpstreamTimeout}
    return by_status.get(response.status_code, UpstreamError)(message)
