"""Pieces of the OpenAPI document (`app/views/openapi.py`): the error answer and the
status callback endpoints (docs/callbacks.md)."""

from __future__ import annotations

from typing import Any

from app.repo.callback_endpoints import EVENTS

_ERROR = {"$ref": "#/components/schemas/Error"}


def error_answer(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ERROR}}}


_error = error_answer

_URL_RULES = (
    "https only, no user:password, and a host whose addresses are all public (no private, "
    "loopback, link-local or reserved address), except hosts the operator allows "
    "(RATCHET_CALLBACK_ALLOW_HOSTS), which may also use http."
)


def _endpoint_schema() -> dict[str, Any]:
    stamp = {"type": ["string", "null"], "format": "date-time"}
    return {
        "type": "object",
        "required": ["id", "url", "events", "enabled"],
        "properties": {
            "id": {"type": "integer"},
            "url": {"type": "string", "description": _URL_RULES},
            "events": {"type": "array", "items": {"type": "string", "enum": list(EVENTS)}},
            "enabled": {"type": "boolean"},
            "disabled_reason": {
                "type": ["string", "null"],
                "description": "gone (it answered 410), failing (a run of failures), or by whom",
            },
            "disabled_at": stamp,
            "previous_secret_until": {
                **stamp,
                "description": "until then the secret before the last roll signs too",
            },
            "secret": {
                "type": "string",
                "description": "The signing secret (`whsec_` + base64), only in the answer "
                "of the create and of a roll: shown once.",
            },
            "created_at": stamp,
            "updated_at": stamp,
        },
    }


def _endpoint_input(required: list[str]) -> dict[str, Any]:
    return {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": required,
                    "properties": {
                        "url": {"type": "string", "maxLength": 2000, "description": _URL_RULES},
                        "events": {
                            "type": "array",
                            "minItems": 1,
                            "items": {"type": "string", "enum": list(EVENTS)},
                            "description": "which changes it receives (default: all)",
                        },
                        "enabled": {"type": "boolean"},
                    },
                }
            }
        },
    }


def callback_endpoint_paths() -> dict[str, Any]:
    """`/v1/callback-endpoints`, and the schema of an endpoint (under `components`)."""
    one = {
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/CallbackEndpoint"}}
        }
    }
    the_id = [
        {"name": "endpoint_id", "in": "path", "required": True, "schema": {"type": "integer"}}
    ]
    missing = _error("No callback endpoint of yours has that id.")
    keyless = _error("No valid API key.")
    return {
        "/v1/callback-endpoints": {
            "post": {
                "summary": "Register a status callback endpoint",
                "description": "Every applied change of your messages (sent, delivered, read, "
                "failed, requeued, canceled) is POSTed to it, signed as Standard Webhooks "
                "(`webhook-id`, `webhook-timestamp`, `webhook-signature`), retried with "
                "backoff for 24 hours. The answer carries the signing secret, once.",
                "operationId": "createCallbackEndpoint",
                "requestBody": _endpoint_input(["url"]),
                "responses": {
                    "201": {"description": "Registered; `secret` is shown this once.", **one},
                    "400": _error("Not JSON, an unknown field or event, or a URL refused."),
                    "401": _error("No valid API key."),
                },
            },
            "get": {
                "summary": "Your callback endpoints",
                "operationId": "listCallbackEndpoints",
                "responses": {
                    "200": {
                        "description": "Every endpoint of yours, oldest first (no secrets).",
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "properties": {
                                        "endpoints": {
                                            "type": "array",
                                            "items": {
                                                "$ref": "#/components/schemas/CallbackEndpoint"
                                            },
                                        }
                                    },
                                }
                            }
                        },
                    },
                    "401": _error("No valid API key."),
                },
            },
        },
        "/v1/callback-endpoints/{endpoint_id}": {
            "parameters": the_id,
            "get": {
                "summary": "One callback endpoint",
                "operationId": "getCallbackEndpoint",
                "responses": {
                    "200": {"description": "The endpoint.", **one},
                    "401": keyless,
                    "404": missing,
                },
            },
            "patch": {
                "summary": "Change an endpoint's URL, events or enabled",
                "description": "Enabling a disabled endpoint posts what piled up meanwhile, "
                "each message's callbacks in sequence order.",
                "operationId": "updateCallbackEndpoint",
                "requestBody": _endpoint_input([]),
                "responses": {
                    "200": {"description": "Changed.", **one},
                    "400": _error("Not JSON, an unknown field or event, or a URL refused."),
                    "401": keyless,
                    "404": missing,
                },
            },
            "delete": {
                "summary": "Remove an endpoint and its undelivered callbacks",
                "operationId": "deleteCallbackEndpoint",
                "responses": {"204": {"description": "Removed."}, "401": keyless, "404": missing},
            },
        },
        "/v1/callback-endpoints/{endpoint_id}/roll-secret": {
            "parameters": the_id,
            "post": {
                "summary": "Roll the signing secret",
                "description": "A new secret, shown once. The old one keeps signing beside it "
                "(two signatures in `webhook-signature`) for `overlap_seconds` (default 86400, "
                "at most 7 days; 0 ends it now).",
                "operationId": "rollCallbackSecret",
                "requestBody": {
                    "required": False,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "additionalProperties": False,
                                "properties": {
                                    "overlap_seconds": {
                                        "type": "integer",
                                        "minimum": 0,
                                        "maximum": 7 * 86400,
                                    }
                                },
                            }
                        }
                    },
                },
                "responses": {
                    "200": {"description": "Rolled; `secret` is shown this once.", **one},
                    "400": _error("A body other than `overlap_seconds` in range."),
                    "401": keyless,
                    "404": missing,
                },
            },
        },
    }


def callback_schemas() -> dict[str, Any]:
    return {"CallbackEndpoint": _endpoint_schema()}
