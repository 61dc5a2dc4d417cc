"""`lockdown compare`: two php.ini configurations of one target in interleaved A/B runs, on
the real stack (hello), and its one-line errors."""
import json

from conftest import processes_mentioning
from lockdown.reports import numbers
from lockdown.reports.compare_text import format_compare

SHORT = ("--runs", "5", "--duration", "1", "--warmup-duration", "0")


def test_two_configurations_are_measured_in_interleaved_pairs_and_their_pages_compared(lockdown, tmp_path):
    """opcache off against on: both arms run, in flipped pairs, each with its own settings,
    which reach the workers (hello prints the engine's state, so the pages show the change)."""
    run_dir = tmp_path / "cmp"
    r = lockdown("compare", "hello", "--with", "opcache.enable=0", "--php-ini", "memory_limit=96M",
                 *SHORT, "--run-dir", run_dir)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    result = json.loads((run_dir / "compare.json").read_text())
    assert result["php_ini"] == {"both": {"memory_limit": "96M"}, "with": {"opcache.enable": "0"}}
    ab = result["bench"]
    assert len(ab["before"]["runs"]) == len(ab["after"]["runs"]) == 5
    assert ab["order"][:4] == ["before", "after", "after", "before"]
    assert all(run["rps"] > 0 for arm in ("before", "after") for run in ab[arm]["runs"])
    assert ab["before"]["php_ini_effective_overrides"].get("memory_limit") == "96M"
    assert ab["after"]["php_ini_effective_overrides"].get("opcache.enable") == "0"
    assert "opcache.enable" not in ab["before"]["php_ini_effective_overrides"]
    assert ab["change"]["pairs"] == 5 and len(ab["change"]["ci95_pct"]) == 2
    # no prediction to plan for: exactly --runs pairs, and how finely they resolve
    assert "plan" not in ab and "power" not in ab["change"] and ab["change"]["resolvable_pct"] > 0
    assert ("resolution: these pairs resolve changes of" in r.stdout) is not ab["change"]["significant"]
    # the page says which engine served it: the comparison finds the difference, and where
    pages = result["responses"]
    assert pages["urls"] == 2 and pages["same"] == 0
    first = pages["pages"][0]["first_difference"]
    assert "opcache=on memory_limit=96M" in first["before"] and "opcache=off memory_limit=96M" in first["after"]
    out = r.stdout
    assert "compare hello: baseline (memory_limit=96M) against with opcache.enable=0" in out
    assert "throughput: " in out and "5 interleaved pairs" in out
    assert "pages: 2 of 2 URLs serve a different page after the change: / " in out
    assert "see responses in compare.json" in out
    # what a request costs the servers, each apart, and its paired change
    cpu = ab["change_server_cpu"]
    split = [ab[arm]["summary"]["server_cpu_by_server_ms"] for arm in ("before", "after")]
    assert cpu["pairs"] == 5 and all(set(x) == {"nginx", "php-fpm"} for x in split), split
    assert (f"servers' CPU per request: {numbers.ms_fine(ab['before']['summary']['server_cpu_ms_mean'])} -> "
            f"{numbers.ms_fine(ab['after']['summary']['server_cpu_ms_mean'])} ms (nginx ") in out
    # wrk times in microseconds: its latency line needs no note; under siege's 10 ms it would
    latency = next(line for line in out.splitlines() if "latency (mean of runs)" in line)
    assert latency.endswith(" ms"), latency
    for arm in ("before", "after"):
        for run in ab[arm]["runs"]:
            run.update(tool="siege", latency_resolution_ms=10.0)
    assert format_compare(result).split("latency (mean of runs)")[1].splitlines()[0].endswith(
        " ms (siege reports latency to the nearest 10 ms: 0.0 means under 5 ms)")
    assert processes_mentioning(str(run_dir)) == []


def test_bad_comparisons_get_one_line(lockdown, home, tmp_path):
    runs = home / "runs"
    before = set(runs.iterdir()) if runs.is_dir() else set()
    r = lockdown("compare", "hello")
    assert r.returncode == 2 and "nothing to compare" in r.stderr and r.stderr.count("\n") == 1
    r = lockdown("compare", "hello", "--with", "opcache.enable")
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "bad --with 'opcache.enable': expected KEY=VALUE" in r.stderr     # the option given
    r = lockdown("compare", "hello", "--with", "opcache.enable=0", "--php-ini", "jit")
    assert r.returncode == 2 and "bad --php-ini 'jit': expected KEY=VALUE" in r.stderr
    r = lockdown("compare", "hello", "--with", "opcache.enable=0", "--php-ini", "opcache.enable=0")
    assert r.returncode == 2 and "both configurations would be the same" in r.stderr
    r = lockdown("compare", "no-such-target", "--with", "opcache.enable=0")
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "keep.txt").write_text("mine")
    r = lockdown("compare", "hello", "--with", "opcache.enable=0", "--run-dir", tmp_path / "used")
    assert r.returncode == 2 and "is not empty" in r.stderr
    assert (tmp_path / "used" / "keep.txt").read_text() == "mine"
    r = lockdown("compare", "hello", "--with", "opcache.enable=0", "--runs", "4")
    assert r.returncode == 2 and "--runs" in r.stderr
    # wrk, siege and ab take whole seconds only: a fraction is refused before anything starts
    r = lockdown("compare", "hello", "--with", "opcache.enable=0", "--duration", "0.5")
    assert r.returncode == 2 and "--duration" in r.stderr
    # nothing was started, so no run directory was made
    assert (set(runs.iterdir()) if runs.is_dir() else set()) == before


def test_a_comparison_that_runs_out_of_time_stops_both_arms(lockdown, tmp_path):
    """Both stacks are up for the whole comparison: a --timeout stops both, and no result is
    written."""
    run_dir = tmp_path / "cmp"
    r = lockdown("compare", "hello", "--with", "opcache.enable=0", "--runs", "5", "--duration", "5",
                 "--warmup-duration", "0", "--run-dir", run_dir, "--timeout", "6")
    assert r.returncode == 1                      # a runtime failure
    assert r.stderr.startswith("lockdown: error: timed out after 6 s (--timeout)")
    assert (run_dir / "before").is_dir() and (run_dir / "after").is_dir()
    assert not (run_dir / "compare.json").exists()
    assert processes_mentioning(str(run_dir)) == []

