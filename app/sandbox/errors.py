"""Meta's Graph API error bodies, as the Cloud API documents them.

Titles are embedded in ``message`` as "(#code) title"; Meta tells clients to branch on
``code`` and ``error_data.details`` instead, so details always say something specific.
"""

import secrets
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class MetaError:
    code: int
    http_status: int
    title: str
    details: str  # the usual error_data.details, for faults that need no specific one


ERRORS: dict[int, MetaError] = {
    e.code: e
    for e in [
        MetaError(100, 400, "Invalid parameter", "Invalid parameter."),
        MetaError(190, 401, "Invalid OAuth access token", "Error validating access token."),
        MetaError(
            130429,
            429,
            "Rate limit hit",
            "Message failed to send because there were too many messages sent from this "
            "phone number in a short period of time.",
        ),
        MetaError(131000, 500, "Something went wrong", "Something went wrong."),
        MetaError(
            131056,
            400,
            "(Business Account, Consumer Account) pair rate limit hit",
            "Message failed to send because there were too many messages sent from this "
            "phone number to the same phone number in a short period of time.",
        ),
        MetaError(131008, 400, "Required parameter is missing", "A parameter is missing."),
        MetaError(131016, 503, "Service unavailable", "A service is temporarily unavailable."),
        MetaError(131026, 400, "Message undeliverable", "Message Undeliverable."),
        MetaError(
            131047,
            400,
            "Re-engagement message",
            "Message failed to send because more than 24 hours have passed since the "
            "customer last replied to this number.",
        ),
        MetaError(
            131049,
            400,
            "This message was not delivered to maintain healthy ecosystem engagement.",
            "In order to maintain a healthy ecosystem engagement, the message failed to be "
            "delivered.",
        ),
        MetaError(
            132001,
            400,
            "Template name does not exist in the translation",
            "The template does not exist in this language.",
        ),
        MetaError(
            132015,
            400,
            "Template is paused",
            "Template is paused due to low quality so it cannot be sent in a template message.",
        ),
    ]
}


def new_fbtrace_id() -> str:
    # Real trace ids are short opaque tokens; only their presence matters to clients.
    return secrets.token_urlsafe(16)


def error_body(code: int, details: str) -> dict[str, Any]:
    """The synchronous error answer of the send API."""
    error = ERRORS[code]
    return {
        "error": {
            "message": f"(#{code}) {error.title}",
            "type": "OAuthException",
            "code": code,
            "error_data": {"messaging_product": "whatsapp", "details": details},
            "fbtrace_id": new_fbtrace_id(),
        }
    }


def status_error(code: int) -> dict[str, Any]:
    """One element of ``errors[]`` on a ``failed`` status webhook (the newer shape)."""
    error = ERRORS[code]
    details = error.details
    return {
        "code": code,
        "title": error.title,
        "message": error.title,
        "error_data": {"details": details},
    }
