"""The API's OpenAPI 3.1 document, served at `/v1/openapi.json`.

Request schemas come from the pydantic models that validate requests, so the document
cannot drift from what the API accepts. Every route of the app is here, except those in
`INTERNAL` (`app/views/internal_routes.py`, documented in `docs/endpoints.md`).
"""

from __future__ import annotations

from typing import Any

from app.sendrequest import SendRequest
from app.views.openapi_paths import callback_endpoint_paths, callback_schemas
from app.views.openapi_paths import error_answer as _error
from app.views.openapi_webhooks import messenger_webhook


def _message_schema() -> dict[str, Any]:
    timestamp = {"type": "string", "format": "date-time"}
    return {
        "type": "object",
        "required": ["id", "status", "lane", "identity_id", "to", "attempts", "timestamps"],
        "properties": {
            "id": {"type": "integer"},
            "status": {
                "type": "string",
                "enum": ["queued", "sending", "sent", "delivered", "read", "failed"],
            },
            "lane": {"type": "string", "enum": ["reply", "campaign"]},
            "identity_id": {"type": "integer"},
            "to": {
                "type": "string",
                "description": "E.164 digits (WhatsApp, Twilio), or the PSID / IGSID "
                "(Messenger, Instagram)",
            },
            "idempotency_key": {"type": ["string", "null"]},
            "tag": {"type": ["string", "null"], "description": "Messenger / Instagram tag"},
            "provider_message_id": {"type": ["string", "null"]},
            "attempts": {"type": "integer", "description": "provider calls in this cycle"},
            "cycle": {"type": "integer", "description": "1, plus one per operator requeue"},
            "failure_class": {"type": ["string", "null"]},
            "last_error": {
                "type": ["object", "null"],
                "description": "the provider's last error, verbatim: provider, http_status, "
                "code, subcode, title, message, details, trace_id, raw",
            },
            "timestamps": {
                "type": "object",
                "description": "when each state was reached in this cycle",
                "properties": {
                    name: timestamp
                    for name in ("queued", "sending", "sent", "delivered", "read", "failed")
                },
            },
            "created_at": timestamp,
        },
    }


