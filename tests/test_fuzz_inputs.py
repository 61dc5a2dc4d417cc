"""Fixed-seed fuzzing of what lockdown reads from disk (issue 29): a real minicms bundle and run
directory, copied and damaged many ways (a JSON or JSONL file cut at a random byte, bytes
flipped, a value replaced by one of another type or by a number JSON cannot hold, a file
deleted or replaced by a directory or a link to /etc/passwd, unknown keys, other format
versions), each copy read by the real commands in this process (click's CliRunner on the
`lockdown` group): `validate`, `analyze`, `flamegraph`, `export` on bundles; `report`,
`writeup`, and `verify` (up to the finding's lookup, before anything starts) on run
directories. Also perf script text (formats/perf_script.py, what a capture parses) and folded
stacks (what `flamegraph` reads besides bundles).

Whatever the damage: no traceback, an exit status the command documents, a failure is one
`lockdown: error:` line naming the file, a link out of the input is never followed into any
output, and the undamaged input reads as before. The seed is fixed (the same capture gets the
same damage), and a failure names the copy and what was done to it.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import random
import shutil
import signal
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import tree_digest
from lockdown.bundle.model import PerfSample, RecordError
from lockdown.cli.main import main
from lockdown.formats import perf_script

SEED = 29
BUNDLE_COPIES = 60
RUN_COPIES = 40
PERF_COPIES = 300
FOLDED_COPIES = 20
NO_SUCH_FINDING = "fuzz-no-such-finding"
OUTSIDE = Path("/etc/passwd")
PASSWD_MARK = "root:x:0:0"          # /etc/passwd's first line, on every Linux


# --------------------------------------------------------------------- damage

DEEP = 100_000
# JSON text put in place of a value: every other type, numbers no reader can hold, constants
# Python's json takes but JSON has not, nesting beyond the recursion limit, hostile strings
HOSTILE = [
    "null", "true", "false", "0", "-1", "0.5", "-1e308", "1e308", '""', '"x"', "[]", "{}",
    "9223372036854775808", "-9223372036854775809", "18446744073709551616", "1e999", "-1e999",
    "NaN", "Infinity", "-Infinity", "9" * 5000, "[[1, [2, [3, [4]]]]]", '{"a": {"b": [null, {}]}}',
    "[" * DEEP + "]" * DEEP, '{"a":' * DEEP + "1" + "}" * DEEP,
    '"/etc/passwd"', '"../../../../../../etc/passwd"', '"<script>alert(1)</script>"', '"\\u0000"',
    '"\\ud800"', '"a\\nb"', '"' + "x" * 100_000 + '"', '"r000001"', '"%s{}{{"',
]
# a value of the same type that breaks what the records imply (zero, negative, the 64-bit
# ends, an empty string or list, another record's id): past the type checks into the analyzers
SAME_TYPE = {
    int: ["0", "-1", "1", "9223372036854775807", "-9223372036854775808", "4611686018427387904"],
    float: ["0.0", "-0.0", "1e-300", "1e308", "-1.5", "0"],
    str: ['""', '" "', '"r000001"', '";;;"', '"a\\nb"', '"[unknown]"', '"0"', '"\\u00e9\\u4e2d"', '"\\ud800"',
          '"\\ud83d\\ude00"'],
    bool: ["true", "false"], list: ["[]", '[""]', "[0]"], dict: ["{}"], type(None): ["null"],
}
# what an unknown field may hold: anything JSON (no NaN, no 4,300-digit number)
UNKNOWN = ["null", "true", "0", "-1", "0.5", '""', '"x"', "[]", "{}", "18446744073709551616",
           "[[1, [2, [3, [4]]]]]", '{"a": {"b": [null, {}]}}', '"<script>alert(1)</script>"']
PLACEHOLDER = "\x01fuzz\x01"


def rewrite(path: Path, data: bytes) -> None:
    """Replace `path` by a new file (the copies share the original's files by hard links: a
    write in place would damage the original)."""
    path.unlink()
    path.write_bytes(data)


def _walk(rng: random.Random, doc, containers_only: bool = False) -> list:
    """A path into `doc` by a random walk that stops at each level with some chance: top-level
    fields as often as deep leaves."""
    path, node = [], doc
    while isinstance(node, (dict, list)) and node and (not path or rng.random() < 0.7):
        key = rng.choice(list(node)) if isinstance(node, dict) else rng.randrange(len(node))
        child = node[key]
        if containers_only and not isinstance(child, (dict, list)):
            break
        path.append(key)
        node = child
    return path


def _set(doc, path: list, value):
    if not path:
        return value
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


def _dumps(doc, raw: str) -> str:
    return json.dumps(doc, indent=1).replace(json.dumps(PLACEHOLDER), raw)


class Damage:
    """One copy's mutations, recorded in words for the failure message."""

    def __init__(self, rng: random.Random, root: Path, listed: Path | None = None):
        self.rng, self.root, self.done = rng, root, []
        self.listed = listed        # the bundle whose manifest lists files with sizes and hashes
        self.rehash: set[Path] = set()
        self.benign = True          # only unknown keys added where records are read: reads as before

    def say(self, what: str, path: Path) -> None:
        self.done.append(f"{what} {path.relative_to(self.root)}")

    def _maybe_rehash(self, path: Path, chance: float) -> None:
        """Bring the manifest's size and hash up to date, so the damage gets past the size check
        into the reader (a consistent bundle written wrong, not a truncated one)."""
        if (self.listed is not None and self.listed in path.parents and path != self.listed / "manifest.json"
                and self.rng.random() < chance):
            self.rehash.add(path)

    def truncate(self, path: Path) -> None:
        data = path.read_bytes()
        cut = self.rng.choice([0, self.rng.randrange(max(1, len(data)))])
        rewrite(path, data[:cut])
        self.say(f"cut at byte {cut} of {len(data)}:", path)
        self._maybe_rehash(path, 0.6)
        self.benign = False

    def flip(self, path: Path) -> None:
        data = bytearray(path.read_bytes())
        if not data:
            return self.truncate(path)
        spots = []
        for _ in range(self.rng.randint(1, 6)):
            i = self.rng.randrange(len(data))
            data[i] = self.rng.choice([0x00, 0xFF, 0xC3, ord('"'), ord("{"), ord("]"), ord("\n"),
                                       ord("9"), ord("-"), ord(","), self.rng.randrange(256)])
            spots.append(i)
        rewrite(path, bytes(data))
        self.say(f"bytes {spots} changed:", path)
        self._maybe_rehash(path, 0.6)
        self.benign = False

    def _edit_json(self, path: Path, edit) -> bool:
        """Apply `edit(doc) -> (doc, raw text of the placeholder or None)` to a JSON file, or to
        one random line of a JSONL file. False when the file is gone or does not parse (already
        damaged)."""
        if not path.is_file() or path.is_symlink():
            return False
        data = path.read_bytes()
        try:
            if path.suffix == ".jsonl":
                lines = data.split(b"\n")
                numbered = [i for i, line in enumerate(lines) if line.strip()]
                if not numbered:
                    return False
                i = self.rng.choice(numbered)
                doc, raw = edit(json.loads(lines[i]))
                lines[i] = _dumps(doc, raw or "null").replace("\n", "").encode()
                rewrite(path, b"\n".join(lines))
                self.where = f" (line {i + 1})"
            else:
                doc, raw = edit(json.loads(data))
                rewrite(path, (_dumps(doc, raw or "null") + "\n").encode())
                self.where = ""
        except (ValueError, RecursionError):
            return False
        return True

    def retype(self, path: Path) -> None:
        raw = self.rng.choice(HOSTILE)
        chosen = []

        def edit(doc):
            chosen.append(_walk(self.rng, doc))
            return _set(doc, chosen[0], PLACEHOLDER), raw
        if self._edit_json(path, edit):
            self.say(f"value at {chosen[0]}{self.where} set to {raw[:40]}:", path)
            self._maybe_rehash(path, 0.85)
            self.benign = False

    def same_type(self, path: Path) -> None:
        chosen = []

        def edit(doc):
            chosen.append(_walk(self.rng, doc))
            node = doc
            for key in chosen[0]:
                node = node[key]
            chosen.append(self.rng.choice(SAME_TYPE[type(node)]))
            return _set(doc, chosen[0], PLACEHOLDER), chosen[1]
        if self._edit_json(path, edit):
            self.say(f"value at {chosen[0]}{self.where} set to {chosen[1]}:", path)
            self._maybe_rehash(path, 0.9)
            self.benign = False

    def lines(self, path: Path) -> None:
        """A JSONL line deleted, repeated or moved; in a JSON document, a list item."""
        how = self.rng.choice(["deleted", "repeated", "moved"])
        self.benign = False
        if path.suffix == ".jsonl":
            lines = [line for line in path.read_bytes().split(b"\n") if line]
            if not lines:
                return
            i = self.rng.randrange(len(lines))
            line = lines.pop(i) if how != "repeated" else lines[i]
            if how != "deleted":
                lines.insert(self.rng.randrange(len(lines) + 1), line)
            rewrite(path, b"\n".join(lines) + b"\n")
            self.say(f"line {i + 1} {how}:", path)
        else:
            chosen = []

            def edit(doc):
                path_ = _walk(self.rng, doc, containers_only=True)
                node = doc
                for key in path_:
                    node = node[key]
                if isinstance(node, list) and node:
                    i = self.rng.randrange(len(node))
                    item = node.pop(i) if how != "repeated" else node[i]
                    if how != "deleted":
                        node.insert(self.rng.randrange(len(node) + 1), item)
                    chosen.append(path_ + [i])
                return doc, None
            if not self._edit_json(path, edit):
                return
            self.say(f"list item {chosen[0]} {how}:" if chosen else "written again (no list met):", path)
        self._maybe_rehash(path, 0.9)

    def unknown_key(self, path: Path, top: bool) -> None:
        """An unknown field in a record (top: the document's or the JSONL line's own object,
        which readers must ignore) or anywhere (a map keyed by data: may be refused)."""
        raw = self.rng.choice(UNKNOWN)
        chosen = []

        def edit(doc):
            where = [] if top else _walk(self.rng, doc, containers_only=True)
            node = doc
            for key in where:
                node = node[key]
            if isinstance(node, dict):
                node[f"fuzz_unknown_{self.rng.randrange(1000)}"] = PLACEHOLDER
            elif isinstance(node, list):
                node.append(PLACEHOLDER)
            chosen.append(where)
            return doc, raw
        if self._edit_json(path, edit):
            self.say(f"unknown key {raw[:30]} added at {chosen[0]}{self.where}:", path)
            self._maybe_rehash(path, 1.0 if top else 0.85)
            records = path.suffix == ".jsonl" or path.name in ("manifest.json", "findings.json", "verify.json")
            if not (top and records and (self.listed is None or path in self.rehash
                                         or path == self.listed / "manifest.json")):
                self.benign = False
        else:
            self.benign = False

    def version(self, path: Path, key: str, values: list) -> None:
        raw = self.rng.choice(values)
        if self._edit_json(path, lambda doc: (_set(doc, [key], PLACEHOLDER), raw)):
            self.say(f"{key} set to {raw}:", path)
        self.benign = False

    def rename_listed(self, b: Path) -> None:
        """A file of the manifest's list under another name: a path no writer makes."""
        name = self.rng.choice(LISTED_NAMES)

        def edit(manifest):
            files = manifest["files"]
            files[name] = files.pop(self.rng.choice(sorted(files)))
            return manifest, None
        if self._edit_json(b / "manifest.json", edit):
            self.say(f"a listed file renamed {name[:40]!r} in", b / "manifest.json")
        self.benign = False

    def delete(self, path: Path) -> None:
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        self.say("deleted", path)
        self.benign = False

    def to_directory(self, path: Path) -> None:
        self.delete(path)
        self.done.pop()
        path.mkdir()
        if self.rng.random() < 0.5:
            (path / "manifest.json").write_text("{}")
        self.say("replaced by a directory:", path)

    def to_link(self, path: Path) -> None:
        """A link out of the input (to /etc/passwd), or to itself (a loop)."""
        self.delete(path)
        self.done.pop()
        to = self.rng.choice([OUTSIDE, OUTSIDE, path])
        path.symlink_to(to)
        self.say(f"replaced by a link to {'itself' if to == path else to}:", path)
        self._maybe_rehash(path, 0.5)

    def finish(self) -> str:
        """Write the manifest's sizes and hashes of the files marked for it."""
        if self.rehash and self.listed is not None:
            mpath = self.listed / "manifest.json"
            try:
                manifest = json.loads(mpath.read_bytes())
                files = manifest["files"]
            except (ValueError, RecursionError, TypeError, KeyError, OSError):
                return "; ".join(self.done)
            for p in sorted(self.rehash):
                rel = str(p.relative_to(self.listed))
                if p.is_file() and isinstance(files, dict):
                    files[rel] = {"bytes": p.stat().st_size, "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
            rewrite(mpath, json.dumps(manifest, indent=1).encode() + b"\n")
            self.done.append("manifest rehashed")
        return "; ".join(self.done)


def copy_tree(src: Path, dest: Path) -> Path:
    """`src` copied by hard links (fast; every mutation replaces a file, never writes in it)."""
    shutil.copytree(src, dest, symlinks=True, copy_function=os.link)
    return dest


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())


