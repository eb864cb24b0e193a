"""Setting up: the schema, tenants, sending identities and staff logins."""

from __future__ import annotations

import getpass
import re
import secrets
from collections.abc import Callable
from typing import Any, TypeVar

import click
from flask import current_app
from flask.cli import AppGroup
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from app import migrate
from app.clock import utcnow
from app.crypto import get_box
from app.db import get_db
from app.repo import identities, identity_actions, staff, tenants
from jobs.ringing import ring_after_new_rates, ring_message

db_cli = AppGroup("db", help="The database schema.")
tenant_cli = AppGroup("tenant", help="Tenants and their API keys.")
F = TypeVar("F", bound=Callable[..., Any])
# Twilio addresses a WhatsApp sender as whatsapp:+<E.164 digits>.
TWILIO_SENDER = re.compile(r"whatsapp:\+[1-9][0-9]{6,14}")

identity_cli = AppGroup("identity", help="Sending identities (a number or a Page).")
staff_cli = AppGroup("staff", help="Support staff who log in to the dashboard.")


def os_user() -> str:
    try:
        return getpass.getuser()
    except OSError:
        return "unknown"


@db_cli.command("upgrade")
def db_upgrade() -> None:
    """Create or migrate the schema to the latest revision."""
    engine = get_db().engine
    before = migrate.current_revision(engine)
    where = engine.url.render_as_string(hide_password=True)
    try:
        after = migrate.upgrade(engine)
    except SQLAlchemyError as exc:
        # Each migration commits by itself: the ones before the failure stay applied.
        now = migrate.current_revision(engine)
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise click.ClickException(
            f"the upgrade stopped: {reason}\n"
            f"schema now at revision {now or 'empty'} (was {before or 'empty'}; the latest is "
            f"{migrate.head_revision()}) ({where}); the migrations before the failure are "
            "applied. Fix the cause and run `db upgrade` again: it goes on from there."
        ) from exc
    if before == after:
        click.echo(f"schema already at revision {after} ({where})")
    else:
        click.echo(f"schema upgraded from {before or 'empty'} to {after} ({where})")


@tenant_cli.command("create")
@click.argument("name")
def tenant_create(name: str) -> None:
    """Create a tenant; its API key is printed once, on the last line, and stored hashed."""
    try:
        with get_db().transaction() as session:
            tenant, key = tenants.create_tenant(session, name, utcnow())
    except IntegrityError as exc:
        raise click.ClickException(f"a tenant named {name!r} already exists") from exc
    click.echo(f"created tenant {tenant.name!r} (id {tenant.id}); its API key, shown only once:")
    click.echo(key)


def _rate(name: str) -> Callable[[F], F]:
    return click.option(
        f"--{name}-rate",
        type=click.FloatRange(min=0, min_open=True),
        help=f"{name} messages per second",
    )


