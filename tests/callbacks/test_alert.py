"""An endpoint Ratchet disabled (a 410, a run of failures) fires an alert through the
existing alert machinery, which clears when it is enabled again; one its tenant disabled
does not fire."""

from __future__ import annotations

from flask import Flask

from app.clock import utcnow
from app.db import Database
from app.repo.callback_endpoints import get_endpoint, update_endpoint
from jobs.alerts import AlertEvaluator

from ..factories import make_world
from ..views.dashboard_world import make_staff, sign_in
from .conftest import add_endpoint, at, delivered_message, run_until_settled
from .receiver import Receiver


def test_an_endpoint_disabled_by_its_answers_fires_an_alert_that_enabling_clears(
    app: Flask, committed_db: Database
) -> None:
    db = committed_db
    world = make_world(db)
    gone, quiet = Receiver(script=[410]).start(), Receiver().start()
    try:
        endpoint_id = add_endpoint(db, world, gone)
        paused_by_tenant = add_endpoint(db, world, quiet)
        with db.transaction() as session:
            mine = get_endpoint(session, world.tenant_id, paused_by_tenant)
            assert mine is not None
            update_endpoint(session, mine, at(1), enabled=False, by="api:acme")
        delivered_message(db, world, "wamid.A1")
        run_until_settled(db, app.config["RATCHET"], endpoint_id, at(10))
    finally:
        gone.stop()
        quiet.stop()
    evaluator = AlertEvaluator(db, app.config["RATCHET"])
    try:
        fired = evaluator.run(utcnow())
        assert fired.fired == [f"callbacks_disabled:{endpoint_id}"]
        # The alerts page and the banner show it (an alert about no identity).
        make_staff(db, "viewer@acme.test", "viewer", world.tenant_id)
        client = app.test_client()
        sign_in(client, "viewer@acme.test")
        page = client.get("/alerts").get_data(as_text=True)
        assert "Callback endpoint disabled" in page
        assert f"callback endpoint {endpoint_id} (127.0.0.1) disabled: gone" in page
        with db.transaction() as session:
            endpoint = get_endpoint(session, None, endpoint_id)
            assert endpoint is not None
            update_endpoint(session, endpoint, at(20), enabled=True)
        cleared = evaluator.run(utcnow())
        assert cleared.cleared == [f"callbacks_disabled:{endpoint_id}"]
    finally:
        evaluator.close()
