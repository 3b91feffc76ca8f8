"""The inspector's plots as inline SVG, drawn on the server: no script, no asset, no library.

Every text put into a plot is escaped here; colours and sizes are SVG presentation
attributes (the page's content security policy allows no inline style).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from typing import Callable, Optional, Sequence

WIDTH, HEIGHT = 720, 260
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 34, 44
MAX_X_LABELS = 8
COLOURS = {"exact": "#2e7d32", "graft": "#1565c0", "fallback": "#ef6c00", "abstain": "#757575", "other": "#8e24aa"}
PERCENTILE_OPACITY = {"p50": "1", "p90": "0.65", "p99": "0.35"}


@dataclass(frozen=True)
class Series:
    """One named, coloured quantity of a plot."""

    name: str
    colour: str


def colour_of(name: str) -> str:
    return COLOURS.get(name, COLOURS["other"])


def nice_max(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 times a power of ten at or above ``value`` (1 for nothing)."""
    if not value or value <= 0 or not math.isfinite(value):
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if value <= m * power * (1 + 1e-9))


def count_label(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 or value == int(value) else f"{value:g}"


def seconds_label(value: float) -> str:
    if value == 0:
        return "0"
    if value < 0.001:
        return f"{value * 1e6:.0f} µs"
    return f"{value * 1000:.3g} ms" if value < 1 else f"{value:.3g} s"


def _svg(title: str, body: list[str], height: int = HEIGHT, css_class: str = "plot") -> str:
    return (
        f'<svg class="{css_class}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
        f'width="{WIDTH}" height="{height}" role="img" aria-label="{escape(title)}"><title>{escape(title)}</title>'
        + "".join(body) + "</svg>"
    )


def intervals(top_value: float) -> int:
    """How many gridline intervals divide ``top_value`` (a :func:`nice_max`) into round steps."""
    mantissa = top_value / 10 ** math.floor(math.log10(top_value))
    return 5 if round(mantissa, 6) in (2.5, 5) else 4


def _y_axis(top_value: float, label: Callable[[float], str], plot_height: int) -> list[str]:
    parts, n = [], intervals(top_value)
    for i in range(n + 1):
        value = top_value * i / n
        y = TOP + plot_height - plot_height * i / n
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd" stroke-width="1"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11" fill="#555">{escape(label(value))}</text>')
    return parts


def _legend(series: Sequence[Series]) -> list[str]:
    parts, x = [], LEFT
    for item in series:
        parts.append(f'<rect x="{x}" y="10" width="12" height="12" fill="{item.colour}"/>')
        parts.append(f'<text x="{x + 16}" y="20" font-size="12" fill="#222">{escape(item.name)}</text>')
        x += 24 + 7 * len(item.name)
    return parts


def _x_labels(labels: Sequence[str], slot: float, plot_height: int) -> list[str]:
    every = max(1, math.ceil(len(labels) / MAX_X_LABELS))
    return [
        f'<text x="{LEFT + slot * (i + 0.5):.1f}" y="{TOP + plot_height + 16}" text-anchor="middle" font-size="11" '
        f'fill="#555">{escape(text)}</text>'
        for i, text in enumerate(labels) if i % every == 0
    ]


def stacked_bars(title: str, labels: Sequence[str], values: Sequence[dict[str, float]], series: Sequence[Series],
                 value_label: Callable[[float], str] = count_label) -> str:
    """One bar per label, stacked by series (``values[i][series name]``)."""
    plot_height = HEIGHT - TOP - BOTTOM
    top_value = nice_max(max((sum(v.values()) for v in values), default=0))
    slot = (WIDTH - LEFT - RIGHT) / max(1, len(labels))
    body = [*_legend(series), *_y_axis(top_value, value_label, plot_height)]
    for i, (label, stack) in enumerate(zip(labels, values)):
        base = TOP + plot_height
        for item in series:
            amount = stack.get(item.name, 0)
            if amount <= 0:
                continue
            height = plot_height * amount / top_value
            base -= height
            body.append(
                f'<rect class="bar" data-series="{escape(item.name)}" x="{LEFT + slot * i + slot * 0.15:.1f}" y="{base:.1f}" '
                f'width="{slot * 0.7:.1f}" height="{height:.1f}" fill="{item.colour}">'
                f'<title>{escape(label)}: {escape(value_label(amount))} {escape(item.name)}</title></rect>'
            )
    body += _x_labels(labels, slot, plot_height)
    return _svg(title, body)


def grouped_bars(title: str, groups: Sequence[tuple[str, dict[str, Optional[float]]]], members: Sequence[str],
                 value_label: Callable[[float], str] = seconds_label) -> str:
    """Per group (a decision) one bar per member (a percentile), in the group's colour."""
    plot_height = HEIGHT - TOP - BOTTOM
    top_value = nice_max(max((v for _, values in groups for v in values.values() if v is not None), default=0))
    slot = (WIDTH - LEFT - RIGHT) / max(1, len(groups))
    width = slot * 0.8 / max(1, len(members))
    body = _y_axis(top_value, value_label, plot_height)
    for i, member in enumerate(members):
        body.append(f'<rect x="{LEFT + 70 * i}" y="10" width="12" height="12" fill="#444" '
                    f'fill-opacity="{PERCENTILE_OPACITY.get(member, "1")}"/>')
        body.append(f'<text x="{LEFT + 70 * i + 16}" y="20" font-size="12" fill="#222">{escape(member)}</text>')
    for g, (group, values) in enumerate(groups):
        for m, member in enumerate(members):
            value = values.get(member)
            if value is None or value <= 0:
                continue
            height = plot_height * value / top_value
            x = LEFT + slot * g + slot * 0.1 + width * m
            body.append(
                f'<rect class="bar" data-series="{escape(group)}" x="{x:.1f}" y="{TOP + plot_height - height:.1f}" '
                f'width="{width * 0.9:.1f}" height="{height:.1f}" fill="{colour_of(group)}" '
                f'fill-opacity="{PERCENTILE_OPACITY.get(member, "1")}"><title>{escape(group)} {escape(member)}: '
                f'{escape(value_label(value))}</title></rect>'
            )
    body += _x_labels([group for group, _ in groups], slot, plot_height)
    return _svg(title, body)


def score_bars(title: str, rows: Sequence[tuple[str, float, bool]], threshold: float) -> str:
    """Horizontal bars of candidate scores (``(label, score, chosen)``) with the threshold marked."""
    row_height, label_width = 26, 220
    height = TOP + row_height * max(1, len(rows)) + 24
    span = WIDTH - label_width - RIGHT

    def x_of(score: float) -> float:
        return label_width + span * min(1.0, max(0.0, score))

    body = []
    for i, (label, score, chosen) in enumerate(rows):
        y = TOP + row_height * i
        colour = COLOURS["graft"] if chosen else "#9e9e9e"
        body.append(f'<text x="{label_width - 8}" y="{y + 16}" text-anchor="end" font-size="12" fill="#222">{escape(label[:32])}</text>')
        body.append(
            f'<rect class="bar" x="{label_width}" y="{y + 4}" width="{x_of(score) - label_width:.1f}" height="{row_height - 8}" '
            f'fill="{colour}"><title>{escape(label)}: {score:.3f}</title></rect>'
        )
        body.append(f'<text x="{x_of(score) + 4:.1f}" y="{y + 16}" font-size="11" fill="#555">{score:.3f}</text>')
    x = x_of(threshold)
    body.append(f'<line class="threshold" x1="{x:.1f}" x2="{x:.1f}" y1="{TOP - 6}" y2="{height - 18}" stroke="#c62828" '
                f'stroke-width="2" stroke-dasharray="5 3"/>')
    body.append(f'<text x="{x:.1f}" y="{TOP - 12}" text-anchor="middle" font-size="11" fill="#c62828">'
                f'threshold {threshold:.3f}</text>')
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        body.append(f'<text x="{x_of(tick):.1f}" y="{height - 4}" text-anchor="middle" font-size="10" fill="#777">{tick:g}</text>')
    return _svg(title, body, height=height)
