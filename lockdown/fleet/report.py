"""`lockdown fleet report`: the fleet's records rendered into a directory (index.html,
report.json, flame graphs). Rendering only: the numbers are fleet/analysis.py's."""
from __future__ import annotations

import json
import time
from collections import Counter

import jinja2

from ..reports.flamegraph import FlameOptions, render_flamegraph
from ..reports.numbers import ms_fine, share as pct
from . import analysis

_ENV = jinja2.Environment(loader=jinja2.PackageLoader("lockdown.fleet", "templates"),
                          autoescape=True, undefined=jinja2.StrictUndefined)


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ts)) if ts else "–"


def _num(v, fmt: str = "{:.1f}") -> str:
    return "–" if v is None else fmt.format(v)


def _ms(v) -> str:
    return "–" if v is None else f"{ms_fine(v)} ms"


def build(records: list[dict], route: str | None = None, host: str | None = None) -> dict:
    """The report's document (report.json): what analysis.py computes, for these filters."""
    served = analysis.filtered(analysis.served(records), route, host)
    rows = analysis.route_table(served)
    stacks = analysis.folded(served)
    ts = [float(r["t"]) for r in served if "t" in r]
    return {"requests": len(served), "hosts": sorted({r.get("host", "") for r in served}),
            "since": min(ts) if ts else None, "until": max(ts) if ts else None,
            "route": route, "host": host, "samples": sum(stacks.values()),
            "routes": rows, "findings": analysis.findings(served, rows),
            "hot_functions": analysis.hot_functions(stacks),
            "losses": analysis.losses(records)}


def render(doc: dict, records: list[dict]) -> dict[str, str]:
    """File name -> contents: index.html, report.json, flamegraphs/fleet.svg and one per route."""
    served = analysis.filtered(analysis.served(records), doc["route"], doc["host"])
    files: dict[str, str] = {"report.json": json.dumps(doc, indent=2, ensure_ascii=False) + "\n"}
    stacks = analysis.folded(served)
    if stacks:
        files["flamegraphs/fleet.svg"] = render_flamegraph(stacks, FlameOptions(
            title="Fleet: PHP wall-clock samples", count_name="samples"))
    by_route: dict[str, Counter] = {}
    for r in served:
        by_route.setdefault(analysis.route_key(r), Counter()).update(
            {k: int(v) for k, v in (r.get("stacks") or {}).items()})
    routes = []
    for i, row in enumerate(doc["routes"], 1):
        svg = None
        if by_route.get(row["route"]):
            svg = f"flamegraphs/route-{i}.svg"
            files[svg] = render_flamegraph(by_route[row["route"]], FlameOptions(
                title=f"Route {row['route']}", count_name="samples"))
        routes.append({"route": row["route"], "script": row["script"], "requests": row["requests"],
                       "requests_pct": pct(row["requests_pct"]), "cpu_pct": pct(row["cpu_pct"]),
                       "p50": _ms(row["wall_p50_ms"]), "p99": _ms(row["wall_p99_ms"]),
                       "spr": _num(row["statements_per_request"]), "samples": row["samples"],
                       "errors": row["errors"], "svg": svg})
    model = {"requests": doc["requests"], "hosts": doc["hosts"], "since": _when(doc["since"]),
             "until": _when(doc["until"]), "route": doc["route"], "host": doc["host"],
             "samples": doc["samples"], "lost_total": sum(doc["losses"].values()),
             "routes": routes, "fleet_svg": "flamegraphs/fleet.svg" if stacks else None,
             "findings": [{**f, "fleet": "–" if f["fleet_share_pct"] is None else pct(f["fleet_share_pct"]),
                           "route_share": "–" if f["route_share_pct"] is None else pct(f["route_share_pct"]),
                           "requests": pct(f["requests_pct"])} for f in doc["findings"]],
             "hot": [{**h, "self_pct": pct(h["self_pct"]), "inclusive_pct": pct(h["inclusive_pct"])}
                     for h in doc["hot_functions"]]}
    files["index.html"] = _ENV.get_template("fleet.html.j2").render(m=model)
    return files


def text(doc: dict, top: int = 10) -> str:
    """The terminal summary: top findings, then the busiest routes."""
    lines = [f"{doc['requests']} requests, {len(doc['hosts'])} host(s), {doc['samples']} samples; "
             f"records counted lost by the agents: {sum(doc['losses'].values())}"]
    lines.append("findings:" if doc["findings"] else "findings: none")
    for f in doc["findings"][:top]:
        more = f" (and {len(f['routes']) - 1} more route(s))" if len(f["routes"]) > 1 else ""
        share = "" if f["fleet_share_pct"] is None else f", {pct(f['fleet_share_pct'])} of fleet samples"
        lines.append(f"  {f['kind']:<18} {f['route']}{more}: {f['summary']}{share}")
    lines.append("routes (by share of fleet CPU):")
    for row in doc["routes"][:top]:
        lines.append(f"  {pct(row['cpu_pct']):>7} cpu {pct(row['requests_pct']):>7} req  "
                     f"p50 {_ms(row['wall_p50_ms'])}  {row['route']}")
    return "\n".join(lines)
