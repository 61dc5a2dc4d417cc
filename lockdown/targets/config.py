"""target.toml: what a target directory declares, read into a `Target` and checked.

A bad file gives one `LockdownError` line naming the file and the offending key, before
anything starts. Every path the file names is confined: the target's own files (`[app] files`,
`[database] schema` and `seed`, the scripts its commands name by a relative path) resolve,
symlinks and `..` followed, inside the target directory (or inside a sibling target directory:
the built-in variants share their base's files by symlink), and the app-tree paths (`docroot`,
`front_controller`, `patchable`) inside the app tree. `[app] source` alone may name a directory
elsewhere: it is the application to copy. Values that end up in a server's configuration
(nginx.conf, php.ini, the load generator's URL list) are held to what those files can carry as
one token or one line, so that none can add a directive (docs/targets.md, "What is checked").
"""
from __future__ import annotations

import fnmatch
import math
import posixpath
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import LockdownError
from . import extends

# Bounds on the URL list: one cycle of it is expanded in memory and written into the load
# generator's script (a weight of 10^8 hung the command until --timeout).
MAX_WEIGHT = 1000
MAX_TOTAL_WEIGHT = 10_000
MAX_URLS = 1000
MAX_TIMEOUT_S = 86_400.0

# A target's name becomes part of directory names (prepared/NAME[-PLACE]-KEY, runs/DATE-CMD-NAME), lock
# files and, with --mysql, the database lockdown_NAME (64 characters at most in MariaDB).
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,54}")
_DB_NAME_RE = re.compile(r"[A-Za-z0-9_]{1,64}")
# docroot and front_controller are written into nginx.conf (root, index, try_files), where a
# `$` is a variable and `;`, `{`, `}`, quotes and white space end a token: only these, the
# characters a run directory's path may hold (paths.CONFIG_SAFE).
_APP_PATH_RE = re.compile(r"[A-Za-z0-9/._+@,%-]+")
_INI_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
# What a URL keeps as it is: RFC 3986's unreserved and reserved characters and '%' (an escape
# already made). Anything else (a space, a quote, a non-ASCII character) is percent-encoded,
# as the load generators' lists also do (harness/loadgen.py).
_URL_KEEP = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
                "-._~/?&=:;,+@!$'()*[]")
_INTERPRETERS = {"php", "sh", "bash", "dash", "python", "python3", "perl", "ruby", "node"}


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
    writable: tuple = ()                  # app-tree paths the app writes in place (own copies in a run)
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
    sources: tuple = ()                   # with `extends`: the directories merged, the variant first

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


_TOML_TYPES = {str: "a string", int: "an integer", float: "a number", bool: "a boolean",
               list: "an array", dict: "a table"}


def _toml_type(t: type) -> str:
    return _TOML_TYPES.get(t, t.__name__)


def _type_names(types) -> str:
    types = types if isinstance(types, tuple) else (types,)
    if set(types) == {int, float}:
        return "a number"
    return " or ".join(_toml_type(t) for t in types)


def _expect(path, table, key, types, required=False, default=None, where=None):
    where = where or f"`{key}`"
    if key not in table:
        if required:
            raise _fail(path, f"missing required key `{key}`")
        return default
    value = table[key]
    wanted = types if isinstance(types, tuple) else (types,)
    # TOML's true and false are Python ints too: a boolean is a number only where asked for
    if not isinstance(value, wanted) or (isinstance(value, bool) and bool not in wanted):
        raise _fail(path, f"{where} must be {_type_names(types)}, not {_toml_type(type(value))}")
    return value


def _control_char(text: str) -> str | None:
    """The first control character of `text` (a newline ends a line of any config file), if any."""
    return next((c for c in text if ord(c) < 32 or ord(c) == 127), None)


def _inside(p: Path, root: Path) -> bool:
    return p == root or root in p.parents


def _sibling_target(p: Path, directory: Path) -> bool:
    """Whether `p` lies inside another target directory beside `directory` (one holding a
    target.toml): how minicms-clean shares minicms's files, by symlink."""
    parent = directory.parent
    if parent == directory or not _inside(p, parent) or p == parent:
        return False
    top = parent / p.relative_to(parent).parts[0]
    return top != directory and (top / "target.toml").is_file()


