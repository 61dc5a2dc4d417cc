"""Remediations lockdown derives from the evidence when no recipe applies (issue 30): the PHP
function responsible is located in the app's own source (the statement's sender by its text,
sender.py; a walker or getter by the name the call graph gives), and a diff is written with
PHP's tokenizer (php/memoize.php, php/defer.php) and checked with patch(1) and `php -l` on a
copy. Each is a proposal for `lockdown verify`, which measures it and compares every page;
each says in its description what it changes in the app's behaviour.

Per finding kind:
- repeated-query: a per-request memo in the sender, keyed on its arguments (one memo per
  object for a method);
- db-static-cache, file-static-cache: the getter served from a generated PHP array file that
  OPcache keeps in memory, rebuilt on a miss, every TTL seconds, and (a file) when the file
  read changes;
- fs-scan that is a discovery walk: the walker's result kept the same way;
- write-on-read: the write moved after the response (fastcgi_finish_request);
- failed-lookups: what the function trying the candidates resolved, kept the same way;
- autoload: a class map of the app's files in front of its loader (class_map.py);
- session-probe: a per-request memo of the function that asks the server;
- per-call-setup: the statement that runs the setup's loop (it calls a loop builtin the finding
  names) runs on the first call of a request only, its results kept in a static
  (php/setup_once.php: refused when the statement reads anything that depends on the call);
- disk-spill, regex-compile (and a per-call-setup no diff can be made for): no diff (the change
  is a judgment on the app's query or pattern that no rewrite can make safely), but the place to
  change, found the same way (the statement's sender; the named function's definition), added to
  `no_patch` and `details.located`, so that the finding says where as precisely as a diff would;
- n-plus-one: a prefetch: the loop (the sender's caller in the call graph) asks for every row's
  key first, and the sender's class fetches them in one `IN (...)` query through the same
  database object's batch method (BATCH_METHODS), checked at run time against the per-row
  query; when the code does not have that shape, no diff, and `no_patch` says where the
  per-row query is sent. A per-row query that an ORM's lazy loading sends (no app code holds
  its text; the call graph names the relation: sql_caller.lazy_relations_by_count): the model
  loads the relation by default (php/eager_load.php, Eloquent's `$with`), the narrower
  `->with(...)` on the parent query named beside it.
"""
from __future__ import annotations

import json
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..analyzers.findings import Finding, Remediation
from ..collectors import arg_probe
from ..errors import LockdownError
from ..harness.toolchain import tool
from ..targets.config import is_patchable
from . import class_map as class_maps
from . import sender as senders
from .memoize import memoized, rewritten
from .recipes import PREPARED_TREE, check_applies, unified_diff

DEFER = Path(__file__).with_name("php") / "defer.php"
TTL_S = 60     # how long a generated static cache trusts its entries (documented in docs/verify.md)


@dataclass
class Site:
    """The function a generated diff changes."""
    function: str
    file: str           # relative to the app tree
    line: int           # of its `function` keyword
    how: str            # how it was found, in words


def propose(finding: Finding, patchable, app_dir: Path, called: dict[str, float] | None = None,
            tree: str = PREPARED_TREE) -> list[Remediation]:
    """The generated remediation for `finding`, or [] with `details.no_patch` saying why."""
    make = _MAKERS.get(finding.id)
    if make is None:
        return []
    told = finding.details.get("no_patch")      # the detector's own word on why it has no fix
    try:
        made = make(finding, list(patchable), app_dir, called if called is not None else {}, tree)
        if made and finding.details.get("no_patch") == told:
            finding.details.pop("no_patch", None)
        return made
    except (LockdownError, OSError, ValueError) as e:
        finding.details["no_patch"] = f"no remediation could be generated: {e}"
        return []


class Called(dict):
    """Function (and "caller==>callee") -> calls per profiled request (the capture's xhprof),
    `by_count`: statement shape -> the functions called as many times as it was sent in every
    profiled request (analyzers/sql_caller.senders_by_count), and `lazy`: shape -> the ORM
    relation methods lazily loaded that many times (sql_caller.lazy_relations_by_count)."""

    def __init__(self, per_request: dict[str, float] | None = None, by_count: dict[str, list[str]] | None = None,
                 lazy: dict[str, list[str]] | None = None):
        super().__init__(per_request or {})
        self.by_count = by_count or {}
        self.lazy = lazy or {}


