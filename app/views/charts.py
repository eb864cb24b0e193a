"""Charts (`/charts`): one identity, or every identity the person sees, over the last hour,
day or week: outcomes per bucket, the delivered rate of each bucket's sends, the queue's
depth and the longest wait before sending, and the dead letters by class now. Drawn on the
server as SVG (`app/views/svg.py`) from the aggregates of `app/repo/charts.py`."""

from __future__ import annotations

from datetime import timedelta

from flask import abort, render_template, request
from flask.typing import ResponseReturnValue
from markupsafe import Markup

from app.auth import tenant_scope
from app.db import get_db
from app.inputs import parse_id
from app.repo.charts import RANGES, Series, read_series
from app.repo.overview import list_identities
from app.views.pages import duration, now, staff_blueprint
from app.views.svg import Line, line_chart, nice_top

bp = staff_blueprint("charts", __name__)

# Okabe-Ito hues (darkened where they carry text elsewhere), each with its own dash.
SENT, DELIVERED, READ, FAILED = "#0072B2", "#009E73", "#CC79A7", "#D55E00"


def _percent(value: float) -> str:
    return f"{value * 100:.0f}%"


def _wait(seconds: float) -> str:
    return duration(timedelta(seconds=seconds))


def draw(series: Series) -> dict[str, Markup]:
    per = duration(series.bucket)
    starts, bucket = series.starts, series.bucket
    return {
        "outcomes": line_chart(
            "outcomes",
            f"Messages per {per}: sent, delivered, read, failed",
            starts,
            bucket,
            [
                Line("sent", series.sent, SENT),
                Line("delivered", series.delivered, DELIVERED, dash="7 4"),
                Line("read", series.read, READ, dash="2 3"),
                Line("failed", series.failed, FAILED, marker=True),
            ],
        ),
        "rate": line_chart(
            "rate",
            f"Delivered rate of each {per}'s sends (delivered or read since)",
            starts,
            bucket,
            [Line("delivered or read", series.delivered_rate, DELIVERED, summed=False)],
            fmt=_percent,
            top=1.0,
        ),
        "depth": line_chart(
            "depth",
            f"Messages waiting (queued or sending) at the end of each {per}",
            starts,
            bucket,
            [Line("waiting", series.waiting, SENT, summed=False)],
        ),
        "wait": line_chart(
            "wait",
            f"Longest wait from queued to sent among each {per}'s sends",
            starts,
            bucket,
            [Line("longest wait", series.longest_wait, FAILED, dash="7 4", summed=False)],
            fmt=_wait,
            # A minute at least, so that a fast queue's scale reads 30 s and 1 m, not 0 s.
            top=max(60.0, nice_top(max((w for w in series.longest_wait if w), default=0.0))),
        ),
    }


@bp.get("/charts")
def index() -> ResponseReturnValue:
    scope = tenant_scope()
    range_name = request.args.get("range", "hour")
    if range_name not in RANGES:
        range_name = "hour"
    chosen = request.args.get("identity", "")
    with get_db().transaction() as session:
        identities = list_identities(session, scope)
        ids = [i.id for i in identities]
        if chosen:
            chosen_id = parse_id(chosen)
            if chosen_id is None or chosen_id not in ids:
                abort(404)
            ids = [chosen_id]
        series = read_series(session, ids, now(), range_name) if ids else None
    return render_template(
        "charts/index.html",
        identities=identities,
        chosen=chosen,
        range_name=range_name,
        ranges=list(RANGES),
        series=series,
        drawn=draw(series) if series is not None else {},
    )
