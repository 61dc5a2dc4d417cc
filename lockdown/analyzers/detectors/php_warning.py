"""php-warning: a PHP warning or notice raised on every request of a page (docs/pathologies.md
section 1: Drupal 7.50+ with a module the registry lists and the file system lacks logs one on
every view).

Mechanism
    Something the code expects is not there: a file an include names (a module removed from
    the disk but not from the registry), an array key, a variable. PHP raises a warning or a
    notice, formats it and writes it to its log on every request; an application that logs it
    itself writes a row for it (Drupal's watchdog, bulletin's `bb_log`), which write-on-read
    then reports. The warning is the cause; the log write its consequence.

Signature
    The capture's error handler (collectors/php/prepend.php: `php_errors` of each request,
    docs/bundle-format.md) saw the same warning -- type, file, line, message, paths shown
    relative to the app tree -- on at least `min_request_share` of a URL's requests, of a type
    in `types`. The two warnings of one failed include (`Failed to open stream`, then `Failed
    opening ... for inclusion`), same file and line, same missing file, are one finding.

Missing files
    When the message names a file that does not exist (a failed include, fopen,
    file_get_contents), the finding says which, and, when a SELECT of the same requests reads
    a column that holds file names (`filename`, `file`, `path`, `filepath`, `uri`) from a table,
    that table is named as the likely registry, with the statement that would drop its entry
    (`registry.repair`: to check on a copy, never applied here).

Share of request time
    `share_pct`: the log writes the warning causes, when write-on-read found a write on the same
    requests sent by a logging function (its `cause`) -- those go when the warning does. What
    PHP spends raising and logging the warning itself is not measurable from the samples (it
    runs inside the builtin or the include); the Excimer share of the function that raised it
    is given as an upper bound in the evidence.

Details
    `case` (the subject: file:line and the message), `file`, `line`, `function`, `type`,
    `messages`, `per_request` (min, median, max), `missing` (file, module), `registry`,
    `log_write` (the write-on-read fingerprint and its sender).
"""
from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

from ..engine_state import app_tree
from ..findings import Evidence, Finding, severity_for
from ..sql_text import identifiers, is_marker, is_table_select, tokens
from . import write_on_read
from .context import Context
from .figures import spread
from .repeated_query import tables_read

ID = "php-warning"
SUBJECT = "case"  # what tells its findings apart (findings.SUBJECT_KEYS)

TYPES = {1: "E_ERROR", 2: "E_WARNING", 8: "E_NOTICE", 32: "E_CORE_WARNING", 128: "E_COMPILE_WARNING",
         256: "E_USER_ERROR", 512: "E_USER_WARNING", 1024: "E_USER_NOTICE", 2048: "E_STRICT",
         8192: "E_DEPRECATED", 16384: "E_USER_DEPRECATED"}
_MISSING = (re.compile(r"^(?:include|require)(?:_once)?\(\): Failed opening '(?P<path>.+)' for inclusion"),
            re.compile(r"^\w+\((?P<path>[^()]+)\): Failed to open stream: No such file or directory"))
_MODULE_MISSING = re.compile(r"module (?:is )?missing from the file system:?\s*(?P<name>[\w-]+)?", re.I)
_MODULE_DIR = re.compile(r"(?:^|/)(?:modules|plugins|extensions)/(?:[^/]+/)*?(?P<name>[\w-]+)/[^/]+$")
FILE_COLUMNS = frozenset({"filename", "file", "path", "filepath", "uri", "file_path"})


def relative(text: str, tree: str | None) -> str:
    """`text` with the app tree's path (a per-run directory) taken out of every path in it."""
    return text.replace(tree.rstrip("/") + "/", "") if tree else text


def missing_file(message: str) -> str | None:
    """The file a message says is not there, as the message names it, or None."""
    for pattern in _MISSING:
        m = pattern.match(message)
        if m:
            return m["path"]
    return None


def module_of(path: str) -> str:
    """The module a missing file belongs to: its directory under modules/ (plugins/,
    extensions/), else the file's name without extensions."""
    m = _MODULE_DIR.search(path)
    return m["name"] if m else path.rsplit("/", 1)[-1].split(".")[0]


@dataclass
class Case:
    file: str
    line: int
    type: str
    function: str
    key: str                                    # what the messages have in common: the missing file, or the message
    messages: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)   # request id -> times raised
    urls: list[str] = field(default_factory=list)
    missing: str | None = None
    module: str | None = None
    registry: dict | None = None
    log_write: write_on_read.Case | None = None
    raiser_pct: float | None = None             # Excimer: % of timed samples under the raising function

    @property
    def subject(self) -> str:
        return f"{self.file}:{self.line} {self.key}"

    @property
    def share(self) -> float:
        return self.log_write.time.share if self.log_write else 0.0


def _collect(ctx: Context, types: set[str]) -> dict[tuple, Case]:
    tree = app_tree(ctx.manifest)
    found: dict[tuple, Case] = {}
    for r in ctx.requests:
        for e in r.php_errors or ():
            kind = TYPES.get(e.get("type"), str(e.get("type")))
            if kind not in types:
                continue
            message, file = relative(e["message"], tree), relative(e["file"], tree)
            missing = missing_file(message)
            k = (file, e["line"], missing or message)
            c = found.setdefault(k, Case(file, e["line"], kind, e["function"], missing or message, missing=missing))
            if message not in c.messages:
                c.messages.append(message)
            c.counts[r.id] = c.counts.get(r.id, 0) + e["count"]
    return found