LISTED_NAMES = ["a\nb.json", "xhprof/r\r1.json", "x" * 300 + ".json", "/etc/passwd", "../../../../etc/passwd",
                "xhprof/../../x.json", "xhprof", "perf", "manifest.json", "", ".", "xhprof//r000001.json",
                "requests.jsonl\x00", "xhprof/\u00e9.json", "xhprof/.json", "requests.jsonl/"]
OPS = ["truncate", "flip", "retype", "retype", "retype", "same_type", "same_type", "same_type", "lines",
       "unknown", "unknown-top", "version", "delete", "directory", "link"]


def damage_bundle(rng: random.Random, b: Path, root: Path | None = None) -> Damage:
    """One to three mutations of bundle `b` (inside `root`, the copy)."""
    d = Damage(rng, root or b, listed=b)
    records = [b / n for n in ("requests.jsonl", "statements.jsonl", "excimer.jsonl", "perf/samples.jsonl")
               if (b / n).is_file()]
    xhprof = _files(b / "xhprof") if (b / "xhprof").is_dir() else []
    json_files = [b / "manifest.json"] * 3 + records * 2 + [b / "perf/buildids.json"] + xhprof[:3]
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        json_files = [p for p in json_files if p.is_file() and not p.is_symlink()]
        if not json_files:
            break
        path = rng.choice(json_files)
        op = rng.choice(OPS + ["rename"])
        if op in ("truncate", "flip", "retype", "same_type", "lines"):
            getattr(d, op)(path)
        elif op.startswith("unknown"):
            d.unknown_key(path, top=op == "unknown-top")
        elif op == "rename":
            d.rename_listed(b)
        elif op == "version":
            d.version(b / "manifest.json", rng.choice(["version", "format"]),
                      ["2", "0", "-1", "1.0", '"1"', "null", "true", "99999999999999999999", '"lockdown-bundle"',
                       '"other"', "[1]", "NaN"])
        else:
            path = rng.choice(json_files + [p for p in (b / "perf", b / "xhprof", b / "slow.log") if p.exists()])
            {"delete": d.delete, "directory": d.to_directory, "link": d.to_link}[op](path)
    return d


