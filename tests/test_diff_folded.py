"""Three-column differential folded stacks (`stack BEFORE AFTER`), read and written by `lockdown
flamegraph` as difffolded.pl and inferno-diff-folded write them and flamegraph.pl and
inferno-flamegraph draw them. The inferno tools (`cargo install inferno`) are used where they
are installed; the format itself is checked on lines written as difffolded.pl prints them."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import REPO
from lockdown.cli.main import main
from lockdown.formats.diff_folded import format_diff_folded, parse_diff_folded

BEFORE = REPO / "fixtures" / "golden" / "minicms" / "bundle"
AFTER = REPO / "fixtures" / "golden" / "minicms-engine-off" / "bundle"


def _inferno(tool: str) -> str:
    found = shutil.which(tool) or next((str(p) for p in [Path.home() / ".cargo" / "bin" / tool] if p.exists()), None)
    if found is None:
        pytest.skip(f"{tool} is not installed (cargo install inferno)")
    return found


def _lockdown(*args):
    r = CliRunner().invoke(main, ["flamegraph", *map(str, args)])
    return r


def _ok(*args) -> str:
    r = _lockdown(*args)
    assert r.exit_code == 0, r.output
    return r.output


def test_the_format_as_difffolded_pl_prints_it():
    # difffolded.pl: "$stack $Folded{$stack}{1} $Folded{$stack}{2}\n", 0 where absent; -n scales
    # the first column to the second's total with int()
    before = {"main;a": 30, "main;b": 10, "gone": 5}
    after = {"main;a": 10, "main;b": 20, "new 2": 4}
    assert format_diff_folded(before, after) == "gone 5 0\nmain;a 30 10\nmain;b 10 20\nnew 2 0 4\n"
    # totals 45 -> 34: 30 * 34 / 45 = 22.67 -> 22, 10 -> 7, 5 -> 3
    assert format_diff_folded(before, after, normalize=True) == "gone 3 0\nmain;a 22 10\nmain;b 7 20\nnew 2 0 4\n"
    text = format_diff_folded(before, after)
    assert parse_diff_folded(text.splitlines()) == (before, after)
    # a frame ending in a number is part of the stack: the counts are the last two
    assert parse_diff_folded(["f;x 2 3 4", "", "f;x 2 1 1.5"]) == ({"f;x 2": 4}, {"f;x 2": 5.5})


def test_lines_without_two_counts_are_refused_naming_the_line():
    with pytest.raises(ValueError, match=r"line 2: one count \(a two-column folded file\)"):
        parse_diff_folded(["a;b 1 2", "a;c 7"])
    with pytest.raises(ValueError, match=r"line 1: not 'stack before after'"):
        parse_diff_folded(["a;b 1 x"])
    with pytest.raises(ValueError, match="too large"):
        parse_diff_folded(["a 1 " + "9" * 400])


def _svg_changes(svg: str) -> dict[str, tuple[str, str]]:
    """frame name -> (shown count, change) from the differential graph's tooltips."""
    return {m.group(1): (m.group(2), m.group(3)) for m in
            re.finditer(r"<title>([^<]*) \(([\d,.]+) samples?, [\d.]+%; before [\d,.]+, change ([^)]+)\)</title>", svg)}


def test_a_three_column_file_as_bundle_draws_the_differential_graph(tmp_path):
    diff = tmp_path / "diff.folded"
    diff.write_text("main;a 30 10\nmain;b 10 20\ngone 5 0\n")       # difffolded.pl's order: none
    _ok(diff, "--no-normalize", "-o", tmp_path / "d.svg")
    changes = _svg_changes((tmp_path / "d.svg").read_text())
    assert changes["a"] == ("10", "-66.67%") and changes["b"] == ("20", "+100.00%")
    assert changes["main"] == ("30", "-25.00%") and "gone" not in changes     # widths from AFTER
    _ok(diff, "--no-normalize", "--widths", "before", "-o", tmp_path / "b.svg")
    assert "gone (5 samples" in (tmp_path / "b.svg").read_text()
    # and its two columns taken apart again, written back as they were (sorted)
    _ok(diff, "--no-normalize", "-o", tmp_path / "again.folded")
    assert (tmp_path / "again.folded").read_text() == "gone 5 0\nmain;a 30 10\nmain;b 10 20\n"


def test_diff_of_two_captures_is_written_as_three_columns(tmp_path):
    out = _ok("--diff", BEFORE, AFTER, "--format", "folded", "-o", tmp_path)
    written = tmp_path / "diff-php.samples.folded"
    assert f"wrote {written}" in out
    before, after = parse_diff_folded(written.read_text().splitlines())
    _ok(AFTER, "--format", "folded", "-o", tmp_path / "after.folded")
    folded_lines = (tmp_path / "after.folded").read_text().splitlines()
    assert {k: v for k, v in after.items()} == {
        line.rsplit(" ", 1)[0]: int(line.rsplit(" ", 1)[1]) for line in folded_lines}
    assert sum(before.values()) <= sum(after.values()) and before    # normalized to AFTER's total, truncated
    for bad, said in ((("--format", "speedscope", "-o", tmp_path / "x.json"), "SVG or as three-column folded"),
                      (("-o", tmp_path / "x.svg"), None)):
        r = _lockdown("--diff", written, AFTER, *bad) if said is None else _lockdown("--diff", BEFORE, AFTER, *bad)
        assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.output
        assert (said or "is a three-column (differential) folded file") in r.stderr


def test_lockdown_writes_what_inferno_diff_folded_writes(tmp_path):
    tool = _inferno("inferno-diff-folded")
    a, b = tmp_path / "a.folded", tmp_path / "b.folded"
    _ok(BEFORE, "--format", "folded", "-o", a)
    _ok(AFTER, "--format", "folded", "-o", b)
    for flags, ours in (((), ("--no-normalize",)), (("-n",), ())):
        theirs = subprocess.run([tool, *flags, a, b], capture_output=True, text=True, check=True).stdout
        _ok("--diff", a, b, *ours, "-o", tmp_path / "ours.folded")
        assert (tmp_path / "ours.folded").read_text() == "".join(sorted(theirs.splitlines(keepends=True)))
        assert len(theirs.splitlines()) > 20


def test_inferno_diff_folded_output_renders_here_and_ours_renders_in_inferno(tmp_path):
    diff_tool, graph_tool = _inferno("inferno-diff-folded"), _inferno("inferno-flamegraph")
    a, b = tmp_path / "a.folded", tmp_path / "b.folded"
    _ok(BEFORE, "--format", "folded", "-o", a)
    _ok(AFTER, "--format", "folded", "-o", b)
    theirs = tmp_path / "theirs.folded"
    theirs.write_text(subprocess.run([diff_tool, a, b], capture_output=True, text=True, check=True).stdout)
    _ok(theirs, "--no-normalize", "-o", tmp_path / "theirs.svg")
    ours_svg = (tmp_path / "theirs.svg").read_text()
    total_after = sum(int(line.rsplit(" ", 1)[1]) for line in b.read_text().splitlines())
    assert f'data-s="{total_after}"' in ours_svg                      # the root is AFTER's total
    _ok("--diff", a, b, "--no-normalize", "-o", tmp_path / "ours.folded")
    svg = subprocess.run([graph_tool], stdin=(tmp_path / "ours.folded").open(), capture_output=True, text=True,
                         check=True).stdout
    m = re.search(r"<title>all \(([\d,]+) samples, 100(?:\.00)?%\)</title>", svg)
    assert m and int(m.group(1).replace(",", "")) == total_after, svg[:2000]