def sent_by(finding: Finding, app_dir: Path, called: dict[str, float], by_count: bool = False
            ) -> tuple[Site | None, str]:
    """The function sending the finding's statement (details.fingerprint): the one whose body
    holds its text, else (`by_count`: for a per-request memo, which `verify` checks page by
    page) the app's function called once per execution of it."""
    fp = finding.details.get("fingerprint")
    if not fp:
        return None, "the finding names no statement"
    found, why = senders.locate(fp, app_dir, called)
    if found is not None:
        return Site(found.function, found.file, found.line, found.how), ""
    if not by_count:
        return None, why
    site, also = sent_by_count(fp, app_dir, called)
    return (site, "") if site is not None else (None, why + also)


def name_sender(finding: Finding, site: Site) -> None:
    """details.sender: the function located, unless the detector named one (it may hold None)."""
    if not finding.details.get("sender"):
        finding.details["sender"] = site.function


def sent_by_count(fp: str, app_dir: Path, called: dict[str, float]) -> tuple[Site | None, str]:
    """The app function (defined in the app tree) called exactly as often as statements of shape
    `fp` were sent, in every profiled request; of several, the innermost (one the others call)."""
    names = getattr(called, "by_count", {}).get(fp) or []
    sites = [s for s in (defined(fn, app_dir, called)[0] for fn in names if not fn.startswith(("{", "main()")))
             if s is not None and not ("/" + s.file).count("/vendor/")]     # the app's own, not its libraries
    inner = [s for s in sites if not any(f"{s.function}==>{t.function}" in called for t in sites if t is not s)]
    if len(inner) != 1:
        return None, ("" if not inner else "; several functions of the app are called as often as it is sent: "
                      + ", ".join(s.function for s in inner[:5]))
    s = inner[0]
    return Site(s.function, s.file, s.line, f"{s.function} (defined at {s.file}:{s.line}) is called as many times "
                                            f"as the statement is sent, in every profiled request (the statement's "
                                            f"text is built elsewhere, by a query builder)"), ""


def defined(function: str, app_dir: Path, called: dict[str, float]) -> tuple[Site | None, str]:
    """Where `function` (an xhprof name) is defined in the app tree."""
    sites = arg_probe.locate(app_dir, [function]).get(function, [])
    if len(sites) != 1:
        return None, (f"{function} is not defined in the app's files" if not sites else
                      f"{function} is defined in {len(sites)} places")
    s = sites[0]
    rel = arg_probe.site_label(s, app_dir).rpartition(":")[0]
    seen = called.get(function)
    return Site(function, rel, s.line, f"{function} is defined at {rel}:{s.line}"
                + (f", called {seen:g} times per request in the capture's xhprof" if seen else "")), ""


def named_site(finding: Finding, key: str, app_dir: Path, called: dict[str, float]) -> Site | None:
    """Where the function the finding names in `details[key]` is defined; None, with
    `no_patch` saying why when it names one that cannot be found."""
    fn = finding.details.get(key)
    if not fn:
        return None
    site, why = defined(fn, app_dir, called)
    if site is None:
        finding.details["no_patch"] = f"no remediation generated: {why}"
    return site


def diff_of(finding: Finding, site: Site, patchable: list[str], app_dir: Path, tree: str, what: str,
            scope: str = "request", cache: dict | None = None, script: Path | None = None) -> list[Remediation]:
    """The checked diff that rewrites `site`, or [] with no_patch set."""
    if not is_patchable(site.file, patchable):
        finding.details["no_patch"] = (f"{site.file} is not one of the target's patchable files; declare it (or a "
                                       f"pattern holding it) in target.toml's `patchable` to get {what}")
        return []
    kwargs = {"script": script} if script else {}
    text, why = memoized(app_dir / site.file, site.function, site.line, scope=scope, cache=cache, **kwargs)
    if text is None:
        finding.details["no_patch"] = f"none generated, because {why}; the change would be {what}"
        return []
    old = (app_dir / site.file).read_text(errors="replace")
    diff = unified_diff(site.file, old, text)
    checked = check_applies(app_dir, site.file, diff, tree) + "; " + php_lint(text)
    return [Remediation(kind="diff", content=diff, checked=checked, file=site.file, origin="generated",
                        description=what[0].upper() + what[1:] + f" ({site.how})")]