ELSEWHERE = ["/etc", "/etc/passwd", "a\nb", "", ".", "../../../..", "/nonexistent/bundle", "x" * 300]


def damage_run(rng: random.Random, run: Path, original_bundle: Path) -> Damage:
    """One or two mutations of run directory `run`: its own files, its verify results or the
    bundle the report reads."""
    if rng.random() < 0.2:
        d = damage_bundle(rng, run / "bundle", root=run)
        d.benign = False
        return d
    d = Damage(rng, run)
    verify = sorted((run / "verify").glob("*/verify.json"))
    svgs = sorted((run / "verify").glob("*/*.svg"))
    json_files = [run / "findings.json"] * 3 + [run / "analysis.json"] * 2 + [run / "bench.json"] + verify * 2
    for _ in range(rng.choice([1, 1, 1, 2])):
        json_files = [p for p in json_files if p.is_file() and not p.is_symlink()]
        if not json_files:
            break
        path = rng.choice(json_files)
        op = rng.choice(OPS + ["elsewhere"])
        if op in ("truncate", "flip", "retype", "same_type", "lines"):
            getattr(d, op)(path)
        elif op == "elsewhere":     # findings.json names the bundle when DIR/bundle is gone
            where = rng.choice(ELSEWHERE + [str(original_bundle)])
            if (run / "bundle").is_dir():
                d.delete(run / "bundle")
            d.version(run / "findings.json", "bundle", [json.dumps(where)])
        elif op.startswith("unknown"):
            d.unknown_key(path, top=op == "unknown-top" and path.name != "analysis.json")
        elif op == "version":
            d.version(rng.choice([run / "findings.json", *verify]), "format",
                      ["2", "0", "1.0", '"1"', "null", "true", "99999999999999999999", "[1]"])
        else:
            choices = json_files + svgs + [p for p in (run / "bundle", run / "verify", run / "bundle/manifest.json",
                                                       run / "incomplete.json") if p.exists()]
            path = rng.choice(choices)
            if op == "delete" or path.name == "incomplete.json":
                if path.name == "incomplete.json" or rng.random() < 0.1:
                    (run / "incomplete.json").write_text(rng.choice(['{"owner": 1}', "[", "{}"]))
                    d.say("an unfinished run's marker written:", run / "incomplete.json")
                    d.benign = False
                else:
                    d.delete(path)
            else:
                {"directory": d.to_directory, "link": d.to_link}[op](path)
    return d


