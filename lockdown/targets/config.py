"""target.toml: what a target directory declares, read into a `Target` and checked.

A bad file gives one `LockdownError` line naming the file and the offending key.
"""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import LockdownError


@dataclass(frozen=True)
class Url:
    path: str
    weight: int = 1


@dataclass(frozen=True)
class Target:
    name: str
    directory: Path
    description: str = ""
    docroot: str = "."
    front_controller: str = "index.php"
    php_ini: dict = field(default_factory=dict)
    patchable: tuple = ()
    app_source: Path | None = None        # copied into the app tree (symlinks dereferenced)
    app_files: Path | None = None         # or a directory of the target itself
    app_exclude: tuple = ()
    database: str | None = None           # database name, None when the app needs none
    schema: Path | None = None
    seed: Path | None = None
    install: tuple = ()
    install_timeout: float = 900.0
    configure: tuple = ()
    urls: tuple = ()
    sanity_url: str = "/"
    sanity_expect: str = ""
    volatile: tuple = ()                  # regexes of response parts that change by themselves

    @property
    def toml_path(self) -> Path:
        return self.directory / "target.toml"

    def weighted_paths(self) -> list[str]:
        """The URL list expanded by weight, interleaved so that any prefix keeps the mix: smooth
        weighted round-robin (nginx's upstream balancing), where each path is within one
        request of its share at every point. A run that ends mid-list, as a timed run does,
        has then served the same mix as a whole list."""
        total = sum(u.weight for u in self.urls)
        credit = {u.path: 0 for u in self.urls}
        order: list[str] = []
        for _ in range(total):
            for u in self.urls:
                credit[u.path] += u.weight
            pick = max(self.urls, key=lambda u: credit[u.path]).path    # first of equals
            credit[pick] -= total
            order.append(pick)
        return order


def _fail(path: Path, problem: str) -> LockdownError:
    return LockdownError(f"bad target file {path}: {problem}")


def _expect(path, table, key, types, required=False, default=None):
    if key not in table:
        if required:
            raise _fail(path, f"missing required key `{key}`")
        return default
    value = table[key]
    if not isinstance(value, types):
        names = " or ".join(t.__name__ for t in (types if isinstance(types, tuple) else (types,)))
        raise _fail(path, f"`{key}` must be a {names}, not {type(value).__name__}")
    return value


def _command(path, table, section) -> tuple:
    if table is None:
        return ()
    cmd = _expect(path, table, "command", (list, str), required=True)
    if isinstance(cmd, str):
        cmd = ["sh", "-c", cmd]
    if not cmd or not all(isinstance(c, str) for c in cmd):
        raise _fail(path, f"[{section}] command must be a non-empty list of strings")
    return tuple(cmd)


def _url_path(path, value, where) -> str:
    if not isinstance(value, str) or not value.startswith("/"):
        raise _fail(path, f"{where} must be a string starting with '/', got {value!r}")
    return value