def php_lint(text: str) -> str:
    """`php -l` on the patched text; raises ValueError when it does not parse."""
    run = subprocess.run([tool("php"), "-n", "-l"], input=text, capture_output=True, text=True, timeout=60)
    if run.returncode != 0:
        first = next((ln for ln in (run.stdout + run.stderr).splitlines() if ln.strip()), "")
        raise ValueError(f"the patched file does not pass php -l: {first[:200]}")
    return "the patched file passes php -l"


def _located(finding: Finding, app_dir: Path, called: dict[str, float], by_count: bool = False) -> Site | None:
    site, why = sent_by(finding, app_dir, called, by_count)
    if site is None:
        finding.details["no_patch"] = f"the function sending the statement was not found: {why}"
    return site


def repeated_query(finding: Finding, patchable, app_dir: Path, called, tree) -> list[Remediation]:
    site = _located(finding, app_dir, called, by_count=True)
    if site is None:
        return []
    name_sender(finding, site)
    scope = "object" if "::" in site.function else "request"
    what = (f"a per-request memo of {site.function}, the function that sends the repeated statement, keyed on its "
            f"arguments{' (one memo per object)' if scope == 'object' else ''}: right while nothing the request does "
            f"changes its answer (the capture saw no write to the table between the repeats)")
    return diff_of(finding, site, patchable, app_dir, tree, what, scope=scope)


def session_probe(finding: Finding, patchable, app_dir: Path, called, tree) -> list[Remediation]:
    """session-probe: a per-request memo of the function that asks the server (its sender, by
    the call graph or the statement's text)."""
    named = finding.details.get("sender")
    site = defined(named, app_dir, called)[0] if named else None
    if site is None:
        site = _located(finding, app_dir, called, by_count=True)
        if site is None:
            return []
    scope = "object" if "::" in site.function else "request"
    what = (f"a per-request memo of {site.function}, which asks the server `{finding.details.get('statement')}` "
            f"on every call: asked once per request instead (a change of the server's state during a request is "
            f"then seen by the next request, not at once)")
    return diff_of(finding, site, patchable, app_dir, tree, what, scope=scope)


def _cache_name(function: str, extra: str = "") -> str:
    short = re.sub(r"[^A-Za-z0-9]+", "-", function.replace("\\", "-")).strip("-").lower()
    return f"{extra}-{short}" if extra else short


def static_cache(finding: Finding, patchable, app_dir: Path, called, tree) -> list[Remediation]:
    """db-static-cache: the getter sending the lookups, served from a generated array file."""
    site = _located(finding, app_dir, called)
    if site is None:
        return []
    name_sender(finding, site)
    table = finding.details.get("table") or "the table"
    what = (f"a static cache of {site.function}: its results kept in a generated PHP array file "
            f"(.lockdown-cache/ beside {Path(site.file).name}), which OPcache keeps in memory, filled on a miss; "
            f"invalidation: every entry is dropped every {TTL_S} s (a change to `{table}` shows within {TTL_S} s; "
            f"delete the file to apply one at once), and a method's entries are keyed on the object's scalar "
            f"properties as well as its arguments")
    return diff_of(finding, site, patchable, app_dir, tree, what, scope="persistent",
                   cache={"name": _cache_name(site.function, str(table)), "ttl": TTL_S})


def _rel_expr(patched: str, target: str) -> str:
    """A PHP expression for `target` (relative to the app tree) from the patched file's __DIR__."""
    depth = len(Path(patched).parent.parts)
    up = "/".join([".."] * depth)
    return class_maps.php_string(f"/{up + '/' if up else ''}{target}")


def file_cache(finding: Finding, patchable, app_dir: Path, called, tree) -> list[Remediation]:
    """file-static-cache: the reading function's result kept, rebuilt when the file changes."""
    site = named_site(finding, "function", app_dir, called)
    if site is None:
        finding.details.setdefault("no_patch", "the finding names no reading function")
        return []
    version, watched = "", ""
    path = finding.details.get("reader_path") or ""
    rel = _app_relative(path, app_dir)
    if rel:
        watched = f"; and when {rel} changes (its mtime and size are the cache's version)"
        expr = f"__DIR__ . {_rel_expr(site.file, rel)}"
        version = f"@filemtime( {expr} ) . ':' . @filesize( {expr} )"
    what = (f"a static cache of {site.function}: its results kept in a generated PHP array file "
            f"(.lockdown-cache/ beside {Path(site.file).name}), which OPcache keeps in memory; invalidation: "
            f"rebuilt every {TTL_S} s{watched}")
    return diff_of(finding, site, patchable, app_dir, tree, what, scope="persistent",
                   cache={"name": _cache_name(site.function), "ttl": TTL_S, "version": version})


