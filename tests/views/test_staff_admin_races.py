"""Two admins acting on each other at once: the request of an admin disabled a moment ago,
already in flight, changes nothing (real PostgreSQL, two HTTP clients, the interleaving
forced with an event hook on B's connection)."""

from __future__ import annotations

import threading
from typing import Any

from flask import Flask, g
from flask.testing import FlaskClient
from sqlalchemy import event, select

from app.db import Database
from app.models import Staff

from .dashboard_world import PASSWORD, csrf_token, make_staff, make_tenants, use_clock


def _signed_in(app: Flask, email: str) -> FlaskClient:
    client = app.test_client()
    g.pop("_login_user", None)
    g.pop("csrf_token", None)
    page = client.get("/sign-in").get_data(as_text=True)
    answer = client.post(
        "/sign-in", data={"email": email, "password": PASSWORD, "csrf_token": csrf_token(page)}
    )
    assert answer.status_code == 302, answer.get_data(as_text=True)
    return client


def _token(client: FlaskClient) -> str:
    g.pop("_login_user", None)
    g.pop("csrf_token", None)
    return csrf_token(client.get("/staff").get_data(as_text=True))


def test_two_admins_disabling_each_other_at_once_leave_the_tenant_one_admin(
    app: Flask, committed_db: Database
) -> None:
    """`set_disabled` refuses an admin's own login ("it could lock every admin out") but
    never re-checks the acting login inside its transaction: the view's actor was loaded
    by `load_staff` when the request began. Interleaving: B's request to disable A has
    loaded B (enabled); A's request to disable B commits; B's request then locks A's row
    and disables A. Both are disabled, each by a login that was (or is now) disabled: the
    tenant has no admin left, and the audit log shows a disabled login acting."""
    use_clock(app)
    tenants = make_tenants(committed_db)
    tenant = tenants.acme.tenant_id
    make_staff(committed_db, "a@acme.test", "admin", tenant)
    make_staff(committed_db, "b@acme.test", "admin", tenant)
    with committed_db.transaction() as session:
        ids = {row.email: row.id for row in session.execute(select(Staff.email, Staff.id))}
    a_client, b_client = _signed_in(app, "a@acme.test"), _signed_in(app, "b@acme.test")
    a_token, b_token = _token(a_client), _token(b_client)

    main = threading.current_thread()
    fired = threading.Event()
    answers: dict[str, int] = {}

    def a_disables_b() -> None:
        with app.app_context():
            answer = a_client.post(
                f"/staff/{ids['b@acme.test']}/disable", data={"csrf_token": a_token}
            )
            answers["a"] = answer.status_code

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        # B's action transaction, about to lock its target: A's request runs now.
        if (
            threading.current_thread() is main
            and not fired.is_set()
            and "FROM staff" in statement
            and "FOR UPDATE" in statement
        ):
            fired.set()
            worker = threading.Thread(target=a_disables_b)
            worker.start()
            worker.join(timeout=10)

    event.listen(committed_db.engine, "before_cursor_execute", before)
    try:
        g.pop("_login_user", None)
        g.pop("csrf_token", None)
        answer = b_client.post(f"/staff/{ids['a@acme.test']}/disable", data={"csrf_token": b_token})
        answers["b"] = answer.status_code
    finally:
        event.remove(committed_db.engine, "before_cursor_execute", before)
    assert fired.is_set() and answers.get("a") == 302, answers

    with committed_db.transaction() as session:
        enabled_admins = session.scalars(
            select(Staff.email).where(
                Staff.tenant_id == tenant, Staff.role == "admin", Staff.disabled_at.is_(None)
            )
        ).all()
    assert enabled_admins, (
        "B (disabled by A a moment before) disabled A in a request already in flight: "
        f"tenant acme has no enabled admin left ({answers})"
    )