def load_target(directory: Path) -> Target:
    """Read and check `directory/target.toml`."""
    directory = directory.resolve()
    path = directory / "target.toml"
    if not path.is_file():
        raise LockdownError(f"no target at {directory}: target.toml is missing "
                            f"(see `lockdown targets` for the built-in ones)")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise _fail(path, f"not valid TOML ({e})")
    except (OSError, UnicodeDecodeError) as e:
        raise _fail(path, f"cannot be read ({e})")

    known = _SCALAR_KEYS | set(_SECTION_KEYS)
    unknown = sorted(set(data) - known)
    if unknown:
        raise _fail(path, f"unknown key `{unknown[0]}` (known: {', '.join(sorted(known))})")

    for section, allowed in _SECTION_KEYS.items():
        table = data.get(section)
        tables = table if isinstance(table, list) else [table]
        for i, t in enumerate(tables):
            if isinstance(t, dict):
                extra = sorted(set(t) - allowed)
                if extra:
                    where = f"{section}[{i}]" if isinstance(table, list) else f"[{section}]"
                    raise _fail(path, f"unknown key `{extra[0]}` in {where} "
                                      f"(known: {', '.join(sorted(allowed))})")

    app = _expect(path, data, "app", dict, default={})
    source = _expect(path, app, "source", str)
    files = _expect(path, app, "files", str)
    if source and files:
        raise _fail(path, "[app] takes `source` or `files`, not both")
    if not source and not files:
        raise _fail(path, "[app] needs `source` (a directory to copy) or `files` (in the target)")
    if files and not (directory / files).is_dir():
        raise _fail(path, f"[app] files directory {files!r} does not exist in the target")

    db = _expect(path, data, "database", dict)
    db_name = schema = seed = None
    if db is not None:
        db_name = _expect(path, db, "name", str, required=True)
        if not db_name.replace("_", "").isalnum():
            raise _fail(path, f"[database] name {db_name!r} may only hold letters, digits and _")
        for key in ("schema", "seed"):
            rel = _expect(path, db, key, str)
            if rel and not (directory / rel).is_file():
                raise _fail(path, f"[database] {key} file {rel!r} does not exist in the target")
        schema = directory / db["schema"] if db.get("schema") else None
        seed = directory / db["seed"] if db.get("seed") else None

    urls_raw = _expect(path, data, "urls", list, required=True)
    if not urls_raw:
        raise _fail(path, "`urls` must list at least one URL")
    urls = []
    for i, u in enumerate(urls_raw):
        if not isinstance(u, dict):
            raise _fail(path, f"urls[{i}] must be a table with `path` and `weight`")
        weight = u.get("weight", 1)
        if not isinstance(weight, int) or isinstance(weight, bool) or weight < 1:
            raise _fail(path, f"urls[{i}].weight must be a positive integer, got {weight!r}")
        urls.append(Url(_url_path(path, u.get("path"), f"urls[{i}].path"), weight))

    sanity = _expect(path, data, "sanity", dict, required=True)
    expect = _expect(path, sanity, "expect", str, required=True)
    if not expect:
        raise _fail(path, "[sanity] expect must not be empty")

    php_ini = _expect(path, data, "php_ini", dict, default={})
    for k, v in php_ini.items():
        if not isinstance(v, (str, int, float, bool)):
            raise _fail(path, f"php_ini.{k} must be a string, number or boolean")

    verify = _expect(path, data, "verify", dict, default={})
    volatile = _expect(path, verify, "volatile", list, default=[])
    for i, rx in enumerate(volatile):
        if not isinstance(rx, str):
            raise _fail(path, f"[verify] volatile[{i}] must be a string (a regular expression)")
        try:
            re.compile(rx)
        except re.error as e:
            raise _fail(path, f"[verify] volatile[{i}] is not a regular expression: {e}")

    install = _expect(path, data, "install", dict)
    return Target(
        name=_expect(path, data, "name", str, default=directory.name),
        directory=directory,
        description=_expect(path, data, "description", str, default=""),
        docroot=_expect(path, data, "docroot", str, default="."),
        front_controller=_expect(path, data, "front_controller", str, default="index.php"),
        php_ini={k: _ini_value(v) for k, v in php_ini.items()},
        patchable=tuple(_expect(path, data, "patchable", list, default=[])),
        app_source=Path(source) if source else None,
        app_files=directory / files if files else None,
        app_exclude=tuple(_expect(path, app, "exclude", list, default=[])),
        database=db_name, schema=schema, seed=seed,
        install=_command(path, install, "install"),
        install_timeout=float(_expect(path, install or {}, "timeout", (int, float), default=900)),
        configure=_command(path, _expect(path, data, "configure", dict), "configure"),
        urls=tuple(urls),
        sanity_url=_url_path(path, sanity.get("url", "/"), "[sanity] url"),
        sanity_expect=expect,
        volatile=tuple(volatile),
    )


_SCALAR_KEYS = {"name", "description", "docroot", "front_controller", "php_ini", "patchable"}
_SECTION_KEYS = {
    "app": {"source", "files", "exclude"},
    "database": {"name", "schema", "seed"},
    "install": {"command", "timeout"},
    "configure": {"command"},
    "urls": {"path", "weight"},
    "sanity": {"url", "expect"},
    "verify": {"volatile"},
}


def _ini_value(v) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    return str(v)
