"""ProxyFlask: Flask, with three of the steps it takes on every request remembered instead of redone.

All three sit on every request's way to its upstream, where each call costs several times its warm time on
a core that was idle (issue 54: the first token's time added). What they remember is what Flask would
work out again the same way, so the answers do not change:

- whether a view or hook is a coroutine (Flask asks `inspect` of each, on every request; the app has
  no coroutine views);
- the URL adapter of a request's host, scheme, method and path: werkzeug parses the Host header twice,
  decodes the path and encodes the host as IDNA to make one, for the same few paths every time;
- that there is no session: the proxy keeps no cookie sessions (it has no secret key), and Flask asked
  for a cookie signer and made a new empty session for each request to find that out.
"""

from __future__ import annotations

from flask import Flask
from flask.sessions import NullSession, SessionInterface

# Bounded: a client chooses the paths and hosts it sends (a full table is emptied and filled anew).
# The gthread worker's threads share the tables: each get, add and clear is one step under the GIL, and
# a race costs at most a miss (Flask's own work again).
MOST_ADAPTERS = 512
MOST_PLAIN_FUNCTIONS = 4096  # views and hooks (a function made per request would otherwise be kept)
# What werkzeug's Map.bind_to_environ and Flask's request.host read of a request's environ.
ADAPTER_INPUTS = (
    "HTTP_HOST",
    "SERVER_NAME",
    "SERVER_PORT",
    "wsgi.url_scheme",
    "HTTP_CONNECTION",
    "HTTP_UPGRADE",
    "SCRIPT_NAME",
    "REQUEST_METHOD",
    "PATH_INFO",
    "QUERY_STRING",
)


class NoSessions(SessionInterface):
    """Every request's session is the one null session (Flask's for an app without a secret key: it
    refuses to be written, so one serves all), opened without asking for a signer; never saved."""

    none = NullSession()

    def open_session(self, app, request) -> NullSession:
        return self.none

    def save_session(self, app, session, response) -> None:
        return None


class ProxyFlask(Flask):
    session_interface = NoSessions()

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._plain_functions: set = set()  # ensure_sync: known not to be coroutine functions
        self._adapters: dict[tuple, tuple] = {}  # create_url_adapter: inputs -> (adapter, host)

    def ensure_sync(self, func):
        if func in self._plain_functions:
            return func
        synced = super().ensure_sync(func)
        if synced is func and len(self._plain_functions) < MOST_PLAIN_FUNCTIONS:
            self._plain_functions.add(func)
        return synced

    def create_url_adapter(self, request):
        """Flask's adapter for `request`, made once for each host, scheme, method and path and reused: a
        MapAdapter holds only these and the map, and matching does not change it. Flask's own with a
        server name or trusted hosts configured (neither is), and outside a request."""
        if request is None or self.config["SERVER_NAME"] is not None or self.config["TRUSTED_HOSTS"] is not None:
            return super().create_url_adapter(request)
        environ = request.environ
        inputs = tuple(map(environ.get, ADAPTER_INPUTS))
        made = self._adapters.get(inputs)
        if made is None:
            made = (super().create_url_adapter(request), request.host)  # Flask sets request.host there
            if len(self._adapters) >= MOST_ADAPTERS:
                self._adapters.clear()
            self._adapters[inputs] = made
        else:
            request.host = made[1]
        return made[0]