def _confined(path: Path, key: str, value: str, root: Path, root_name: str, todo: str,
              directory: Path | None = None) -> Path:
    """`root / value`, refused unless it stays inside `root`: `value` relative, its `..` not
    climbing out, and, symlinks resolved, still inside `root` (or, with `directory`, inside a
    sibling target directory). `todo` says what to give instead."""
    bad = _control_char(value)
    if bad is not None:
        raise _fail(path, f"{key} {value!r} holds a control character ({bad!r}); {todo}")
    if not value:
        raise _fail(path, f"{key} is empty; {todo}")
    if value.startswith("/"):
        raise _fail(path, f"{key} {value!r} leads out of the {root_name} (an absolute path); {todo}")
    lexical = posixpath.normpath(value)
    if lexical == ".." or lexical.startswith("../"):
        raise _fail(path, f"{key} {value!r} leads out of the {root_name}; {todo}")
    root = root.resolve()
    try:
        real = (root / lexical).resolve()
    except (OSError, RuntimeError) as e:      # a symlink loop
        raise _fail(path, f"{key} {value!r} cannot be resolved ({e}); {todo}")
    if not (_inside(real, root) or (directory is not None and _sibling_target(real, directory))):
        raise _fail(path, f"{key} {value!r} leads out of the {root_name} (through a symlink, to "
                          f"{real}); {todo}")
    return root / lexical


def _app_path(path, key, value: str, root: Path, root_name: str, todo: str,
              sibling_of: Path | None) -> str:
    """A path of the app tree that nginx.conf names (docroot, front_controller), normalized: of a
    strict character set (no value can end nginx's token or add a directive), relative, and
    inside `root` (the app tree, or the docroot) in the source the tree is copied from, symlinks
    followed: the copy dereferences them, so a symlinked docroot would bring in what it points to."""
    bad = sorted({c for c in value if not _APP_PATH_RE.fullmatch(c)})
    if value and bad:
        shown = " ".join(repr(c) for c in bad[:5])
        raise _fail(path, f"{key} {value!r} holds {shown}: nginx.conf names it, so it may hold only "
                          f"ASCII letters, digits and / . _ + @ , % -; {todo}")
    _confined(path, key, value, root, root_name, todo, sibling_of)
    return posixpath.normpath(value)


def _command(path, table, section, directory: Path) -> tuple:
    if table is None:
        return ()
    cmd = _expect(path, table, "command", (list, str), required=True, where=f"[{section}] command")
    if isinstance(cmd, str):
        cmd = ["sh", "-c", cmd]
    if not cmd or not all(isinstance(c, str) for c in cmd) or not cmd[0]:
        raise _fail(path, f"[{section}] command must be a non-empty list of strings")
    bad = next((c for c in cmd if "\0" in c), None)
    if bad is not None:
        raise _fail(path, f"[{section}] command argument {bad!r} holds a NUL character")
    # the scripts a command names by a relative path stay in the target directory (it runs there)
    scripts = [cmd[0]] if "/" in cmd[0] else []
    if Path(cmd[0]).name in _INTERPRETERS and len(cmd) > 1 and not cmd[1].startswith("-"):
        scripts.append(cmd[1])
    for script in scripts:
        if not script.startswith("/"):
            _confined(path, f"[{section}] command's script", script, directory, "target directory",
                      "put the script in the target directory and name it relative to it", directory)
    return tuple(cmd)


def _url_path(path, value, where) -> str:
    """A URL path as sent: starts with '/', no control character, no fragment; a space, a
    non-ASCII character or another character a request line cannot carry is percent-encoded."""
    if not isinstance(value, str) or not value.startswith("/"):
        raise _fail(path, f"{where} must be a string starting with '/', got {value!r}")
    bad = _control_char(value)
    if bad is not None:
        raise _fail(path, f"{where} {value!r} holds a control character ({bad!r}); "
                          f"percent-encode it (e.g. %0A for a newline) or remove it")
    if "#" in value:
        raise _fail(path, f"{where} {value!r} holds '#': a fragment is never sent to the server; "
                          f"remove it (or write %23 for a '#' in the path)")
    out = []
    for i, c in enumerate(value):
        if c == "%" and not re.fullmatch(r"[0-9A-Fa-f]{2}", value[i + 1:i + 3]):
            out.append("%25")                          # a '%' that is not an escape
        elif c in _URL_KEEP or c == "%":
            out.append(c)
        else:
            out.append("".join(f"%{b:02X}" for b in c.encode("utf-8")))
    return "".join(out)


def _positive_number(path, table, key, where, default, limit):
    value = _expect(path, table, key, (int, float), default=default, where=where)
    if not (math.isfinite(value) and 0 < value <= limit):
        raise _fail(path, f"{where} must be a positive number of seconds, at most {limit:g}, got {value!r}")
    return float(value)


