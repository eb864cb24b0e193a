"""Charts drawn on the server as inline SVG: no script, no chart library, nothing fetched.

A line chart is one polyline per series over the buckets (a missing value breaks the line),
with a zero line, a top line labelled with the scale's maximum, a few time labels and a
legend. Each series differs by colour (Okabe-Ito) and by dash or marker, never colour alone;
the SVG's title and description say in words what the lines show.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from markupsafe import Markup, escape

WIDTH, HEIGHT = 760, 210
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 12, 28


@dataclass(frozen=True, slots=True)
class Line:
    label: str
    values: Sequence[float | None]
    colour: str
    dash: str = ""  # an SVG stroke-dasharray; "" is solid
    marker: bool = False  # a dot on every non-zero value
    summed: bool = True  # a count, whose total means something (a rate's does not)


def nice_top(value: float) -> float:
    """The scale's maximum: the value rounded up to 1, 2 or 5 times a power of ten."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if value <= step * power:
            return float(step * power)
    return float(10 * power)


def _tick_every(bucket: timedelta) -> timedelta:
    """Time labels on round times: every 10 minutes of an hour, 3 hours of a day, and each
    midnight (UTC) of a week."""
    if bucket >= timedelta(hours=1):
        return timedelta(days=1)
    if bucket >= timedelta(minutes=15):
        return timedelta(hours=3)
    return timedelta(minutes=10)


def _time_label(moment: datetime, bucket: timedelta) -> str:
    if bucket >= timedelta(hours=1):
        return moment.strftime("%a %H:%M")
    return moment.strftime("%H:%M")


def line_chart(
    chart_id: str,
    title: str,
    starts: Sequence[datetime],
    bucket: timedelta,
    lines: Sequence[Line],
    fmt: Callable[[float], str] = lambda v: f"{v:g}",
    top: float | None = None,
) -> Markup:
    """An inline SVG of `lines` over the buckets beginning at `starts`."""
    count = max(1, len(starts))
    present = [v for line in lines for v in line.values if v is not None]
    scale = top if top is not None else nice_top(max(present, default=0.0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(i: int) -> float:
        return LEFT + (i + 0.5) * plot_w / count

    def y(value: float) -> float:
        return TOP + plot_h - min(value, scale) / scale * plot_h

    parts = [
        f'<line class="axis" x1="{LEFT}" y1="{y(0):.1f}" x2="{WIDTH - RIGHT}" y2="{y(0):.1f}"/>',
        f'<line class="grid" x1="{LEFT}" y1="{y(scale):.1f}" x2="{WIDTH - RIGHT}" '
        f'y2="{y(scale):.1f}"/>',
        f'<text class="tick" x="{LEFT - 6}" y="{y(scale) + 4:.1f}" text-anchor="end">'
        f"{escape(fmt(scale))}</text>",
        f'<text class="tick" x="{LEFT - 6}" y="{y(0) + 4:.1f}" text-anchor="end">'
        f"{escape(fmt(0))}</text>",
    ]
    parts += [
        f'<line class="grid" x1="{LEFT}" y1="{y(scale / 2):.1f}" x2="{WIDTH - RIGHT}" '
        f'y2="{y(scale / 2):.1f}"/>',
        f'<text class="tick" x="{LEFT - 6}" y="{y(scale / 2) + 4:.1f}" text-anchor="end">'
        f"{escape(fmt(scale / 2))}</text>",
    ]
    every = int(_tick_every(bucket).total_seconds())
    for i in (i for i, start in enumerate(starts) if int(start.timestamp()) % every == 0):
        anchor = "end" if x(i) > WIDTH - RIGHT - 24 else "middle"
        parts.append(
            f'<text class="tick" x="{x(i):.1f}" y="{HEIGHT - 8}" text-anchor="{anchor}">'
            f"{escape(_time_label(starts[i], bucket))}</text>"
        )
    for line in lines:
        dash = f' stroke-dasharray="{line.dash}"' if line.dash else ""
        segment: list[str] = []
        for i, value in enumerate([*line.values, None]):
            if value is None:
                if len(segment) == 1:  # a lone point still shows
                    px, py = segment[0].split(",")
                    parts.append(f'<circle cx="{px}" cy="{py}" r="2.5" fill="{line.colour}"/>')
                elif segment:
                    parts.append(
                        f'<polyline fill="none" stroke="{line.colour}" stroke-width="2"'
                        f'{dash} points="{" ".join(segment)}"/>'
                    )
                segment = []
                continue
            segment.append(f"{x(i):.1f},{y(value):.1f}")
            if line.marker and value > 0:
                parts.append(
                    f'<circle cx="{x(i):.1f}" cy="{y(value):.1f}" r="3" fill="{line.colour}"/>'
                )
    described = "; ".join(_summary(line, fmt) for line in lines)
    svg = (
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-labelledby="{chart_id}-t {chart_id}-d" preserveAspectRatio="xMinYMin meet">'
        f'<title id="{chart_id}-t">{escape(title)}</title>'
        f'<desc id="{chart_id}-d">{escape(described)}</desc>' + "".join(parts) + "</svg>"
    )
    return Markup(svg) + legend(lines)


def _summary(line: Line, fmt: Callable[[float], str]) -> str:
    present = [v for v in line.values if v is not None]
    if not present:
        return f"{line.label}: none"
    said = f"{line.label}: highest {fmt(max(present))}, last {fmt(present[-1])}"
    return f"{said}, total {fmt(sum(present))}" if line.summed else said


def legend(lines: Sequence[Line]) -> Markup:
    items = []
    for line in lines:
        dash = f' stroke-dasharray="{line.dash}"' if line.dash else ""
        dot = f'<circle cx="13" cy="6" r="3" fill="{line.colour}"/>' if line.marker else ""
        items.append(
            '<li><svg width="26" height="12" aria-hidden="true">'
            f'<line x1="0" y1="6" x2="26" y2="6" stroke="{line.colour}" stroke-width="2"{dash}/>'
            f"{dot}</svg> {escape(line.label)}</li>"
        )
    return Markup('<ul class="legend">' + "".join(items) + "</ul>")