def _app_relative(path: str, app_dir: Path) -> str:
    """`path` (as the capture saw it, in some run's copy of the app) relative to the app tree:
    the longest tail of it that exists under `app_dir`."""
    parts = Path(path).parts
    for i in range(1, len(parts)):
        tail = Path(*parts[i:])
        if (app_dir / tail).is_file():
            return str(tail)
    return ""


def scan_cache(finding: Finding, patchable, app_dir: Path, called, tree) -> list[Remediation]:
    """fs-scan when the walk is the discovery itself: the walker's result kept."""
    if finding.remediations or finding.details.get("walk") == "miss-fallback":
        return []
    site = named_site(finding, "walker", app_dir, called)
    if site is None:
        return []
    what = (f"the result of {site.function}'s walk kept in a generated PHP array file (.lockdown-cache/ beside "
            f"{Path(site.file).name}), which OPcache keeps in memory, keyed on its arguments and the object's "
            f"scalar properties (its root); invalidation: walked again every {TTL_S} s, so a directory added to "
            f"or removed from the tree shows within {TTL_S} s (delete the file to apply it at once)")
    return diff_of(finding, site, patchable, app_dir, tree, what, scope="persistent",
                   cache={"name": _cache_name(site.function, "walk"), "ttl": TTL_S})


def lookup_cache(finding: Finding, patchable, app_dir: Path, called, tree) -> list[Remediation]:
    """failed-lookups: the function that tries the candidates keeps what it resolved."""
    if str(finding.details.get("function", "")).startswith("("):
        return []                 # "(unknown)" or "(several functions)": the detector says why
    fn = str(finding.details.get("function") or "")
    site, why = defined(fn, app_dir, called) if fn else (None, "")
    if site is None:
        if fn:
            finding.details["no_patch"] = f"no remediation generated: {outside_the_app(fn, why, finding)}"
        return []
    what = (f"what {site.function} resolves kept in a generated PHP array file (.lockdown-cache/ beside "
            f"{Path(site.file).name}), which OPcache keeps in memory, keyed on its arguments and the object's "
            f"scalar properties: the failed lookups run once, not on every request; invalidation: resolved "
            f"again every {TTL_S} s, so a file added or removed shows within {TTL_S} s (delete the file to apply it "
            f"at once)")
    return diff_of(finding, site, patchable, app_dir, tree, what, scope="persistent",
                   cache={"name": _cache_name(site.function, "lookup"), "ttl": TTL_S})


# builtins that search PHP's include_path entry by entry: each entry tried before the one that
# holds the file (or every entry, for a file that is not there) is a failed lookup
INCLUDE_PATH_WALKERS = {"stream_resolve_include_path", "include", "include_once", "require", "require_once",
                        "fopen"}


def outside_the_app(fn: str, why: str, finding: Finding) -> str:
    """Why lookups made by a function the app tree does not define get no diff, and what to
    change instead: that code is a library or the framework as installed, which lockdown does
    not patch (it patches a copy of the app's own files)."""
    if fn.startswith("main()"):
        out = ("they are made by the top-level code of files (main()), which xhprof does not tell apart: there "
               "is no function to change")
    else:
        out = (f"{why}: it is a library or the framework as installed (under PHP's include_path or outside the app "
               f"tree), which lockdown does not patch")
    walkers = sorted(INCLUDE_PATH_WALKERS & set(finding.details.get("builtins") or []))
    if walkers:
        out += (f"; its {', '.join(walkers)} searches PHP's include_path entry by entry, and every entry tried "
                f"before the one holding the file fails: list that directory first in include_path (or drop "
                f"`.` from it), and install the library with a class-map autoloader (Composer's "
                f"`dump-autoload -o`) rather than autoloaders that probe the include path for optional parts")
    else:
        out += "; the fix belongs where it is installed (its own cache or setting), or in what the app asks of it"
    if finding.details.get("estimated"):
        out += ("; note that its part of the failures is an estimate (they are shared among the callers of "
                "lookup builtins by their calls)")
    return out


