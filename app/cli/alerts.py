"""`alerts ...`: what is firing, an identity's own stuck threshold, one evaluation now."""

from __future__ import annotations

import click
from flask import current_app

from app.cli.setup import os_user
from app.clock import utcnow
from app.db import get_db
from app.repo import alerts, staff
from app.repo.alert_signals import KIND_TITLES
from app.repo.identities import get_identity

alerts_cli = click.Group("alerts", help="Alerts: what fires, thresholds, one evaluation.")


@alerts_cli.command("list")
def alerts_list() -> None:
    """The alerts firing now, the oldest first."""
    with get_db().transaction() as session:
        firing = alerts.firing_alerts(session)
    for alert in firing:
        click.echo(
            f"{alert.fired_at:%Y-%m-%d %H:%M:%S} UTC  {KIND_TITLES.get(alert.kind, alert.kind)}: "
            f"{alert.summary}  [episode {alert.episode_key}]"
        )
    click.echo(f"{len(firing)} alert{'' if len(firing) == 1 else 's'} firing")


@alerts_cli.command("stuck-after")
@click.argument("identity_id", type=int)
@click.argument("seconds")
def alerts_stuck_after(identity_id: int, seconds: str) -> None:
    """Set an identity's own stuck-queue threshold in SECONDS, or `default` for
    RATCHET_STUCK_AFTER's."""
    if seconds == "default":
        value = None
    else:
        try:
            value = float(seconds)
        except ValueError:
            raise click.BadParameter("a number of seconds, or `default`") from None
        if not value > 0:
            raise click.BadParameter("must be more than 0 seconds")
    with get_db().transaction() as session:
        identity = get_identity(session, identity_id)
        if identity is None:
            raise click.ClickException(f"no identity with id {identity_id}")
        alerts.set_stuck_after(session, identity_id, value)
        staff.record_audit(
            session,
            os_user(),
            "identity.stuck_after",
            f"identity:{identity_id}",
            utcnow(),
            {"stuck_after": value},
            tenant_id=identity.tenant_id,
        )
    default = current_app.config["RATCHET"].stuck_after
    click.echo(
        f"identity {identity_id}: stuck after {value:g} s"
        if value is not None
        else f"identity {identity_id}: stuck after the default ({default:g} s)"
    )


@alerts_cli.command("evaluate")
def alerts_evaluate() -> None:
    """Evaluate every alert once now (the sweeper does this every RATCHET_ALERT_INTERVAL)."""
    from jobs.alerts import AlertEvaluator

    evaluator = AlertEvaluator(get_db(), current_app.config["RATCHET"])
    try:
        outcome = evaluator.run(utcnow())
    finally:
        evaluator.close()
    for key in outcome.fired:
        click.echo(f"fired: {key}")
    for key in outcome.cleared:
        click.echo(f"cleared: {key}")
    click.echo(outcome.describe())
