"""A bundle's xhprof profiles as the files of the tools people already use: xhprof_html and
XHGui. Pure: bundle in, file names and contents out (the CLI writes them).

xhprof_html (XHProfRuns_Default) reads a run from `<dir>/<run>.<source>.xhprof` with
unserialize() and lists runs by splitting file names on ".". Its xhprof_param_init drops run
ids that are not hex digits (`ctype_xdigit` in current xhprof_lib; `[A-Za-z0-9-]` in older
ones), so a run id is made of `0-9a-f` only: the request's number (`000007` for request
`r000007`), or the hex of any other request id; the source is the target name cut down to
`A-Za-z0-9-`, and `index.tsv` says which request and URL each run is. `<dir>` is
`ini_get("xhprof.output_dir")`, or `sys_get_temp_dir()` when that is empty: the xhprof
extension declares that setting, tideways_xhprof does not (so `-d xhprof.output_dir=` is
ignored there), and `sys_temp_dir` is PHP's own, so `viewer_command` sets both.

XHGui's importer (`external/import.php -f FILE`, php-profiler's `bin/import.php FILE`) reads
JSON lines `{"profile", "meta"}` as php-profiler's FileSaver writes them, to
`xhgui.data.jsonl` by default. Its savers read `meta.url`, `simple_url`, `get`, `env`,
`SERVER` and `request_ts_micro` {sec, usec} (integers), and `profile["main()"]`.

tideways_xhprof 5 on PHP 8 ends `main()` almost at once and records the request's top-level
calls without a caller, and records every internal function call twice (`f==>f@1`). Both
tools take `main()` as the request's total (xhprof_html: xhprof_compute_flat_info; XHGui:
main_wt, and the first caller-less key as the total its call graph thresholds compare
with). So by default profiles are repaired (`repair`): top-level calls go
under `main()`, `main()` gets the request's wall time, CPU time and peak memory from the
request log, and the doubled internal calls go (lockdown.analyzers.builtins.undouble, the
edges lockdown's own analysis leaves out). `raw=True` exports them exactly as recorded.
"""
from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable
from urllib.parse import parse_qsl, urlsplit

from ..analyzers.analysis import select
from ..analyzers.builtins import base_name, is_internal, undouble
from ..bundle.model import RequestRecord
from ..bundle.store import Bundle, BundleError
from ..errors import LockdownError
from .php_serialize import serialize

FORMATS = ("xhprof", "xhgui")
XHPROF_SUFFIX = "xhprof"           # XHProfRuns_Default's file suffix
XHGUI_FILE = "xhgui.data.jsonl"    # php-profiler's default save.handler.file name
INDEX_FILE = "index.tsv"
SERVER_KEY = "LOCKDOWN_PROFILE"    # meta.SERVER entry saying how the profile was exported
# The instrumenting profiler's own functions: internal, but not in the manifest's list, which
# is read from the workers without it.
_PROFILER_PREFIXES = ("tideways_xhprof_",)
_UNSAFE = re.compile(r"[^A-Za-z0-9-]+")
_NUMBERED = re.compile(r"r([0-9]+)")       # lockdown's request ids: r000007


@dataclass(frozen=True)
class ExportFile:
    name: str
    data: bytes
    mtime: float | None = None     # xhprof_html lists runs by file time: the request's start


def safe_name(text: str, fallback: str) -> str:
    """`text` with only `A-Za-z0-9-` (source names: no ".", which xhprof_html splits on)."""
    return _UNSAFE.sub("-", text).strip("-") or fallback


