"""The generated fix for an autoload finding: a class map that takes the app's loader's place.

Every class, interface, trait and enum the app's PHP files declare (php/class_map.php, PHP's
tokenizer) is mapped to its file when exactly one file declares it. The statement registering
the app's loader is found with the tokenizer too (php/autoload_register.php): a function
registered by name, a method (`[$this, 'loadClass']`), or a closure (`spl_autoload_register(
function ($class) use (...) {...})`, which xhprof names `{closure}`, `Ns\\{closure}` or
`Cls::Ns\\{closure}`: the registration in that namespace, or in that class's body, whose
argument is a closure). Right after it, the patch takes the loader PHP just registered (the one
`spl_autoload_functions()` did not list before the statement) off the chain and registers in its
place a wrapper that:

- loads a class of the static map with one `require`;
- otherwise asks the app's loader, once, and keeps what it did (a learned map): the file the class
  came from (`ReflectionClass::getFileName()`, when the app's loader included it in that call) or,
  when the loader included nothing and the class still does not exist, that the app's loader has
  no file for it. A class declared in several files is thus mapped to the file the app's own
  loader picks, and an optional class asked for with `class_exists` is not searched for again.
  Anything else (the loader included files but not the class's, or a class from a file it
  included earlier) is not kept: that class stays the app's loader's on every request.
- the learned map is a generated PHP array file (`.lockdown-cache/class-map` beside the patched
  file, which OPcache keeps in memory), written after the response when it grew, and learned
  afresh every `ttl` seconds, so that a class file added or moved shows within `ttl` seconds.

A file of the static map that is gone is left to the app's loader as well."""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from ..harness.toolchain import tool

SCRIPT = Path(__file__).with_name("php") / "class_map.php"
REGISTER = Path(__file__).with_name("php") / "autoload_register.php"
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


def registrations(app_dir: Path) -> list[dict]:
    """Every `spl_autoload_register(` call in the app's files (php/autoload_register.php)."""
    files = [p for p in sorted(app_dir.rglob("*.php")) if p.is_file() and p.stat().st_size <= MAX_BYTES]
    if not files:
        return []
    run = subprocess.run([tool("php"), "-n", "-d", "extension=tokenizer", str(REGISTER)],
                         input=json.dumps({"files": [str(f) for f in files]}), capture_output=True, text=True,
                         timeout=600)
    out = []
    for line in run.stdout.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and "file" in rec:
            rec["file"] = str(Path(rec["file"]).relative_to(app_dir))
            out.append(rec)
    return out


def _closure_scope(loader: str) -> tuple[str, str] | None:
    """(class, namespace) of an xhprof closure name: `{closure}`, `Ns\\{closure}`,
    `Ns\\Cls::Ns\\{closure}`; None for a named function or method."""
    cls, _, fn = loader.rpartition("::")
    if not fn.endswith("{closure}"):
        return None
    return cls.lstrip("\\"), fn[:-len("{closure}")].rstrip("\\").lstrip("\\")


def matches(reg: dict, loader: str) -> bool:
    """Whether the registration `reg` registers `loader` (an xhprof name)."""
    scope = _closure_scope(loader)
    if scope is not None:
        cls, ns = scope
        if reg["kind"] != "closure":
            return False
        if cls:
            return reg["class"].lower() == cls.lower()
        return not reg["class"] and reg["namespace"].lower() == ns.lower()
    short = loader.rpartition("::")[2].rpartition("\\")[2].lower()
    return reg["kind"] != "closure" and any(n.rpartition("::")[2].rpartition("\\")[2].lower() == short
                                            for n in reg["names"])


def registration(app_dir: Path, loader: str) -> tuple[dict | None, str]:
    """(the registration of `loader`, "") or (None, why it cannot be told)."""
    regs = registrations(app_dir)
    found = [r for r in regs if matches(r, loader)]
    if len(found) != 1:
        seen = ", ".join(f"{r['file']}:{r['line']} ({r['kind']})" for r in regs[:6]) or "none"
        return None, (f"{len(found)} `spl_autoload_register(...)` statements in the app's files register {loader} "
                      f"(registrations seen: {seen}); a class map needs exactly one")
    if not found[0]["statement"]:
        return None, (f"the registration of {loader} ({found[0]['file']}:{found[0]['line']}) is part of a larger "
                      f"statement; a class map is inserted only after a statement of its own")
    return found[0], ""


