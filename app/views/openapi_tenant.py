"""The OpenAPI pieces of issue 34, added to `app/views/openapi.py`'s document: the list of
messages (`GET /v1/messages`), the intake limits' 429 on every keyed operation, and the
purge time a message carries once retention emptied its content.

The list's parameters come from `ListQuery`, the model that validates them, so the
document cannot drift from what the API accepts.
"""

from __future__ import annotations

from typing import Any

from app.listquery import ListQuery
from app.views.openapi import document as base_document
from app.views.openapi_webhooks import add_provider_refusals

_ERROR = {"$ref": "#/components/schemas/Error"}


def _parameters() -> list[dict[str, Any]]:
    schema = ListQuery.model_json_schema()
    parameters = []
    for name, prop in schema["properties"].items():
        described = dict(prop)
        description = described.pop("description", None)
        described.pop("title", None)
        if "anyOf" in described:  # an optional field: its one non-null form
            described = next(s for s in described["anyOf"] if s.get("type") != "null")
        parameter = {"name": name, "in": "query", "required": False, "schema": described}
        if description:
            parameter["description"] = description
        parameters.append(parameter)
    return parameters


def list_operation() -> dict[str, Any]:
    return {
        "summary": "List your messages, newest first, filtered",
        "description": "Every filter is optional; given together they must all match. "
        "Pages follow `next_cursor` until it is null: a message created meanwhile never "
        "shifts a later page (keyset paging below the last id). An unknown parameter, a "
        "parameter given twice or a bad value is a 400 naming it.",
        "operationId": "listMessages",
        "parameters": _parameters(),
        "responses": {
            "200": {
                "description": "One page.",
                "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/MessagePage"}}
                },
            },
            "400": {
                "description": "An unknown filter, one given twice, a bad value or a "
                "cursor this API did not give.",
                "content": {"application/json": {"schema": _ERROR}},
            },
            "401": {
                "description": "No API key, or not a valid one.",
                "content": {"application/json": {"schema": _ERROR}},
            },
        },
    }


def _limit_answer() -> dict[str, Any]:
    return {
        "description": "Past one of your tenant's intake limits: nothing was stored. "
        "`Retry-After` says in how many seconds to try again; `limit` names the limit.",
        "headers": {"Retry-After": {"schema": {"type": "integer", "minimum": 1}}},
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/LimitError"}}},
    }


SCHEMAS: dict[str, Any] = {
    "MessagePage": {
        "type": "object",
        "required": ["data", "next_cursor"],
        "properties": {
            "data": {"type": "array", "items": {"$ref": "#/components/schemas/Message"}},
            "next_cursor": {
                "type": ["string", "null"],
                "description": "give it as `cursor` for the next page; null on the last",
            },
        },
    },
    "LimitError": {
        "type": "object",
        "required": ["error", "limit", "retry_after"],
        "properties": {
            "error": {"type": "string"},
            "limit": {
                "type": "string",
                "enum": ["requests_per_second", "max_waiting"],
                "description": "the limit reached",
            },
            "value": {"type": "number", "description": "the tenant's setting"},
            "retry_after": {"type": "integer"},
        },
    },
}


def document() -> dict[str, Any]:
    """The served document: `app/views/openapi.py`'s, with the list, the 429s and the
    purge time added."""
    document = base_document()
    paths = document["paths"]
    paths["/v1/messages"]["get"] = list_operation()
    add_provider_refusals(paths)
    for path, operations in paths.items():
        if not path.startswith("/v1/"):
            continue
        for method, operation in operations.items():
            if method == "parameters":  # a path's shared parameters, not an operation
                continue
            if operation.get("security") != []:
                operation["responses"]["429"] = _limit_answer()
    schemas = document["components"]["schemas"]
    schemas.update(SCHEMAS)
    schemas["Message"]["properties"]["content_purged_at"] = {
        "type": ["string", "null"],
        "format": "date-time",
        "description": "when retention emptied the text, the template's parameters and the "
        "provider's raw answers (null: kept); the state, times, codes and ids stay",
    }
    schemas["Message"]["properties"]["send_at"] = {
        "type": ["string", "null"],
        "format": "date-time",
        "description": "not sent before this time (null: as soon as possible)",
    }
    schemas["Message"]["properties"]["expires_at"] = {
        "type": ["string", "null"],
        "format": "date-time",
        "description": "never sent after this time: not called by then, it ends `failed` "
        "with failure class `expired` (null: no limit). From the request's `valid_for` or "
        "`expires_at`, else from the identity's default validity for the message's lane",
    }
    return document
