"""Webhook paths of the OpenAPI document (`app/views/openapi.py`), kept apart to keep it small."""

from __future__ import annotations

from typing import Any


def _error(description: str) -> dict[str, Any]:
    schema = {"$ref": "#/components/schemas/Error"}
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def messenger_webhook() -> dict[str, Any]:
    """`/webhooks/messenger`: Messenger (`object: page`) and Instagram (`object: instagram`)."""
    return {
        "/webhooks/messenger": {
            "get": {
                "summary": "Meta's subscription handshake for Messenger and Instagram",
                "operationId": "messengerHandshake",
                "security": [],
                "parameters": [
                    {"name": name, "in": "query", "required": True, "schema": {"type": "string"}}
                    for name in ("hub.mode", "hub.verify_token", "hub.challenge")
                ],
                "responses": {
                    "200": {"description": "The challenge, echoed as text/plain."},
                    "403": {
                        "description": "Not a subscription, or not the verify token of a "
                        "Messenger or Instagram identity."
                    },
                },
            },
            "post": {
                "summary": "Messenger / Instagram webhooks (for the provider)",
                "description": "Signed with `X-Hub-Signature-256` (HMAC-SHA256 of the raw "
                "body with the app secret of every Page or Instagram account `entry[].id` "
                "names). Echoes of our sends, deliveries and reads (by `mids`, or by "
                "watermark: every message of that thread sent at or before it), Instagram's "
                "`messaging_seen`, and customers' messages (which open their 24-hour "
                "window). Every correctly signed delivery is acknowledged.",
                "operationId": "messengerWebhook",
                "security": [],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": {"type": "object"}}},
                },
                "responses": {
                    "200": {"description": "Stored and applied (counts in `results`)."},
                    "202": {"description": "Signed, but not a shape Ratchet understands."},
                    "400": _error(
                        "Not JSON, `object` neither `page` nor `instagram`, or names no "
                        "identity (or more than 100)."
                    ),
                    "401": _error(
                        "No identity it names is known, or the signature does not match "
                        "(one answer for both)."
                    ),
                    "413": _error("The body is larger than 1 MiB, however it is framed."),
                },
            },
        }
    }


def add_provider_refusals(paths: dict[str, Any]) -> None:
    """Answers every provider route gives before its own checks: a NUL in a query
    parameter is a 400 (`app/inputs.py`), and a Twilio identity id that is not a whole
    number of at most 19 digits matches no route (404)."""
    nul = _error("A NUL character in a parameter.")
    for path in ("/webhooks/whatsapp", "/webhooks/messenger"):
        paths[path]["get"]["responses"]["400"] = nul
    paths["/webhooks/twilio/{identity_id}"]["post"]["responses"]["404"] = _error(
        "The identity id is not a whole number from 0 to 2^63 - 1."
    )
