"""Schemathesis over /v1: requests generated from the served OpenAPI document, both valid
(positive) and invalid (negative) ones, never get a 5xx, and every answer matches the
document's schema for its status."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from flask import Flask
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import APIOperation, Case, GenerationMode
from schemathesis.checks import not_a_server_error, response_schema_conformance

from app.db import Database

from ..conftest import make_app
from ..factories import make_world

# Per operation and mode: the whole run stays well under a minute on a busy two-core machine.
EXAMPLES = 25


@pytest.fixture
def app(pg_url: str, redis_url: str) -> Iterator[Flask]:
    """The shared app fixture without the server's idle-in-transaction limit: `db` keeps
    one transaction open for the whole test, and Hypothesis can spend longer than the
    limit's 10 s making cases on a busy machine with no statement sent, which PostgreSQL
    would end as a stalled session (seen once in six runs under load)."""
    app = make_app(pg_url, redis_url, db_idle_in_transaction=0)
    with app.app_context():
        yield app
    app.extensions["ratchet.db"].dispose()
    app.extensions["ratchet.redis"].close()


def fuzz(operation: APIOperation, mode: GenerationMode, headers: dict[str, str]) -> int:
    """Run one operation's generated cases through the checks; how many ran."""
    ran = 0

    @settings(max_examples=EXAMPLES, suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(mode))
    def run(case: Case) -> None:
        nonlocal ran
        ran += 1
        case.call_and_validate(
            headers=headers, checks=[not_a_server_error, response_schema_conformance]
        )

    try:
        run()
    except Unsatisfiable:
        # An operation with no parameters and no body has nothing to make invalid.
        assert mode is GenerationMode.NEGATIVE and ran == 0, operation.label
    return ran


def test_no_v1_operation_answers_a_5xx_or_off_schema(app: Flask, db: Database) -> None:
    world = make_world(db)
    headers = {"Authorization": f"Bearer {world.api_key}"}
    schema = schemathesis.openapi.from_wsgi("/v1/openapi.json", app).include(path_regex="^/v1/")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10
    cases = sum(fuzz(op, mode, headers) for op in operations for mode in GenerationMode)
    print(f"schemathesis ran {cases} cases over {len(operations)} operations")
    assert cases > len(operations) * EXAMPLES


def test_the_success_answers_match_the_document(app: Flask, db: Database) -> None:
    # Generated ids rarely name a real identity or message, so the 2xx bodies are checked here.
    world = make_world(db)
    headers = {"Authorization": f"Bearer {world.api_key}"}
    schema = schemathesis.openapi.from_wsgi("/v1/openapi.json", app)
    checks = [not_a_server_error, response_schema_conformance]
    send = {"identity_id": world.identity_id, "to": "+15551234567", "text": "hi"}
    created = schema["/v1/messages"]["POST"].Case(body=send)
    response = created.call_and_validate(headers=headers, checks=checks)
    assert response.status_code == 201
    the_id = {"message_id": response.json()["id"]}
    for case in [
        schema["/v1/messages/{message_id}"]["GET"].Case(path_parameters=the_id),
        schema["/v1/messages"]["GET"].Case(query={"status": "queued"}),
        schema["/v1/messages/{message_id}/cancel"]["POST"].Case(path_parameters=the_id),
        schema["/v1/callback-endpoints"]["POST"].Case(body={"url": "https://1.1.1.1/hook"}),
        schema["/v1/callback-endpoints"]["GET"].Case(),
    ]:
        assert case.call_and_validate(headers=headers, checks=checks).status_code in {200, 201}
