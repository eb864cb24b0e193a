"""`GET /v1/messages`: a tenant's messages, filtered and paged (docs/api.md)."""

from __future__ import annotations

from flask import Blueprint, g, jsonify, request
from flask.typing import ResponseReturnValue

from app.db import get_db
from app.json_errors import json_error
from app.listquery import encode_cursor, parse_list_query
from app.repo.listing import list_messages
from app.sendrequest import RequestError
from app.views.api import message_json, require_api_key

bp = Blueprint("message_list", __name__, url_prefix="/v1")
# The same key check (and intake limits) as the rest of the API.
bp.before_request(require_api_key)


@bp.get("/messages")
def index() -> ResponseReturnValue:
    try:
        query = parse_list_query(request.args.to_dict(flat=False))
    except RequestError as exc:
        return json_error(400, str(exc), field=exc.field)
    with get_db().transaction() as session:
        page = list_messages(session, g.tenant_id, query)
        data = [message_json(message) for message in page.messages]
    after = encode_cursor(page.next_before) if page.next_before is not None else None
    return jsonify({"data": data, "next_cursor": after})