@identity_cli.command("create")
@click.option("--tenant", "tenant_name", required=True, help="the tenant's name")
@click.option("--provider", required=True, type=click.Choice(identities.PROVIDERS))
@click.option(
    "--account-id",
    required=True,
    help="phone number id, Page id, Instagram account id, or Twilio Account SID",
)
@click.option("--base-url", required=True, help="the provider's API base (or the sandbox's)")
@click.option("--token", required=True, help="access token, or Twilio Auth Token")
@click.option("--app-secret", help="the Meta app secret (webhook signatures)")
@click.option("--verify-token", help="the token Meta's webhook handshake must present")
@click.option("--from", "sender", help="Twilio sender, e.g. whatsapp:+15551234567")
@click.option(
    "--business-account",
    help="WhatsApp: the business account (WABA) id Meta's account and template webhooks name",
)
@_rate("reply")
@_rate("campaign")
@_rate("total")
def identity_create(
    tenant_name: str,
    provider: str,
    account_id: str,
    base_url: str,
    token: str,
    app_secret: str | None,
    verify_token: str | None,
    sender: str | None,
    business_account: str | None,
    reply_rate: float | None,
    campaign_rate: float | None,
    total_rate: float | None,
) -> None:
    """Create a sending identity; its id is printed on the last line."""
    if provider in ("whatsapp", "messenger", "instagram") and not app_secret:
        raise click.UsageError(f"--app-secret is required for {provider} (webhook signatures)")
    if provider == "twilio" and not sender:
        raise click.UsageError("--from is required for twilio (e.g. whatsapp:+15551234567)")
    if provider == "twilio" and not TWILIO_SENDER.fullmatch(sender or ""):
        raise click.UsageError(
            f"--from {sender!r} is not a Twilio WhatsApp sender: give whatsapp:+ and the "
            "number in E.164, e.g. whatsapp:+15551234567"
        )
    if provider not in identities.BUILT:
        raise click.ClickException(
            f"Ratchet cannot send through {provider} yet, so an identity of it could never "
            f"send; nothing was created (available now: {', '.join(sorted(identities.BUILT))})"
        )
    try:
        with get_db().transaction() as session:
            tenant = tenants.get_tenant_by_name(session, tenant_name)
            if tenant is None:
                raise click.ClickException(f"no tenant named {tenant_name!r}")
            identity = identities.create_identity(
                session,
                get_box(),
                tenant_id=tenant.id,
                provider=provider,
                account_id=account_id,
                base_url=base_url,
                token=token,
                app_secret=app_secret,
                verify_token=verify_token,
                sender=sender,
                business_account_id=business_account,
                reply_rate=reply_rate,
                campaign_rate=campaign_rate,
                total_rate=total_rate,
                now=utcnow(),
            )
    except IntegrityError as exc:
        # One Twilio account has many senders: there the pair is what is unique.
        also = f" and sender {sender!r}" if provider == "twilio" else ""
        raise click.ClickException(
            f"a {provider} identity with account id {account_id!r}{also} already exists"
        ) from exc
    except (
        identities.RatesError,
        identities.BaseUrlError,
        identities.TokenError,
        identities.BusinessAccountError,
    ) as exc:
        raise click.ClickException(f"{exc}; nothing was created") from exc
    click.echo(
        f"created {provider} identity for tenant {tenant_name!r}, account {account_id}, "
        f"sending through {identity.base_url}; its id:"
    )
    if provider == "twilio":
        base = current_app.config["RATCHET"].public_base_url
        click.echo(
            f"Twilio calls back at {base}/webhooks/twilio/{identity.id} (given with every "
            "send); point the sender's incoming-message webhook there too"
        )
    click.echo(str(identity.id))


@identity_cli.command("update")
@click.argument("identity_id", type=int)
@click.option("--token")
@click.option("--app-secret")
@click.option("--base-url")
@click.option("--verify-token")
@click.option("--business-account", help="WhatsApp: the business account (WABA) id")
@_rate("reply")
@_rate("campaign")
@_rate("total")
def identity_update(
    identity_id: int,
    token: str | None,
    app_secret: str | None,
    base_url: str | None,
    verify_token: str | None,
    business_account: str | None,
    reply_rate: float | None,
    campaign_rate: float | None,
    total_rate: float | None,
) -> None:
    """Replace an identity's token, secret, base URL, business account or rates."""
    with get_db().transaction() as session:
        identity = identities.get_identity(session, identity_id)
        if identity is None:
            raise click.ClickException(f"no identity with id {identity_id}")
        try:
            # The same operation (and audit row) as the dashboard's identities page.
            changed = identity_actions.change(
                session,
                get_box(),
                identity,
                actor=os_user(),
                now=utcnow(),
                via="cli",
                token=token,
                app_secret=app_secret,
                base_url=base_url,
                verify_token=verify_token,
                reply_rate=reply_rate,
                campaign_rate=campaign_rate,
                total_rate=total_rate,
                business_account_id=business_account,
            )
        except (
            identities.RatesError,
            identities.BaseUrlError,
            identities.TokenError,
            identities.BusinessAccountError,
        ) as exc:
            raise click.ClickException(f"{exc}; nothing was changed") from exc
    if not changed:
        raise click.UsageError("nothing to change: give at least one option")
    click.echo(f"updated identity {identity_id}: {', '.join(changed)}")
    # New rates may change a lane's shard count: its drains are rung now, not at the
    # sweeper's next pass.
    rates_given = (reply_rate, campaign_rate, total_rate) != (None, None, None)
    if rates_given and not ring_after_new_rates(identity_id, current_app.config["RATCHET"]):
        click.echo("Redis is unreachable: the sweeper will ring the drains")


