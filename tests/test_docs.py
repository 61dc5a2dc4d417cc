"""The docs keep up with the code: docs/architecture.md names every module of the package,
and nothing in the docs or the code points at a file outside the repository, which a clone
cannot follow. Reads files only (no server, no subprocess)."""
from __future__ import annotations

import os
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "lockdown"
ARCHITECTURE = REPO / "docs" / "architecture.md"

# What is searched for references out of the repository: the docs, and every kind of source
# file of the package, the tests, the bench scripts, the setup scripts and the built-in targets.
# Not recorded data (bundles under fixtures/golden, perf text under fixtures/perf): a capture
# records the absolute paths of the machine it ran on, as it should.
SEARCHED = ("docs", "lockdown", "tests", "bench", "scripts", "fixtures/apps")
TOP_FILES = ("README.md", "Makefile", "setup.py", "pyproject.toml", "setup.cfg")
SOURCE_SUFFIXES = {".py", ".md", ".toml", ".cfg", ".ini", ".php", ".sh", ".j2", ".js", ".css",
                   ".lua", ".sql", ".txt"}
SKIPPED_DIRS = {"__pycache__", ".pytest_cache"}

# The project's brief and its notes sat beside the repository, in a directory named "shared"
# (reached relatively, or by the absolute path of the machine the work was done on). That
# directory at the start of a path (with any number of "../" before it), or the absolute path's
# root, is a reference a clone cannot follow. Not flagged: the English word, `shared_callers`, a system
# path such as /usr/share/wordpress (lockdown serves it), a URL whose path holds the same word.
OUTSIDE = (
    ("shar" "ed/ directory beside the repository", re.compile(r"(?<![\w./-])(?:\.\./)*shar[e]d/")),
    ("absolute path of the development machine", re.compile(r"(?<![\w.:/-])/wor[k]/")),
)


def walk(top: Path):
    """The files under `top`, sorted, without following symbolic links (a link into another
    folder of the repository is that folder's), nor entering caches."""
    for here, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not (Path(here) / d).is_symlink())
        for name in sorted(files):
            path = Path(here) / name
            if not path.is_symlink():
                yield path


def module_files() -> list[Path]:
    """Every module of the package: its .py files but __init__.py, and its package
    directories (a directory holding __init__.py), as paths relative to the repository."""
    out = []
    for path in walk(PACKAGE):
        if path.name == "__init__.py":
            if path.parent != PACKAGE:
                out.append(path.parent.relative_to(REPO))
        elif path.suffix == ".py":
            out.append(path.relative_to(REPO))
    return out


def table_rows(text: str) -> dict[str, str]:
    """The architecture table: its first cell (a backquoted folder such as `lockdown/cli/`)
    -> the whole row."""
    rows = {}
    for line in text.splitlines():
        m = re.match(r"\|\s*`([^`]+/)`\s*\|", line)
        if m:
            rows[m.group(1)] = line
    return rows


def is_named(module: Path, text: str, rows: dict[str, str]) -> bool:
    """A module file is named when its folder's row has `name.py` in backquotes, or the doc
    gives its whole path; a package directory when it has a row of its own."""
    if (REPO / module).is_dir():
        return f"{module.as_posix()}/" in rows
    if module.as_posix() in text:
        return True
    row = rows.get(f"{module.parent.as_posix()}/", "")
    return re.search(rf"`{re.escape(module.name)}`", row) is not None


def test_architecture_names_every_module():
    text = ARCHITECTURE.read_text(encoding="utf-8")
    rows = table_rows(text)
    modules = module_files()
    assert len(modules) > 100 and "lockdown/analyzers/detectors/" in rows   # the walk and the parse work
    missing = [m.as_posix() for m in modules if not is_named(m, text, rows)]
    assert not missing, (f"docs/architecture.md does not name {', '.join(missing)}: add each, with one "
                         "line of what it holds, to the row of its folder (a package directory gets "
                         "a row of its own)")


def test_a_module_left_out_of_the_table_is_caught():
    text = ARCHITECTURE.read_text(encoding="utf-8")
    rows = table_rows(text)
    module = Path("lockdown/analyzers/detectors/fs_scan.py")
    assert is_named(module, text, rows)
    without = {k: v.replace("`fs_scan.py`", "`fs_scan`") for k, v in rows.items()}
    assert not is_named(module, text.replace("`fs_scan.py`", "`fs_scan`"), without)
    assert not is_named(Path("lockdown/analyzers/detectors/not_a_detector.py"), text, rows)
    package = Path("lockdown/analyzers/detectors")
    assert is_named(package, text, rows)
    assert not is_named(package, text, {k: v for k, v in rows.items() if k != "lockdown/analyzers/detectors/"})


def searched_files() -> list[Path]:
    files = [REPO / name for name in TOP_FILES if (REPO / name).is_file()]
    for top in SEARCHED:
        files.extend(p for p in walk(REPO / top) if p.suffix in SOURCE_SUFFIXES or p.name == "Makefile")
    return files


def outside_references(text: str) -> list[str]:
    return [why for why, pattern in OUTSIDE if pattern.search(text)]


def test_nothing_points_outside_the_repository():
    found = []
    files = searched_files()
    assert any(f.name == "architecture.md" for f in files) and any(f.suffix == ".php" for f in files)
    for path in files:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(lines, 1):
            for why in outside_references(line):
                found.append(f"{path.relative_to(REPO)}:{number}: {why}: {line.strip()[:100]}")
    assert not found, ("these point at files outside the repository; state the fact in the right "
                       "doc in docs/ (or name a public source) and refer to that:\n" + "\n".join(found))


def test_the_patterns_flag_what_leaves_the_repository_and_nothing_else():
    shared, work = "shar" "ed", "wor" "k"
    flagged = [f"({shared}/pathologies.md section 2)", f"see ../{shared}/formats.md",
               f"(docs: /{work}/{shared}/formats.md)", f"`{shared}/`", f"/{work}/main/fixtures/apps/minicms"]
    kept = ["source = \"/usr/share/wordpress\"", f"details.{shared}_callers", f"a {shared} VM",
            f"{shared} memory", "docs/pathologies.md section 2", "/usr/share/php/", f"lib/{shared}/x.so",
            f"https://example.org/{work}/x", "homework/"]
    assert [t for t in flagged if not outside_references(t)] == []
    assert [t for t in kept if outside_references(t)] == []
