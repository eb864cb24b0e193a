"""Sending identities: the number or Page a message goes out from."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import urlsplit

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from app.crypto import SecretBox, sha256_hex
from app.models import Identity
from app.providers import PROVIDERS as PROVIDER_REGISTRY
from app.repo.sql import rows_changed
from app.repo.staff import record_audit

# Every provider the CLI and the schema know; `BUILT` are those a message can be sent
# through today (the provider registry).
PROVIDERS = ("whatsapp", "twilio", "messenger", "instagram")
BUILT = frozenset(PROVIDER_REGISTRY)


@dataclass(frozen=True, slots=True)
class IdentitySecrets:
    """Decrypted secrets, for the provider call or a signature check; never logged."""

    token: str = field(repr=False)
    app_secret: str | None = field(repr=False)


def create_identity(
    session: Session,
    box: SecretBox,
    *,
    tenant_id: int,
    provider: str,
    account_id: str,
    base_url: str,
    token: str,
    now: datetime,
    app_secret: str | None = None,
    verify_token: str | None = None,
    sender: str | None = None,
    reply_rate: float | None = None,
    campaign_rate: float | None = None,
    total_rate: float | None = None,
    business_account_id: str | None = None,
) -> Identity:
    if provider not in PROVIDERS:
        raise ValueError(f"unknown provider {provider!r}; expected one of {', '.join(PROVIDERS)}")
    if provider not in BUILT:
        # Its messages could never be sent: they would wait for ever.
        raise ValueError(
            f"Ratchet cannot send through {provider} yet; an identity of it could never send "
            f"(available now: {', '.join(sorted(BUILT))})"
        )
    identity = Identity(
        tenant_id=tenant_id,
        provider=provider,
        account_id=account_id,
        base_url=checked_base_url(base_url),
        token_encrypted=box.encrypt(checked_token(token)),
        app_secret_encrypted=box.encrypt(app_secret) if app_secret else None,
        verify_token_hash=sha256_hex(verify_token) if verify_token else None,
        sender=sender,
        business_account_id=free_business_account(session, business_account_id, tenant_id),
        created_at=now,
        token_set_at=now,
        app_secret_set_at=now if app_secret else None,
    )
    for name, value in (
        ("reply_rate", reply_rate),
        ("campaign_rate", campaign_rate),
        ("total_rate", total_rate),
    ):
        if value is not None:
            setattr(identity, name, value)
    check_rates(
        identity.reply_rate if identity.reply_rate is not None else 20.0,
        identity.campaign_rate if identity.campaign_rate is not None else 10.0,
        identity.total_rate if identity.total_rate is not None else 80.0,
    )
    session.add(identity)
    session.flush()
    return identity


class BusinessAccountError(ValueError):
    """Not a WhatsApp business account id (Meta's are digits)."""


def checked_business_account(value: str | None) -> str | None:
    """A WhatsApp business account id as Meta writes it (`entry[].id`): digits only."""
    if value is None:
        return None
    value = value.strip()
    if not value.isascii() or not value.isdigit() or len(value) > 100:
        raise BusinessAccountError(
            f"{value[:40]!r} is not a WhatsApp business account id (digits, as Meta's "
            "WhatsApp Manager shows it)"
        )
    return value


def free_business_account(session: Session, value: str | None, tenant_id: int) -> str | None:
    """A business account id no identity of another tenant holds: Meta's events for it are
    acted on for its identities, so one tenant may not name another's."""
    account = checked_business_account(value)
    if account is None:
        return None
    other = session.scalar(
        select(Identity.id)
        .where(Identity.business_account_id == account, Identity.tenant_id != tenant_id)
        .limit(1)
    )
    if other is not None:
        raise BusinessAccountError(
            f"business account {account} belongs to another tenant's identity"
        )
    return account


class BaseUrlError(ValueError):
    """A base URL no provider call can go to, or one that holds a secret."""


# Identity.base_url's width.
BASE_URL_WIDTH = 500


def checked_base_url(url: str) -> str:
    """`url` without its trailing slashes, where it is an `http(s)://host[:port][/path]`
    address: the provider module appends the account's path to it (`/<id>/messages`), so
    a query or a fragment would be cut off or carried into every call; and it is shown on
    the dashboard and in the CLI's answers, so it may hold no user name or password (the
    token has its own, encrypted, field). The errors never repeat the URL: what was typed
    may hold a password or a token."""
    if not url or not url.isascii() or not url.isprintable() or " " in url:
        raise BaseUrlError(
            "the base URL is empty, or holds spaces, control or non-ASCII characters "
            "(give an internationalised host in its xn-- form)"
        )
    if "@" in url:
        raise BaseUrlError(
            "the base URL holds '@' (a user name or password?); give the token with "
            "--token (it is stored encrypted), and the URL without them"
        )
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise BaseUrlError("the base URL's host or port cannot be read") from None
    if parts.scheme not in ("https", "http") or not url.lower().startswith(parts.scheme + "://"):
        raise BaseUrlError(
            "the base URL must start with https:// (or http:// for a sandbox on a network "
            "of your own: the token then travels in clear)"
        )
    host = parts.hostname or ""
    if not any(c.isalnum() for c in host) or port == 0:
        raise BaseUrlError("the base URL names no host, or port 0")
    if "?" in url or "#" in url:  # a query or a fragment, empty ones too
        raise BaseUrlError(
            "the base URL has a query or fragment; the account's path is appended to it, "
            "so give the address alone"
        )
    if len(url) > BASE_URL_WIDTH:
        raise BaseUrlError(f"the base URL is {len(url)} characters; at most {BASE_URL_WIDTH}")
    return url.rstrip("/")


class TokenError(ValueError):
    """A token no provider call can carry."""


def token_problem(token: str) -> str | None:
    """Why `token` cannot travel in an HTTP header (None: it can). Every provider sends it
    there (a Bearer token, Twilio's basic auth), and a header carries visible ASCII only:
    a pasted space, line break or zero-width character would fail every call before it
    leaves. The words never repeat the token."""
    if not token:
        return "the token is empty"
    if not all("!" <= c <= "~" for c in token):
        return (
            "the token holds a space, a control or a non-ASCII character (a zero-width "
            "space pasted with it?), which no HTTP header can carry"
        )
    return None


def checked_token(token: str) -> str:
    problem = token_problem(token)
    if problem is not None:
        raise TokenError(problem)
    return token


class RatesError(ValueError):
    """Lane rates that would let one lane's traffic delay the other's."""


def check_rates(reply: float, campaign: float, total: float) -> None:
    """The two lanes' rates must fit within the total: then a reply never waits for a
    pacing slot because campaigns took the identity's whole budget."""
    if min(reply, campaign, total) <= 0:
        raise RatesError("rates must be above zero")
    if reply + campaign > total + 1e-9:
        raise RatesError(
            f"the reply rate ({reply:g}/s) and the campaign rate ({campaign:g}/s) add up to "
            f"more than the total rate ({total:g}/s); replies could then wait behind campaigns"
        )


def get_identity(session: Session, identity_id: int) -> Identity | None:
    return session.get(Identity, identity_id, populate_existing=True)


def find_identity(
    session: Session, provider: str, account_id: str, sender: str | None = None
) -> Identity | None:
    """The identity of that account (for Twilio, of that account and sender)."""
    query = select(Identity).where(Identity.provider == provider, Identity.account_id == account_id)
    if sender is not None:
        query = query.where(Identity.sender == sender)
    return session.scalars(query).one_or_none()


def identities_with_verify_token(
    session: Session, providers: tuple[str, ...], verify_token: str
) -> list[Identity]:
    query = select(Identity).where(
        Identity.provider.in_(providers), Identity.verify_token_hash == sha256_hex(verify_token)
    )
    return list(session.scalars(query))


def reveal_secrets(box: SecretBox, identity: Identity) -> IdentitySecrets:
    app_secret = identity.app_secret_encrypted
    return IdentitySecrets(
        token=box.decrypt(identity.token_encrypted),
        app_secret=box.decrypt(app_secret) if app_secret else None,
    )


def update_identity(
    session: Session,
    box: SecretBox,
    identity_id: int,
    *,
    token: str | None = None,
    app_secret: str | None = None,
    base_url: str | None = None,
    verify_token: str | None = None,
    reply_rate: float | None = None,
    campaign_rate: float | None = None,
    total_rate: float | None = None,
    business_account_id: str | None = None,
    now: datetime,
) -> list[str]:
    """Change what was given; returns the names of the fields changed.

    A new token or app secret stamps `credentials_changed_at`: an answer to an attempt
    claimed before it was given to the old credentials, and must not pause the identity.
    """
    values: dict[str, object] = {}
    if token is not None:
        values["token_encrypted"] = box.encrypt(checked_token(token))
    if app_secret is not None:
        values["app_secret_encrypted"] = box.encrypt(app_secret)
    if base_url is not None:
        values["base_url"] = checked_base_url(base_url)
    if verify_token is not None:
        values["verify_token_hash"] = sha256_hex(verify_token)
    if business_account_id is not None:
        current = get_identity(session, identity_id)
        assert current is not None
        values["business_account_id"] = free_business_account(
            session, business_account_id, current.tenant_id
        )
    for name, value in (
        ("reply_rate", reply_rate),
        ("campaign_rate", campaign_rate),
        ("total_rate", total_rate),
    ):
        if value is not None:
            values[name] = value
    if reply_rate is not None or campaign_rate is not None or total_rate is not None:
        current = get_identity(session, identity_id)
        assert current is not None
        check_rates(
            reply_rate if reply_rate is not None else current.reply_rate,
            campaign_rate if campaign_rate is not None else current.campaign_rate,
            total_rate if total_rate is not None else current.total_rate,
        )
    changed = list(values)
    if token is not None:
        values["token_set_at"] = now
    if app_secret is not None:
        values["app_secret_set_at"] = now
    if token is not None or app_secret is not None:
        values["credentials_changed_at"] = now
        values["credentials_version"] = Identity.credentials_version + 1
    if values:
        session.execute(update(Identity).where(Identity.id == identity_id).values(**values))
    names = {
        "token_encrypted": "token",
        "app_secret_encrypted": "app secret",
        "verify_token_hash": "verify token",
        "base_url": "base url",
    }
    return [names.get(key, key.replace("_", " ")) for key in changed]


def pause_identity(
    session: Session,
    identity_id: int,
    reason: str,
    now: datetime,
    *,
    unless_changed_since: datetime | None = None,
    credentials_version: int | None = None,
    by: str | None = None,
) -> bool:
    """Pause an active identity; False if it was already paused (the first reason stays).

    With `unless_changed_since` (an attempt's claim time) and `credentials_version` (the
    credentials it was sent with), no pause if the identity was resumed after the claim or
    given new credentials since: checked in the UPDATE itself, so a resume or an update
    committing at the same moment is either seen here or undoes this pause after it.
    """
    guard = [Identity.id == identity_id, Identity.paused_at.is_(None)]
    if unless_changed_since is not None:
        guard.append(
            or_(Identity.resumed_at.is_(None), Identity.resumed_at <= unless_changed_since)
        )
        if credentials_version is None:
            changed_at = Identity.credentials_changed_at
            guard.append(or_(changed_at.is_(None), changed_at <= unless_changed_since))
    if credentials_version is not None:
        guard.append(Identity.credentials_version == credentials_version)
    changed = rows_changed(
        session,
        update(Identity)
        .where(*guard)
        .values(paused_at=now, paused_reason=reason, paused_by=by or "ratchet"),
    )
    if changed == 1 and by is None:
        # An automatic pause (a broken sender, an unsendable token) is Ratchet's own act:
        # logged as the system in the same transaction. An operator's is logged by its caller.
        tenant_id = session.scalar(select(Identity.tenant_id).where(Identity.id == identity_id))
        detail = {"reason": reason, "via": "automatic"}
        record_audit(
            session, "ratchet", "identity.pause", f"identity:{identity_id}", now, detail,
            tenant_id=tenant_id,
        )  # fmt: skip
    return changed == 1


def resume_identity(session: Session, identity_id: int, now: datetime) -> bool:
    """Resume a paused identity; `resumed_at` tells a stale broken-sender answer apart."""
    changed = rows_changed(
        session,
        update(Identity)
        .where(Identity.id == identity_id, Identity.paused_at.is_not(None))
        .values(paused_at=None, paused_reason=None, paused_by=None, resumed_at=now),
    )
    return changed == 1


def is_stale_for(
    identity: Identity, claimed_at: datetime, credentials_version: int | None = None
) -> bool:
    """An attempt claimed before the identity's last resume, or sent with credentials it
    no longer has, spoke with what the operator has since replaced: its broken-sender
    answer is stale. Without the version, the credential change's time decides."""
    if identity.resumed_at is not None and identity.resumed_at > claimed_at:
        return True
    if credentials_version is not None:
        return identity.credentials_version != credentials_version
    changed_at = identity.credentials_changed_at
    return changed_at is not None and changed_at > claimed_at