def run_ids(request_ids: list[str]) -> dict[str, str]:
    """Request id -> a distinct xhprof_html run id of hex digits: the number of lockdown's own
    ids (`r000007` -> `000007`), else the hex of the id's UTF-8 bytes; a clash gets the hex of
    the id, then a hex counter after it."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for rid in request_ids:
        m = _NUMBERED.fullmatch(rid)
        run = m.group(1) if m else rid.encode().hex() or "0"
        if run in taken:
            run = rid.encode().hex() or "0"
        base, n = run, 1
        while run in taken:
            run, n = f"{base}{n:x}", n + 1
        taken.add(run)
        out[rid] = run
    return out


def viewer_command(out_dir: str, port: int = 8000) -> str:
    """The command that serves xhprof_html on `out_dir`'s runs, whichever profiler PHP loads:
    XHProfRuns_Default reads xhprof.output_dir (declared by the xhprof extension only) and
    falls back to sys_get_temp_dir(), which sys_temp_dir sets; some forks and images
    (wodby/xhprof) read the XHPROF_OUTPUT_DIR environment variable first."""
    d = shlex.quote(out_dir)
    return (f"XHPROF_OUTPUT_DIR={d} php -d xhprof.output_dir={d} -d sys_temp_dir={d} "
            f"-S 127.0.0.1:{port} -t XHPROF_HTML_DIR")


def profiled(bundle: Bundle, request: str | None = None,
             url: str | None = None) -> list[tuple[RequestRecord, dict]]:
    """The chosen requests that have an xhprof profile, with their profiles, in capture order."""
    have = set(bundle.xhprof_ids())
    if not have:
        raise LockdownError(f"{bundle.root}: no xhprof profiles in this bundle (captured without the "
                            f"xhprof collector or with --xhprof-every 0); capture again with "
                            f"`lockdown profile TARGET --xhprof-every N`")
    chosen = select(bundle.requests(), request, url, bundle.root / "requests.jsonl")
    pairs = [(r, bundle.xhprof(r.id)) for r in chosen if r.id in have]
    if not pairs:
        what = f"request {request!r}" if request else f"URL {url!r}"
        raise LockdownError(f"no xhprof profile for {what}: only instrumented requests have one "
                            f"(here {', '.join(sorted(have)[:3])}{', ...' if len(have) > 3 else ''}); "
                            f"give one of them with --request")
    for r, p in pairs:
        if not isinstance(p, dict) or not isinstance(p.get("main()"), dict):
            raise BundleError(f"{bundle.root / 'xhprof' / (r.id + '.json')}: not an xhprof profile "
                              f"(no main() entry); the bundle is damaged, capture it again")
        bad = next((k for k, v in p.items() if not isinstance(v, dict)), None)
        if bad is not None:
            raise BundleError(f"{bundle.root / 'xhprof' / (r.id + '.json')}: not an xhprof profile "
                              f"({bad!r} has no metrics); the bundle is damaged, capture it again")
    return pairs


@dataclass(frozen=True)
class Exported:
    """One request's profile as it is exported: what was changed (`repairs`, empty: nothing)
    and what was left alone that a reader should know (`notes`)."""
    request: RequestRecord
    profile: dict
    repairs: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    raw: bool = False

    @property
    def repaired(self) -> bool:
        return bool(self.repairs)

    def describe(self) -> str:
        """What index.tsv and XHGui's SERVER say about the profile."""
        if self.raw:
            return "as recorded (--raw)"
        return "; ".join(self.repairs + self.notes) or "as recorded (nothing to repair)"


def internal_test(manifest: dict) -> Callable[[str], bool] | None:
    """Is a function internal: the target engine's lists in the manifest, as lockdown's
    analysis decides, plus the profiler's own functions; None without the lists."""
    php = manifest.get("php") or {}
    if not php.get("internal_functions"):
        return None
    functions = {f.lower() for f in php["internal_functions"]}
    classes = {c.lower() for c in php.get("internal_classes") or []}
    return lambda name: name.lower().startswith(_PROFILER_PREFIXES) or is_internal(name, functions, classes)


def _add(a: dict, b: dict) -> dict:
    return {m: a.get(m, 0) + b.get(m, 0) for m in {**a, **b}}


def _main_metrics(own: dict, children: list[dict], r: RequestRecord) -> tuple[dict, list[str], list[str]]:
    """main()'s new metrics (only those it records), how they were set, and clock notes."""
    out, said, notes = {}, [], []
    logged = {"wt": r.wall_us, "cpu": r.cpu_us}
    for m, value in own.items():
        below = sum(v.get(m, 0) for v in children)
        if m == "ct":
            out[m] = 1
        elif m in logged and logged[m] is not None:
            out[m] = max(logged[m], below)
            said.append(f"{m} {logged[m]} us")
            if below > logged[m]:
                notes.append(f"callees' {m} {below} us > the request's {logged[m]} us (clocks differ): "
                             f"main() {m} = {below}")
        elif m in ("mu", "pmu") and r.peak_memory is not None:
            out[m] = r.peak_memory
            said.append(f"{m} {r.peak_memory} B")
        else:                                    # not in the request log: main()'s own and its callees'
            out[m] = value + below
    return out, said, notes


def repair(profile: dict, r: RequestRecord,
           internal: Callable[[str], bool] | None) -> tuple[dict, tuple[str, ...], tuple[str, ...]]:
    """`profile` as xhprof_html and XHGui need it; what was repaired and notes. A profile
    with no caller-less call but main() and no doubled internal call comes back as it is.

    - tideways' doubled internal calls (`f==>f@1`, and `f@1` as a caller) are folded into the
      real ones (lockdown.analyzers.builtins.undouble). Without the manifest's internal function
      list they are kept: a user function's self-call is real recursion.
    - each caller-less key `f` but main() becomes `main()==>f` (added to an existing one);
    - main() is then the request: ct 1, wt its wall time, cpu its CPU time, mu and pmu its peak
      memory, from the request log, each only if main() records that metric; wt and cpu at least
      the sum of main()'s callees' (a callee can run after the request log's clock stops);
      other metrics (mem.na, ...) main()'s own plus its callees'."""
    repairs: list[str] = []
    notes: list[str] = []
    if internal is None:
        if any(sep and base_name(a) == base_name(b) for a, sep, b in (k.partition("==>") for k in profile)):
            notes.append("self-call edges kept: the manifest has no internal function list to tell "
                         "tideways' doubled internal calls from recursion")
    else:
        profile, dropped = undouble(profile, internal)
        if dropped:
            repairs.append(f"{dropped} doubled internal call edges (f==>f@1) removed")
    top = [k for k in profile if "==>" not in k and k != "main()"]
    if top:
        out: dict = {}
        for key, v in profile.items():
            new = key if "==>" in key or key == "main()" else f"main()==>{key}"
            out[new] = _add(out[new], v) if new in out else dict(v)
        own = out.pop("main()")
        main_, said, clock = _main_metrics(own, [v for k, v in out.items() if k.startswith("main()==>")], r)
        profile = {"main()": main_, **out}
        repairs[:0] = [f"main() = the request ({', '.join(said) or 'ct 1'})",
                       f"{len(top)} calls without a caller put under main()"]
        notes += clock
    return profile, tuple(repairs), tuple(notes)


