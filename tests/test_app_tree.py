"""A run's app tree is hard links to the prepared tree; what a remediation writes is made the
run's own first, and a write through a link is caught (harness/app_tree.py)."""
from __future__ import annotations

import difflib
import os
import time

import pytest

from lockdown.analyzers.findings import Remediation
from lockdown.errors import LockdownError
from lockdown.harness import app_tree
from lockdown.harness.bench import fetch
from lockdown.harness.prepare import prepare
from lockdown.harness.stack import Stack, StackOptions
from lockdown.remediation.apply import remedy
from lockdown.remediation.recipes import unified_diff
from lockdown.targets.registry import resolve

from conftest import processes_mentioning, tree_digest


@pytest.fixture
def linked(tmp_path):
    """A small prepared tree and a linked copy of it: (original, copy, time before the copy)."""
    src = tmp_path / "prepared"
    (src / "cache").mkdir(parents=True)
    (src / "lib").mkdir()
    (src / "config.php").write_text("<?php return ['store' => 'db'];\n")
    (src / "cache" / "en.cdb").write_bytes(b"\0cdb" * 100)
    (src / "lib" / "a.php").write_text("<?php // a\n")
    os.chmod(src / "lib" / "a.php", 0o640)
    since = time.time_ns()
    app_tree.link_copy(src, tmp_path / "copy")
    return src, tmp_path / "copy", since


def test_owned_file_is_written_without_touching_the_original(linked):
    src, copy, since = linked
    before = tree_digest(src)
    assert (copy / "config.php").stat().st_ino == (src / "config.php").stat().st_ino
    path = app_tree.own(copy, "config.php")
    assert path.stat().st_ino != (src / "config.php").stat().st_ino and path.stat().st_nlink == 1
    assert path.read_bytes() == (src / "config.php").read_bytes()
    path.write_text("<?php return ['store' => 'php'];\n")
    assert tree_digest(src) == before and app_tree.written_through(copy, since) == []
    # a directory: every file under it; mode kept; a path not there yet needs nothing
    app_tree.own(copy, "lib")
    assert (copy / "lib" / "a.php").stat().st_nlink == 1 and (copy / "lib" / "a.php").stat().st_mode & 0o777 == 0o640
    assert app_tree.own(copy, "cache/new.php") == copy / "cache" / "new.php"
    with pytest.raises(LockdownError, match="outside the app tree"):
        app_tree.own(copy, "../prepared/config.php")


def test_a_write_through_a_link_is_caught(linked):
    src, copy, since = linked
    with open(copy / "cache" / "en.cdb", "r+b") as f:   # in place, as a careless rebuild would
        f.write(b"X")
    (copy / "lib" / "new.php").write_text("new files are the copy's own\n")
    assert app_tree.written_through(copy, since) == ["cache/en.cdb"]
    assert (src / "cache" / "en.cdb").read_bytes().startswith(b"X")   # which is why it matters


def test_own_all_unlinks_every_file_and_keeps_changes(linked):
    src, copy, since = linked
    before = tree_digest(src)
    app_tree.own(copy, "config.php").write_text("changed\n")
    app_tree.own_all(copy)
    assert all(p.stat().st_nlink == 1 for p in copy.rglob("*") if p.is_file())
    assert (copy / "config.php").read_text() == "changed\n"
    for p in copy.rglob("*"):
        if p.is_file():
            p.write_text("overwritten in place\n")
    assert tree_digest(src) == before
    assert sorted(p.name for p in copy.parent.iterdir()) == ["copy", "prepared"]


def test_diff_files_are_the_headers_only():
    diff = ("--- a/config.php\t2026-11-22 08:00:00\n+++ b/config.php\t2026-11-22 08:01:00\n"
            "@@ -1,3 +1,3 @@\n a\n--- ../removed SQL comment\n+++ ../added line\n \n"
            "--- /dev/null\n+++ b/cache/new.php\n@@ -0,0 +1 @@\n+x\n"
            "--- a/lib/a.php\n+++ b/lib/a.php\n@@ -1 +1 @@\n-old\n+new\n")
    # inside a hunk, removing "-- ../removed SQL comment" and adding "++ ../added line" read like
    # headers; the hunk's line counts say they are not
    assert app_tree.diff_files(diff) == ["config.php", "cache/new.php", "lib/a.php"]


