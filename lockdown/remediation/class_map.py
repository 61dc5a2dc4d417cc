"""The generated fix for an autoload finding: a class map. Every class, interface, trait and
enum the app's PHP files declare (php/class_map.php, PHP's tokenizer) is mapped to its file;
a loader that looks the class up in that map is registered in front of the app's own
(`spl_autoload_register(..., true, true)`, right after the app registers its loader), so a
class loads with one lookup instead of the include-path walk. A name declared in several files
is left out (the app's loader picks among them by its own rules), and so is a file that is
gone: the app's loader still handles whatever the map does not."""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from ..harness.toolchain import tool

SCRIPT = Path(__file__).with_name("php") / "class_map.php"
MAX_CLASSES = 20_000          # an inline map larger than this belongs in the app's build step
MAX_BYTES = 2_000_000


def declarations(app_dir: Path) -> dict[str, list[str]]:
    """Lower-cased class name -> the app-relative files declaring it."""
    files = [p for p in sorted(app_dir.rglob("*.php")) if p.is_file() and p.stat().st_size <= MAX_BYTES]
    if not files:
        return {}
    run = subprocess.run([tool("php"), "-n", "-d", "extension=tokenizer", "-d", "memory_limit=1G", str(SCRIPT)],
                         input=json.dumps({"files": [str(f) for f in files]}), capture_output=True, text=True,
                         timeout=600)
    out: dict[str, list[str]] = {}
    for line in run.stdout.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and "name" in rec:
            rel = str(Path(rec["file"]).relative_to(app_dir))
            out.setdefault(rec["name"].lower(), [])
            if rel not in out[rec["name"].lower()]:
                out[rec["name"].lower()].append(rel)
    return out


def registration(app_dir: Path, loader: str) -> tuple[str, int] | None:
    """(file, 0-based line) of the statement registering `loader` (an xhprof name: `f`,
    `Ns\\f`, `Class::method`) with spl_autoload_register, when exactly one holds its name."""
    short = loader.rpartition("::")[2].rpartition("\\")[2]
    pattern = re.compile(r"spl_autoload_register\s*\((?:[^;]*?)\b" + re.escape(short) + r"\b", re.I)
    found = []
    for path in sorted(app_dir.rglob("*.php")):
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        if "spl_autoload_register" not in text:
            continue
        for i, line in enumerate(text.splitlines()):
            if pattern.search(line) and line.rstrip().endswith(";"):
                found.append((str(path.relative_to(app_dir)), i))
    return found[0] if len(found) == 1 else None


def loader_lines(mapping: dict[str, str], patched: str) -> list[str]:
    """The PHP lines registering the map's loader, paths relative to the patched file's dir."""
    base = os.path.dirname(patched)
    entries = []
    for name, rel in sorted(mapping.items()):
        path = "/" + os.path.relpath(rel, base or ".")
        entries.append(f"        {php_string(name)} => {php_string(path)},")
    return ["// lockdown: a class map generated from the app's files (every class declared in exactly one",
            "// file), consulted before the app's own loader: one lookup instead of a walk. A class",
            "// missing from it, or whose file is gone, is left to the app's loader.",
            "spl_autoload_register(function ($class) {",
            "    static $map = array(", *entries, "    );",
            "    $key = strtolower(ltrim($class, '\\\\'));",
            "    if (isset($map[$key]) && is_file(__DIR__ . $map[$key])) {",
            "        require __DIR__ . $map[$key];",
            "    }",
            "}, true, true);"]


def php_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def with_class_map(app_dir: Path, loader: str) -> tuple[str | None, str, str]:
    """(patched file, its new text, "") or (None, "", why no class map can be written)."""
    where = registration(app_dir, loader)
    if where is None:
        return None, "", f"no single `spl_autoload_register(...{loader}...);` line in the app's files"
    rel, line = where
    declared = declarations(app_dir)
    mapping = {name: files[0] for name, files in declared.items() if len(files) == 1}
    if not mapping:
        return None, "", "the app's files declare no class"
    if len(mapping) > MAX_CLASSES:
        return None, "", f"{len(mapping)} classes: too many for an inline map; generate it in the app's build step"
    text = (app_dir / rel).read_text(errors="replace")
    lines = text.splitlines(keepends=True)
    indent = re.match(r"[ \t]*", lines[line]).group(0)
    block = "".join(indent + ln + "\n" for ln in loader_lines(mapping, rel))
    return rel, "".join(lines[:line + 1]) + block + "".join(lines[line + 1:]), ""