# --------------------------------------------------------------------- running the readers

@pytest.fixture(scope="module")
def cli(home):
    """`cli(*args)`: the lockdown command in this process -> (exit status, stdout, stderr,
    exception). LOCKDOWN_HOME is the tests' home (the group sweeps it); the signal handlers the
    group installs are put back after each command."""
    runner = CliRunner(env={"LOCKDOWN_HOME": str(home)})

    def run(*args):
        saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
        try:
            r = runner.invoke(main, [str(a) for a in args])
        finally:
            for s, h in saved.items():
                signal.signal(s, h)
        exc = r.exception if not isinstance(r.exception, SystemExit) else None
        return r.exit_code, r.stdout, r.stderr, exc
    return run


def outputs_of(out: Path) -> str:
    """Everything a command wrote under `out` (text, as far as it decodes)."""
    return "".join(p.read_bytes().decode("utf-8", "replace") for p in _files(out)) if out.exists() else ""


def check(label: str, how: str, result, codes: set, out: Path, names_file: bool = True,
          linked: bool = True) -> int:
    """The contract every reader keeps whatever its input, or an AssertionError naming the
    mutation: no traceback, a documented exit status, a failure in one line naming a file,
    nothing of a file a link led outside to in any output."""
    status, stdout, stderr, exc = result
    where = f"{label}: {how}\nexit {status}\nstdout: {stdout[-1500:]}\nstderr: {stderr[-3000:]}"
    if exc is not None:
        import traceback
        raise AssertionError(f"{where}\n{''.join(traceback.format_exception(exc))}")
    assert "Traceback" not in stdout + stderr, where
    assert status in codes, where
    written = outputs_of(out)
    assert PASSWD_MARK not in stdout + stderr + written or not linked, where
    if status == 2:
        lines = stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("lockdown: error: "), where
        assert "/" in lines[0] or not names_file, where     # names the file (or directory) it could not take
    elif status == 1:                            # validate: a coverage check failed, as a row
        assert "FAIL" in stdout and not stderr, where
    return status