@pytest.mark.server
def test_stack_refuses_a_remedy_that_writes_through_and_rebuilds_the_prepared_copy(tmp_path, monkeypatch):
    """A remedy that writes a linked file in place: the run fails with one message naming the
    file, the damaged prepared copy is thrown away, the next stack gets a fresh one."""
    monkeypatch.setenv("LOCKDOWN_PREPARED_DIR", str(tmp_path / "prepared"))
    target = resolve("hello")

    def careless(stack):
        with open(stack.app_dir / "index.php", "a") as f:
            f.write("<?php echo 'patched';\n")

    said = []
    with pytest.raises(LockdownError, match=r"in place .*\(index\.php\).*discarded"):
        with Stack(target, tmp_path / "run1", StackOptions(workers=1, remedy=careless), say=said.append):
            pass
    assert processes_mentioning(str(tmp_path / "run1")) == []
    assert [p.name for p in (tmp_path / "prepared").iterdir() if p.is_dir()] == []
    # the next stack prepares hello again, and a diff remediation patches its own copy only
    prepare(target)
    prepared = next(p for p in (tmp_path / "prepared").iterdir() if p.is_dir())
    original = (prepared / "app" / "index.php").read_text()
    diff = unified_diff("index.php", original, original + "<?php // patched\n")
    rem = Remediation(kind="diff", content=diff, file="index.php")
    with Stack(target, tmp_path / "run2", StackOptions(workers=1, remedy=remedy([rem], said.append)),
               say=said.append) as stack:
        assert (stack.app_dir / "index.php").read_text().endswith("<?php // patched\n")
        assert (prepared / "app" / "index.php").read_text() == original


@pytest.mark.server
@pytest.mark.parametrize("writes", [None, ["index.php"], ["cache"]])
def test_remediation_steps_own_what_they_declare(tmp_path, monkeypatch, writes):
    """A step that rewrites index.php in place (file_put_contents): with nothing declared the
    whole tree is copied first, with index.php declared that file is; declaring something
    else lets the write through, and the stack refuses to serve it."""
    monkeypatch.setenv("LOCKDOWN_PREPARED_DIR", str(tmp_path / "prepared"))
    target = resolve("hello")
    original = (prepare(target).app / "index.php").read_text()
    step = ["php", "-r", "file_put_contents('index.php', '<?php echo \"rebuilt\";');"]
    rem = Remediation(kind="diff", content="", steps=[step], writes=writes)   # only the step writes
    said = []
    opts = StackOptions(workers=1, remedy=remedy([rem], said.append))
    if writes == ["cache"]:
        with pytest.raises(LockdownError, match=r"\(index\.php\)"):
            with Stack(target, tmp_path / "run", opts, say=said.append):
                pass
        return
    with Stack(target, tmp_path / "run", opts, say=said.append) as stack:
        assert (stack.app_dir / "index.php").read_text() == '<?php echo "rebuilt";'
        assert (prepare(target).app / "index.php").read_text() == original
        whole = "[remedy] the steps name nothing they write: the whole app tree becomes this run's own copy"
        assert (whole in said) == (writes is None)
        if writes is None:
            assert all(p.stat().st_nlink == 1 for p in stack.app_dir.rglob("*") if p.is_file())


@pytest.mark.server
def test_fixes_applied_together_skip_a_change_already_made_and_stop_at_a_conflict(tmp_path, monkeypatch):
    """`verify --all` applies several findings' diffs to one copy. Two findings can propose the
    same change in different words (other context lines): the second is already applied and
    is skipped, said so. A diff that changes the same line another way is a conflict: one
    line, and no reject file left in the copy."""
    monkeypatch.setenv("LOCKDOWN_PREPARED_DIR", str(tmp_path / "prepared"))
    target = resolve("hello")
    original = (prepare(target).app / "index.php").read_text()
    fifty, sixty = original.replace("$i < 50", "$i < 5"), original.replace("$i < 50", "$i < 6")
    same = [Remediation(kind="diff", content=unified_diff("index.php", original, fifty), file="index.php"),
            Remediation(kind="diff", file="index.php", content="".join(difflib.unified_diff(
                original.splitlines(True), fifty.splitlines(True), "a/index.php", "b/index.php", n=1)))]
    assert same[0].content != same[1].content
    said = []
    with Stack(target, tmp_path / "run", StackOptions(workers=1, remedy=remedy(same, said.append)),
               say=said.append) as stack:
        assert (stack.app_dir / "index.php").read_text() == fifty
        assert "[remedy] the diff against index.php is already applied (an earlier fix made the same change)" in said
        assert fetch(stack.base_url + "/")[1].count(b"<li>") == 5
    conflict = [same[0], Remediation(kind="diff", content=unified_diff("index.php", original, sixty), file="index.php")]
    with pytest.raises(LockdownError, match=r"the diff against index\.php does not apply .*verify conflicting "
                                            r"fixes one at a time"):
        with Stack(target, tmp_path / "run2", StackOptions(workers=1, remedy=remedy(conflict, said.append)),
                   say=said.append):
            pass
    assert not list((tmp_path / "run2").rglob("*.rej"))
    assert (prepare(target).app / "index.php").read_text() == original


