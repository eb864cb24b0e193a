"""The rate limit's fast path: a request past its tenant's `requests_per_second`, refused
before Flask's request machinery (docs/api.md, "Limits").

A tenant flooding the API is refused hundreds of times a second, and each refusal used to
go through all of Flask: a request context, routing, the before-request hooks, a JSON
response, the after-request hooks. On a busy host that work queued the other tenants'
requests behind the flood. `IntakeGate` wraps the app's WSGI callable and answers the
refusal itself when it can decide it without the database:

1. The path and method name an endpoint whose blueprint checks the API key (the gate
   matches the app's own URL map, so a 404 or 405 stays one), and the request carries a
   key this process verified within the last second (`keycache.remembered_tenant`).
2. The tenant has a rate: `intake.rate_wait` (this process's memory of its refusals, then
   Redis) says whether the request fits.
3. Past the rate: the 429 is answered here, with the body, `Retry-After` and security
   headers the ordinary path gives. Within it: the request goes on to Flask marked as
   taken (`RATE_TAKEN`), so it is not counted twice, and meets every other check there.

Anything else (no key, a key not remembered, a key that never verified, no rate) goes on
untouched to the ordinary path, which verifies the key against the database and checks the
limits itself. Redis away: `rate_wait` logs and lets the request go on, as the ordinary path.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, cast
from urllib.parse import unquote_to_bytes

from flask import Flask
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Response

from app.security_headers import headers_for
from app.views.intake import RATE_TAKEN, rate_body, rate_wait
from app.views.keycache import remembered_tenant

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class IntakeGate:
    """WSGI middleware: refuse a remembered key past its rate before Flask sees it."""

    def __init__(self, wsgi_app: WsgiApp, app: Flask, keyed_endpoints: frozenset[str]) -> None:
        self.wsgi_app = wsgi_app
        self.app = app
        self.keyed_endpoints = keyed_endpoints
        # What app/security_headers.py adds to every response but the static files'.
        self.headers = {
            **headers_for(app.config["RATCHET"].public_base_url),
            "Cache-Control": "no-store",
        }

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        refusal = self.refusal(environ)
        if refusal is not None:
            return refusal(environ, start_response)
        return self.wsgi_app(environ, start_response)

    def refusal(self, environ: dict[str, Any]) -> Response | None:
        """The 429, or None: on to Flask (marked if the rate was taken)."""
        if _has_nul(environ):
            return None  # the app's own check answers it 400, taking nothing from the rate
        scheme, _, key = environ.get("HTTP_AUTHORIZATION", "").partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            return None
        tenant = remembered_tenant(self.app.extensions, key.strip(), time.monotonic())
        if tenant is None or tenant.max_requests_per_second is None:
            return None
        if self.endpoint(environ) not in self.keyed_endpoints:
            return None
        rate = tenant.max_requests_per_second
        wait = rate_wait(self.app.extensions, tenant, rate)
        if wait <= 0:
            environ[RATE_TAKEN] = True
            return None
        retry_after, body = rate_body(rate, wait)
        response = cast(Response, self.app.json.response(body))  # as `jsonify` makes it
        response.status_code = 429
        response.headers["Retry-After"] = str(retry_after)
        response.headers.update(self.headers)
        return response

    def endpoint(self, environ: dict[str, Any]) -> str | None:
        """The endpoint Flask would route this request to; None for a 404, 405 or redirect."""
        try:
            endpoint, _ = self.app.url_map.bind_to_environ(environ).match()
        except HTTPException:  # a RequestRedirect is one too
            return None
        return str(endpoint)


def _has_nul(environ: dict[str, Any]) -> bool:
    """A NUL in the path or the query: `app/inputs.py` refuses those before the key check."""
    query = unquote_to_bytes(environ.get("QUERY_STRING", ""))
    return "\x00" in environ.get("PATH_INFO", "") or b"\x00" in query


def init_app(app: Flask, require_api_key: Callable[[], Any]) -> None:
    """After every blueprint is registered: gate the endpoints of every blueprint that runs
    `require_api_key` before its requests (the OpenAPI document is open to all)."""
    keyed = {
        name
        for name, hooks in app.before_request_funcs.items()
        if name is not None and require_api_key in hooks
    }
    endpoints = frozenset(
        endpoint
        for endpoint in app.view_functions
        if endpoint.rpartition(".")[0] in keyed and endpoint != "api.openapi"
    )
    app.wsgi_app = IntakeGate(app.wsgi_app, app, endpoints)  # type: ignore[method-assign]