def deferred_write(finding: Finding, patchable, app_dir: Path, called, tree) -> list[Remediation]:
    if finding.details.get("refills"):
        finding.details["no_patch"] = (f"the write refills a cache kept in the database table "
                                       f"`{finding.details['refills']}`: the fix is the app's own cache setting (a "
                                       f"local in-memory cache such as APCu), which no generic diff can make")
        return []
    site = _located(finding, app_dir, called)
    if site is None:
        return []
    name_sender(finding, site)
    what = (f"the write in {site.function} moved off the response path: it runs after the response was "
            f"released (fastcgi_finish_request, in a shutdown function). What changes: the page no longer "
            f"waits for it and cannot show its result, and an error in it is logged instead of failing the page")
    return diff_of(finding, site, patchable, app_dir, tree, what, script=DEFER)


PREFETCH = Path(__file__).with_name("php") / "prefetch.php"
# a per-row fetch method of a database object -> its sibling returning every row (lower-case
# keys): the batch query goes through the app's own API. PDO-style wrappers, Doctrine DBAL,
# MediaWiki's IDatabase, Laravel's query builder, WordPress's wpdb.
BATCH_METHODS = {"fetchone": "fetchAll", "fetchrow": "fetchAll", "fetchassoc": "fetchAll",
                 "fetchassociative": "fetchAllAssociative", "getrow": "getAll", "get_row": "get_results",
                 "selectrow": "select", "first": "get", "one": "all", "queryone": "queryAll", "findone": "findAll",
                 "row": "rows"}


def prefetch(finding: Finding, patchable, app_dir: Path, called, tree) -> list[Remediation]:
    """n-plus-one: the loop asks for every row's key first, one `IN (...)` query fetches them
    (php/prefetch.php); or no diff, with where the per-row query is sent and why."""
    site, why = sent_by(finding, app_dir, called)
    if site is None:
        relations = getattr(called, "lazy", {}).get(finding.details.get("fingerprint") or "") or []
        if relations:
            return eager_load(finding, relations, patchable, app_dir, called, tree)
        finding.details["no_patch"] = f"the function sending the per-row query was not found: {why}"
        return []
    name_sender(finding, site)
    where = f"the per-row query is sent by {site.function} ({site.file}:{site.line})"
    made, why = _prefetch(finding, site, patchable, app_dir, called, tree)
    if not made:
        finding.details["no_patch"] = (f"{where}; no prefetch was generated ({why}): fetch the loop's rows with one "
                                       f"`IN (...)` query before it starts")
    return made


def _prefetch(finding: Finding, site: Site, patchable, app_dir: Path, called, tree) -> tuple[list[Remediation], str]:
    keys = finding.details.get("key_columns") or []
    if len(keys) != 1:
        return [], "the per-row query is keyed on more than one column"
    callers = {edge.partition("==>")[0]: n for edge, n in called.items()
               if "==>" in edge and edge.partition("==>")[2] == site.function}
    if not callers:
        return [], "the capture's call graph shows no caller of it"
    loop_fn = max(callers, key=callers.get)
    loop, why = defined(loop_fn, app_dir, called)
    if loop is None:
        return [], why
    for f in (site.file, loop.file):
        if not is_patchable(f, patchable):
            return [], f"{f} is not one of the target's patchable files"
    texts, why = prefetched(app_dir, site, loop, keys[0])
    if texts is None:
        return [], why
    diffs, checks = [], []
    for rel, text in texts.items():         # one remediation: both files or neither
        diff = unified_diff(rel, (app_dir / rel).read_text(errors="replace"), text)
        diffs.append(diff)
        checks.append(check_applies(app_dir, rel, diff, tree) + " (" + php_lint(text) + ")")
    files = " and ".join(texts)
    return [Remediation(kind="diff", content="".join(diffs), file=site.file, origin="generated",
                        checked="; ".join(checks),
                        description=(f"A prefetch for the N+1 loop in {loop.function} ({files}): the loop asks "
                                     f"{site.function} for every row's `{keys[0]}` first, which fetches them in one "
                                     f"`IN (...)` query through the same database object and answers the per-row "
                                     f"calls from it; checked at run time against the per-row query for the first "
                                     f"key, and skipped when they differ ({site.how}; the loop by the capture's "
                                     f"call graph)"))], ""


