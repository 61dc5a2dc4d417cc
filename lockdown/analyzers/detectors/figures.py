"""How often a pattern shows, as the query and file detectors report it: a count's spread over
the requests (min, median, max), per URL, and the URL that sends it most."""
from __future__ import annotations

import statistics

from .context import Context


def number(x):
    """A count, median etc. to one decimal, as an int when that is whole."""
    x = round(float(x), 1)
    return int(x) if x.is_integer() else x


def spread(values: list[float]) -> dict:
    return {"min": number(min(values)), "median": number(statistics.median(values)),
            "max": number(max(values))}


def spread_by_url(ctx: Context, items: list, urls: list[str], with_key: str, count_key: str) -> dict:
    """Per URL: its requests, how many show the pattern (`items`, each with .url and
    .executions) and the spread of executions per request among those."""
    out = {}
    for u in urls:
        mine = [x for x in items if x.url == u]
        out[u] = {"requests": len(ctx.by_url[u]), with_key: len(mine),
                  count_key: spread([x.executions for x in mine])}
    return out


def busiest(per_url: dict, key: str = "executions_per_request") -> tuple | None:
    """(URL, its median, the others' lowest and highest median, how many others) when the URLs
    differ in how often they send a statement, else None: the median over all requests hides
    the page that sends it most when that page is under half of them."""
    med = {u: v[key]["median"] for u, v in per_url.items()}
    if len(set(med.values())) <= 1:
        return None
    top = max(med, key=lambda u: med[u])
    rest = [m for u, m in med.items() if u != top]
    return top, med[top], min(rest), max(rest), len(rest)


def others_text(lo, hi, n: int) -> str:
    where = "the other URL" if n == 1 else f"the {n} other URLs"
    return f"{lo:g}{'' if lo == hi else f'-{hi:g}'} on {where}"


def busiest_url(per_url: dict, key: str = "executions_per_request") -> str | None:
    """"24 times per request on / (3 on the 4 other URLs)", or None (`busiest`)."""
    b = busiest(per_url, key)
    return None if b is None else f"{b[1]:g} times per request on {b[0]} ({others_text(*b[2:])})"


def native_on(ctx: Context, urls: set[str], is_hit) -> tuple[list, list, float]:
    """(the timed requests' native samples on `urls`, those whose frames `is_hit`, the URLs' part
    of all timed requests' wall time): what a detector that reads a stack signature in perf's
    samples (session files, regex compilation) weighs its share with."""
    samples = [s for s in ctx.native if ctx.url_of.get(s.request) in urls]
    weight = (sum(r.wall_us for r in ctx.timed if ctx.url_of[r.id] in urls) / ctx.wall_us_total
              if ctx.wall_us_total else 0.0)
    return samples, [s for s in samples if is_hit(s.frames)], weight
