"""The PHP function that sends a statement the capture saw, found in the app's own source: the
string literals of its PHP files (php/sql_literals.php, PHP's tokenizer) whose SQL has the
statement's shape, each with the named function around it; among several, the ones the
capture's xhprof call graph shows called. This is what a generated remediation patches, so it
holds whatever the app's database layer looks like (PDO, mysqli, a wrapper of its own), as long
as the statement's text is written in the code."""
from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..analyzers.query_digest import fingerprint
from ..harness.toolchain import tool

SCRIPT = Path(__file__).with_name("php") / "sql_literals.php"
MAX_FILES = 4000              # PHP files read to find the literal (a big app has ~10,000)
MAX_BYTES = 2_000_000         # larger PHP files are generated data, not a database layer
_TABLES = re.compile(r"\b(?:from|into|update|join|replace)\s+`?([A-Za-z_][\w$]*)`?(?:\.`?([A-Za-z_][\w$]*)`?)?", re.I)
_PLACEHOLDER = re.compile(r"(?<![\w:]):[A-Za-z_]\w*|%[sdfi]|\$\d+")


@dataclass
class Sender:
    """A function whose body holds the statement's text."""
    function: str       # Namespace\\Class::method or Namespace\\function
    file: str           # relative to the app tree
    line: int           # of its `function` keyword
    method: bool
    static: bool
    literal_line: int   # of the statement's text
    how: str            # how it was matched, in words, for the remediation's description


def tables_of(fp: str) -> list[str]:
    """The tables a statement shape names (the last part of db.table)."""
    return list(dict.fromkeys((m.group(2) or m.group(1)).lower() for m in _TABLES.finditer(fp)))


def shape_of(text: str) -> str:
    """A literal's SQL in fingerprint form, with named (:id), printf (%s) and numbered ($1)
    placeholders read as `?`."""
    return fingerprint(_PLACEHOLDER.sub("?", text))


def table_words(tables: list[str]) -> list[str]:
    """What the code holds of each table's name: the name, and without a prefix such as `wp_`
    or `mw_` (`{$wpdb->prefix}options`), the part after the first underscore."""
    out = []
    for t in tables:
        out.append(t)
        head, sep, tail = t.partition("_")
        if sep and len(tail) >= 4:
            out.append(tail)
    return list(dict.fromkeys(out))


def candidate_files(app_dir: Path, words: list[str]) -> list[Path]:
    """PHP files of the app tree whose text holds one of the words (case-insensitively)."""
    found = []
    needles = [w.lower().encode() for w in words]
    for path in sorted(app_dir.rglob("*.php")):
        try:
            if not path.is_file() or path.stat().st_size > MAX_BYTES:
                continue
            data = path.read_bytes().lower()
        except OSError:
            continue
        if any(n in data for n in needles):
            found.append(path)
            if len(found) >= MAX_FILES:
                break
    return found


def literals(files: list[Path], words: list[str]) -> list[dict]:
    """sql_literals.php's records for `files` (those with one of `words`)."""
    if not files:
        return []
    request = {"files": [str(f) for f in files], "words": words}
    try:
        run = subprocess.run([tool("php"), "-n", "-d", "extension=tokenizer", "-d", "memory_limit=512M",
                              str(SCRIPT)], input=json.dumps(request), capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return []
    out = []
    for line in run.stdout.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and "text" in rec:
            out.append(rec)
    return out


def matches(fp: str, text: str) -> str | None:
    """"exact" when the literal has the statement's shape, "start" when the statement begins
    with the literal's shape (its text continues in code: `... IN (` + a list), else None."""
    shape = shape_of(text)
    if shape == fp:
        return "exact"
    # a `?` glued to a name is an interpolated part of it ("{$prefix}options", "$table"): any name
    pattern = re.escape(shape).replace(r"\?", r"(?:\?|[\w$.`]*)")
    if "?" in shape and re.fullmatch(pattern, fp):
        return "exact"
    squeezed = re.sub(r"\s+", "", shape)
    if len(squeezed) >= 16 and re.sub(r"\s+", "", fp).startswith(squeezed) and tables_of(shape):
        return "start"
    return None


def locate(fp: str, app_dir: Path, called: dict[str, float] | None = None) -> tuple[Sender | None, str]:
    """(the sender of statements of shape `fp` in `app_dir`, "") or (None, why none was
    chosen). `called`: function -> calls per instrumented request, from the capture."""
    tables = tables_of(fp)
    variables = re.findall(r"@@(?:global\.|session\.|local\.)?(\w+)", fp)   # SELECT @@GLOBAL.read_only
    if not tables and not variables:
        return None, "the statement names no table or variable to look for in the code"
    words = table_words(tables) or list(dict.fromkeys(variables))
    recs = literals(candidate_files(app_dir, words), words)
    found: dict[str, tuple[str, dict]] = {}
    for rec in recs:
        how = matches(fp, rec["text"])
        if how is None or not rec.get("function") or rec.get("closure"):
            continue
        prior = found.get(rec["function"])
        if prior is None or (prior[0] == "start" and how == "exact"):
            found[rec["function"]] = (how, rec)
    if not found:
        return None, f"no PHP function of the app tree holds the text of `{fp}`"
    ranked = sorted(found.items(), key=lambda kv: (kv[1][0] != "exact", not (called or {}).get(kv[0]), kv[0]))
    best = [kv for kv in ranked if (kv[1][0], bool((called or {}).get(kv[0]))) ==
            (ranked[0][1][0], bool((called or {}).get(ranked[0][0])))]
    if len(best) > 1:
        return None, "several functions hold its text: " + ", ".join(k for k, _ in best[:5])
    function, (how, rec) = best[0]
    rel = str(Path(rec["file"]).relative_to(app_dir))
    seen = (called or {}).get(function)
    why = (f"its text ({'the whole statement' if how == 'exact' else 'the start of it'}) is in "
           f"{rel}:{rec['line']}, inside {function}"
           + (f", which the capture's xhprof shows called {seen:g} times per request" if seen else ""))
    return Sender(function, rel, int(rec["function_line"]), bool(rec["method"]), bool(rec["static"]),
                  int(rec["line"]), why), ""