EAGER_LOAD = Path(__file__).with_name("php") / "eager_load.php"


def eager_load(finding: Finding, relations: list[str], patchable, app_dir: Path, called, tree) -> list[Remediation]:
    """n-plus-one sent by an ORM's lazy loader (no app code holds the per-row query): the model
    loads the relation by default (php/eager_load.php: Eloquent's `$with`); or no diff, with
    where the relation is defined and the batched form."""
    parent = (finding.details.get("parent") or {}).get("example")
    batched = finding.details.get("batched_example")
    if len(relations) != 1:
        finding.details["no_patch"] = ("the per-row query is sent by an ORM's lazy loading of one of "
                                       + ", ".join(relations[:5]) + ", each read as often as it is sent: load the "
                                       "one the loop reads with the query that returns its rows")
        return []
    relation = relations[0]
    site, why = defined(relation, app_dir, called)
    model, _, name = relation.rpartition("::")
    short = model.rpartition("\\")[2]
    narrow = (f"the narrower change is `->with('{name}')` on the query that returns the loop's rows"
              + (f" (`{parent}`)" if parent else ""))
    if site is None:
        finding.details["no_patch"] = f"the per-row query is {relation}'s lazy loading, but {why}; {narrow}"
        return []
    finding.details["lazy_relation"] = relation
    finding.details["located"] = f"{site.file}:{site.line}"
    where = f"the per-row query is sent by lazily loading {relation} ({site.file}:{site.line})"
    if not is_patchable(site.file, patchable):
        finding.details["no_patch"] = f"{where}; {site.file} is not one of the target's patchable files; {narrow}"
        return []
    text, answer = rewritten(app_dir / site.file, site.function, site.line, EAGER_LOAD, {})
    if text is None:
        finding.details["no_patch"] = f"{where}; no eager loading was generated ({answer}); {narrow}"
        return []
    clash = _with_clash(app_dir, answer, short)
    if clash:
        finding.details["no_patch"] = f"{where}; no eager loading was generated ({clash}); {narrow}"
        return []
    diff = unified_diff(site.file, (app_dir / site.file).read_text(errors="replace"), text)
    checked = check_applies(app_dir, site.file, diff, tree) + "; " + php_lint(text)
    how = "adds it to the `$with` it declares" if answer.get("added_to_existing") else "declares `$with`"
    return [Remediation(kind="diff", content=diff, checked=checked, file=site.file, origin="generated",
                        description=(f"Eager loading by default: {short} ({site.file}) {how} = ['{name}'], so a "
                                     f"query of {short} rows loads their `{name}` for all of them in one query"
                                     + (f" (`{batched}`)" if batched else "") + f" instead of one query per row "
                                     f"when the loop reads `->{name}`. What changes: every query of {short} "
                                     f"loads `{name}` too, read or not (one more query where it was not); "
                                     f"{narrow}. Found by the capture's call graph: the ORM's lazy loader called "
                                     f"{relation} as many times as the per-row query was sent, in every profiled "
                                     f"request"))]


def _with_clash(app_dir: Path, answer: dict, model: str) -> str:
    """Why a `$with` written into `model` would be wrong, from what its file alone cannot tell
    (php/eager_load.php's answer: the parent class, traits and related model, resolved against
    the file's imports), or "": a parent class of the app's own may declare the `$with` it
    would replace; a trait of the app's own that declares one makes the class fatal; a related
    model that loads relations by default may load this one back, without end."""
    parent = answer.get("extends") or ""
    if parent and not answer.get("added_to_existing") and _declared(app_dir, "class", parent) is not None:
        return f"{model} extends {parent}, a class of the app's own, whose `$with` a declaration here would replace"
    for trait in answer.get("traits") or []:
        text = _declared(app_dir, "trait", trait)
        if text is not None and re.search(r"\$with\b", text):
            return f"{model} uses the trait {trait}, which declares `$with` too"
    related = answer.get("related") or ""
    text = _declared(app_dir, "class", related) if related else None
    if text is not None and re.search(r"\$with\s*=\s*(?:\[\s*[^\]\s]|array\s*\(\s*[^)\s])", text):
        return (f"the related model {related} loads relations by default itself, which may load {model} back, "
                f"without end")
    return ""