BUNDLE_READERS = [
    ("validate", lambda b, out: ("validate", b), {0, 2, 3}),      # 3: a check failed (docs/commands.md)
    ("analyze", lambda b, out: ("analyze", b), {0, 2}),
    ("analyze-json", lambda b, out: ("analyze", b, "--json", "--top", "3"), {0, 2}),
    ("flamegraph-php", lambda b, out: ("flamegraph", b, "-o", out / "php.svg"), {0, 2}),
    ("flamegraph-native", lambda b, out: ("flamegraph", b, "--kind", "native", "-o", out / "native.folded"), {0, 2}),
    ("flamegraph-offcpu", lambda b, out: ("flamegraph", b, "--kind", "php-offcpu", "-o", out / "off.json"), {0, 2}),
    ("export", lambda b, out: ("export", b, "-o", out / "export"), {0, 2}),
    ("export-xhgui", lambda b, out: ("export", b, "-o", out / "export", "--format", "xhgui"), {0, 2}),
]
RUN_READERS = [
    ("report", lambda d, out: ("report", d, "-o", out / "report.html"), {0, 2}),
    ("writeup", lambda d, out: ("writeup", d, "-o", out / "issues"), {0, 2}),
    # everything verify reads before it starts anything; the finding's lookup then fails
    ("verify", lambda d, out: ("verify", d, "--finding", NO_SUCH_FINDING), {2}),
]


