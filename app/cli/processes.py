"""The long-running processes: worker, sweeper, sandbox provider, demo."""

from __future__ import annotations

import logging
import threading
from typing import Any

import click
import httpx
from flask import current_app

from app.clock import utcnow
from app.crypto import get_box
from app.db import get_db


@click.command("sweep")
@click.option("--once", is_flag=True, help="one pass, then exit")
def sweep_command(once: bool) -> None:
    """Ring drains with messages due, replay unapplied webhook statuses, expire old parked ones."""
    from jobs.sweep import run_sweeper

    config = current_app.config["RATCHET"]
    click.echo(
        f"sweeper starting (every {config.sweep_interval:g} s)" if not once else "sweeping once"
    )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    passes = run_sweeper(get_db(), config, utcnow, once=once, report=click.echo)
    click.echo(f"sweeper stopped after {passes} passes")


@click.command("demo")
@click.option("--sandbox-url", required=True, help="where the sandbox provider listens")
def demo_command(sandbox_url: str) -> None:
    """Seed demo data against the sandbox, print the logins, then wait for SIGTERM.

    It keeps running so that `make run`'s process manager, which stops everything when
    one process ends, keeps the others up.
    """
    import signal
    import threading

    from app import demo

    config = current_app.config["RATCHET"]
    demo.wait_for(f"{sandbox_url}/_sandbox/health")
    demo.wait_for(f"{config.public_base_url}/healthz")
    login = demo.seed(get_db(), get_box(), sandbox_url, config.public_base_url)
    click.echo(f"Ratchet is up: {config.public_base_url}/")
    click.echo(f"  sandbox provider: {sandbox_url}/_sandbox/numbers")
    if login.password:
        click.echo(f"  staff login: {login.email} / {login.password}")
    else:
        click.echo(
            f"  staff login: {login.email} (password printed on the first run; "
            "'flask --app wsgi staff create' makes another)"
        )
    if login.api_key:
        click.echo(f"  demo tenant API key (shown once): {login.api_key}")
        click.echo(f"  sent {len(demo.DEMO_RECIPIENTS)} demo messages through the API")
        from app.demo_twilio import DEMO_RECIPIENTS as TWILIO_DEMO

        click.echo(f"  sent {len(TWILIO_DEMO)} more demo messages through the Twilio identity")
    click.echo("  demo traffic: one message every 10 s (replies, campaigns, fault recipients)")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    from jobs.ringing import ring_message

    try:
        pages = _seed_pages(sandbox_url, config.public_base_url, login, stop, ring_message)
    except httpx.HTTPError:
        if not stop.is_set():
            raise
        # Stopped while seeding: the sandbox went with everything else (Ctrl-C).
        click.echo("demo stopped while seeding the pages")
        return
    sent = demo.trickle(get_db(), sandbox_url, login, stop, ring=ring_message)
    pages.join(timeout=5)
    click.echo(f"demo stopped after {sent} trickle messages")


def _seed_pages(
    sandbox_url: str, public_url: str, login: Any, stop: Any, ring: Any
) -> threading.Thread:
    """Messenger and Instagram beside the WhatsApp demo (`app/demo_pages.py`): seeded now,
    their trickle in a thread of its own until `stop`."""
    from app import demo_pages

    db = get_db()
    pages = demo_pages.seed_pages(
        db, get_box(), sandbox_url, public_url, login.tenant_id, login.api_key
    )
    names = ", ".join(f"{page.provider} {page.page_id}" for page in pages)
    click.echo(f"  pages: {names} (sandbox: {sandbox_url}/_sandbox/pages)")
    if login.api_key:
        click.echo(f"  sent {len(demo_pages.PAGE_MESSAGES)} Messenger / Instagram demo messages")
    app = current_app._get_current_object()  # type: ignore[attr-defined]

    def run() -> None:
        with app.app_context():
            demo_pages.trickle_pages(db, sandbox_url, login.tenant_id, pages, stop, ring=ring)

    thread = threading.Thread(target=run, name="demo-pages", daemon=True)
    thread.start()
    return thread


@click.command("worker")
@click.option("--lane", required=True, type=click.Choice(["reply", "campaign", "callbacks"]))
@click.option("--burst", is_flag=True, help="stop when the queue is empty")
def worker_command(lane: str, burst: bool) -> None:
    """Send the lane's messages until SIGTERM (a non-forking RQ worker)."""
    from jobs.worker import run_worker

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per provider call
    click.echo(f"worker for the {lane} lane starting{' (burst)' if burst else ''}")
    run_worker(lane, burst=burst)
    click.echo(f"worker for the {lane} lane stopped")


@click.command("sandbox")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=0, type=int, help="0 picks a free port (printed)")
def sandbox_command(host: str, port: int) -> None:
    """Run the sandbox provider (the outside world for tests and the demo) until SIGTERM."""
    from app.sandbox.server import serve

    serve(host=host, port=port)