def load_target(directory: Path) -> Target:
    """Read and check `directory/target.toml`, section by section in the order its errors are
    reported (the first problem found is the one named)."""
    directory = directory.resolve()
    path = directory / "target.toml"
    data = _read_toml(path, directory)
    if "extends" in data:
        return _load_extended(directory, path, data)
    _check_keys(path, data)
    name = _name(path, data, directory)
    app_source, app_files, exclude = _app(path, data, directory)
    # a target's own files may be symlinks (to a sibling target's)
    docroot, front_controller = _app_tree_paths(path, data, app_files or app_source,
                                                directory if app_files else None)
    patchable = _patchable(path, data)
    writable = _writable(path, data)
    db_name, schema, seed = _database(path, data, directory, name)
    urls = _urls(path, data)
    sanity = _expect(path, data, "sanity", dict, required=True)
    expect = _expect(path, sanity, "expect", str, required=True, where="[sanity] expect")
    if not expect:
        raise _fail(path, "[sanity] expect must not be empty")
    php_ini = _php_ini(path, data)
    volatile = _volatile(path, data)
    install = _expect(path, data, "install", dict)
    return Target(
        name=name,
        directory=directory,
        description=_expect(path, data, "description", str, default=""),
        docroot=docroot,
        front_controller=front_controller,
        php_ini={k: _ini_value(v) for k, v in php_ini.items()},
        patchable=tuple(patchable),
        writable=tuple(writable),
        app_source=app_source,
        app_files=app_files,
        app_exclude=tuple(exclude),
        database=db_name, schema=schema, seed=seed,
        install=_command(path, install, "install", directory),
        install_timeout=_positive_number(path, install or {}, "timeout", "[install] timeout", 900,
                                         MAX_TIMEOUT_S),
        configure=_command(path, _expect(path, data, "configure", dict), "configure", directory),
        urls=tuple(urls),
        sanity_url=_url_path(path, sanity.get("url", "/"), "[sanity] url"),
        sanity_expect=expect,
        volatile=tuple(volatile),
    )


def _load_extended(directory: Path, path: Path, data: dict) -> Target:
    """A variant: its base's files and keys with its own over them, made as one directory
    (targets/extends.py) and loaded as any target; an error names the variant's file."""
    _check_keys(path, data)
    merged, sources = extends.materialize(directory, data, _read_toml)
    try:
        target = load_target(merged)
    except LockdownError as e:
        chain = " <- ".join(str(d) for d in reversed(sources))
        raise LockdownError(str(e).replace(str(merged / "target.toml"), f"{path} (merged: {chain})")) from None
    return replace(target, sources=tuple(sources))


def _read_toml(path: Path, directory: Path) -> dict:
    if not path.is_file():
        raise LockdownError(f"no target at {directory}: target.toml is missing "
                            f"(see `lockdown targets` for the built-in ones)")
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise _fail(path, f"not valid TOML ({e})")
    except (OSError, UnicodeDecodeError) as e:
        raise _fail(path, f"cannot be read ({e})")


def _check_keys(path: Path, data: dict) -> None:
    """No key the file format does not have, at the top or in a section."""
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


def _name(path: Path, data: dict, directory: Path) -> str:
    name = _expect(path, data, "name", str, default=directory.name)
    if not _NAME_RE.fullmatch(name):
        said = "is empty" if not name else f"{name!r} is not a safe name"
        default = "" if "name" in data else " (it defaults to the directory's name)"
        raise _fail(path, f"name {said}{default}: it names directories and a database, so it "
                          f"must be 1 to 55 ASCII letters, digits, '-' or '_', starting with a "
                          f"letter or digit; set `name` to one")
    return name