# the wrapper's first part: the loader the statement just registered, or nothing when it cannot
# be told (loader_lines)
_TAKE_OVER = (
    "(static function (array $before) {",
    "    $added = array();",
    "    foreach (\\spl_autoload_functions() as $f) {",
    "        if (!\\in_array($f, $before, true)) {",
    "            $added[] = $f;",
    "        }",
    "    }",
    "    if (\\count($added) !== 1) {",
    "        return;",
    "    }",
    "    $app = $added[0];",
    "    try {",
    "        $call = $app instanceof \\Closure ? $app : \\Closure::fromCallable($app);",
    "    } catch (\\Throwable $e) {",
    "        return;",
    "    }",
)
# its last part: the learned map and the wrapper in the loader's place (TTL: its period, s)
_LEARN = (
    "    $dir = __DIR__;",
    "    $cache = __DIR__ . '/.lockdown-cache/class-map';",
    "    $period = \\intdiv(\\time(), TTL);",
    "    $learned = \\is_file($cache) ? (include $cache) : null;",
    "    if (!\\is_array($learned) || ($learned[\"\\0period\"] ?? null) !== $period) {",
    "        $learned = array(\"\\0period\" => $period);",
    "    }",
    "    $known = \\count($learned);",
    "    $wrapper = static function ($class) use ($call, $map, $dir, &$learned) {",
    "        $key = \\strtolower(\\ltrim($class, '\\\\'));",
    "        if (isset($map[$key]) && \\is_file($dir . $map[$key])) {",
    "            require $dir . $map[$key];",
    "            return;",
    "        }",
    "        if (\\array_key_exists($key, $learned)) {",
    "            if ($learned[$key] === false) {",
    "                return;",
    "            }",
    "            if (\\is_file($learned[$key])) {",
    "                require $learned[$key];",
    "                return;",
    "            }",
    "        }",
    "        $files = \\get_included_files();",
    "        $call($class);",
    "        $now = \\get_included_files();",
    "        if (\\class_exists($class, false) || \\interface_exists($class, false) || \\trait_exists($class, false)",
    "            || (\\function_exists('enum_exists') && \\enum_exists($class, false))) {",
    "            $file = (new \\ReflectionClass($class))->getFileName();",
    "            if (\\is_string($file) && !\\in_array($file, $files, true) && \\in_array($file, $now, true)) {",
    "                $learned[$key] = $file;",
    "            }",
    "        } elseif (\\count($now) === \\count($files)) {",
    "            $learned[$key] = false;",
    "        }",
    "    };",
    "    $first = \\spl_autoload_functions()[0] === $app;",
    "    \\spl_autoload_unregister($app);",
    "    \\spl_autoload_register($wrapper, true, $first);",
    "    \\register_shutdown_function(static function () use (&$learned, $known, $cache) {",
    "        if (\\count($learned) === $known) {",
    "            return;",
    "        }",
    "        @\\mkdir(\\dirname($cache), 0700);",
    "        $tmp = $cache . '.' . \\getmypid() . '.tmp';",
    "        if (@\\file_put_contents($tmp, '<?php return ' . \\var_export($learned, true) . \";\\n\") !== false) {",
    "            @\\rename($tmp, $cache);",
    "        }",
    "    });",
    "})($lockdown_autoloaders);",
    "unset($lockdown_autoloaders);",
)


def loader_lines(mapping: dict[str, str], patched: str, ttl: int) -> list[str]:
    """The PHP lines that put the map's loader in place of the one just registered (paths
    relative to the patched file's directory)."""
    base = os.path.dirname(patched)
    entries = []
    for name, rel in sorted(mapping.items()):
        path = "/" + os.path.relpath(rel, base or ".")
        entries.append(f"        {php_string(name)} => {php_string(path)},")
    return [
        "// lockdown: a class map in place of the loader registered just above. Classes declared in",
        "// exactly one of the app's files load with one lookup; any other class is asked of that",
        "// loader once, and the file it loaded (or that it has none) is kept in .lockdown-cache/",
        f"// (learned afresh every {ttl} s). What it cannot be sure of stays the loader's.",
        *_TAKE_OVER, "    $map = array(", *entries, "    );",
        *(line.replace("TTL", str(ttl)) for line in _LEARN),
    ]


def php_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def with_class_map(app_dir: Path, loader: str, ttl: int = 60) -> tuple[str | None, str, str, dict]:
    """(patched file, its new text, "", what the map holds) or (None, "", why no class map can be
    written, {}). What the map holds: {"mapped": classes in the static map, "several_files":
    the classes declared in several files (left to the app's loader, then learned)}."""
    reg, why = registration(app_dir, loader)
    if reg is None:
        return None, "", why, {}
    rel = reg["file"]
    declared = declarations(app_dir)
    mapping = {name: files[0] for name, files in declared.items() if len(files) == 1}
    several = sorted(name for name, files in declared.items() if len(files) > 1)
    if not mapping and not several:
        return None, "", "the app's files declare no class", {}
    if len(mapping) > MAX_CLASSES:
        return None, "", f"{len(mapping)} classes: too many for an inline map; generate it in the app's build step", {}
    text = (app_dir / rel).read_text(errors="replace")
    lines = text.splitlines(keepends=True)
    start, end = reg["line"] - 1, reg["end_line"] - 1
    indent = re.match(r"[ \t]*", lines[start]).group(0)
    before = indent + "$lockdown_autoloaders = \\spl_autoload_functions();\n"
    block = "".join(indent + ln + "\n" if ln else "\n" for ln in loader_lines(mapping, rel, ttl))
    new = "".join(lines[:start]) + before + "".join(lines[start:end + 1]) + block + "".join(lines[end + 1:])
    return rel, new, "", {"mapped": len(mapping), "several_files": several}
