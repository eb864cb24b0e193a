"""The client's address and scheme behind reverse proxies (werkzeug's `ProxyFix`).

Off by default: the socket's address is the client's, and an `X-Forwarded-For` header is
ignored (anyone can send one). With `RATCHET_TRUSTED_PROXIES=N`, the N-th address from
the right of `X-Forwarded-For` (the one the outermost trusted proxy saw) becomes
`request.remote_addr`, and `X-Forwarded-Proto` says whether the client used https. The
sign-in throttle and the audit log's addresses read `request.remote_addr`.
"""

from __future__ import annotations

from flask import Flask
from werkzeug.middleware.proxy_fix import ProxyFix


def init_app(app: Flask) -> None:
    trusted = app.config["RATCHET"].trusted_proxies
    if trusted:
        app.wsgi_app = ProxyFix(  # type: ignore[method-assign]
            app.wsgi_app, x_for=trusted, x_proto=trusted, x_host=0, x_port=0, x_prefix=0
        )