def _declared(app_dir: Path, kind: str, name: str) -> str | None:
    """The text of the app's file (outside vendor/) that declares the class or trait `name`, or
    None: by its last segment, in the namespace it names (Illuminate\\Foundation\\Auth\\User is
    not the app's App\\Models\\User)."""
    namespace, _, short = name.lstrip("\\").rpartition("\\")
    if not short:
        return None
    in_namespace = re.compile(rf"^\s*namespace\s+{re.escape(namespace)}\s*[;{{]", re.M | re.I) if namespace else None
    pattern = re.compile(rf"^\s*(?:#\[.*\]\s*)?(?:(?:abstract|final|readonly)\s+)*{kind}\s+{re.escape(short)}\b",
                         re.M | re.I)
    for path in app_dir.rglob("*.php"):
        if "vendor" in path.relative_to(app_dir).parts:
            continue
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        if pattern.search(text) and (in_namespace is None or in_namespace.search(text)):
            return text
    return None


def prefetched(app_dir: Path, sender: Site, loop: Site, key: str) -> tuple[dict[str, str] | None, str]:
    """{file: new text} for the sender's file and the loop's (one when they are the same)."""
    def name(function: str) -> str:
        return function.rpartition("::")[2].rpartition("\\")[2]

    with tempfile.TemporaryDirectory(prefix="lockdown-prefetch-") as tmp:
        request = {"sender": {"file": str(app_dir / sender.file), "line": sender.line, "name": name(sender.function)},
                   "caller": {"file": str(app_dir / loop.file), "line": loop.line, "name": name(loop.function)},
                   "key": key, "batch": BATCH_METHODS,
                   "out_sender": f"{tmp}/sender.php", "out_caller": f"{tmp}/caller.php"}
        run = subprocess.run([tool("php"), "-n", "-d", "extension=tokenizer", str(PREFETCH)], input=json.dumps(request),
                             capture_output=True, text=True, timeout=60)
        try:
            answer = json.loads(run.stdout)
        except ValueError:
            first = next((ln for ln in (run.stderr + run.stdout).splitlines() if ln.strip()), "no output")
            return None, f"the prefetch writer failed (php exit {run.returncode}): {first[:200]}"
        if not answer.get("written"):
            return None, str(answer.get("refused"))
        if sender.file == loop.file:
            return {sender.file: Path(f"{tmp}/sender.php").read_text()}, ""
        return {sender.file: Path(f"{tmp}/sender.php").read_text(),
                loop.file: Path(f"{tmp}/caller.php").read_text()}, ""


def class_map(finding: Finding, patchable, app_dir: Path, called, tree) -> list[Remediation]:
    """autoload: a class map of the app's files, learned for the rest from its loader, in the
    loader's place (class_map.py)."""
    loader = finding.details.get("function")
    if not loader:
        return []
    rel, text, why, held = class_maps.with_class_map(app_dir, loader, TTL_S)
    if rel is None:
        finding.details["no_patch"] = f"no class map generated: {why}"
        return []
    if not is_patchable(rel, patchable):
        finding.details["no_patch"] = (f"{rel} (where {loader} is registered) is not one of the target's patchable "
                                       f"files; declare it in target.toml's `patchable` to get a generated class map")
        return []
    diff = unified_diff(rel, (app_dir / rel).read_text(errors="replace"), text)
    several = held["several_files"]
    finding.details["class_map"] = {"mapped": held["mapped"], "declared_in_several_files": several}
    left = (f"; {len(several)} classes declared in several files ({', '.join(several[:5])}"
            f"{' ...' if len(several) > 5 else ''}) are not in the static map: the file {loader} loads for each is "
            f"learned" if several else "")
    return [Remediation(kind="diff", content=diff, file=rel, origin="generated",
                        checked=check_applies(app_dir, rel, diff, tree) + "; " + php_lint(text),
                        description=(f"A class map in place of {loader}, right after the app registers it ({rel}): "
                                     f"the {held['mapped']} classes declared in exactly one of the app's files load "
                                     f"with one lookup, no walk{left}. Any other class is asked of {loader} once and "
                                     f"what it did is kept in a generated PHP array file (.lockdown-cache/class-map "
                                     f"beside {Path(rel).name}, which OPcache keeps in memory): the file it loaded, "
                                     f"or that it has none (an optional class asked for with class_exists); a class "
                                     f"it loads in any other way is left to it on every request. What changes: a "
                                     f"class missing from the map, or whose file is gone, is found by {loader} as "
                                     f"before; invalidation: the learned part is learned afresh every {TTL_S} s, so "
                                     f"a class file added or moved shows within {TTL_S} s; regenerate the static "
                                     f"map (or use the app's own, e.g. composer dump-autoload -o) when the tree "
                                     f"changes"))]


