"""The scripts in bench/ run and print what they promise. They are how the project measures
itself, and nothing else calls them: harness_precision.py and php_ini_effect.py had passed
`--duration 10.0` to `lockdown bench` since its --duration became whole seconds, and failed
before their first run without anyone noticing. Each runs here at the smallest size on
`hello`; the numbers are checked for consistency with each other, never against a timing."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from conftest import REPO, _env


def bench_script(home, name: str, *args: str, timeout: float = 300) -> str:
    """stdout of `python3 bench/NAME ARGS`, which must exit 0."""
    proc = subprocess.run([sys.executable, str(REPO / "bench" / name), *args], capture_output=True,
                          text=True, timeout=timeout, env=_env(home), cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


def numbers(line: str) -> list[float]:
    return [float(x) for x in re.findall(r"\d+(?:\.\d+)?", line)]


def test_harness_precision_prints_the_cv_and_the_host_beside_it(home):
    out = bench_script(home, "harness_precision.py", "--target", "hello", "--runs", "3", "--duration", "1")
    assert out.startswith("target hello: 3 runs of 1 s at concurrency ")
    rps = numbers(re.search(r"^rps per run: (.*)$", out, re.M).group(1))
    assert len(rps) == 3 and min(rps) > 0
    cv = float(re.search(r"^rps_cv (\d+\.\d+)%  \(min/max ratio (\d\.\d+)\)$", out, re.M).group(1))
    mean = sum(rps) / 3
    sd = (sum((x - mean) ** 2 for x in rps) / 2) ** 0.5
    assert abs(cv - 100 * sd / mean) < 0.2            # the CV of the runs it printed (rounded to 0.1)
    # three runs are enough to set the host's capacity beside it
    assert len(numbers(re.search(r"^host speed per run: (.*)$", out, re.M).group(1))) == 3
    assert re.search(r"^rps_cv / host capacity CV: \d+\.\d\d ", out, re.M)
    assert re.search(r"^servers' CPU per request: mean \d+\.\d\d ms, CV \d+\.\d\d% ", out, re.M), out


def test_php_ini_effect_prints_the_ratio_of_its_pairs(home):
    out = bench_script(home, "php_ini_effect.py", "--target", "hello", "--pairs", "1", "--duration", "1",
                       "--ini", "opcache.enable=0")
    last = out.strip().splitlines()[-1]
    m = re.fullmatch(r"hello: baseline (\d+\.\d) req/s, opcache\.enable=0 (\d+\.\d) req/s, ratio (\d\.\d{3})", last)
    assert m, out
    base, variant, ratio = map(float, m.groups())
    assert base > 0 and variant > 0 and abs(ratio - variant / base) < 0.002


def test_attribution_effect_prints_shares_and_ms_side_by_side(home, wordpress_bundle):
    # on existing bundles (the shared WordPress capture twice): no capture of its own
    _, b1 = wordpress_bundle
    out = bench_script(home, "attribution_effect.py", "--bundle", str(b1), "--bundle", str(b1))
    lines = out.strip().splitlines()
    assert lines[0].split() == ["b1", "b1"]
    samples, cpu = numbers(lines[1]), numbers(lines[2])
    assert samples[0] == samples[1] > 0 and cpu[0] == cpu[1] > 0
    rows = {line.split()[0]: numbers(line) for line in lines[3:]}
    assert "vm" in rows and sum(v[0] for v in rows.values()) == pytest.approx(100, abs=0.2)
    for pct, ms, pct2, ms2 in rows.values():
        # both printed to 0.1 ms: ms is rounded once, and the cpu it was computed from once more
        assert (pct, ms) == (pct2, ms2) and ms == pytest.approx(pct * cpu[0] / 100, abs=0.05 + 0.05 * pct / 100 + 1e-6)


def test_machine_noise_measures_each_core_count(home):
    out = bench_script(home, "machine_noise.py", "--runs", "2", "--seconds", "0.3", "--cores", "2")
    lines = out.strip().splitlines()
    assert [line.split(" core(s)")[0] for line in lines] == ["1", "2"]
    for line in lines:
        lo, mean, hi = map(float, re.search(r"min/mean/max (\S+)/(\S+)/(\S+),", line).groups())
        assert lo <= mean == 1.0 <= hi                 # work per run, relative to the mean


def test_fold_speed_times_lockdowns_folder_against_the_others(home):
    """On a given perf script: lockdown's folder, its pure-Python reference when the native one
    is built, and each other tool either timed with the same output or skipped with the reason."""
    from lockdown.analyzers.folded import NATIVE
    out = bench_script(home, "fold_speed.py", "--script", str(REPO / "fixtures" / "perf" / "wordpress.script.txt.gz"),
                       "--repeat", "1")
    lines = out.splitlines()
    assert re.match(r"^input: \d+\.\d MB of perf script, [\d,]+ lines, 769 samples \(given: ", lines[0])
    assert lines[1] == "note: 769 samples, fewer than the 50,000 the comparison is meant for"
    ours = next(x for x in lines if x.startswith("lockdown fold_perf_bytes"))
    assert ours.endswith(f"({'native' if NATIVE else 'pure Python: native/ not built'}; baseline)")
    if NATIVE:
        assert any(x.startswith("lockdown pure Python") and x.endswith("(reference: same output)") for x in lines)
    for tool in ("inferno-collapse-perf", "inferno-collapse-perf -n 1", "stackcollapse-perf.pl"):
        line = next(x for x in lines if x.startswith(tool + "  ") or x.startswith(tool + " skipped"))
        assert line.endswith("(same output)") or " skipped: " in line, line
    assert "DIFFERS" not in out


def test_fold_speed_captures_when_given_no_script(home):
    out = bench_script(home, "fold_speed.py", "--target", "hello", "--requests", "60", "--perf-freq", "999",
                       "--repeat", "1", "--no-python")
    m = re.match(r"^input: [\d.]+ MB of perf script, [\d,]+ lines, ([\d,]+) samples \(captured now: hello, "
                 r"60 requests at 999 Hz\)$", out.splitlines()[0])
    assert m and int(m.group(1).replace(",", "")) > 0 and "DIFFERS" not in out


def test_ab_calibration_counts_the_significant_aa_comparisons_it_printed(home):
    out = bench_script(home, "ab_calibration.py", "--target", "hello", "--times", "1", "--runs", "5",
                       "--duration", "1")
    rows = [line for line in out.splitlines() if re.match(r"^\s+\d+ ", line)]
    assert len(rows) == 1
    hits = sum(row.endswith("  significant") for row in rows)
    verdict = re.search(r"^verdict \(host capacity taken out\): (\d) of 1 A/A comparisons significant = "
                        r"(\d+\.\d)% \(95% interval (\d+\.\d) \.\. (\d+\.\d)%; nominal 5%\)$", out, re.M)
    assert verdict and int(verdict.group(1)) == hits and float(verdict.group(2)) == 100.0 * hits
    lo, hi = float(verdict.group(3)), float(verdict.group(4))
    assert lo <= 100.0 * hits <= hi and (lo, hi) != (0.0, 100.0)      # Wilson: a real interval, even of 1
    assert re.search(r"^paired ratios alone: \d of 1 A/A comparisons significant", out, re.M)
    assert re.search(r"^servers' CPU per request: \d of 1 A/A comparisons significant", out, re.M)
    assert re.search(r"^mean smallest change resolved \(80% power\): \d+\.\d% \(5 pairs of 1 s\)$", out, re.M)