def document() -> dict[str, Any]:
    send_schema = SendRequest.model_json_schema(ref_template="#/components/schemas/{model}")
    definitions = send_schema.pop("$defs", {})
    message_ref = {"$ref": "#/components/schemas/Message"}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Ratchet send API",
            "version": "1",
            "description": (
                "Send WhatsApp, Messenger and Instagram messages exactly once. Give every "
                "send an idempotency key (the `Idempotency-Key` header or `idempotency_key` "
                "in the body): a retry with the same key and body returns the existing "
                "message (200) instead of sending again. **A send without a key is not "
                "deduplicated: if your client retries it after a timeout, the recipient may "
                "get the message twice.**"
            ),
        },
        "servers": [{"url": "/"}],
        "security": [{"apiKey": []}],
        "paths": {
            "/v1/messages": {
                "post": {
                    "summary": "Send a message",
                    "operationId": "createMessage",
                    "parameters": [
                        {
                            "name": "Idempotency-Key",
                            "in": "header",
                            "required": False,
                            "schema": {"type": "string", "minLength": 1, "maxLength": 255},
                            "description": "The same as `idempotency_key` in the body; if "
                            "both are given they must be equal.",
                        }
                    ],
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": send_schema}},
                    },
                    "responses": {
                        "201": {
                            "description": "Accepted and queued.",
                            "headers": {
                                "Location": {"schema": {"type": "string"}},
                            },
                            "content": {"application/json": {"schema": message_ref}},
                        },
                        "200": {
                            "description": "A retry: the message this key already created, "
                            "in whatever state it is now.",
                            "content": {"application/json": {"schema": message_ref}},
                        },
                        "400": _error(
                            "Malformed JSON (including nesting too deep or a number of "
                            "too many digits), a missing or invalid field, a NUL character "
                            "in the text or the key, an invalid recipient, neither or both "
                            "of text and template, or two different idempotency keys."
                        ),
                        "401": _error("No API key, or not a valid one."),
                        "413": _error("The body is larger than 64 KiB, however it is framed."),
                        "415": _error("The body is not `application/json`."),
                        "422": {
                            "description": "The identity is not one of yours (or no identity "
                            "could have that id), its provider is not one Ratchet can send "
                            "through yet, a template for a Messenger or Instagram identity "
                            "(they take `text`), a `tag` for a WhatsApp identity, or the key "
                            "was already used for a different request (`existing_id` names "
                            "the message it created).",
                            "content": {
                                "application/json": {
                                    "schema": {"$ref": "#/components/schemas/ConflictError"}
                                }
                            },
                        },
                    },
                }
            },
            "/v1/messages/{message_id}": {
                "get": {
                    "summary": "A message and its state",
                    "operationId": "getMessage",
                    "parameters": [
                        {
                            "name": "message_id",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "integer"},
                        }
                    ],
                    "responses": {
                        "200": {
                            "description": "The message.",
                            "content": {"application/json": {"schema": message_ref}},
                        },
                        "401": _error("No API key, or not a valid one."),
                        "404": _error("No such message among yours."),
                    },
                }
            },
            "/v1/messages/{message_id}/cancel": {
                "post": {
                    "summary": "Cancel a message before it is sent",
                    "description": "Only a message no worker has claimed yet (`queued`) can "
                    "be canceled: it ends `failed` with `failure_class` `canceled` and is "
                    "never sent. Once claimed it may already be on its way to the provider, "
                    "so the answer is 409 with its current `status`.",
                    "operationId": "cancelMessage",
                    "parameters": [
                        {
                            "name": "message_id",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "integer"},
                        }
                    ],
                    "requestBody": {
                        "required": False,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "properties": {
                                        "reason": {
                                            "type": "string",
                                            "minLength": 1,
                                            "maxLength": 500,
                                            "description": "why; kept in the audit log",
                                        }
                                    },
                                }
                            }
                        },
                    },
                    "responses": {
                        "200": {
                            "description": "Canceled: the message, now `failed`/`canceled`.",
                            "content": {"application/json": {"schema": message_ref}},
                        },
                        "400": _error("The body is not an object with only a `reason`."),
                        "401": _error("No API key, or not a valid one."),
                        "404": _error("No such message among yours."),
                        "409": {
                            "description": "Too late: a worker claimed it, or it was sent "
                            "or has failed. `status` is its current state.",
                            "content": {
                                "application/json": {
                                    "schema": {
                                        "type": "object",
                                        "required": ["error", "status"],
                                        "properties": {
                                            "error": {"type": "string"},
                                            "status": {"type": "string"},
                                            "message": message_ref,
                                        },
                                    }
                                }
                            },
                        },
                    },
                }
            },
            "/v1/openapi.json": {
                "get": {
                    "summary": "This document",
                    "operationId": "getOpenApi",
                    "security": [],
                    "responses": {"200": {"description": "The OpenAPI document."}},
                }
            },
            "/webhooks/whatsapp": {
                "get": {
                    "summary": "Meta's subscription handshake (for the provider)",
                    "operationId": "whatsappHandshake",
                    "security": [],
                    "parameters": [
                        {
                            "name": name,
                            "in": "query",
                            "required": True,
                            "schema": {"type": "string"},
                        }
                        for name in ("hub.mode", "hub.verify_token", "hub.challenge")
                    ],
                    "responses": {
                        "200": {"description": "The challenge, echoed as text/plain."},
                        "403": {"description": "Not a subscription, or an unknown verify token."},
                    },
                },
                "post": {
                    "summary": "Status and inbound-message webhooks (for the provider)",
                    "description": "Signed with `X-Hub-Signature-256` (HMAC-SHA256 of the raw "
                    "body with the app secret of every identity the delivery names). Every "
                    "correctly signed delivery is acknowledged, unknown ids and duplicates "
                    "included.",
                    "operationId": "whatsappWebhook",
                    "security": [],
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    },
                    "responses": {
                        "200": {
                            "description": "Stored; each status applied, parked, recorded "
                            "as a duplicate, or kept unmatched under a number Ratchet does "
                            "not know (counts in `results`)."
                        },
                        "202": {
                            "description": "Signed, but not a shape Ratchet understands: "
                            "kept verbatim, nothing applied."
                        },
                        "400": _error(
                            "Not JSON, names no WhatsApp identity, or names more than 100."
                        ),
                        "401": _error(
                            "No identity it names is known, or the signature does not match "
                            "(one answer for both)."
                        ),
                        "413": _error("The body is larger than 1 MiB, however it is framed."),
                    },
                },
            },
            **messenger_webhook(),
            **callback_endpoint_paths(),
            "/webhooks/twilio/{identity_id}": {
                "post": {
                    "summary": "Twilio status callbacks and incoming messages (for the provider)",
                    "description": "Form-encoded, signed with `X-Twilio-Signature` (HMAC-SHA1 "
                    "of the full URL, query string included, and the sorted form parameters, "
                    "with the identity's Auth Token). Ratchet gives this URL, with a `c` query "
                    "parameter naming the message, as the `StatusCallback` of every send.",
                    "operationId": "twilioCallback",
                    "security": [],
                    "parameters": [
                        {
                            "name": "identity_id",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "integer"},
                        }
                    ],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/x-www-form-urlencoded": {"schema": {"type": "object"}}
                        },
                    },
                    "responses": {
                        "200": {
                            "description": "Stored; the status applied, parked, ignored (a "
                            "Twilio step below `sent`) or a duplicate; or an incoming message "
                            "opened the 24-hour window."
                        },
                        "202": {"description": "Signed, but not understood: kept verbatim."},
                        "400": _error("Not form data."),
                        "401": _error(
                            "No such Twilio identity, a signature that does not match, or "
                            "another account's callback (one answer for all three)."
                        ),
                        "413": _error("The body is larger than 1 MiB, however it is framed."),
                    },
                }
            },
            "/healthz": {
                "get": {
                    "summary": "Liveness (internal): the process is up",
                    "operationId": "healthz",
                    "security": [],
                    "responses": {"200": {"description": "Up."}},
                }
            },
            "/readyz": {
                "get": {
                    "summary": "Readiness (internal): the database and Redis answer",
                    "operationId": "readyz",
                    "security": [],
                    "responses": {
                        "200": {"description": "Ready."},
                        "503": {"description": "The database or Redis does not answer."},
                    },
                }
            },
            "/metrics": {
                "get": {
                    "summary": "Prometheus metrics (internal), in Prometheus's text format",
                    "operationId": "metrics",
                    "description": (
                        "Queue gauges read from the database at scrape time, and this "
                        "host's counters. Behind the bearer token RATCHET_METRICS_TOKEN; "
                        "closed (403) while it is not set."
                    ),
                    "security": [{"metricsToken": []}],
                    "responses": {
                        "200": {
                            "description": "The exposition.",
                            "content": {"text/plain": {"schema": {"type": "string"}}},
                        },
                        "401": {"description": "The token is missing or wrong."},
                        "403": {"description": "Closed: RATCHET_METRICS_TOKEN is not set."},
                    },
                }
            },
        },
        "components": {
            "securitySchemes": {
                "apiKey": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "Your tenant API key, from `flask --app wsgi tenant create`.",
                },
                "metricsToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "RATCHET_METRICS_TOKEN.",
                },
            },
            "schemas": {
                **definitions,
                **callback_schemas(),
                "SendRequest": send_schema,
                "Message": _message_schema(),
                "Error": {
                    "type": "object",
                    "required": ["error"],
                    "properties": {
                        "error": {"type": "string", "description": "what was wrong"},
                        "field": {"type": ["string", "null"]},
                    },
                },
                "ConflictError": {
                    "type": "object",
                    "required": ["error"],
                    "properties": {
                        "error": {"type": "string"},
                        "existing_id": {"type": "integer"},
                        "field": {"type": ["string", "null"]},
                    },
                },
            },
        },
    }