def test_the_next_rounds_base_that_no_longer_applies_is_refused_in_words(tmp_path):
    """--on-top-of: a base diff the prepared tree no longer takes names patch's reason (not a
    Python list) and leaves no reject file in the copy's place."""
    from lockdown.remediation.base import base_refused, patched_tree
    app = tmp_path / "app"
    app.mkdir()
    (app / "index.php").write_text("<?php\necho 'now';\n")
    stale = Remediation(kind="diff", file="index.php",
                        content=unified_diff("index.php", "<?php\necho 'then';\n", "<?php\necho 'fixed';\n"))
    with pytest.raises(LockdownError) as e:
        patched_tree(app, [stale], tmp_path / "base-app", base_refused)
    assert str(e.value) == ("--on-top-of: the base's diff against index.php does not apply to the prepared app tree "
                            "(Hunk #1 FAILED at 1.; 1 out of 1 hunk FAILED); the target changed since it was "
                            "verified: verify again")
    assert not list(tmp_path.rglob("*.rej")) and (app / "index.php").read_text() == "<?php\necho 'now';\n"


# An app that rewrites an existing data file in place, and trusts a cache only when it is newer
# than its source (DokuWiki's page metadata and render cache): `writable` gives a run its own
# copy of the data directory, which the workers own; the copy keeps the source's file times.
DATA_PAGE = r"""<?php
$f = __DIR__ . '/data/hits.txt';
$n = (int) file_get_contents($f) + 1;
$h = @fopen($f, 'r+');                       // in place, as most apps write their data files
$ok = $h !== false && fwrite($h, (string) $n) !== false;
if ($h) { fclose($h); }
$fresh = filemtime(__DIR__ . '/data/page.cache') > filemtime(__DIR__ . '/data/page.txt');
echo "page ok; hits ", $ok ? $n : 'not saved', '; cache ', $fresh ? 'fresh' : 'stale', "\n";
"""


def _data_target(root, writable: bool):
    from conftest import one_page_target
    target = one_page_target(root, "datapage", "an app writing its data in place", DATA_PAGE, "page ok")
    data = target / "app" / "data"
    data.mkdir()
    (data / "hits.txt").write_text("0")
    (data / "page.txt").write_text("source")
    (data / "page.cache").write_text("rendered")
    old = time.time() - 7200
    os.utime(data / "page.txt", (old, old))                  # the cache is an hour newer than its source
    os.utime(data / "page.cache", (old + 3600, old + 3600))
    # an app source, as a user's site is (copied with cp, not with the target's own files)
    text = (target / "target.toml").read_text().replace('files = "app"', 'source = "app"')
    if writable:
        text = text.replace('[app]', 'writable = ["data"]\n\n[app]', 1)
    (target / "target.toml").write_text(text)
    return target


@pytest.mark.server
def test_writable_paths_are_the_runs_own_and_file_times_are_kept(tmp_path, monkeypatch):
    from lockdown.targets.config import load_target
    monkeypatch.setenv("LOCKDOWN_PREPARED_DIR", str(tmp_path / "prepared"))
    for writable in (False, True):
        target = load_target(_data_target(tmp_path / f"w{writable}", writable))
        with Stack(target, tmp_path / f"run{writable}", StackOptions(workers=1), say=lambda m: None) as stack:
            pages = [fetch(stack.base_url + "/")[1].decode() for _ in range(3)]
        prepared = prepare(target).app
        assert (prepared / "data" / "hits.txt").read_text() == "0"          # the prepared tree never changes
        if writable:
            assert [p.split(";")[1].strip() for p in pages] == ["hits 1", "hits 2", "hits 3"]
        else:   # the files are links into the prepared tree: the workers may not write them
            assert all("hits not saved" in p for p in pages)
        assert all("cache fresh" in p for p in pages)                       # the times came along