def _app(path: Path, data: dict, directory: Path) -> tuple[Path | None, Path | None, list]:
    """[app]: (the directory to copy, or None; the target's own directory of files, or None;
    the top-level entries left out)."""
    app = _expect(path, data, "app", dict, default={})
    source = _expect(path, app, "source", str, where="[app] source")
    files = _expect(path, app, "files", str, where="[app] files")
    if source and files:
        raise _fail(path, "[app] takes `source` or `files`, not both")
    if not source and not files:
        raise _fail(path, "[app] needs `source` (a directory to copy) or `files` (in the target)")
    app_source = app_files = None
    if files:
        app_files = _confined(path, "[app] files", files, directory, "target directory",
                              "give a directory of the target, relative to it", directory)
        if not app_files.is_dir():
            raise _fail(path, f"[app] files directory {files!r} does not exist in the target")
    else:
        app_source = _app_source(path, source, directory)
    exclude = _expect(path, app, "exclude", list, default=[], where="[app] exclude")
    for i, e in enumerate(exclude):
        if not isinstance(e, str):
            raise _fail(path, f"[app] exclude[{i}] must be a string (a top-level entry of the "
                              f"source), not {_toml_type(type(e))}")
        if not e or e in (".", "..") or "/" in e or _control_char(e) is not None:
            raise _fail(path, f"[app] exclude[{i}] {e!r} is not the name of a top-level entry of "
                              f"the source; give a file or directory name without '/'")
    return app_source, app_files, exclude


def _app_source(path: Path, source: str, directory: Path) -> Path:
    bad = _control_char(source)
    if bad is not None:
        raise _fail(path, f"[app] source {source!r} holds a control character ({bad!r})")
    app_source = Path(source).expanduser()
    if not app_source.is_absolute():
        app_source = directory / app_source
    if not app_source.is_dir():
        raise _fail(path, f"[app] source {source!r} is not an existing directory; install the "
                          f"application there (`make setup` installs the built-in targets' "
                          f"packages) or give the directory to copy")
    if app_source.resolve() == Path("/"):
        raise _fail(path, "[app] source is the root directory; give the application's directory")
    return app_source


def _app_tree_paths(path: Path, data: dict, app_root: Path, sibling_of: Path | None) -> tuple[str, str]:
    """(docroot, front_controller), checked in the app's source; `sibling_of`: the target
    directory when its own files are the app (they may be symlinks to a sibling's)."""
    docroot = _app_path(path, "docroot", _expect(path, data, "docroot", str, default="."), app_root,
                        "app tree", "give a directory inside the app tree, relative to it (e.g. "
                        "\".\" or \"public\")", sibling_of)
    front = _expect(path, data, "front_controller", str, default="index.php")
    todo = "give the PHP file nginx routes unknown paths to, relative to the docroot (e.g. \"index.php\")"
    front_controller = _app_path(path, "front_controller", front, app_root / docroot, "docroot",
                                 todo, sibling_of)
    if front_controller == "." or front.endswith("/"):
        raise _fail(path, f"front_controller {front!r} is not a file name; {todo}")
    return docroot, front_controller


# Without a `patchable` key every PHP file of the app tree may be patched: patches are only
# ever applied to copies, and `verify` measures each one; a target narrows it by declaring it.
DEFAULT_PATCHABLE = ("*.php",)


def is_patchable(rel: str, patterns) -> bool:
    """Whether `rel` (relative to the app tree) is one of `patterns`: file names or fnmatch
    patterns, where `*` also crosses directories ("src/*.php" holds src/a/b.php)."""
    return any(rel == p or fnmatch.fnmatchcase(rel, p) for p in patterns)


def _app_paths(path: Path, data: dict, key: str, default: list, what: str, dot_ok: bool) -> list[str]:
    """`key`: a list of paths inside the app tree, relative to it (`what` names one in errors);
    `dot_ok`: whether "." (the tree itself) is one."""
    given = _expect(path, data, key, list, default=default)
    for i, p in enumerate(given):
        if not isinstance(p, str):
            raise _fail(path, f"{key}[{i}] must be a string ({what}), not {_toml_type(type(p))}")
        lexical = posixpath.normpath(p) if p else ""
        if not p or _control_char(p) is not None or p.startswith("/") or lexical == ".." or lexical.startswith("../"):
            raise _fail(path, f"{key}[{i}] {p!r} leads out of the app tree; give {what}, relative to it")
        if lexical == "." and not dot_ok:
            raise _fail(path, f"{key}[{i}] {p!r} is the app tree itself; give {what}, relative to it (e.g. \"data\")")
    return given


def _writable(path: Path, data: dict) -> list[str]:
    """The files and directories the app writes in place (a data directory, a file cache): each
    run gets its own copy of them, which the workers own (harness/stack.py)."""
    return [posixpath.normpath(p) for p in
            _app_paths(path, data, "writable", [], "a file or directory of the app tree", dot_ok=False)]


def _patchable(path: Path, data: dict) -> list[str]:
    return _app_paths(path, data, "patchable", list(DEFAULT_PATCHABLE), "a file of the app tree", dot_ok=True)


