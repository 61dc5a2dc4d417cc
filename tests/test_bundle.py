"""Bundles on disk: a real (small) capture, then every kind of damage a reader must reject
with one line naming the file."""
import json
import shutil

import pytest

BUNDLE_ERRORS = [
    ("truncated", lambda b: _truncate(b / "requests.jsonl"), "requests.jsonl: ", "truncated or damaged"),
    ("missing file", lambda b: (b / "excimer.jsonl").unlink(), "excimer.jsonl: missing from the bundle", ""),
    ("no manifest", lambda b: (b / "manifest.json").unlink(), "manifest.json: missing", ""),
    ("damaged manifest", lambda b: (b / "manifest.json").write_text("{\"format\": "), "manifest.json: damaged", ""),
    ("other version", lambda b: _set_version(b, 99), "bundle format version 99 is not supported", ""),
    ("flipped bytes", lambda b: _flip(b / "requests.jsonl"), "requests.jsonl: content differs", ""),
]


def _truncate(p):
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])


def _flip(p):
    data = bytearray(p.read_bytes())
    data[10] = ord("#") if data[10] != ord("#") else ord("!")
    p.write_bytes(bytes(data))


def _set_version(b, v):
    m = json.loads((b / "manifest.json").read_text())
    m["version"] = v
    (b / "manifest.json").write_text(json.dumps(m))


@pytest.fixture(scope="module")
def hello_bundle(tmp_path_factory, home):
    import os
    import subprocess
    from conftest import REPO, lockdown_argv
    b = tmp_path_factory.mktemp("bundles") / "hello"
    r = subprocess.run(lockdown_argv("profile", "hello", "--requests", "20", "-o", b,
                                     "--collect", "excimer,xhprof", "--xhprof-every", "3",
                                     "--xhprof-flags", "memory_alloc",
                                     "--no-overhead-check"),
                       capture_output=True, text=True, timeout=300, cwd=REPO,
                       env={**os.environ, "LOCKDOWN_HOME": str(home)})
    assert r.returncode == 0, r.stderr
    return b


def test_bundle_layout(hello_bundle):
    m = json.loads((hello_bundle / "manifest.json").read_text())
    assert (m["format"], m["version"]) == ("lockdown-bundle", 1)
    assert set(m["files"]) >= {"requests.jsonl", "excimer.jsonl"}
    assert any(f.startswith("xhprof/") for f in m["files"])
    assert m["php"]["extensions"]["excimer"]
    # tideways_xhprof is loaded only in the one-worker pool that serves instrumented requests
    assert "tideways_xhprof" not in m["php"]["extensions"]
    assert m["php"]["pool"]["instrumented_extension"] == "tideways_xhprof"
    requests = [json.loads(l) for l in (hello_bundle / "requests.jsonl").read_text().splitlines()]
    instrumented = [r for r in requests if r["instrumented"]]
    assert instrumented and len({r["pid"] for r in instrumented}) == 1
    assert not {r["pid"] for r in instrumented} & {r["pid"] for r in requests if not r["instrumented"]}
    # --xhprof-flags memory_alloc: allocation counts per function
    profile = json.loads((hello_bundle / "xhprof" / f"{instrumented[0]['id']}.json").read_text())
    assert all({"ct", "wt", "mem.na", "mem.nf", "mem.aa"} <= set(v) for v in profile.values())
    assert m["php"]["pool"]["auto_prepend_file"].endswith("capture/prepend.php")
    assert not list(hello_bundle.parent.glob(".*partial*"))   # no staging left behind


@pytest.mark.parametrize("name,damage,message,also", BUNDLE_ERRORS, ids=[e[0] for e in BUNDLE_ERRORS])
def test_damaged_bundle_is_one_line(lockdown, hello_bundle, tmp_path, name, damage, message, also):
    b = tmp_path / "b"
    shutil.copytree(hello_bundle, b)
    damage(b)
    r = lockdown("validate", b)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith("lockdown: error: ") and message in r.stderr and also in r.stderr


def test_not_a_bundle(lockdown, tmp_path):
    r = lockdown("validate", tmp_path / "nothing")
    assert r.returncode == 2 and "no such bundle directory" in r.stderr