@pytest.fixture(scope="module")
def originals(minicms_verified, tmp_path_factory):
    """The shared minicms run directory (with one verification) and its bundle, copied once
    (by hard links) so that nothing here can touch the shared one."""
    v, shared, _ = minicms_verified
    assert v.returncode in (0, 3), v.stdout[-3000:] + v.stderr[-3000:]
    base = tmp_path_factory.mktemp("fuzz-originals")
    run = copy_tree(shared, base / "run")
    assert (run / "findings.json").is_file() and list((run / "verify").glob("*/verify.json"))
    manifest = json.loads((run / "bundle" / "manifest.json").read_text())
    assert manifest["collected"]["queries"]["statements"] > 0        # a bundle with SQL
    return run, run / "bundle"


def _baseline(cli, readers, source: Path, out: Path, label: str) -> dict:
    """Each reader's exit status on the undamaged input (checked to work)."""
    codes = {}
    for name, argv, allowed in readers:
        o = out / name
        o.mkdir(parents=True)
        status = check(f"{label} {name}", "undamaged", cli(*argv(source, o)), allowed, o)
        codes[name] = status
    return codes


def test_damaged_bundles(cli, originals, tmp_path):
    """BUNDLE_COPIES damaged copies of a real minicms bundle (SQL, perf, Excimer, xhprof), each
    through `validate` and two other readers."""
    _, bundle = originals
    t0 = time.monotonic()
    digest = tree_digest(bundle)
    before = _baseline(cli, BUNDLE_READERS, bundle, tmp_path / "before", "original")
    assert before["validate"] in (0, 3) and all(before[n] == 0 for n in before if n != "validate"), before
    rng = random.Random(SEED)
    seen = {0: 0, 1: 0, 2: 0, 3: 0}
    for i in range(BUNDLE_COPIES):
        copy = copy_tree(bundle, tmp_path / f"b{i}")
        d = damage_bundle(rng, copy)
        how = d.finish()
        chosen = [BUNDLE_READERS[0], *rng.sample(BUNDLE_READERS[1:], 2)]
        for name, argv, allowed in chosen:
            out = tmp_path / f"out{i}" / name
            out.mkdir(parents=True)
            status = check(f"bundle copy {i} {name}", how, cli(*argv(copy, out)), allowed, out)
            seen[status] += 1
            if d.benign:            # unknown fields of records are ignored
                assert status == before[name], f"bundle copy {i} {name}: {how}: exit {status}, undamaged {before[name]}"
        shutil.rmtree(copy)
        shutil.rmtree(tmp_path / f"out{i}")
    assert seen[2] > BUNDLE_COPIES // 2 and seen[0] > 0, seen      # the damage reached the readers both ways
    assert tree_digest(bundle) == digest
    after = _baseline(cli, BUNDLE_READERS, bundle, tmp_path / "after", "original again")
    assert after == before
    print(f"{BUNDLE_COPIES} bundle copies: exits {seen}, {time.monotonic() - t0:.1f} s")


