"""`lockdown export --format callgrind` read by valgrind's own callgrind_annotate (Debian's
valgrind): per request, per URL and merged, its program totals are the exported profiles'
main() (wall time, CPU time, peak memory growth: the request's, as the xhprof export repairs
it), and each function's inclusive wall time is what lockdown's analysis of the same profile
gives. A real capture of `hello` with tideways_xhprof's cpu and memory metrics."""
import json
import re
import subprocess

import pytest

from conftest import lockdown_runner
from lockdown.analyzers.builtins import function_totals
from lockdown.harness.toolchain import tool

EVENTS = ["wt", "cpu", "pmu"]


@pytest.fixture(scope="module")
def bundle(home, tmp_path_factory):
    out = tmp_path_factory.mktemp("callgrind") / "b"
    r = lockdown_runner(home)("profile", "hello", "-o", out, "--requests", "20", "--warmup-requests", "2",
                              "--no-overhead-check", "--collect", "xhprof", "--xhprof-every", "2",
                              "--xhprof-flags", "cpu,memory")
    assert r.returncode == 0, r.stdout + r.stderr
    return out


@pytest.fixture(scope="module")
def profiles(bundle, home, tmp_path_factory):
    """The repaired profiles, as the XHGui export writes them: request id -> profile."""
    out = tmp_path_factory.mktemp("callgrind") / "xhgui"
    r = lockdown_runner(home)("export", bundle, "-o", out, "--format", "xhgui")
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in (out / "xhgui.data.jsonl").read_text().splitlines()]
    return {d["meta"]["SERVER"]["UNIQUE_ID"]: d["profile"] for d in lines}


def annotate(path, inclusive=False, event="wt"):
    """callgrind_annotate's program totals and {function: cost} (every function: threshold 100)."""
    r = subprocess.run([tool("callgrind_annotate"), f"--inclusive={'yes' if inclusive else 'no'}",
                        "--threshold=100", f"--show={','.join(EVENTS) if not inclusive else event}", str(path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "WARNING" not in r.stderr, r.stderr
    number = r"([\d,]+)(?: \([ \d.]+%\))?"
    totals = re.search(r"^\s*" + r"\s+".join([number] * (1 if inclusive else 3)) + r"\s+PROGRAM TOTALS", r.stdout, re.M)
    assert totals, r.stdout
    funcs = {}
    for m in re.finditer(r"^\s*" + number + r"\s+php:(?:user|internal):(.+)$", r.stdout, re.M):
        funcs[m[2]] = int(m[1].replace(",", ""))
    return [int(g.replace(",", "")) for g in totals.groups() if g is not None], funcs


def index_of(out):
    header, *rows = [line.split("\t") for line in (out / "index.tsv").read_text().splitlines()]
    return [dict(zip(header, row)) for row in rows]


def test_callgrind_per_request_totals_and_inclusive_times(lockdown, bundle, profiles, tmp_path):
    out = tmp_path / "cg"
    r = lockdown("export", bundle, "-o", out, "--format", "callgrind")
    assert r.returncode == 0, r.stderr
    assert "callgrind_annotate " in r.stdout
    rows = index_of(out)
    assert sorted(row["request_ids"] for row in rows) == sorted(profiles) and len(rows) >= 4
    for row in rows:
        profile = profiles[row["request_ids"]]
        path = out / row["file"]
        assert path.name.startswith("callgrind.out.")            # the name KCachegrind opens
        totals, _ = annotate(path)
        assert totals == [profile["main()"][e] for e in EVENTS]   # the request's wall, CPU, peak memory
        _, inclusive = annotate(path, inclusive=True)
        want = {f: t["inclusive_us"] for f, t in function_totals(profile).items() if f != "main()"}
        inclusive.pop("main()")
        assert inclusive == want and "htmlspecialchars" in want
        text = path.read_text()
        assert "events: wt cpu pmu" in text and "\nfn=(1) main()\n" in text
        calls = sum(int(n) for n in re.findall(r"^calls=(\d+) ", text, re.M))
        assert calls == sum(v["ct"] for k, v in profile.items() if "==>" in k)


@pytest.mark.parametrize("group", ["url", "all"])
def test_callgrind_merged_totals_are_the_sum_of_their_requests(lockdown, bundle, profiles, tmp_path, group):
    out = tmp_path / group
    r = lockdown("export", bundle, "-o", out, "--format", "callgrind", "--group", group)
    assert r.returncode == 0, r.stderr
    rows = index_of(out)
    assert len(rows) == (1 if group == "all" else 2)             # hello serves two URLs
    assert sorted(i for row in rows for i in row["request_ids"].split()) == sorted(profiles)
    for row in rows:
        ids = row["request_ids"].split()
        totals, _ = annotate(out / row["file"])
        assert totals == [sum(profiles[i]["main()"][e] for i in ids) for e in EVENTS]
        assert int(row["requests"]) == len(ids)
        if group == "url":
            assert len(row["urls"].split()) == 1


def test_callgrind_of_one_request_and_bad_group(lockdown, bundle, profiles, tmp_path):
    rid = sorted(profiles)[0]
    r = lockdown("export", bundle, "-o", tmp_path / "one", "--format", "callgrind", "--request", rid)
    assert r.returncode == 0, r.stderr
    assert [row["request_ids"] for row in index_of(tmp_path / "one")] == [rid]
    for args, word in ((("--format", "callgrind", "--group", "host"), "--group"),
                       (("--format", "callgrind", "--kind", "native"), "--kind"),
                       (("--group", "url"), "--group"),                  # xhprof runs are per request
                       (("--format", "pprof", "--raw"), "--raw")):
        r = lockdown("export", bundle, "-o", tmp_path / "bad", *args)
        assert r.returncode == 2 and word in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
        assert not (tmp_path / "bad").exists()
