"""The proxy's exceptions, and their one mapping to OpenAI's error JSON.

    ProxyError                       500 server_error
    ├── InvalidRequest               400 invalid_request_error
    │   ├── TemplateError            400 (a chat template refused the conversation)
    │   └── ContextLengthExceeded    400 code=context_length_exceeded
    ├── AuthenticationFailed         401 authentication_error
    ├── PermissionDenied             403 permission_error (a plain key on an admin route)
    ├── NotFound                     404 invalid_request_error
    │   └── ModelNotFound            404 code=model_not_found
    ├── PayloadTooLarge              413 invalid_request_error (storage_quota_exceeded: one write over a quota)
    ├── RateLimited                  429 requests|tokens, code=rate_limit_exceeded (a key's limit: access/;
    │                                    model_queue_full: too many wait for a model's load)
    ├── StorageQuotaExceeded         429 storage, code=storage_quota_exceeded (a key's stored objects)
    ├── TooManySockets               429 requests, code=too_many_sockets (a key's open WebSockets)
    ├── StoreUnavailable             503 server_error (the storage failed: store/seam.py)
    └── UpstreamError                502 upstream_error (bad answer from llama.cpp)
        ├── UpstreamUnavailable      503 (refused, down, or loading the model)
        └── UpstreamTimeout          504

Raise these where the problem is found; `to_dict()` and `ProxyError.status` are the only
translation to HTTP, used by the app's error handler and by streams. Anthropic's Messages API
writes the same exceptions its own way: `to_anthropic()` and `anthropic_status` (an upstream that
is down is Anthropic's 529 overloaded_error, which its clients retry with backoff).
"""

from __future__ import annotations

import copy
import re

# Where a server is (the operator's to know, not a tenant's): a URL's scheme, user and host, or a host:port
# (an IPv6 one in brackets), as llama-server's, a box's, Redis's and the children's log lines write them.
ADDRESS = re.compile(
    r"\b[a-z][a-z0-9+.\-]*://[^\s/'\"]+|\[[0-9A-Fa-f:.]+\]:[0-9]{2,5}\b|\b[A-Za-z0-9][A-Za-z0-9.\-]*:[0-9]{2,5}\b"
)


def without_addresses(text: str, placeholder: str = "<address>") -> str:
    """`text` with every server address in it replaced by `placeholder`."""
    return ADDRESS.sub(placeholder, text)


# Every error answer carries its code here too (app.py), whatever the API: Anthropic's and Ollama's bodies have none.
ERROR_CODE_HEADER = "X-Error-Code"


class ProxyError(Exception):
    status = 500
    type = "server_error"
    code: str | None = None
    anthropic_type = "api_error"
    headers: dict[str, str] = {}  # noqa: RUF012 - replaced per instance, never mutated

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code

    def without_addresses(self) -> ProxyError:
        """This error as a caller who does not see everything gets it: the servers' addresses in its
        message (an upstream that was lost, refused, timed out, or refused a feature) replaced by
        <address>: where they are is the operator's to know."""
        if not ADDRESS.search(self.message):
            return self
        shown = copy.copy(self)
        shown.message = without_addresses(self.message)
        return shown

    def to_dict(self) -> dict:
        """The OpenAI error object: {"error": {"message", "type", "param", "code"}}."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    @property
    def anthropic_status(self) -> int:
        return self.status

    def to_anthropic(self) -> dict:
        """Anthropic's error object: {"type": "error", "error": {"type", "message"}}."""
        message = f"{self.param}: {self.message}" if self.param and self.param not in self.message else self.message
        return {"type": "error", "error": {"type": self.anthropic_type, "message": message}}


class InvalidRequest(ProxyError):
    status = 400
    type = "invalid_request_error"
    anthropic_type = "invalid_request_error"


class TemplateError(InvalidRequest):
    code = "invalid_chat_template"


class ContextLengthExceeded(InvalidRequest):
    code = "context_length_exceeded"


class AuthenticationFailed(ProxyError):
    status = 401
    type = "authentication_error"
    code = "invalid_api_key"
    anthropic_type = "authentication_error"


class PermissionDenied(ProxyError):
    status = 403
    type = "permission_error"
    code = "permission_denied"
    anthropic_type = "permission_error"


class RateLimited(ProxyError):
    """A key over one of its limits; `retry_after` seconds until it may try again (Retry-After)."""

    status = 429
    type = "requests"  # OpenAI's: "requests" or "tokens", by the limit that was hit
    code = "rate_limit_exceeded"
    anthropic_type = "rate_limit_error"

    def __init__(self, message: str, *, retry_after: str, of_tokens: bool = False):
        super().__init__(message)
        self.headers = {"Retry-After": retry_after, "retry-after-ms": str(int(retry_after) * 1000)}
        if of_tokens:
            self.type = "tokens"


class StorageQuotaExceeded(ProxyError):
    """A key whose stored responses and conversations reached its quota (--max-stored-mib): no more
    writes until some are deleted or expire (no Retry-After: the store cannot say when)."""

    status = 429
    type = "storage"
    code = "storage_quota_exceeded"
    anthropic_type = "rate_limit_error"


class TooManySockets(ProxyError):
    """A key with as many Responses WebSockets open as it may hold: its handshake is refused until one
    closes (no Retry-After: a socket is open until its client closes it)."""

    status = 429
    type = "requests"
    code = "too_many_sockets"
    anthropic_type = "rate_limit_error"


class NotFound(ProxyError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"
    anthropic_type = "not_found_error"


class ModelNotFound(NotFound):
    code = "model_not_found"


class PayloadTooLarge(ProxyError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"
    anthropic_type = "request_too_large"


class StoreUnavailable(ProxyError):
    """The store of responses and conversations failed (Redis down, SQLite locked or unwritable)."""

    status = 503
    code = "store_unavailable"


class UpstreamError(ProxyError):
    status = 502
    type = "upstream_error"
    code = "bad_upstream_response"


class UpstreamUnavailable(UpstreamError):
    status = 503
    code = "upstream_unavailable"
    anthropic_type = "overloaded_error"

    @property
    def anthropic_status(self) -> int:
        return 529


class FleetUnavailable(UpstreamUnavailable):
    """The fleet cannot place the request: its Redis unreachable past the last known membership's
    expiry, or no box that can run the model answering (fleet/). Named so, never a 500."""

    code = "fleet_unavailable"


class Preempted(UpstreamUnavailable):
    """A background generation (a batch's line) stopped to give its slot to an interactive request; the
    batch runner runs it again (batch/runner.py), so no client sees this. Said by a header, which every
    API's error shape keeps (Anthropic's has no code)."""

    code = "preempted"
    headers = {"X-Preempted": "1"}  # noqa: RUF012 - never mutated


class UpstreamTimeout(UpstreamError):
    status = 504
    code = "upstream_timeout"
    anthropic_type = "timeout_error"
