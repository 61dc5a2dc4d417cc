"""What `lockdown flamegraph`'s counts are, said where each format can say it: the file name
`-o DIR` picks, flamegraph.pl's --countname, the SVG's own tooltips, speedscope's `unit`; and
one request's speedscope profile in the order Excimer took its samples. On a recorded bundle
(fixtures/golden/minicms: perf at 99 Hz, Excimer on the wall clock every 9 ms)."""
import json
import re

from click.testing import CliRunner

from conftest import REPO
from lockdown.analyzers.folded import fold_perf_records
from lockdown.analyzers.off_cpu import app_relative
from lockdown.analyzers.symbolize import jit_name, symbolize, tables_for
from lockdown.bundle.store import open_bundle
from lockdown.cli.main import main

BUNDLE = REPO / "fixtures" / "golden" / "minicms" / "bundle"


def _flamegraph(*args) -> str:
    r = CliRunner().invoke(main, ["flamegraph", str(BUNDLE), *map(str, args)])
    assert r.exit_code == 0, r.output
    return r.output


def _timed_ids(bundle) -> set[str]:
    return {r.id for r in bundle.requests() if not r.instrumented}


def _folded_total(path) -> int:
    return sum(int(line.rsplit(" ", 1)[1]) for line in path.read_text().splitlines())


def test_a_directory_as_output_names_the_file_after_the_kind_and_unit(tmp_path):
    out = _flamegraph("--kind", "native", "--format", "folded", "-o", tmp_path)
    native = tmp_path / "native.ns.folded"
    assert f"wrote {native}" in out
    assert f"flamegraph.pl --countname=ns {native}" in out and "nanoseconds of CPU" in out
    b = open_bundle(BUNDLE)
    ids = _timed_ids(b)
    # the counts are perf's periods (cpu-clock: nanoseconds of CPU), as stackcollapse-perf.pl sums them
    assert _folded_total(native) == sum(s.period for s in b.perf_samples() if s.request in ids)
    _flamegraph("--kind", "php", "--format", "folded", "-o", tmp_path)
    _flamegraph("--kind", "php-offcpu", "--format", "folded", "-o", tmp_path)
    _flamegraph("--kind", "php-offcpu", "-o", tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["native.ns.folded", "php-offcpu.svg",
                                                           "php-offcpu.us.folded", "php.samples.folded"]


def _tooltip_units(svg: str) -> set[str]:
    return set(re.findall(r"<title>[^<]* \([\d,.]+ ([a-z]+), [\d.]+%\)</title>", svg))


def test_the_svg_labels_its_counts_in_their_unit(tmp_path):
    for kind, units in (("php-offcpu", {"us"}), ("native", {"sample", "samples"}), ("php", {"sample", "samples"})):
        _flamegraph("--kind", kind, "-o", tmp_path / f"{kind}.svg")
        shown = _tooltip_units((tmp_path / f"{kind}.svg").read_text())
        assert shown and shown <= units, (kind, shown)
    _flamegraph("--kind", "php-offcpu", "--countname", "microseconds", "-o", tmp_path / "mine.svg")
    assert _tooltip_units((tmp_path / "mine.svg").read_text()) <= {"microseconds", "microsecond"}


def test_the_run_report_s_off_cpu_graph_says_us():
    from lockdown.reports.html_report import capture_flamegraph
    svg = capture_flamegraph(open_bundle(BUNDLE), "php-offcpu", "off cpu")
    assert _tooltip_units(svg) == {"us"}


def _profile(path) -> dict:
    doc = json.loads(path.read_text())
    assert len(doc["profiles"]) == 1
    return doc["profiles"][0]


def test_speedscope_profiles_carry_their_unit(tmp_path):
    b = open_bundle(BUNDLE)
    period = b.manifest["capture"]["excimer_period_ms"]
    for kind, unit in (("native", "nanoseconds"), ("php-offcpu", "microseconds"), ("php", "milliseconds")):
        _flamegraph("--kind", kind, "-o", tmp_path / f"{kind}.json")
        assert _profile(tmp_path / f"{kind}.json")["unit"] == unit
    php = _profile(tmp_path / "php.json")
    ids = _timed_ids(b)
    periods = sum(w for p in b.excimer() if p.request in ids for _, w, _ in p.samples)
    assert abs(php["endValue"] - periods * period) < 1e-6 and periods > 0


def test_one_request_s_speedscope_profile_is_in_time_order(tmp_path):
    b = open_bundle(BUNDLE)
    profile = max(b.excimer(), key=lambda p: len(p.samples))
    _flamegraph("--kind", "php", "--request", profile.request, "-o", tmp_path / "r.json")
    doc = json.loads((tmp_path / "r.json").read_text())
    frames = [f["name"] for f in doc["shared"]["frames"]]
    got = [";".join(frames[i] for i in sample) for sample in doc["profiles"][0]["samples"]]
    taken = sorted(profile.samples, key=lambda s: s[0])
    expected = [app_relative(profile.stacks[i], b.manifest["run_dir"]) for _, _, i in taken]
    assert got == expected and len(got) == len(profile.samples)
    assert got != sorted(got)              # this request's time order is not the folded order
    assert doc["profiles"][0]["weights"] == [w * b.manifest["capture"]["excimer_period_ms"] for _, w, _ in taken]


def test_one_request_s_native_speedscope_profile_is_in_time_order(tmp_path):
    """perf's samples of one request, each folded as the folded output folds them, in the
    order of their time: the same stacks and periods as the folded file, in time order."""
    b = open_bundle(BUNDLE)
    by_request: dict = {}
    for s in b.perf_samples():
        by_request.setdefault(s.request, []).append(s)
    request = max((r for r in by_request if r), key=lambda r: len(by_request[r]))
    taken = sorted(by_request[request], key=lambda s: s.time_ns)
    assert len(taken) >= 3
    _flamegraph("--kind", "native", "--request", request, "-o", tmp_path / "n.json")
    _flamegraph("--kind", "native", "--request", request, "--format", "folded", "-o", tmp_path / "n.folded")
    doc = json.loads((tmp_path / "n.json").read_text())
    profile = doc["profiles"][0]
    frames = [f["name"] for f in doc["shared"]["frames"]]
    stacks = [";".join(frames[i] for i in sample) for sample in profile["samples"]]
    assert profile["unit"] == "nanoseconds" and profile["weights"] == [s.period for s in taken]
    merged: dict = {}
    for stack, weight in zip(stacks, profile["weights"]):
        merged[stack] = merged.get(stack, 0) + weight
    folded = dict(line.rsplit(" ", 1) for line in (tmp_path / "n.folded").read_text().splitlines())
    assert merged == {k: int(v) for k, v in folded.items()}
    # each sample's own stack, in the order of the samples' time (folded one by one here)
    named = symbolize(taken, tables_for(b.build_ids()), jit=jit_name(b.manifest))
    one_by_one = [next(iter(fold_perf_records([s], annotate_kernel=True, annotate_jit=True))) for s in named]
    assert stacks == one_by_one and len(set(stacks)) > 1
