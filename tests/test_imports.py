"""The import graph of lockdown/ follows the data flow (docs/architecture.md):

    target -> harness -> collectors -> bundle -> analyzers -> findings -> reports

A module imports its own layer and layers before it in ORDER, never a later one; analyzers,
the run directory's model and reports also never import the capture side (harness,
collectors): an analyzer never starts a process, a report only renders what the stages
wrote. The one documented exception is `harness -> analyzers.stats` (the benchmark's
statistics); KNOWN lists the edges against the flow that are still there, each with why, and
fails once one of them is gone, so the list only shrinks. No server is started: the modules
are parsed, not imported."""
from __future__ import annotations

import ast
from pathlib import Path

import lockdown

ROOT = Path(lockdown.__file__).parent

# the layers, upstream first: each module belongs to the longest prefix that names it
ORDER = ["foundation", "targets", "formats", "bundle", "capture", "analyzers", "rundir", "remediation",
         "reports", "pipeline", "cli"]
LAYERS = {
    "lockdown": "foundation",             # __init__: the version
    "lockdown.errors": "foundation", "lockdown.paths": "foundation", "lockdown.signals": "foundation",
    "lockdown.progress": "foundation", "lockdown.php_ini": "foundation",
    "lockdown.options": "foundation",     # the measuring commands' options and defaults
    "lockdown.owner": "foundation",       # who owns a record: pid and start time
    "lockdown.redact": "foundation",      # DSN passwords out of what is written
    "lockdown.targets": "targets",        # what a target is
    "lockdown.formats": "formats",        # parsers of tools' text
    "lockdown.bundle": "bundle",          # the contract between capture and analysis
    "lockdown.harness": "capture",        # running the application ...
    "lockdown.collectors": "capture",     # ... and capturing it per request (they use each other)
    "lockdown.analyzers": "analyzers",    # pure functions of bundles: views, findings
    "lockdown.rundir": "rundir",          # the run directory's documents (findings.json, verify.json, ...)
    "lockdown.run_marker": "rundir",      # DIR/incomplete.json
    "lockdown.remediation": "remediation",    # findings -> checked changes, verified
    "lockdown.reports": "reports",        # rendering only
    "lockdown.pipeline": "pipeline",      # the stages in sequence, callable from Python
    "lockdown.fleet": "pipeline",         # production agent, collector, store, fleet reports (starts Redis, stacks)
    "lockdown.intake": "pipeline",        # lockdown init: a user's site made into a target (starts a stack)
    "lockdown.cli": "cli", "lockdown.__main__": "cli",    # argument parsing
}
# layers that never import the capture side, whatever their place in ORDER
NO_CAPTURE = {"analyzers", "rundir", "reports"}

DOCUMENTED = {
    ("lockdown.harness.bench", "lockdown.analyzers.stats"),       # the benchmark's mean, deviation, CI
    ("lockdown.harness.ab_bench", "lockdown.analyzers.stats"),    # the A/B change and its planning
}
# Edges against the flow that are still there, (importer, what it imports: a module or a
# package, meaning anything in it). Remove an entry with the edge.
KNOWN: set[tuple[str, str]] = set()


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    rel = Path(*name.split("."))
    return (ROOT.parent / rel).with_suffix(".py").is_file() or (ROOT.parent / rel / "__init__.py").is_file()


def imports_of(path: Path) -> set[str]:
    """The lockdown modules `path` imports, at any depth of its code (a function's import too)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            # `from .. import paths`: the module paths; `from ..x import name`: the module x
            subs = [f"{source}.{a.name}" for a in node.names if is_module(f"{source}.{a.name}")]
            found |= set(subs) if subs and len(subs) == len(node.names) else {source, *subs}
    return {m for m in found if m == "lockdown" or m.startswith("lockdown.")}


def layer_of(module: str) -> str:
    prefix = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[prefix]


def graph() -> set[tuple[str, str]]:
    return {(module_name(p), m) for p in sorted(ROOT.rglob("*.py")) for m in imports_of(p)}


def excepted(edge: tuple[str, str], exceptions: set = DOCUMENTED | KNOWN) -> bool:
    return any(edge[0] == a and (edge[1] == b or edge[1].startswith(b + ".")) for a, b in exceptions)


def against_the_flow(edge: tuple[str, str]) -> bool:
    a, b = map(layer_of, edge)
    return ORDER.index(b) > ORDER.index(a) or (a in NO_CAPTURE and b == "capture")


def test_every_module_has_a_layer():
    assert set(LAYERS.values()) == set(ORDER)
    for path in ROOT.rglob("*.py"):
        layer_of(module_name(path))         # (max() of nothing fails)


def test_no_import_against_the_data_flow():
    edges = graph()
    assert len(edges) > 300, len(edges)      # the parse found the graph
    wrong = sorted(e for e in edges if against_the_flow(e) and not excepted(e))
    assert not wrong, "imports against the data flow (docs/architecture.md):\n" + "\n".join(
        f"  {a} ({layer_of(a)}) -> {b} ({layer_of(b)})" for a, b in wrong)


def test_the_exceptions_are_still_there():
    """An exception whose edge is gone leaves the list, so that it cannot come back unseen."""
    edges = graph()
    assert all(against_the_flow(e) for e in DOCUMENTED | KNOWN)
    gone = sorted(x for x in DOCUMENTED | KNOWN if not any(excepted(e, {x}) for e in edges))
    assert not gone, gone


def test_the_check_sees_a_back_edge():
    assert against_the_flow(("lockdown.remediation.verify", "lockdown.reports.run_results"))
    assert against_the_flow(("lockdown.reports.writeup", "lockdown.harness.bench"))
    assert against_the_flow(("lockdown.options", "lockdown.harness.steady_runs"))
    assert not against_the_flow(("lockdown.reports.bench_table", "lockdown.options"))
    assert against_the_flow(("lockdown.analyzers.tail", "lockdown.harness.processes"))
    assert against_the_flow(("lockdown.rundir.store", "lockdown.reports.output"))
    assert not against_the_flow(("lockdown.reports.writeup", "lockdown.rundir.model"))
    assert not against_the_flow(("lockdown.remediation.verify", "lockdown.harness.profile"))
