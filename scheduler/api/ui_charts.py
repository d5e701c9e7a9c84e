"""The dashboard's charts (ui_dashboard.py) as inline SVG: no script but the UI's own may
run on a UI page (ui_headers.py's CSP), and none draws: each chart is drawn here, each
column carrying its values in data attributes and a <title> (a hover shows them), and the
figures are also written beside it. The SVG stretches to the page's width (a phone's too):
its strokes keep their width (non-scaling-stroke) and its labels are HTML around it, so
nothing is squeezed.

Colours are Okabe and Ito's palette, safe for the common colour blindnesses; each line has
its own dash as well, and the legend names them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

# The drawing's own units (the SVG is stretched to its box: preserveAspectRatio none).
WIDTH, HEIGHT = 600, 160
# Okabe-Ito.
BLUE, ORANGE, GREEN, VERMILLION = "#0072B2", "#E69F00", "#009E73", "#D55E00"
SKY, PURPLE = "#56B4E9", "#CC79A7"


@dataclass(frozen=True, slots=True)
class Line:
    """One series of a chart: its name (its data-<name> and fig-<name>), colour, dash (SVG
    stroke-dasharray, "" solid), and per column its height (None: nothing to draw there),
    its value as data-<name> holds it and as its <title> says it ("" for both: the height,
    a count); `label`, what the legend and titles call it ("": its name)."""

    name: str
    colour: str
    dash: str
    values: Sequence[float | None]
    data: Sequence[str] = ()
    said: Sequence[str] = ()
    label: str = ""

    @property
    def called(self) -> str:
        return self.label or self.name

    def datum(self, column: int) -> str:
        return self.data[column] if self.data else _datum(self.values[column])

    def saying(self, column: int) -> str:
        return self.said[column] if self.said else _datum(self.values[column]) or "-"


def nice_top(highest: float) -> float:
    """The chart's top: the smallest 1, 2 or 5 times a power of ten at or above `highest`
    (at least 1), so the scale reads in round numbers."""
    if highest <= 1:
        return 1.0
    power = 10 ** math.floor(math.log10(highest))
    for step in (1, 2, 5, 10):
        if step * power >= highest:
            return float(step * power)
    return float(10 * power)  # pragma: no cover (10 always fits)


def y_of(value: float, top: float) -> float:
    """Where `value` sits in the drawing (0 at the top edge, HEIGHT at the bottom), on a
    scale from 0 to `top`; values past it stay on the edge."""
    return round(HEIGHT - min(max(value, 0.0), top) / top * HEIGHT, 2)


def x_of(column: int, columns: int) -> float:
    """The middle of column `column` of `columns`."""
    return round((column + 0.5) * WIDTH / columns, 2)


def runs(values: Sequence[float | None], top: float) -> list[str]:
    """The points of a line as SVG polyline runs: a column with no value breaks it, and a
    value alone between breaks is a short level stroke across its column (a point would not
    show)."""
    out: list[list[str]] = [[]]
    for i, value in enumerate(values):
        if value is None:
            if out[-1]:
                out.append([])
            continue
        out[-1].append(f"{x_of(i, len(values))},{y_of(value, top)}")
    half = WIDTH / len(values) / 2 if values else 0
    drawn = []
    for points in (p for p in out if p):
        if len(points) == 1:
            x, y = (float(v) for v in points[0].split(","))
            points = [f"{round(x - half, 2)},{y}", f"{round(x + half, 2)},{y}"]
        drawn.append(" ".join(points))
    return drawn


def ticks(top: float) -> tuple[str, str, str]:
    """The y axis' values at the top, middle and bottom grid lines of a 0 to `top` scale,
    as a reader writes them: 25,000 rather than 25000, and never 1e+06 (`:g`'s form past
    six digits)."""
    return grouped(top), grouped(top / 2), "0"


def grouped(value: float) -> str:
    """A figure as the pages show it, its thousands grouped: 25,000; 0.5."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,}"