SETUP_ONCE = Path(__file__).with_name("php") / "setup_once.php"


def setup_once(finding: Finding, patchable, app_dir: Path, called, tree) -> list[Remediation]:
    """per-call-setup: the statement of the function that runs the setup's loop (a call of a
    loop builtin the finding names) runs on the first call of a request only, its results kept
    in a static (php/setup_once.php says when that is refused); else where, as located_only."""
    fn = finding.details.get("function")
    loops = [x.get("builtin") for x in finding.details.get("loops") or [] if isinstance(x, dict)]
    site = defined(fn, app_dir, called)[0] if fn and not fn.startswith("(") and loops else None
    if site is None:
        return located_only(finding, patchable, app_dir, called, tree)
    if not is_patchable(site.file, patchable):
        finding.details["no_patch"] = (f"{site.file} is not one of the target's patchable files; declare it (or a "
                                       f"pattern holding it) in target.toml's `patchable` to get its setup done "
                                       f"once per request")
        return []
    text, answer = rewritten(app_dir / site.file, site.function, site.line, SETUP_ONCE,
                                     {"loop": [b for b in loops if b]})
    if text is None:
        finding.details["located"] = f"{site.file}:{site.line}"
        if getattr(answer, "answer", {}).get("fed_by_arguments"):
            finding.details["refuted"] = str(answer)       # pipeline: dismissed, not reported
            finding.details["no_patch"] = f"no setup to keep: {answer}. Where: {site.how}"
            return []
        finding.details["no_patch"] = (f"none generated, because {answer}; keep the setup's result in a static "
                                       f"variable, computed on the first call. Where: {site.how}")
        return []
    results, writes = ", ".join(answer.get("results", [])), ", ".join(answer.get("writes", []))
    what = (f"the setup of {site.function} (the statement on line {answer.get('statement_line')} that calls "
            f"{answer.get('loop')}) run on the first call of each request only, its results ({results}) kept in a "
            f"static for the later calls: right while what the setup reads does not change during a request"
            + (f"; what it writes into {writes} (beside its results) now happens once per request" if writes else ""))
    old = (app_dir / site.file).read_text(errors="replace")
    diff = unified_diff(site.file, old, text)
    checked = check_applies(app_dir, site.file, diff, tree) + "; " + php_lint(text)
    return [Remediation(kind="diff", content=diff, checked=checked, file=site.file, origin="generated",
                        description=what[0].upper() + what[1:] + f" ({site.how})")]


def located_only(finding: Finding, patchable, app_dir: Path, called, tree) -> list[Remediation]:
    """No diff by nature (module docstring): the finding's `no_patch` gains where to change.
    Locating is best effort: when it fails, the detector's own `no_patch` stands."""
    try:
        if finding.details.get("fingerprint"):
            site = sent_by(finding, app_dir, called)[0]
            noun = "the statement is sent by the function found by its text: "
        else:
            fn = finding.details.get("function")
            site = defined(fn, app_dir, called)[0] if fn and not fn.startswith("(") else None
            noun = ""
    except (LockdownError, OSError, ValueError):
        return []
    if site is None:
        return []
    finding.details["located"] = f"{site.file}:{site.line}"
    if noun:
        name_sender(finding, site)
    told = finding.details.get("no_patch") or "no generic change is safe here"
    finding.details["no_patch"] = f"{told.rstrip('.')}. Where: {noun}{site.how}"
    return []


_MAKERS = {"repeated-query": repeated_query, "db-static-cache": static_cache, "file-static-cache": file_cache,
           "fs-scan": scan_cache, "write-on-read": deferred_write, "n-plus-one": prefetch,
           "failed-lookups": lookup_cache, "autoload": class_map, "session-probe": session_probe,
           "disk-spill": located_only, "regex-compile": located_only, "per-call-setup": setup_once}
