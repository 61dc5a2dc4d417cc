"""The capture's phases, timed into the bundle's manifest (`phases`, docs/bundle-format.md) by
the helper `lockdown bench` times its own with (harness/bench.py `Phases`); bundles written
before it was recorded are read as before."""
import json
from pathlib import Path

import pytest

from lockdown.bundle.store import open_bundle
from lockdown.harness.bench import Phases

GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "golden"


def test_phases_time_each_phase_in_order():
    said = []
    clock = Phases(said.append)
    assert clock.run("one", lambda a, b: a + b, 2, 3) == 5
    clock.record("two", 0.0)               # started long ago: a large, rounded duration
    assert said == ["[one]"]
    assert [p["name"] for p in clock.timings] == ["one", "two"]
    assert 0 <= clock.timings[0]["seconds"] < clock.timings[1]["seconds"]
    assert all(p["seconds"] == round(p["seconds"], 3) for p in clock.timings)
    quiet = Phases()
    with pytest.raises(ZeroDivisionError):
        quiet.run("fails", lambda: 1 / 0)
    assert quiet.timings == []                # a phase that raised records nothing


def test_bundles_without_phases_are_read():
    manifests = sorted(GOLDEN.glob("*/bundle/manifest.json")) or sorted(GOLDEN.rglob("manifest.json"))
    assert manifests
    for m in manifests:
        assert "phases" not in json.loads(m.read_text())
        assert open_bundle(m.parent).manifest.get("phases") is None


@pytest.mark.server
def test_profile_records_its_phases(lockdown, tmp_path):
    b = tmp_path / "b"
    r = lockdown("profile", "minicms", "--requests", "20", "--overhead-slices", "2", "-o", b)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    phases = json.loads((b / "manifest.json").read_text())["phases"]
    assert [p["name"] for p in phases] == ["start", "sanity", "warmup", "baseline", "capture", "baseline",
                                           "environment", "stop", "assemble"]
    assert all(isinstance(p["seconds"], float) and p["seconds"] >= 0 for p in phases)
    v = lockdown("validate", b)
    assert v.returncode == 0, v.stdout[-3000:] + v.stderr[-3000:]      # which check, if one fails
    r = lockdown("profile", "hello", "--requests", "5", "--no-overhead-check", "-o", tmp_path / "h")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    phases = json.loads((tmp_path / "h" / "manifest.json").read_text())["phases"]
    assert [p["name"] for p in phases] == ["start", "sanity", "warmup", "capture", "environment", "stop",
                                           "assemble"]
