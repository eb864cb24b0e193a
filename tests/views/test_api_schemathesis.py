"""Schemathesis over the document served at /v1/openapi.json, as its command line runs it:
every operation the document names (the API, the provider webhooks, health and metrics),
every phase (the document's examples, the coverage of each parameter's edges, fuzzing, and
stateful sequences following the document's links) and every check, against the app
served over real HTTP. No answer is a 5xx, and none breaks what the document says."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import pytest
import schemathesis
from flask import Flask
from schemathesis.checks import (
    CHECKS,
    content_type_conformance,
    load_all_checks,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import events, from_schema
from schemathesis.engine.recorder import Interaction

from app.db import Database

from ..conftest import make_app
from ..factories import make_world
from .messenger_server import Ratchet

# Fuzzed cases per operation and mode; the coverage and stateful phases add their own.
# About 2,500 cases in all (fuzzing 1,700, coverage 600, stateful 150 to 600), in 50 to
# 100 s on a busy two-core machine; at 100 the fuzzing alone came near the floor.
EXAMPLES = 130
AT_LEAST = 2000

# positive_data_acceptance expects any request the schema allows to be accepted. These
# operations document refusals no JSON Schema can hold, so the check expects them there
# and keeps its defaults everywhere else:
# - a recipient valid for the identity's provider (a PSID is no phone number), an identity
#   of the caller's own (422), a cursor this API gave, a callback URL whose host resolves
#   to public addresses;
# - a webhook body is documented as an object: what makes it a delivery is Meta's or
#   Twilio's format, and one naming no identity is the documented 400;
# - a NUL character, which a string schema allows and PostgreSQL text cannot hold.
DOCUMENTED_REFUSALS = [
    {"operations": ["createMessage"], "statuses": ["400", "422"]},
    {
        "operations": [
            "listMessages",
            "cancelMessage",
            "createCallbackEndpoint",
            "updateCallbackEndpoint",
            "whatsappHandshake",
            "whatsappWebhook",
            "messengerHandshake",
            "messengerWebhook",
            "twilioCallback",
        ],
        "statuses": ["400"],
    },
]
ACCEPTED = ["2xx", "3xx", "401", "403", "404", "409", "429"]


@dataclass
class Run:
    cases: int = 0
    answered: int = 0
    phases: Counter[str] = field(default_factory=Counter)
    statuses: Counter[int] = field(default_factory=Counter)
    failures: list[tuple[str, str]] = field(default_factory=list)  # (kind, one example)
    errors: list[str] = field(default_factory=list)


def config(api_key: str, identity_id: int) -> SchemathesisConfig:
    load_all_checks()
    every_check = {check.__name__: {"enabled": True} for check in CHECKS.get_all()}
    # Half the generated values of these fields are ones that exist, so that sends and
    # callback endpoints are created, and the stateful phase follows them to the
    # operations that read, change, cancel and delete them.
    real = {
        "body.identity_id": [identity_id],
        "body.to": ["+15551234567", "15557654321"],
        "body.url": ["https://1.1.1.1/hook"],
    }
    return SchemathesisConfig.from_dict(
        {
            "dictionaries": {key: {"values": values} for key, values in real.items()},
            "parameters": {key: {"dictionary": key, "probability": 0.5} for key in real},
            "headers": {"Authorization": f"Bearer {api_key}"},
            "workers": 1,
            "continue-on-failure": True,
            "checks": every_check,
            "generation": {"max-examples": EXAMPLES, "database": "none"},
            "operations": [
                {
                    "include-operation-id": refusal["operations"],
                    "checks": {
                        "positive_data_acceptance": {
                            "expected-statuses": ACCEPTED + refusal["statuses"]
                        }
                    },
                }
                for refusal in DOCUMENTED_REFUSALS
            ],
        }
    )


def run_all_phases(url: str, api_key: str, identity_id: int) -> Run:
    schema = schemathesis.openapi.from_url(url, config=config(api_key, identity_id))
    run = Run()
    for event in from_schema(schema).execute():
        if isinstance(event, (events.NonFatalError, events.FatalError)):
            run.errors.append(repr(event))
        if not isinstance(event, events.ScenarioFinished):
            continue
        recorder = event.recorder
        run.cases += len(recorder.cases)
        run.phases[event.phase.value] += len(recorder.cases)
        for interaction in recorder.interactions.values():
            if interaction.response is not None:
                run.answered += 1
                run.statuses[interaction.response.status_code] += 1
        for case_id, checks in recorder.checks.items():
            for check in checks:
                if check.failure_info is not None:
                    sent = recorder.interactions.get(case_id)
                    run.failures.append((f"{check.name}: {kind(sent)}", described(sent)))
    return run


def kind(sent: Interaction | None) -> str:
    """A failure's operation and answer, without the generated values."""
    if sent is None:
        return "(no request)"
    path = urlsplit(sent.request.uri).path
    status = sent.response.status_code if sent.response is not None else None
    return f"{sent.request.method} {path} -> {status}"


def report(failures: list[tuple[str, str]]) -> str:
    """Each kind of failure once, how many times, and one example of it."""
    counts = Counter(kind for kind, _ in failures)
    example = dict(failures)
    return "\n".join(f"{n} x {kind}\n    {example[kind]}" for kind, n in counts.most_common(30))


def described(sent: Interaction | None) -> str:
    if sent is None:
        return "(no request)"
    answer = sent.response
    said = f"{answer.status_code} {answer.content[:200]!r}" if answer is not None else "no answer"
    return f"{sent.request.method} {sent.request.uri[:300]} {sent.request.body!r:.300} -> {said}"


def test_every_check_over_the_served_document_finds_nothing(ratchet: Ratchet) -> None:
    world = make_world(ratchet.db)
    run = run_all_phases(f"{ratchet.url}/v1/openapi.json", world.api_key, world.identity_id)
    print(f"schemathesis: {run.cases} cases ({dict(run.phases)}), {run.answered} answered")
    print(f"schemathesis statuses: {dict(sorted(run.statuses.items()))}")
    assert not run.errors, run.errors
    assert not run.failures, report(run.failures)
    assert not [status for status in run.statuses if status >= 500]
    assert run.answered >= AT_LEAST


@pytest.fixture
def app(pg_url: str, redis_url: str) -> Iterator[Flask]:
    """The shared app fixture without the server's idle-in-transaction limit: `db` keeps
    one transaction open for the whole test, which a slow machine can leave idle past the
    limit's 10 s."""
    app = make_app(pg_url, redis_url, db_idle_in_transaction=0)
    with app.app_context():
        yield app
    app.extensions["ratchet.db"].dispose()
    app.extensions["ratchet.redis"].close()


def test_the_success_answers_match_the_document(app: Flask, db: Database) -> None:
    # Generated ids rarely name a real identity or message, so the 2xx bodies are checked here.
    world = make_world(db)
    headers = {"Authorization": f"Bearer {world.api_key}"}
    schema = schemathesis.openapi.from_wsgi("/v1/openapi.json", app)
    checks = [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_headers_conformance,
        response_schema_conformance,
    ]
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
