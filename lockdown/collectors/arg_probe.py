"""The argument probe: are a function's many calls per request repeats of the same arguments?

xhprof counts calls but keeps no arguments, so the repeated-call detector can only see that
each call does the same child calls. The probe answers the question a reader would ask next:
in a copy of the application (never the original), each candidate function gets one line at
the top of its body that reports its arguments (and its object) to php/argprobe.php, which
counts distinct (object, arguments) pairs per request. Functions are found with PHP's own
tokenizer (php/locate.php); the inserted call stays on the line of the opening brace, so line
numbers in errors and profiles do not move.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import LockdownError
from ..harness import service_account
from ..harness.toolchain import tool
from .request_log import chained, read_jsonl, write_prepend

PHP_DIR = Path(__file__).with_name("php")
SOURCE_SUFFIXES = (".php", ".inc", ".module", ".install", ".theme", ".engine", ".profile")
HEADER = "X-Lockdown-Probe"


@dataclass(frozen=True)
class Site:
    """Where a probe call goes: `offset` is the byte after the body's opening brace."""
    function: str
    file: Path
    offset: int
    line: int


def source_files(root: Path, functions: list[str]) -> list[Path]:
    """Files under `root` that define a function of one of these names (a quick text match,
    confirmed by the tokenizer later)."""
    names = sorted({f.rpartition("::")[2].rpartition("\\")[2] for f in functions})
    if not names:
        return []
    pattern = re.compile(rb"function\s+&?\s*(?:" + b"|".join(re.escape(n.encode()) for n in names)
                         + rb")\s*\(", re.I)
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            if name.endswith(SOURCE_SUFFIXES):
                path = Path(dirpath) / name
                if not _utf8(str(path)):
                    continue        # the locator reads its file list as JSON: UTF-8 only
                try:
                    if pattern.search(path.read_bytes()):
                        out.append(path)
                except OSError:
                    continue
    return sorted(out)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:      # a file name that is not UTF-8 (surrogate-escaped bytes)
        return False
    return True


def locate(root: Path, functions: list[str], timeout: float = 300) -> dict[str, list[Site]]:
    """Every definition of `functions` (xhprof names: `Ns\\Class::method`, `Ns\\func`) under
    `root`, by file: an app may define a name in several files and load one of them, so each
    definition is probed and the one that ran is known from the results. A function not found
    (defined in eval'd code, or a name xhprof made up) is absent; a locator that fails (PHP
    error, timeout) raises LockdownError with its first error line, so the run can say why its
    findings went unprobed."""
    files = source_files(root, functions)
    if not files:
        return {}
    try:
        run = subprocess.run([tool("php"), "-n", "-d", "extension=tokenizer", "-d", "memory_limit=1G",
                              str(PHP_DIR / "locate.php")],
                             input=json.dumps({"files": [str(f) for f in files], "functions": functions}),
                             capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise LockdownError(f"locating the probed functions took over {timeout:.0f} s "
                            f"({len(files)} files)") from None
    try:
        found = json.loads(run.stdout) if run.returncode == 0 else None
    except ValueError:
        found = None
    if not isinstance(found, dict):
        why = next((ln.strip() for ln in (run.stderr + run.stdout).splitlines() if ln.strip()), "no output")
        raise LockdownError(f"locating the probed functions failed (php exit {run.returncode}): {why[:300]}")
    wanted = {f.lower(): f for f in functions}
    out: dict[str, list[Site]] = {}
    for name, defs in found.items():
        fn = wanted.get(name.lower())
        if fn is not None and isinstance(defs, list):
            out.setdefault(fn, []).extend(Site(fn, Path(d["file"]), d["offset"], d["line"]) for d in defs)
    return {fn: sorted(sites, key=lambda s: (str(s.file), s.offset)) for fn, sites in out.items()}


def instrument(sites: list[Site]) -> dict[int, Site]:
    """Insert the probe call into each site's file; returns probe number -> site. Each file
    is written anew and renamed into place, so a hard link to the original is never written
    through."""
    numbers = {}
    by_file: dict[Path, list[tuple[int, Site]]] = {}
    for n, site in enumerate(sites):
        numbers[n] = site
        by_file.setdefault(site.file, []).append((n, site))
    for path, entries in by_file.items():
        code = path.read_bytes()
        for n, site in sorted(entries, key=lambda e: e[1].offset, reverse=True):
            call = (f" $__lockdown_probe_call = \\LockdownArgProbe::hit({n}, \\func_get_args(), "
                    f"isset($this) ? $this : null);").encode()
            code = code[:site.offset] + call + code[site.offset:]
        tmp = path.with_name(path.name + ".lockdown-probe")
        tmp.write_bytes(code)
        os.chmod(tmp, path.stat().st_mode & 0o7777)
        tmp.replace(path)
    return numbers


def install(root: Path, chain_prepend: str | None = None) -> Path:
    """The probe's prepend file in `root` (results go to root/out/probe.jsonl)."""
    (root / "out").mkdir(parents=True, exist_ok=True)
    service_account.give(root / "out", service_account.account())   # the workers write it
    prepend = root / "argprobe.php"
    write_prepend(prepend, chained((PHP_DIR / "argprobe.php").read_text(), chain_prepend))
    return prepend


COUNTS = ("calls", "distinct", "distinct_arguments")
TIMES = ("total_us", "first_us", "repeat_us")


def results(root: Path, numbers: dict[int, Site], app_dir: Path) -> dict[str, list[dict]]:
    """function -> one row per probed request that called it:
    {request, uri, calls, distinct, distinct_arguments, defined_at}, `defined_at` being the
    definition that ran ("file:line" under `app_dir`), and when every call was timed, the wall
    time of its calls (`total_us`), of its first call (`first_us`) and of its repeats
    (`repeat_us`, the calls whose pair came earlier in the request). Two definitions of one
    name that both ran in a request (one per class of a conditionally loaded pair) are counted
    together."""
    out: dict[str, list[dict]] = {}
    for line in read_jsonl(root / "out" / "probe.jsonl"):
        per_request: dict[str, dict] = {}
        for n, v in (line.get("functions") or {}).items():
            site = numbers.get(int(n))
            if site is None:
                continue
            row = per_request.get(site.function)
            if row is None:
                row = per_request[site.function] = {"request": line.get("request"), "uri": line.get("uri"),
                                                    **{k: 0 for k in COUNTS + TIMES}, "defined_at": [],
                                                    "timed": True}
            for k in COUNTS:
                row[k] += v[k]
            row["timed"] = row["timed"] and all(isinstance(v.get(k), int) for k in TIMES)
            for k in TIMES:
                row[k] += v.get(k) or 0
            row["defined_at"].append(site_label(site, app_dir))
        for fn, row in per_request.items():
            row["defined_at"] = ", ".join(row["defined_at"])
            if not row.pop("timed"):
                for k in TIMES:
                    del row[k]
            out.setdefault(fn, []).append(row)
    return out


def site_label(site: Site, app_dir: Path) -> str:
    """"file:line" of a definition, the file relative to the app when it is inside it."""
    try:
        name = site.file.relative_to(app_dir)
    except ValueError:
        name = site.file
    return f"{name}:{site.line}"
