"""Small charts as inline SVG for the HTML report (templates/chart_*.svg.j2), drawn on the
server so the page needs no chart library and no network.

Only layout happens here (pixel positions, axis ticks): every value, error bar end and point is
given by the caller as it was measured or computed by an analyzer. Labels go through jinja2's
autoescaping, so names from the target (URLs, functions) stay text."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import jinja2
from markupsafe import Markup

_ENV = jinja2.Environment(loader=jinja2.PackageLoader("lockdown.reports", "templates"),
                          autoescape=True, undefined=jinja2.StrictUndefined,
                          trim_blocks=True, lstrip_blocks=True)

# Fixed colours, so a subsystem or a budget part looks the same in every chart of the page.
COLORS = {
    "vm": "#4e79a7", "memory": "#f28e2b", "gc": "#e15759", "hashtable": "#76b7b2",
    "string": "#59a14f", "regex": "#edc948", "compile": "#b07aa1", "builtin": "#ff9da7",
    "fs-io": "#9c755f", "net-io": "#bab0ac", "kernel": "#d37295", "profiler-ext": "#8cd17d",
    "other": "#79706e",
    "cpu": "#4e79a7", "db wait": "#f28e2b", "waiting for a CPU": "#e15759", "other wait": "#bab0ac",
    "before": "#9aa7b8", "after": "#4e79a7", "run": "#9aa7b8", "mean": "#4e79a7",
}
DEFAULT_COLOR = "#4e79a7"


def color_of(name: str) -> str:
    return COLORS.get(name, DEFAULT_COLOR)


@dataclass
class Bar:
    label: str
    value: float
    lo: float | None = None          # error bar ends, as measured (e.g. a 95% CI)
    hi: float | None = None
    points: list = field(default_factory=list)   # individual values drawn as dots (runs)
    text: str = ""                   # shown right of the bar
    color: str = DEFAULT_COLOR
    tooltip: str = ""


@dataclass
class Segment:
    name: str
    value: float


@dataclass
class StackedRow:
    label: str
    segments: list[Segment]
    text: str = ""


def nice_ticks(top: float, count: int = 5) -> list[float]:
    """Round axis ticks from 0 to at least `top` (1, 2, 2.5 or 5 times a power of ten)."""
    if not top > 0 or not math.isfinite(top):
        return [0.0, 1.0]
    raw = top / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    n = math.ceil(top / step - 1e-9)
    return [round(i * step, 10) for i in range(n + 1)]


def _tick_text(v: float) -> str:
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:,.4g}"


def _px(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".")


def _fit(label: str, width: float, char_px: float = 6.6) -> str:
    n = max(3, int(width / char_px))
    return label if len(label) <= n else label[:n - 1] + "\u2026"


def bar_chart(bars: list[Bar], title: str, unit: str = "", width: int = 900,
              label_width: int = 190, text_width: int = 190, bar_height: int = 18) -> Markup:
    """A horizontal bar chart; a bar's `lo`/`hi` draw an error bar, its `points` dots."""
    ends = [v for b in bars for v in (b.value, b.lo, b.hi, *b.points) if v is not None]
    ticks = nice_ticks(max(ends, default=0.0))
    plot_x, plot_w = label_width, width - label_width - text_width
    scale = plot_w / ticks[-1]
    gap, top = 6, 26

    def x(value: float) -> str:
        return _px(plot_x + max(value, 0.0) * scale)

    rows = []
    for i, b in enumerate(bars):
        y = top + i * (bar_height + gap)
        mid = y + bar_height / 2
        err = None
        if b.lo is not None and b.hi is not None:
            err = {"x1": x(b.lo), "x2": x(b.hi), "y": _px(mid), "y1": _px(mid - 5), "y2": _px(mid + 5),
                   # an end beyond the axis (a req/s interval reaching below zero) is not a
                   # bound: no cap there, an arrow at the axis says the bar goes on
                   "open_lo": b.lo < 0, "arrow": f"{_px(plot_x + 6)},{_px(mid - 4)} "
                                                 f"{_px(plot_x)},{_px(mid)} {_px(plot_x + 6)},{_px(mid + 4)}"}
        rows.append({"label": _fit(b.label, label_width - 10), "full": b.label, "y": _px(y),
                     "mid": _px(mid + 4), "w": _px(max(b.value, 0.0) * scale), "color": b.color,
                     "err": err, "points": [{"x": x(p), "y": _px(mid)} for p in b.points],
                     "text": b.text, "text_x": _px(plot_x + plot_w + 8),
                     "tooltip": b.tooltip or f"{b.label}: {b.text}"})
    height = top + len(bars) * (bar_height + gap) + 24
    axis_y = top + len(bars) * (bar_height + gap)
    return Markup(_ENV.get_template("chart_bars.svg.j2").render(
        title=title, unit=unit, width=width, height=height, rows=rows, bar_height=bar_height,
        plot_x=plot_x, plot_end=_px(plot_x + plot_w), top=top - 4, axis_y=axis_y,
        ticks=[{"x": x(t), "text": _tick_text(t)} for t in ticks], tick_y=axis_y + 14))