@identity_cli.command("pause")
@click.argument("identity_id", type=int)
@click.option("--reason", required=True, help="why, for the people who will resume it")
@click.option("--campaign-only", is_flag=True, help="pause the campaign lane; replies go on")
def identity_pause(identity_id: int, reason: str, campaign_only: bool) -> None:
    """Stop sending from an identity (or its campaign lane); its messages wait, none fails."""
    scope = identity_actions.CAMPAIGN if campaign_only else identity_actions.WHOLE
    try:
        with get_db().transaction() as session:
            identity = identities.get_identity(session, identity_id)
            if identity is None:
                raise click.ClickException(f"no identity with id {identity_id}")
            paused = identity_actions.pause(
                session,
                identity,
                scope=scope,
                reason=reason,
                actor=os_user(),
                now=utcnow(),
                via="cli",
            )
    except identity_actions.IdentityActionError as exc:
        raise click.ClickException(f"{exc}; nothing was changed") from exc
    what = (
        f"the campaign lane of identity {identity_id}"
        if campaign_only
        else f"identity {identity_id}"
    )
    if paused.done:
        click.echo(f"paused {what}: {reason} ({paused.holds} messages wait)")
    else:
        click.echo(f"{what} was already paused; nothing changed")


@identity_cli.command("resume")
@click.argument("identity_id", type=int)
@click.option("--campaign-only", is_flag=True, help="resume the campaign lane only")
def identity_resume(identity_id: int, campaign_only: bool) -> None:
    """Resume a paused identity (or its campaign lane): what it held is due now and rung."""
    scope = identity_actions.CAMPAIGN if campaign_only else identity_actions.WHOLE
    with get_db().transaction() as session:
        identity = identities.get_identity(session, identity_id)
        if identity is None:
            raise click.ClickException(f"no identity with id {identity_id}")
        resumed = identity_actions.resume(
            session, identity, scope=scope, actor=os_user(), now=utcnow(), via="cli"
        )
    what = (
        f"the campaign lane of identity {identity_id}"
        if campaign_only
        else f"identity {identity_id}"
    )
    if not resumed.done:
        click.echo(f"{what} was not paused; nothing changed")
        return
    # One ring per lane: the drain finds every message due on it.
    all_rung = all([ring_message(0, lane, identity_id) for lane in resumed.lanes])
    waiting = resumed.due_now if campaign_only else resumed.released
    click.echo(
        f"resumed {what}: {waiting} waiting messages due now, "
        f"{waiting if all_rung else 0} rung" + ("" if all_rung else " (the sweeper rings the rest)")
    )


@staff_cli.command("create")
@click.argument("email")
@click.option("--role", required=True, type=click.Choice(staff.ROLES))
@click.option("--tenant", "tenant_name", help="the tenant; without it, platform staff")
@click.option("--password", help="without it, one is generated")
def staff_create(email: str, role: str, tenant_name: str | None, password: str | None) -> None:
    """Create a staff login; the password is printed on the last line."""
    password = password or secrets.token_urlsafe(12)
    try:
        with get_db().transaction() as session:
            tenant_id = None
            if tenant_name is not None:
                tenant = tenants.get_tenant_by_name(session, tenant_name)
                if tenant is None:
                    raise click.ClickException(f"no tenant named {tenant_name!r}")
                tenant_id = tenant.id
            member = staff.create_staff(session, email, role, password, utcnow(), tenant_id)
    except IntegrityError as exc:
        raise click.ClickException(f"staff {email!r} already exists") from exc
    scope = f"tenant {tenant_name!r}" if tenant_name else "platform staff"
    click.echo(f"created {member.role} {member.email} ({scope}); password:")
    click.echo(password)