def exported(bundle: Bundle, request: str | None = None, url: str | None = None,
             raw: bool = False) -> list[Exported]:
    """The chosen profiled requests' profiles, in capture order, repaired unless `raw`."""
    pairs = profiled(bundle, request, url)
    if raw:
        return [Exported(r, p, raw=True) for r, p in pairs]
    internal = internal_test(bundle.manifest)
    return [Exported(r, *repair(p, r, internal)) for r, p in pairs]


def source_name(bundle: Bundle) -> str:
    return safe_name(bundle.manifest.get("target", {}).get("name") or "", "lockdown")


def _cell(v) -> str:
    return re.sub(r"[\t\r\n]", " ", str(v))


def index_tsv(rows: list[tuple[str, str, Exported]]) -> str:
    """run, source, request, method, URI, status, wall time, start (UTC), whether and how the
    profile was repaired, and the xhprof_html query of each exported run."""
    lines = ["run\tsource\trequest\tmethod\turi\tstatus\twall_us\tstart_utc\trepaired\tprofile\tview"]
    for run, source, e in rows:
        r = e.request
        start = datetime.fromtimestamp(r.start_unix, timezone.utc).isoformat(timespec="milliseconds")
        lines.append("\t".join(_cell(v) for v in (
            run, source, r.id, r.method, r.uri, r.status, r.wall_us, start, "yes" if e.repaired else "no",
            e.describe(), f"index.php?run={run}&source={source}")))
    return "\n".join(lines) + "\n"


def xhprof_files(bundle: Bundle, items: list[Exported]) -> list[ExportFile]:
    """One `<run>.<source>.xhprof` per profiled request (PHP serialize() of the profile),
    and the index."""
    source = source_name(bundle)
    runs = run_ids([e.request.id for e in items])
    files = [ExportFile(f"{runs[e.request.id]}.{source}.{XHPROF_SUFFIX}", serialize(e.profile),
                        e.request.start_unix) for e in items]
    files.append(ExportFile(INDEX_FILE, index_tsv([(runs[e.request.id], source, e) for e in items]).encode()))
    return files


def xhgui_record(r: RequestRecord, profile: dict, server_name: str, described: str | None = None) -> dict:
    """One request as php-profiler's ProfilingData shapes it: `url` is the request URI,
    `simple_url` drops numbers after "=" (its default), times come from the request's
    wall-clock start; SERVER_NAME is the target, UNIQUE_ID the request id, and
    LOCKDOWN_PROFILE (`described`) how the profile was exported. XHGui's savers keep only
    the meta keys they know but store SERVER whole (Mongo: a subdocument, whose keys must not
    contain "." or start with "$"; PDO: json_encode), so that is where it can go."""
    uri = r.uri or r.url or "/"
    sec, usec = (int(x) for x in f"{r.start_unix:.6f}".split("."))
    query = urlsplit(uri).query
    server = {"REQUEST_METHOD": r.method, "REQUEST_TIME": sec, "REQUEST_TIME_FLOAT": r.start_unix,
              "QUERY_STRING": query, "SERVER_NAME": server_name, "UNIQUE_ID": r.id}
    if described is not None:
        server[SERVER_KEY] = described
    return {"profile": profile, "meta": {
        "url": uri,
        "simple_url": re.sub(r"=\d+", "", uri),
        "get": dict(parse_qsl(query, keep_blank_values=True)),
        "env": {},
        "SERVER": server,
        "request_ts_micro": {"sec": sec, "usec": usec},
        "request_ts": {"sec": sec, "usec": 0},
        "request_date": datetime.fromtimestamp(sec, timezone.utc).strftime("%Y-%m-%d"),
    }}


def xhgui_files(bundle: Bundle, items: list[Exported]) -> list[ExportFile]:
    """`xhgui.data.jsonl`: one JSON line per profiled request."""
    target = bundle.manifest.get("target", {}).get("name") or "lockdown"
    lines = [json.dumps(xhgui_record(e.request, e.profile, target, e.describe()), separators=(",", ":")) + "\n"
             for e in items]
    return [ExportFile(XHGUI_FILE, "".join(lines).encode())]


def export_files(bundle: Bundle, fmt: str, items: list[Exported]) -> list[ExportFile]:
    """The files of `fmt` for `items` (from `exported`)."""
    if fmt not in FORMATS:
        raise LockdownError(f"unknown export format {fmt!r}; give one of {', '.join(FORMATS)}")
    return (xhprof_files if fmt == "xhprof" else xhgui_files)(bundle, items)