def database_name(target_name: str) -> str:
    """The one rule between the two names: a target's name may hold '-', a database's may not
    (MariaDB would need it quoted everywhere); the database is the target's name with '-' as '_'.
    Both are then ASCII letters, digits and '_' or '-' (_NAME_RE, _DB_NAME_RE)."""
    return target_name.replace("-", "_")


def users_server_database(target_name: str) -> str:
    """The database a target is loaded into on a user's server (--mysql)."""
    return f"lockdown_{database_name(target_name)}"


def _database(path: Path, data: dict, directory: Path,
              name: str) -> tuple[str | None, Path | None, Path | None]:
    """[database]: (name, schema file, seed file), each None when absent; the name, when not
    given, is derived from the target's (`database_name`)."""
    db = _expect(path, data, "database", dict)
    db_name = schema = seed = None
    if db is not None:
        db_name = _expect(path, db, "name", str, default=database_name(name), where="[database] name")
        if not _DB_NAME_RE.fullmatch(db_name):
            raise _fail(path, f"[database] name {db_name!r} may only hold letters, digits and _ "
                              f"(ASCII, 1 to 64)")
        for key in ("schema", "seed"):
            rel = _expect(path, db, key, str, where=f"[database] {key}")
            if not rel:                                # absent or "": none
                continue
            file = _confined(path, f"[database] {key}", rel, directory, "target directory",
                             "give an SQL file of the target, relative to it", directory)
            if not file.is_file():
                raise _fail(path, f"[database] {key} file {rel!r} does not exist in the target")
            if key == "schema":
                schema = file
            else:
                seed = file
    return db_name, schema, seed


def _urls(path: Path, data: dict) -> list[Url]:
    urls_raw = _expect(path, data, "urls", list, required=True)
    if not urls_raw:
        raise _fail(path, "`urls` must list at least one URL")
    if len(urls_raw) > MAX_URLS:
        raise _fail(path, f"`urls` lists {len(urls_raw)} URLs; at most {MAX_URLS}")
    urls = []
    for i, u in enumerate(urls_raw):
        if not isinstance(u, dict):
            raise _fail(path, f"urls[{i}] must be a table with `path` and `weight`")
        weight = u.get("weight", 1)
        if not isinstance(weight, int) or isinstance(weight, bool) or weight < 1:
            raise _fail(path, f"urls[{i}].weight must be a positive integer, got {weight!r}")
        if weight > MAX_WEIGHT:
            raise _fail(path, f"urls[{i}].weight must be at most {MAX_WEIGHT} (weights are "
                              f"proportions), got {weight!r}")
        urls.append(Url(_url_path(path, u.get("path"), f"urls[{i}].path"), weight))
    if sum(u.weight for u in urls) > MAX_TOTAL_WEIGHT:
        raise _fail(path, f"urls' weights add up to {sum(u.weight for u in urls)}; at most "
                          f"{MAX_TOTAL_WEIGHT} (weights are proportions: divide them)")
    return urls


def _php_ini(path: Path, data: dict) -> dict:
    php_ini = _expect(path, data, "php_ini", dict, default={})
    for k, v in php_ini.items():
        if not _INI_KEY_RE.fullmatch(k):
            raise _fail(path, f"php_ini key {k!r} is not a php.ini setting name (letters, digits, "
                              f"'_', '.' and '-')")
        if not isinstance(v, (str, int, float, bool)):
            raise _fail(path, f"php_ini.{k} must be a string, number or boolean")
        if isinstance(v, float) and not math.isfinite(v):
            raise _fail(path, f"php_ini.{k} must be a finite number, got {v!r}")
        bad = _control_char(v) if isinstance(v, str) else None
        if bad is not None:
            raise _fail(path, f"php_ini.{k} {v!r} holds a control character ({bad!r}): a php.ini "
                              f"value is one line; remove it")
    return php_ini


def _volatile(path: Path, data: dict) -> list[str]:
    verify = _expect(path, data, "verify", dict, default={})
    volatile = _expect(path, verify, "volatile", list, default=[], where="[verify] volatile")
    for i, rx in enumerate(volatile):
        if not isinstance(rx, str):
            raise _fail(path, f"[verify] volatile[{i}] must be a string (a regular expression)")
        try:
            re.compile(rx)
        except re.error as e:
            raise _fail(path, f"[verify] volatile[{i}] is not a regular expression: {e}")
    return volatile


_SCALAR_KEYS = {"name", "description", "docroot", "front_controller", "php_ini", "patchable", "writable",
                "extends"}
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