def test_damaged_run_directories(cli, originals, tmp_path):
    """RUN_COPIES damaged copies of a real `lockdown run` directory (with a verification), each
    through `verify` (up to the finding's lookup) and `report` or `writeup`."""
    run, _ = originals
    t0 = time.monotonic()
    digest = tree_digest(run)
    before = _baseline(cli, RUN_READERS, run, tmp_path / "before", "original")
    assert before == {"report": 0, "writeup": 0, "verify": 2}, before
    rng = random.Random(SEED)
    seen = {0: 0, 2: 0}
    for i in range(RUN_COPIES):
        copy = copy_tree(run, tmp_path / f"r{i}")
        d = damage_run(rng, copy, run / "bundle")
        how = d.finish()
        chosen = [RUN_READERS[2], rng.choice(RUN_READERS[:2])]
        for name, argv, allowed in chosen:
            out = tmp_path / f"out{i}" / name
            out.mkdir(parents=True)
            status = check(f"run copy {i} {name}", how, cli(*argv(copy, out)), allowed, out)
            seen[status] += 1
            if d.benign:
                assert status == before[name], f"run copy {i} {name}: {how}: exit {status}, undamaged {before[name]}"
        shutil.rmtree(copy)
        shutil.rmtree(tmp_path / f"out{i}")
    assert seen[2] > RUN_COPIES // 2 and seen[0] > 0, seen
    assert tree_digest(run) == digest
    assert _baseline(cli, RUN_READERS, run, tmp_path / "after", "original again") == before
    print(f"{RUN_COPIES} run directory copies: exits {seen}, {time.monotonic() - t0:.1f} s")


# --------------------------------------------------------------------- parsers of captured text

def damage_text(rng: random.Random, text: str) -> tuple[str, str]:
    """`text` with one to three changes: characters changed, cut short, a number made longer or
    negative, a line deleted, repeated, moved or replaced, separators lost."""
    done = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        lines = text.splitlines(True)
        op = rng.choice(["chars", "cut", "digits", "digits", "minus", "line", "line", "garbage", "blank", "indent"])
        if op == "chars" and text:
            chars = list(text)
            for _ in range(rng.randint(1, 5)):
                i = rng.randrange(len(chars))
                chars[i] = rng.choice(["\n", "\t", " ", "9", "f", "x", "+", ":", "/", "(", ")", "-", "#",
                                       "\x00", "\ufffd", "\u00e9", "."])
            text = "".join(chars)
            done.append("characters changed")
        elif op == "cut":
            cut = rng.randrange(len(text) + 1)
            text = text[:cut]
            done.append(f"cut at {cut}")
        elif op in ("digits", "minus"):
            spots = [i for i, c in enumerate(text) if c in "0123456789abcdef"]
            if spots:
                i = rng.choice(spots)
                add = "-" if op == "minus" else rng.choice("9f") * rng.choice([4, 9, 17, 20, 40, 5000])
                text = text[:i] + add + text[i:]
                done.append(f"{add[:6]}... inserted at {i}")
        elif op == "line" and lines:
            i = rng.randrange(len(lines))
            how = rng.choice(["deleted", "repeated", "moved"])
            line = lines.pop(i) if how != "repeated" else lines[i]
            if how != "deleted":
                lines.insert(rng.randrange(len(lines) + 1), line)
            text = "".join(lines)
            done.append(f"line {i + 1} {how}")
        elif op == "garbage" and lines:
            i = rng.randrange(len(lines))
            lines[i] = rng.choice(["\n", "\t\n", "garbage\n", "\t zz\n", "x 1/1 1.1: 1 e:\n", "\t1 (\n",
                                   "\tffffffffffffffffff s+0x1 (d)\n", "a -1/-1 0.0: 0 e:\n", "#\n", "\x00\n"])
            text = "".join(lines)
            done.append(f"line {i + 1} replaced")
        elif op == "blank":
            text = text.replace("\n\n", "\n")
            done.append("blank lines removed")
        elif op == "indent":
            text = text.replace("\t", rng.choice(["", " ", "        "]))
            done.append("indentation changed")
    return text, "; ".join(done)


def _as_record(s: perf_script.Sample) -> PerfSample:
    """A parsed sample as the capture writes it into perf/samples.jsonl, read back."""
    return PerfSample.from_json(json.loads(json.dumps(
        {"time_ns": s.time_ns, "pid": s.pid, "tid": s.tid, "comm": s.comm, "period": s.period,
         "request": None, "frames": [f.to_json() for f in s.frames]})))