def stacked_chart(rows: list[StackedRow], title: str, unit: str = "", width: int = 900,
                  label_width: int = 190, text_width: int = 110, bar_height: int = 18) -> Markup:
    """Horizontal stacked bars (e.g. wall = cpu + db wait + other wait per URL), with a legend."""
    totals = [sum(max(s.value, 0.0) for s in r.segments) for r in rows]
    ticks = nice_ticks(max(totals, default=0.0))
    plot_x, plot_w = label_width, width - label_width - text_width
    scale = plot_w / ticks[-1]
    gap, top = 6, 44
    names: list[str] = []
    out = []
    for i, r in enumerate(rows):
        y = top + i * (bar_height + gap)
        pos = float(plot_x)
        parts = []
        for s in r.segments:
            if s.name not in names:
                names.append(s.name)
            w = max(s.value, 0.0) * scale
            if w > 0:
                parts.append({"x": _px(pos), "w": _px(w), "color": color_of(s.name),
                              "tooltip": f"{r.label}: {s.name} {s.value:,.1f} {unit}".rstrip()})
            pos += w
        out.append({"label": _fit(r.label, label_width - 10), "full": r.label, "y": _px(y),
                    "mid": _px(y + bar_height / 2 + 4), "parts": parts, "text": r.text,
                    "text_x": _px(plot_x + plot_w + 8)})
    legend, lx = [], float(plot_x)
    for n in names:
        legend.append({"x": _px(lx), "tx": _px(lx + 14), "name": n, "color": color_of(n)})
        lx += 14 + len(n) * 6.6 + 18
    axis_y = top + len(rows) * (bar_height + gap)
    return Markup(_ENV.get_template("chart_stacked.svg.j2").render(
        title=title, unit=unit, width=width, height=axis_y + 24, rows=out, bar_height=bar_height,
        plot_x=plot_x, plot_end=_px(plot_x + plot_w), legend=legend, top=top - 4, axis_y=axis_y,
        ticks=[{"x": _px(plot_x + t * scale), "text": _tick_text(t)} for t in ticks],
        tick_y=axis_y + 14))


def sparkline(values: list[float], top: float, title: str, width: int = 120, height: int = 22) -> Markup:
    """A line of `values` in order, drawn from 0 to `top` (shared by the lines to be compared,
    so a drop reads the same in each): a run's host speed probe by probe."""
    if not values or not top > 0:
        return Markup("")
    step = width / max(len(values) - 1, 1)
    pts = " ".join(f"{_px(i * step)},{_px(height - 1 - max(0.0, min(v, top)) / top * (height - 2))}"
                   for i, v in enumerate(values))
    return Markup(_ENV.get_template("chart_spark.svg.j2").render(
        title=title, width=width, height=height, points=pts))