def registry_of(ctx: Context, rids: list[str], missing: str) -> dict | None:
    """The table a SELECT of these requests reads file names from, with the statement that
    would drop the entry naming `missing`, or None."""
    for rid in rids[:3]:
        for s in ctx.statements_of[rid]:
            if is_marker(s.sql) or not is_table_select(s.sql):
                continue
            words = [t for k, t in tokens(s.sql) if k == "ident"]
            cols = [w.strip("`") for w in words[1:words.index(next(w for w in words if w.lower() == "from"))]]
            col = next((c for c in cols if c.lower() in FILE_COLUMNS), None)
            tables = sorted(tables_read(s.sql))
            if col and len(tables) == 1 and col.lower() in identifiers(s.sql):
                quoted = missing.replace("\\", "\\\\").replace("'", "\\'")
                return {"table": tables[0], "column": col, "statement": s.sql,
                        "repair": f"DELETE FROM {tables[0]} WHERE {col} = '{quoted}'"}
    return None


def decide(ctx: Context) -> list[Case]:
    min_share = ctx.threshold(ID, "min_request_share")
    types = set(ctx.threshold(ID, "types"))
    logs = [w for w in write_on_read.decide(ctx) if w.cause]
    cases = []
    for c in _collect(ctx, types).values():
        per_url: dict[str, int] = defaultdict(int)
        for rid in c.counts:
            per_url[ctx.url_of[rid]] += 1
        c.urls = sorted(u for u, n in per_url.items() if n >= min_share * len(ctx.by_url[u]))
        if not c.urls:
            continue
        rids = sorted(c.counts)
        if c.missing:
            c.module = module_of(c.missing)
            c.registry = registry_of(ctx, rids, c.missing)
        c.log_write = next((w for w in logs if len(set(w.requests) & set(rids)) >= min_share * len(w.requests)), None)
        if c.function != "main()" and c.function in ctx.excimer_frames:
            c.raiser_pct = ctx.php_share_pct(lambda frame: frame == c.function)
        cases.append(c)
    cases.sort(key=lambda c: (-c.share, c.file, c.line, c.key))
    return cases


def detect(ctx: Context) -> list[Finding]:
    return [describe(c) for c in decide(ctx)]


def describe(c: Case) -> Finding:
    n = spread(list(c.counts.values()))
    where = f"{c.file}:{c.line}"
    what = (f"the file `{c.missing}` does not exist (module `{c.module}`)" if c.missing else f"`{c.messages[0]}`")
    fix = ""
    if c.registry:
        fix = (f" The registry still names it: `{c.registry['table']}` ({c.registry['column']}), read with "
               f"`{c.registry['statement']}`; remove its entry (`{c.registry['repair']}`, on a copy first) "
               "or restore the file.")
    elif c.missing:
        fix = " Restore the file, or remove what still names it (a registry entry, a configuration line)."
    caused = (f" It is logged by `{c.log_write.cause}` with a database write on every request "
              f"(write-on-read `{c.log_write.fingerprint}`), which goes with it." if c.log_write else "")
    evidence = [
        Evidence("raised at", f"{where} in {c.function}", "requests.jsonl php_errors (the capture's error handler)"),
        Evidence("type", c.type, "requests.jsonl php_errors"),
        *[Evidence("message", m, "requests.jsonl php_errors") for m in c.messages],
        Evidence("times per request (min/median/max)", f"{n['min']}/{n['median']}/{n['max']}",
                 f"requests.jsonl php_errors, {len(c.counts)} requests"),
    ]
    if c.log_write:
        evidence += [Evidence("the log writes it causes, % of timed requests' wall time", round(c.share, 2),
                              f"write-on-read: `{c.log_write.fingerprint}` sent by {c.log_write.cause}")]
    if c.raiser_pct is not None:
        evidence.append(Evidence(f"upper bound: timed samples with {c.function} on the stack, %",
                                 round(c.raiser_pct, 2), "Excimer"))
    return Finding(
        id=ID, title=f"PHP {c.type} on every request: {where}" + (f", missing {c.missing}" if c.missing else ""),
        severity=severity_for(c.share), share_pct=round(c.share, 2),
        summary=(f"PHP raised {c.type} at `{where}` ({c.function}) {n['median']:g} time(s) per request on "
                 f"{', '.join(c.urls[:3])}{' ...' if len(c.urls) > 3 else ''}: {what}.{fix}{caused}"),
        evidence=evidence, urls=c.urls, requests=sorted(c.counts)[:5],
        details={"case": c.subject, "file": c.file, "line": c.line, "function": c.function, "type": c.type,
                 "messages": c.messages, "per_request": n,
                 "missing": {"file": c.missing, "module": c.module} if c.missing else None,
                 "registry": c.registry,
                 "log_write": ({"fingerprint": c.log_write.fingerprint, "sender": c.log_write.cause}
                               if c.log_write else None)})