def test_damaged_perf_script_text(originals):
    """PERF_COPIES damaged copies of a capture's `perf script` text (its first 150 samples):
    the parser yields samples the bundle takes (perf/samples.jsonl records that read back),
    or one PerfScriptError naming the line; nothing else."""
    _, bundle = originals
    t0 = time.monotonic()
    with open(bundle / "perf" / "script.txt", errors="replace") as f:     # as the capture opens it
        base = "\n\n".join(f.read().split("\n\n")[:150]) + "\n"
    samples = list(perf_script.parse(base.splitlines(True), "script.txt"))
    assert len(samples) > 50 and all(_as_record(s) for s in samples)
    rng = random.Random(SEED)
    refused = 0
    for i in range(PERF_COPIES):
        text, how = damage_text(rng, base)
        try:
            parsed = list(perf_script.parse(io.StringIO(text, newline=None), "script.txt"))
        except perf_script.PerfScriptError as e:
            assert str(e).startswith("script.txt line ") and "\n" not in str(e), f"copy {i}: {how}: {e}"
            refused += 1
            continue
        for s in parsed:
            try:
                _as_record(s)
            except RecordError as e:
                raise AssertionError(f"copy {i}: {how}: parsed into a sample the bundle refuses: {e}")
    assert 0 < refused < PERF_COPIES
    print(f"{PERF_COPIES} perf script copies: {refused} refused, {time.monotonic() - t0:.1f} s")


def test_damaged_folded_stacks(cli, originals, tmp_path):
    """FOLDED_COPIES damaged copies of the folded stacks `flamegraph` writes, read back by
    `flamegraph` (an SVG, speedscope JSON, a differential graph against the undamaged file)."""
    _, bundle = originals
    base = tmp_path / "base"
    base.mkdir()
    for kind in ("php", "native"):
        written = cli("flamegraph", bundle, "--kind", kind, "-o", base / f"{kind}.folded")
        assert check(f"folded {kind}", "undamaged", written, {0}, base) == 0
    rng = random.Random(SEED)
    seen = {0: 0, 2: 0}
    for i in range(FOLDED_COPIES):
        kind = rng.choice(["php", "native"])
        original = base / f"{kind}.folded"
        text, how = damage_text(rng, original.read_text())
        folded = tmp_path / f"f{i}.folded"
        folded.write_text(text, encoding="utf-8", errors="surrogateescape")
        out = tmp_path / f"out{i}"
        out.mkdir()
        for argv in (("flamegraph", folded, "-o", out / "g.svg"), ("flamegraph", folded, "-o", out / "g.json"),
                     ("flamegraph", "--diff", original, folded, "-o", out / "d.svg")):
            seen[check(f"folded copy {i} {argv[1:3]}", how, cli(*argv), {0, 2}, out)] += 1
    assert seen[0] and seen[2], seen


# --------------------------------------------------------------------- hostile paths

def test_hostile_paths_are_one_line(cli, originals, tmp_path):
    """Paths no reader can take, given on the command line or found in a directory's name:
    too long for the file system, holding a line break, empty, a file or device where a
    directory belongs. One line each, never a traceback; a line break is shown as \\n."""
    run, bundle = originals
    long_name = "x" * 300
    broken = tmp_path / "a\nb"                       # a bundle in a directory named with a line break
    copy_tree(bundle, broken)
    rewrite(broken / "requests.jsonl", b"")
    runs = tmp_path / "r\nun"
    copy_tree(run, runs)
    rewrite(runs / "findings.json", b"{")
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    paths = [long_name, tmp_path / long_name / "y", tmp_path / "no\nsuch", "", "/etc", "/etc/passwd", "/dev/null",
             loop, loop / "x", broken, runs]
    out = tmp_path / "out"
    out.mkdir()
    for path in paths:
        for name, argv, _ in BUNDLE_READERS + RUN_READERS:
            # (a folded file named on the command line is quoted when it is not one: the user's own)
            check(f"{name} {str(path)[:40]!r}", "hostile path", cli(*argv(path, out)), {2}, out,
                  names_file=False, linked=not (name.startswith("flamegraph") and path == "/etc/passwd"))
    for name, argv, _ in BUNDLE_READERS:                # an output path too long, or in a loop
        if "-o" in argv(bundle, out):
            for where in (tmp_path / long_name, loop):
                check(f"{name} -o {where.name[:20]}", "hostile output", cli(*argv(bundle, where)), {2}, out)
