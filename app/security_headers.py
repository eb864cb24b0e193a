"""The security headers every response carries (docs/security.md).

- `Content-Security-Policy`: scripts, styles, images and requests from this site only: no
  inline script, no eval, no inline style (htmx is told not to inject its indicator style,
  in `templates/base.html`); no `<base>`, no plugins; forms post here only; and no page may
  frame ours (`frame-ancestors 'none'`, with `X-Frame-Options: DENY` for older browsers),
  so no other site can overlay our pause and requeue buttons.
- `X-Content-Type-Options: nosniff`: a text answer (the Meta handshake's echoed challenge,
  a JSON error) is never run as something else.
- `Referrer-Policy: same-origin`: our URLs (message ids, searches) never leave in a
  Referer; Flask-WTF's https check still gets it on our own forms.
- `Cache-Control: no-store` on everything but the static files: pages show customers'
  messages and a generated password once; nothing should stay in a cache or the history.
- `Strict-Transport-Security` when `PUBLIC_BASE_URL` is https.

Written by hand, not with flask-talisman: these are six constant headers set in one place;
Talisman would also redirect to https and rewrite the session cookie's flags (both owned
elsewhere here), decides HSTS from the request's scheme rather than from PUBLIC_BASE_URL,
and its nonce machinery is not needed once no inline script is left.
"""

from __future__ import annotations

from flask import Flask, Response, request

CSP = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
        "object-src 'none'",
    )
)
HSTS = "max-age=31536000"


def headers_for(public_base_url: str) -> dict[str, str]:
    headers = {
        "Content-Security-Policy": CSP,
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "same-origin",
    }
    if public_base_url.startswith("https://"):
        headers["Strict-Transport-Security"] = HSTS
    return headers


def init_app(app: Flask) -> None:
    fixed = headers_for(app.config["RATCHET"].public_base_url)

    @app.after_request
    def _secure(response: Response) -> Response:
        for name, value in fixed.items():
            response.headers.setdefault(name, value)
        if request.endpoint != "static":
            response.headers["Cache-Control"] = "no-store"
        return response
