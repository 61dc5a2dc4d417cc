"""pprof profiles (`lockdown flamegraph -o X.pb.gz`, `lockdown export --format pprof`) read by
`go tool pprof` itself: every stack comes back with the folded file's weight, in the sample
types and units of its kind, on a real capture of `minicms` (Excimer and perf); per request,
per URL and merged exports add up to the same total; and the vendored protobuf code is what
protoc makes of pprof's profile.proto."""
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from conftest import lockdown_runner
from lockdown.analyzers.folded import read_folded
from lockdown.analyzers.stacks import stacks
from lockdown.bundle.store import open_bundle
from lockdown.harness.toolchain import tool

PROTO_DIR = Path("/usr/share/gocode/src/github.com/google/pprof/proto")   # golang-github-google-pprof-dev


@pytest.fixture(scope="module")
def bundle(home, tmp_path_factory):
    out = tmp_path_factory.mktemp("pprof") / "b"
    r = lockdown_runner(home)("profile", "minicms", "-o", out, "--requests", "30", "--warmup-requests", "3",
                              "--no-overhead-check", "--collect", "perf,excimer")
    assert r.returncode == 0, r.stdout + r.stderr
    return out


def go_raw(path) -> tuple[list[str], dict[str, list[int]], str]:
    """`go tool pprof -raw`: the sample types, {folded stack: values} rebuilt from its samples
    and locations (leaf first in the file), and the period type line."""
    r = subprocess.run([tool("go"), "tool", "pprof", "-raw", str(path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    text = r.stdout
    samples_part = text.split("Samples:\n", 1)[1].split("\nLocations\n", 1)
    header, *sample_lines = samples_part[0].splitlines()
    types = [t.removesuffix("[dflt]") for t in header.split()]
    # `ID: 0x0 M=1 NAME :LINE[:COLUMN] s=START` (older pprof prints no column)
    names = {m[1]: m[2] for m in re.finditer(r"^\s*(\d+): 0x0 M=1 (.*) :0(?::0)? s=0$", samples_part[1], re.M)}
    out: Counter = Counter()
    got: dict[str, list[int]] = {}
    for line in sample_lines:
        values, _, ids = line.partition(":")
        stack = ";".join(names[i] for i in reversed(ids.split()))
        got[stack] = [a + b for a, b in zip(got.get(stack, [0] * len(types)), map(int, values.split()))]
        out[stack] += 1
    assert max(out.values()) == 1                 # one sample per folded stack
    period = re.search(r"^PeriodType: (.*)$", text, re.M)[1]
    return types, got, period


@pytest.mark.parametrize("kind", ["php", "native", "php-offcpu"])
def test_go_pprof_reads_every_stack_with_its_folded_weight(lockdown, bundle, tmp_path, kind):
    pb, folded = tmp_path / f"{kind}.pb.gz", tmp_path / f"{kind}.folded"
    for out in (pb, folded):
        r = lockdown("flamegraph", bundle, "--kind", kind, "-o", out)
        assert r.returncode == 0, r.stderr
    assert pb.read_bytes()[:2] == b"\x1f\x8b"                          # gzipped, as pprof wants
    weights = read_folded(folded)
    types, got, period = go_raw(pb)
    assert set(got) == set(weights) and len(got) >= 10
    manifest = open_bundle(bundle).manifest["capture"]
    if kind == "php":
        ns = round(manifest["excimer_period_ms"] * 1e6)
        assert types == ["samples/count", "wall/nanoseconds"] and period == "wall nanoseconds"
        assert all(got[s] == [w, w * ns] for s, w in weights.items())
    elif kind == "native":
        counts = stacks(open_bundle(bundle), "native", counts=True)
        assert types == ["samples/count", "cpu/nanoseconds"] and period == "cpu nanoseconds"
        assert all(got[s] == [counts[s], w] for s, w in weights.items())   # folded native weights: ns
        assert any(s.split(";")[-1].endswith("_[k]") for s in got)          # kernel frames, marked
    else:
        assert types == ["off_cpu/nanoseconds"]
        assert all(got[s] == [w * 1000] for s, w in weights.items())
    total = sum(v[-1] for v in got.values())
    top = subprocess.run([tool("go"), "tool", "pprof", "-top", "-unit=ns", str(pb)], capture_output=True,
                         text=True, timeout=120)
    assert top.returncode == 0 and re.search(rf"of {total}ns total", top.stdout), top.stdout[:400]


def test_export_groups_add_up(lockdown, bundle, tmp_path):
    totals = {}
    for group in ("request", "url", "all"):
        out = tmp_path / group
        r = lockdown("export", bundle, "-o", out, "--format", "pprof", "--group", group)
        assert r.returncode == 0, r.stderr
        header, *rows = [line.split("\t") for line in (out / "index.tsv").read_text().splitlines()]
        assert header == ["file", "requests", "urls", "request_ids"]
        assert sorted(p.name for p in out.glob("*.pb.gz")) == sorted(row[0] for row in rows)
        totals[group] = sum(sum(v[-1] for v in go_raw(out / row[0])[1].values()) for row in rows)
        if group == "request":
            assert len(rows) >= 20 and all(row[1] == "1" for row in rows)
        if group == "url":
            assert len({row[2] for row in rows}) == len(rows) >= 2
    assert totals["request"] == totals["url"] == totals["all"] > 0


def test_a_folded_file_and_bad_input(lockdown, bundle, tmp_path):
    folded = tmp_path / "x.folded"
    folded.write_text("a;b 3\na;c 4\n")
    r = lockdown("flamegraph", folded, "-o", tmp_path / "x.pb.gz")
    assert r.returncode == 0, r.stderr
    types, got, _ = go_raw(tmp_path / "x.pb.gz")
    assert types == ["samples/count"] and got == {"a;b": [3], "a;c": [4]}
    r = lockdown("export", bundle, "-o", tmp_path / "none", "--format", "pprof", "--request", "r999999")
    assert r.returncode != 0 and r.stderr.count("\n") == 1 and "r999999" in r.stderr
    assert not (tmp_path / "none").exists()


def test_vendored_profile_pb2_is_what_protoc_makes(tmp_path):
    """lockdown/reports/profile_pb2.py below its header is protoc's output for the .proto."""
    r = subprocess.run([shutil.which("protoc") or "protoc", f"--proto_path={PROTO_DIR}", f"--python_out={tmp_path}",
                        "profile.proto"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    import lockdown.reports.profile_pb2 as vendored
    text = Path(vendored.__file__).read_text()
    body = text[text.index("# -*- coding: utf-8 -*-"):]
    assert body == (tmp_path / "profile_pb2.py").read_text()
    assert vendored.Profile.DESCRIPTOR.full_name == "perftools.profiles.Profile"