def chart(
    chart_id: str,
    labels: Sequence[str],
    lines: Sequence[Line],
    top: float,
    y_ticks: tuple[str, str, str] | None = None,
) -> str:
    """A chart of `lines` over the columns `labels` (each a time), scaled 0 to `top`, its y
    axis' values (`y_ticks`, top to bottom: `ticks(top)` by default) beside it in HTML, at
    its three grid lines. Each column has a transparent box over its height with
    data-<line> attributes and a title saying every line's value there."""
    count = len(labels)
    grid = "".join(
        f'<line x1="0" x2="{WIDTH}" y1="{y_of(top * share, top)}" y2="{y_of(top * share, top)}" '
        'stroke="#d0d7de" vector-effect="non-scaling-stroke"/>'
        for share in (0.0, 0.5, 1.0)
    )
    drawn = "".join(
        f'<polyline class="{escape(line.name)}" points="{points}" fill="none" '
        f'stroke="{line.colour}" stroke-width="2" stroke-dasharray="{line.dash or "none"}" '
        'vector-effect="non-scaling-stroke"/>'
        for line in lines
        for points in runs(line.values, top)
    )
    boxes = []
    for i, label in enumerate(labels):
        data = "".join(f' data-{escape(line.name)}="{escape(line.datum(i))}"' for line in lines)
        title = f"{label}: " + ", ".join(f"{line.called} {line.saying(i)}" for line in lines)
        boxes.append(
            f'<rect class="col" x="{round(i * WIDTH / count, 2)}" y="0" '
            f'width="{round(WIDTH / count, 2)}" height="{HEIGHT}" fill="transparent"'
            f' data-at="{escape(label)}"{data}><title>{escape(title)}</title></rect>'
        )
    shown = y_ticks or ticks(top)
    axis = "".join(f"<span>{escape(tick)}</span>" for tick in shown)
    return (
        f'<div class="plot"><div class="yaxis" id="{escape(chart_id)}-y">{axis}</div>'
        f'<svg id="{escape(chart_id)}" class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'preserveAspectRatio="none" role="img">{grid}{drawn}{"".join(boxes)}</svg></div>'
    )


def _datum(value: float | None) -> str:
    if value is None:
        return ""
    if math.isinf(value):
        return "inf"
    return str(int(value)) if float(value).is_integer() else str(value)


def legend(lines: Sequence[Line], figures: dict[str, str]) -> str:
    """The chart's key: each line's colour and dash, its name and its figure beside it."""
    items = "".join(
        f'<span class="key"><svg width="24" height="8" aria-hidden="true"><line x1="0" y1="4" '
        f'x2="24" y2="4" stroke="{line.colour}" stroke-width="3" '
        f'stroke-dasharray="{line.dash or "none"}"/></svg> {escape(line.called)} '
        f'<b id="fig-{escape(line.name)}">{escape(figures.get(line.name, ""))}</b></span>'
        for line in lines
    )
    return f'<p class="legend">{items}</p>'


def load_bar(running: int, capacity: int, services: int = 0) -> str:
    """A node's running jobs against its capacity (the slots of MAX_JOBS_PER_NODE they
    hold): a bar and "running / capacity", the values in data attributes (the tests read
    them) and a <title> (a hover shows it); the services it runs besides, which take no
    slot, said after it (a service alone drew a full node that still took jobs)."""
    share = min(running / capacity, 1.0) if capacity else 1.0
    besides = f" + {services} service{'s' if services != 1 else ''}" if services > 0 else ""
    return (
        f'<svg class="bar" viewBox="0 0 100 10" preserveAspectRatio="none" '
        f'data-running="{running}" data-capacity="{capacity}"><rect width="100" height="10" '
        f'fill="#eaeef2"/><rect width="{share * 100:.1f}" height="10" fill="{SKY}"/>'
        f"<title>{running} of {capacity} running{besides}</title></svg> {running} / {capacity}"
        f"{escape(besides)}"
    )
