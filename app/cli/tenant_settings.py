"""`tenant settings NAME`: a tenant's intake limits and retention, shown or changed."""

from __future__ import annotations

import click

from app.cli.setup import os_user
from app.clock import utcnow
from app.db import get_db
from app.repo import tenant_settings, tenants
from app.repo.tenant_settings import SettingsError, TenantSettings


def _limit(kind: type[int] | type[float]) -> click.ParamType:
    class Limit(click.ParamType):
        name = f"{kind.__name__}|none"

        def convert(self, value: object, param: object, ctx: object) -> int | float | None:
            if value is None or (isinstance(value, str) and value.lower() == "none"):
                return None
            try:
                return kind(str(value))
            except ValueError:
                self.fail(f"{value!r} is not a {kind.__name__} or `none`")

    return Limit()


def describe(settings: TenantSettings) -> str:
    rate = settings.max_requests_per_second
    waiting = settings.max_waiting
    return (
        f"requests per second: {'no limit' if rate is None else f'{rate:g}'}; "
        f"messages waiting: {'no limit' if waiting is None else waiting}; "
        f"content kept {settings.retention_days} days"
    )


@click.command("settings")
@click.argument("name")
@click.option("--requests-per-second", type=_limit(float), help="API requests a second, or `none`.")
@click.option("--max-waiting", type=_limit(int), help="Messages waiting to be sent, or `none`.")
@click.option("--retention-days", type=int, help="Days bodies and raw answers are kept.")
def tenant_settings_command(
    name: str,
    requests_per_second: float | None,
    max_waiting: int | None,
    retention_days: int | None,
) -> None:
    """Show a tenant's intake limits and retention; with options, change them (audited).

    An option left out keeps its value; `none` lifts a limit.
    """
    ctx = click.get_current_context()
    given = {
        option: ctx.get_parameter_source(option) is click.core.ParameterSource.COMMANDLINE
        for option in ("requests_per_second", "max_waiting", "retention_days")
    }
    with get_db().transaction() as session:
        tenant = tenants.get_tenant_by_name(session, name)
        if tenant is None:
            raise click.ClickException(f"no tenant named {name!r}")
        current = tenant_settings.settings_of(tenant)
        if not any(given.values()):
            click.echo(f"tenant {name!r}: {describe(current)}")
            return
        wanted = TenantSettings(
            requests_per_second
            if given["requests_per_second"]
            else current.max_requests_per_second,
            max_waiting if given["max_waiting"] else current.max_waiting,
            retention_days
            if given["retention_days"] and retention_days is not None
            else current.retention_days,
        )
        try:
            tenant_settings.set_tenant_settings(
                session, tenant.id, wanted, actor=f"cli:{os_user()}", now=utcnow()
            )
        except SettingsError as exc:
            raise click.ClickException(f"{exc}; nothing changed") from exc
    click.echo(f"tenant {name!r} now: {describe(wanted)} (was: {describe(current)})")
