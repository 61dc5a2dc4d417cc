"""target.toml parsing: good files load, bad ones give one clear line naming file and key."""
import re
import shutil
from pathlib import Path

import pytest

from lockdown.errors import LockdownError
from lockdown.targets.config import load_target
from lockdown.targets.registry import resolve

from conftest import HELLO


def make_target(tmp_path: Path, toml: str) -> Path:
    d = tmp_path / "t"
    shutil.copytree(HELLO, d)
    (d / "target.toml").write_text(toml)
    return d


GOOD = '''
name = "mini"
[app]
files = "app"
[[urls]]
path = "/"
weight = 2
[[urls]]
path = "/b"
[sanity]
expect = "Hello"
'''


def test_builtin_hello_loads():
    t = resolve("hello")
    assert t.name == "hello" and t.database is None
    assert t.sanity_expect == "Hello from PHP"
    assert (t.app_files / "index.php").is_file()


def test_verify_volatile_patterns_load(tmp_path):
    t = load_target(make_target(tmp_path, GOOD + "\n[verify]\nvolatile = ['id=\\d+']\n"))
    assert t.volatile == ("id=\\d+",)
    assert load_target(make_target(tmp_path / "plain", GOOD)).volatile == ()


def test_weighted_paths_keep_the_mix(tmp_path):
    t = load_target(make_target(tmp_path, GOOD))
    assert t.weighted_paths() == ["/", "/b", "/"]


def test_every_prefix_of_the_weighted_paths_keeps_the_mix():
    """A timed run stops mid-list: whatever prefix it served must be the target's mix, each
    path within one request of its share (WordPress's list: one path of weight 10 among 11)."""
    wp = resolve("wordpress")
    order = wp.weighted_paths()
    weights = {u.path: u.weight for u in wp.urls}
    total = sum(weights.values())
    assert sorted(order) == sorted(p for p, w in weights.items() for _ in range(w))
    for k in range(1, total + 1):
        for path, w in weights.items():
            assert abs(order[:k].count(path) - k * w / total) < 1, (k, path, order[:k])


@pytest.mark.parametrize("toml, problem", [
    ("name = [", "not valid TOML"),
    (GOOD.replace('[sanity]\nexpect = "Hello"', ''), "missing required key `sanity`"),
    (GOOD.replace("weight = 2", "weight = 0"), "urls[0].weight must be a positive integer"),
    (GOOD.replace('path = "/b"', 'path = "b"'), "urls[1].path must be a string starting with '/'"),
    ("bogus = 1\n" + GOOD, "unknown key `bogus`"),
    (GOOD + "expected = 'typo'\n", "unknown key `expected` in [sanity]"),
    (GOOD.replace('files = "app"', 'files = "nope"'), "files directory 'nope' does not exist"),
    (GOOD + '\n[database]\nname = "x; drop"\n', "may only hold letters"),
    (GOOD.replace('[app]\nfiles = "app"', ''), "[app] needs `source`"),
    (GOOD + "\n[verify]\nvolatile = ['(unclosed']\n", "[verify] volatile[0] is not a regular expression"),
    (GOOD + "\n[verify]\nvolatile = [3]\n", "[verify] volatile[0] must be a string"),
])
def test_bad_target_toml(tmp_path, toml, problem):
    d = make_target(tmp_path, toml)
    with pytest.raises(LockdownError) as e:
        load_target(d)
    msg = str(e.value)
    assert problem in msg
    assert str(d / "target.toml") in msg
    assert "\n" not in msg


def test_bad_target_toml_from_cli(lockdown, tmp_path):
    d = make_target(tmp_path, GOOD.replace("weight = 2", 'weight = "heavy"'))
    r = lockdown("bench", d)
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.strip() == (f"lockdown: error: bad target file {d / 'target.toml'}: "
                                f"urls[0].weight must be a positive integer, got 'heavy'")


def test_a_failed_preparation_keeps_the_log_it_names(tmp_path, monkeypatch):
    """The build directory of a failed preparation is removed; the log the error names is not
    in it any more but in prepared/NAME-PLACE.failed-logs/, and a later success removes that."""
    from lockdown.errors import PhaseFailed
    from lockdown.harness.prepare import prepare, prepared_stem
    prepared = tmp_path / "prepared"
    monkeypatch.setenv("LOCKDOWN_PREPARED_DIR", str(prepared))
    step = '\n[configure]\ncommand = ["sh", "-c", "echo boom-from-configure; exit 3"]\n'
    d = make_target(tmp_path, GOOD + step)
    with pytest.raises(PhaseFailed) as failed:
        prepare(load_target(d), say=lambda *a: None)
    log = Path(re.search(r"log in (\S+)", str(failed.value)).group(1))
    stem = prepared_stem(load_target(d))
    assert stem.startswith("mini-") and log.parent == prepared / f"{stem}.failed-logs"
    assert "boom-from-configure" in log.read_text()
    assert sorted(p.name for p in prepared.iterdir()) == [f"{stem}.failed-logs", f"{stem}.lock"]
    (d / "target.toml").write_text(GOOD)
    prepare(load_target(d), say=lambda *a: None)
    assert not (prepared / f"{stem}.failed-logs").exists()


def test_a_users_target_named_like_a_built_in_one_is_prepared_apart(tmp_path):
    """By name alone, a user's `hello` and the built-in hello removed each other's preparation
    as their own older version. A built-in target keeps its name (whatever checkout or package
    it comes from); any other adds where its directory is."""
    from lockdown.harness.prepare import prepared_stem
    from lockdown.targets.registry import resolve
    mine = tmp_path / "hello"
    shutil.copytree(resolve("hello").directory, mine)
    other = tmp_path / "elsewhere" / "hello"
    shutil.copytree(mine, other)
    assert prepared_stem(resolve("hello")) == "hello"
    stems = {prepared_stem(load_target(d)) for d in (mine, other)}
    assert len(stems) == 2 and all(re.fullmatch(r"hello-[0-9a-f]{8}", s) for s in stems)
