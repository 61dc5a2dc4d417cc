"""`lockdown flamegraph` on a real WordPress capture: SVG, folded and speedscope outputs for the
whole capture, one URL and one request, differential graphs, and clear errors on bad input."""
import json
import os
import subprocess
import xml.etree.ElementTree as ET
from collections import Counter

from lockdown.analyzers.folded import read_folded

from conftest import _env, lockdown_argv, lockdown_runner

SVG = "{http://www.w3.org/2000/svg}"


def frame_titles(svg_path):
    root = ET.parse(svg_path).getroot()
    return [t.text for t in root.iter(f"{SVG}title") if t.text]


def excimer_of(bundle):
    return [json.loads(line) for line in (bundle / "excimer.jsonl").read_text().splitlines()]


def test_php_and_native_flame_graphs(lockdown, wordpress_bundle, tmp_path):
    _, b1 = wordpress_bundle
    r = lockdown("flamegraph", b1, "-o", tmp_path / "php.svg")
    assert r.returncode == 0, r.stderr
    titles = frame_titles(tmp_path / "php.svg")
    assert any(t.startswith("WP::main (") for t in titles)
    r = lockdown("flamegraph", b1, "--kind", "native", "-o", tmp_path / "native.svg", "--reverse")
    assert r.returncode == 0, r.stderr
    assert any(t.startswith("execute_ex (") for t in frame_titles(tmp_path / "native.svg"))


def test_folded_export_counts_every_sample_of_the_timed_requests(lockdown, wordpress_bundle, tmp_path):
    _, b1 = wordpress_bundle
    out = tmp_path / "native.folded"
    assert lockdown("flamegraph", b1, "--kind", "native", "-o", out).returncode == 0
    folded = read_folded(out)
    requests = {q["id"]: q for q in map(json.loads, (b1 / "requests.jsonl").read_text().splitlines())}
    samples = [json.loads(line) for line in (b1 / "perf" / "samples.jsonl").read_text().splitlines()]
    timed = [s for s in samples if s["request"] and not requests[s["request"]]["instrumented"]]
    assert sum(folded.values()) == sum(s["period"] for s in timed)      # periods, as the script sums
    assert all(k.startswith("php-fpm8.2;") for k in folded)
    assert not any(k.endswith(";[unknown]") for k in folded if folded[k] > 0.05 * sum(folded.values()))


def test_one_request_and_one_url(lockdown, wordpress_bundle, tmp_path):
    _, b1 = wordpress_bundle
    profiles = {p["request"]: p for p in excimer_of(b1)}
    rid = sorted(profiles)[3]
    out = tmp_path / "one.folded"
    assert lockdown("flamegraph", b1, "--request", rid, "-o", out).returncode == 0
    expected = Counter()
    p = profiles[rid]
    # script frames are named relative to the app tree, so that two captures line up
    app = json.loads((b1 / "manifest.json").read_text())["run_dir"] + "/app/"
    for _, weight, i in p["samples"]:
        expected[p["stacks"][i].replace(app, "")] += weight
    assert read_folded(out) == dict(expected)
    assert all(not frame.startswith("/") for stack in expected for frame in stack.split(";"))
    url = json.loads((b1 / "requests.jsonl").read_text().splitlines()[0])["url"]
    r = lockdown("flamegraph", b1, "--url", url, "-o", tmp_path / "url.json")
    assert r.returncode == 0, r.stderr
    scope = json.loads((tmp_path / "url.json").read_text())
    assert scope["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    prof = scope["profiles"][0]
    assert len(prof["samples"]) == len(prof["weights"]) > 0 and prof["endValue"] == sum(prof["weights"])


def test_differential_graph_of_two_folded_files(lockdown, tmp_path):
    before, after = tmp_path / "before.folded", tmp_path / "after.folded"
    before.write_text("main;scan;is_dir 80\nmain;render 20\n")
    after.write_text("main;scan;is_dir 10\nmain;render 20\n")
    r = lockdown("flamegraph", "--diff", before, after, "-o", tmp_path / "diff.svg")
    assert r.returncode == 0, r.stderr
    titles = frame_titles(tmp_path / "diff.svg")
    assert any(t.startswith("is_dir") for t in titles) and any(t.startswith("render") for t in titles)


def test_bad_inputs_get_one_line(lockdown, wordpress_bundle, tmp_path):
    _, b1 = wordpress_bundle
    cases = [
        (("flamegraph", tmp_path / "nope", "-o", tmp_path / "x.svg"), "no such bundle"),
        (("flamegraph", b1, "-o", tmp_path / "x.png"), "cannot tell the format"),
        (("flamegraph", b1, "--request", "r999999", "-o", tmp_path / "x.svg"), "no request 'r999999'"),
        (("flamegraph", b1, "-o", tmp_path / "missing-dir" / "x.svg"), "cannot write"),
    ]
    bad = tmp_path / "bad.folded"
    bad.write_text("main;a 1 2 3 x\n")
    cases.append((("flamegraph", "--diff", bad, bad, "-o", tmp_path / "x.svg"), "not a folded-stacks file"))
    # never over an input: into the bundle, or over a folded file it reads
    cases += [(("flamegraph", b1, "-o", b1 / "requests.jsonl", "--format", "folded"), "which this command reads"),
              (("flamegraph", "--diff", bad, bad, "-o", bad, "--format", "svg"), "which this command reads")]
    inside = {p: p.stat().st_size for p in b1.rglob("*") if p.is_file()}
    for args, message in cases:
        r = lockdown(*args)
        assert r.returncode == 2 and message in r.stderr and r.stderr.count("\n") == 1, (args, r.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.folded"]   # nothing half-written
    assert {p: p.stat().st_size for p in b1.rglob("*") if p.is_file()} == inside


def test_folded_stacks_to_dev_stdout(wordpress_bundle, home, tmp_path):
    """`-o /dev/stdout` writes the document to the command's stdout (a pipe, or a file the
    shell opened, appended to as `>>` asks), and says "wrote" on stderr, out of the way."""
    _, b1 = wordpress_bundle
    file_out = tmp_path / "folded.txt"
    expected = lockdown_runner(home)("flamegraph", b1, "-o", tmp_path / "ref.folded")
    assert expected.returncode == 0
    reference = (tmp_path / "ref.folded").read_text()
    piped = subprocess.run(lockdown_argv("flamegraph", b1, "-o", "/dev/stdout", "--format", "folded"),
                           capture_output=True, text=True, env=_env(home), timeout=300)
    assert piped.returncode == 0 and piped.stdout == reference and piped.stderr == "wrote /dev/stdout\n"
    file_out.write_text("kept\n")
    with open(file_out, "a") as f:
        r = subprocess.run(lockdown_argv("flamegraph", b1, "-o", "/dev/stdout", "--format", "folded"),
                           stdout=f, stderr=subprocess.PIPE, text=True, env=_env(home), timeout=300)
    assert r.returncode == 0 and file_out.read_text() == "kept\n" + reference
    assert os.path.islink("/dev/stdout")            # and the system's link is still a link
