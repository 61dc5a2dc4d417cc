"""Folded stacks as stackcollapse-perf.pl makes them, Excimer folding, folded files, speedscope.

The reference is stackcollapse-perf.pl's own output on the committed perf script fixtures
(fixtures/perf/expected, recorded by fixtures/perf/record_expected.py with the script from
brendangregg/FlameGraph); when the script is on this machine, the recordings are checked again."""
from __future__ import annotations

import gzip
import io
import json
import os
import sys
import shutil
import subprocess
from pathlib import Path

import pytest

from lockdown.analyzers.folded import (fold_excimer, fold_perf, fold_perf_records, fold_perf_text,
                                       format_folded,
                                       read_folded, write_folded)
from lockdown.bundle.model import ExcimerProfile, PerfSample
from lockdown.formats.perf_script import Frame, Sample, parse
from lockdown.reports.speedscope import SCHEMA, to_speedscope, write_speedscope

REPO = Path(__file__).resolve().parent.parent
SMALL = REPO / "fixtures" / "perf" / "small.script.txt"
# The bundle records (perf/samples.jsonl) of the capture that wordpress.script.txt.gz came from
WORDPRESS_RECORDS = REPO / "fixtures" / "perf" / "wordpress.samples.jsonl.gz"

P = 10101010   # cpu-clock period at 99 Hz, in ns
PAGE_FAULT = "php-fpm8.2;execute_ex"


def small() -> list[Sample]:
    with open(SMALL, encoding="utf-8") as f:
        return list(parse(f))


def one(comm="php-fpm8.2", pid=4242, tid=4242, period=P, event="cpu-clock:pppH",
        frames=(("36230e", "execute_ex", 0x5d4e, "/usr/sbin/php-fpm8.2"),)) -> Sample:
    return Sample(comm, pid, tid, 100_000_000_001, period, event,
                  [Frame.from_json(list(f)) for f in frames])


# --- stackcollapse-perf.pl rules -------------------------------------------------------------

def test_all_options_on():
    folded = fold_perf(small(), include_tid=True, annotate_kernel=True, annotate_jit=True,
                       addrs=True, counts=True)
    assert folded == {
        "php-fpm8.2-4242/4242": 1,
        "php-fpm8.2-4242/4242;[unknown <ffffffffffffffff>];[php-fpm8.2 <110ed1>];execute_ex;"
        "__memset_evex;[[kernel.kallsyms] <ffffffff81000000>]_[k];get_page_from_freelist_[k];"
        "clear_page_erms_[k]": 2,
        "php-fpm8.2-4243/4243;zend_execute;JIT$WP_Hook::apply_filters_[j];"
        "[perf-4243.map <7f1904bf9998>]_[j];RegExp:[&<>]_[j];clock_gettime@@GLIBC_2.17;"
        "__vdso_clock_gettime_[k]": 1,
        "php-fpm:_pool_w-4244/4245;php_execute_script;Lcom/example/Foo:.bar;"
        "net/http.(*Client).Do;std::unique_ptr<Foo, std::default_delete<Foo> >::operator;_[i];"
        "ns::(anonymous namespace)::Parser::parse;"
        "std::vector<int, std::allocator<int> >::_M_realloc_insert": 1,
        "swapper-?/0;start_kernel_[k];tcp_sendmsg_[k];default_idle_[k];native_safe_halt_[k]": 1,
        "worker-?/2;execute_ex": 1,
    }


def test_pid_roots():
    roots = {k.split(";")[0] for k in fold_perf(small(), include_pid=True)}
    # swapper's TID 0 is false in Perl, so its PID becomes "?"; "worker 2" loses its " 2" to
    # the TID field.
    assert roots == {"php-fpm8.2-4242", "php-fpm8.2-4243", "php-fpm:_pool_w-4244", "swapper-?",
                     "worker-?"}


def test_tid_wins_over_pid():
    assert fold_perf([one()], include_pid=True, include_tid=True) == \
        {"php-fpm8.2-4242/4242;execute_ex": P}


def test_event_filter_defaults_to_first_event():
    samples = small()
    assert PAGE_FAULT not in fold_perf(samples)
    assert fold_perf(samples, event_filter="page-faults") == {PAGE_FAULT: 1}
    page_first = [s for s in samples if s.event == "page-faults"] + samples
    assert fold_perf(page_first, counts=True) == {PAGE_FAULT: 2}


def test_periods_summed_unless_counts():
    samples = [one(period=P), one(period=3 * P), one(period=0)]
    assert fold_perf(samples) == {"php-fpm8.2;execute_ex": 4 * P + 1}   # period 0 counts 1
    assert fold_perf(samples, counts=True) == {"php-fpm8.2;execute_ex": 3}


def test_odd_process_names():
    assert fold_perf([one(comm="#cron")]) == {}            # a comment line to the script
    assert fold_perf([one(comm="V8 WorkerThread")]) == {"V8_WorkerThread;execute_ex": P}
    # The script's comm is 2+ characters: a 1-character one takes the PID's padding space...
    assert fold_perf([one(comm="a")]) == {"a_;execute_ex": P}
    # ...or, with a 5-digit PID, the shortest match runs on to the period, taken as the TID.
    assert fold_perf([one(comm="a", pid=16132, tid=16132)], include_tid=True) == \
        {"a_16132/16132___100.000000001:-?/10101010;execute_ex": P}


def test_frame_tidying():
    frames = [
        ("10", "foo;bar(int)", 0x10, "/x/libfoo.so"),                # ";" -> ":", args cut
        ("11", "a->b->", None, "/x/libfoo.so"),                      # inline parts, no empty tail
        ("12", "(deleted)", None, "/x/libfoo.so"),                   # starts with "(": dropped
        ("13", "quote's \"x\"", None, "/x/libfoo.so"),
        ("14", "[unknown]", None, ""),
        ("15", "Lorg/Foo;.run()V", 0x1, "/tmp/perf-9.map"),
        ("16", "f", None, "/tmp/x (deleted)"),
    ]
    folded = fold_perf([one(frames=frames)], annotate_jit=True)
    # "/tmp/x (deleted)": the symbol runs to the last " (", so "f (/tmp/x" is cut to "f ".
    assert folded == {"php-fpm8.2;f ;Lorg/Foo:.run_[j];[];quotes x;a;b_[i];foo:bar": P}
    java = fold_perf([one(comm="java", frames=frames[5:6])])
    assert java == {"java;org/Foo:.run": P}


def test_inline_parts_marked_once_and_unmatched_headers_dropped():
    frames = [("10", "f->g_[i]->h", None, "/x/libfoo.so")]
    assert fold_perf([one(frames=frames)]) == {"php-fpm8.2;f;g_[i];h_[i]": P}   # no second "_[i]"
    assert fold_perf([one(comm="")]) == {}             # a header the script's pattern cannot read


def test_no_frames_counts_as_root():
    assert fold_perf([one(frames=())]) == {"php-fpm8.2": P}


# --- bundle records --------------------------------------------------------------------------

def records_of(samples: list[Sample]) -> list[PerfSample]:
    return [PerfSample(s.time_ns, s.pid, s.tid, s.comm, s.period, None,
                       [f.to_json() for f in s.frames]) for s in samples]


def test_records_fold_like_text():
    samples = [s for s in small() if s.event == "cpu-clock:pppH"]
    opts = dict(include_tid=True, annotate_kernel=True, annotate_jit=True, addrs=True)
    assert fold_perf_records(records_of(samples)) == fold_perf(samples)
    assert fold_perf_records(records_of(samples), **opts) == fold_perf(samples, **opts)


def test_real_bundle_records_fold_like_script():
    with gzip.open(WORDPRESS_RECORDS, "rt", encoding="utf-8") as f:
        records = [PerfSample.from_json(json.loads(line)) for line in f]
    from_text = fold_perf_text(io.StringIO(script_text("wordpress"), newline=""))
    assert len(records) > 700 and fold_perf_records(records) == from_text
    assert sum(fold_perf_records(records, counts=True).values()) == len(records)


# --- stackcollapse-perf.pl's own output, recorded in fixtures/perf/expected ---------------------

sys.path.insert(0, str(REPO / "fixtures" / "perf"))
import record_expected  # noqa: E402  (the fixtures' own recorder: names, inputs, option sets)

KWARGS = {"default": {}, "pid": {"include_pid": True}, "tid": {"include_tid": True},
          "kernel-jit": {"annotate_kernel": True, "annotate_jit": True},
          "addrs-all": {"addrs": True, "annotate_kernel": True, "annotate_jit": True}}


def script_text(fixture: str) -> str:
    return record_expected.read_bytes(record_expected.FIXTURES[fixture]).decode("utf-8")


def test_every_recorded_option_set_is_checked():
    assert set(KWARGS) == set(record_expected.OPTION_SETS)


@pytest.mark.parametrize("options", sorted(KWARGS))
@pytest.mark.parametrize("fixture", sorted(record_expected.FIXTURES))
def test_same_as_stackcollapse_perf_pl(fixture, options):
    """Text folding and parsed-sample folding both give, byte for byte, what
    stackcollapse-perf.pl printed for the same perf script and options."""
    expected = gzip.decompress(record_expected.expected_path(fixture, options).read_bytes()).decode()
    text = script_text(fixture)
    assert expected.count("\n") > 0
    from_text = format_folded(fold_perf_text(io.StringIO(text, newline=""), **KWARGS[options]))
    assert from_text == expected
    assert format_folded(fold_perf(parse(io.StringIO(text)), **KWARGS[options])) == expected


def find_stackcollapse() -> str | None:
    candidates = [os.environ.get("STACKCOLLAPSE_PERF"), shutil.which("stackcollapse-perf.pl"),
                  "/usr/share/flamegraph/stackcollapse-perf.pl", "/opt/FlameGraph/stackcollapse-perf.pl"]
    return next((c for c in candidates if c and os.path.isfile(c)), None)


@pytest.mark.parametrize("options", sorted(KWARGS))
@pytest.mark.parametrize("fixture", sorted(record_expected.FIXTURES))
def test_recordings_still_match_the_script(fixture, options):
    """Where the Perl script is at hand, the recordings are checked against it again."""
    script = find_stackcollapse()
    if script is None or shutil.which("perl") is None:
        pytest.skip("stackcollapse-perf.pl not here (set STACKCOLLAPSE_PERF); recordings used")
    run = subprocess.run(["perl", script, *record_expected.OPTION_SETS[options]],
                         input=script_text(fixture).encode(), capture_output=True, timeout=300)
    assert run.returncode == 0, run.stderr
    recorded = gzip.decompress(record_expected.expected_path(fixture, options).read_bytes())
    assert run.stdout == recorded


def test_text_folding_keeps_the_scripts_line_state():
    """A filtered event leaves its frames out, an unterminated last sample is not counted, and
    comment lines inside a sample are skipped: as the script's loop does."""
    text = ("php 1/1 1.000000001: 5 cpu-clock: \n\t1 a+0x1 (/x)\n\n"
            "php 1/1 1.000000002: 7 page-faults: \n\t2 b+0x1 (/x)\n\n"
            "php 1/1 1.000000003: 3 cpu-clock: \n# a comment\n\t1 a+0x1 (/x)\n\t3 c (/x)\n\n"
            "php 1/1 1.000000004: 9 cpu-clock: \n\t1 a+0x1 (/x)\n")
    assert fold_perf_text(io.StringIO(text, newline="")) == {"php;a": 5, "php;c;a": 3}
    assert fold_perf_text(io.StringIO(text, newline=""), event_filter="page-faults") == {"php;b": 7}
    assert fold_perf_text(io.StringIO(text, newline=""), counts=True) == {"php;a": 1, "php;c;a": 1}
    # a comment that reads like a header is still a comment; a frame line the script's pattern
    # does not match (no "(dso)") adds nothing; lines given without their newline lose nothing
    odd = ["php 1/1 1.000000001: 5 cpu-clock: ", "# perf 2/2 1.000000002: 7 cpu-clock: ", "\t1 a+0x1 (/x)",
           "\tffff", "\t3 cc (/x)", ""]
    assert fold_perf_text(odd) == {"php;cc;a": 5}
    # a header without ": PERIOD EVENT:" weighs 1; a 1-character comm takes the PID's padding
    # the same frame line under a Java process and another one is tidied for each
    java_then_php = ["java 1/1 1.000000001: 5 cpu-clock: ", "\t1 Lorg/Foo;.run()V (/tmp/perf-1.map)", "",
                     "php 2/2 1.000000002: 5 cpu-clock: ", "\t1 Lorg/Foo;.run()V (/tmp/perf-1.map)", ""]
    assert fold_perf_text(java_then_php) == {"java;org/Foo:.run": 5, "php;Lorg/Foo:.run": 5}
    bare = "php 1/1 1.000000001:\n\t1 a (/x)\n\na  4242/4242 1.000000002: 5 cpu-clock: \n\t1 a (/x)\n\n"
    assert fold_perf_text(io.StringIO(bare, newline="")) == {"php;a": 1, "a_;a": 5}


# --- Excimer ---------------------------------------------------------------------------------

def profiles() -> list[ExcimerProfile]:
    return [
        ExcimerProfile("r1", 10, ["index.php;main", "index.php;main;strlen"],
                       [[1, 1, 0], [2, 2, 1], [3, 1, 0]]),
        ExcimerProfile("r2", 11, ["index.php;main"], [[5, 4, 0]]),
    ]


def test_fold_excimer_sums_weights():
    assert fold_excimer(profiles()) == {"index.php;main": 6, "index.php;main;strlen": 2}
    assert fold_excimer(profiles(), request_ids=["r2"]) == {"index.php;main": 4}
    assert fold_excimer(profiles(), request_ids=[]) == {}


# --- folded files ----------------------------------------------------------------------------

def test_write_then_read(tmp_path):
    folded = {"b;c": 2, "a b;c": 1, "a": 0.5, "é;x": 3}
    path = tmp_path / "out.folded"
    write_folded(folded, path)
    assert path.read_text(encoding="utf-8") == "a 0.5\na b;c 1\nb;c 2\né;x 3\n"
    assert read_folded(path) == folded


def test_counts_print_as_perl_prints_them():
    # integers exactly, other numbers with %.15g
    assert format_folded({"b": 10 ** 16, "a": 0.1 + 0.2, "c": 2.5}) == "a 0.3\nb 10000000000000000\nc 2.5\n"


def test_read_sums_repeats_and_skips_empty_lines(tmp_path):
    path = tmp_path / "in.folded"
    path.write_text("a;b 2\n\na;b 3\nc 1.\n", encoding="utf-8")
    assert read_folded(path) == {"a;b": 5, "c": 1.0}


@pytest.mark.parametrize("text,line", [
    ("a;b 1\nno-count\n", 2),
    ("a;b x\n", 1),
    ("a;b -1\n", 1),
    (" 5\n", 1),
    ("a 1\nb 2\na;b 1 2\n", 3),          # differential input: two counts
    ("a 1\nb " + "9" * 400 + "\n", 2),    # beyond a float: the renderers' arithmetic overflows
    ("a " + "9" * 400 + ".5\n", 1),        # float() gives inf
    ("a " + "9" * 5000 + "\n", 1),         # more digits than int() takes
    ("a 1" + "0" * 308 + "\nb 1" + "0" * 308 + "\n", 2),     # each fits, the total does not
], ids=lambda v: repr(v[:30]) if isinstance(v, str) else str(v))
def test_read_rejects_malformed_lines(tmp_path, text, line):
    path = tmp_path / "bad.folded"
    path.write_bytes(text.encode())
    with pytest.raises(ValueError, match=rf"line {line}\b"):
        read_folded(path)


def test_flamegraph_of_a_folded_file_rejects_what_is_not_finite(lockdown, tmp_path):
    path = tmp_path / "in.folded"
    path.write_text("a;b 1\n", encoding="utf-8")
    r = lockdown("flamegraph", path, "-o", tmp_path / "x.svg", "--minwidth", "nan")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--minwidth" in r.stderr, r.stderr
    path.write_text("a;b 1\nc " + "9" * 400 + ".5\n", encoding="utf-8")
    for out in ("x.svg", "x.folded"):
        r = lockdown("flamegraph", path, "-o", tmp_path / out)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "line 2" in r.stderr, r.stderr
        assert not (tmp_path / out).exists()


# --- speedscope ------------------------------------------------------------------------------

def check_speedscope(doc: dict, folded: dict) -> None:
    assert doc["$schema"] == SCHEMA and isinstance(doc["version"], str)
    assert doc["activeProfileIndex"] == 0           # the one profile (an index past it shows nothing)
    frames = [f["name"] for f in doc["shared"]["frames"]]
    assert len(frames) == len(set(frames))
    (profile,) = doc["profiles"]
    assert profile["type"] == "sampled"
    assert len(profile["samples"]) == len(profile["weights"])
    rebuilt = {";".join(frames[i] for i in s): w
               for s, w in zip(profile["samples"], profile["weights"])}
    assert rebuilt == folded
    assert profile["startValue"] == 0 and profile["endValue"] == sum(folded.values())


def test_speedscope_from_folded(tmp_path):
    folded = fold_perf(small())
    doc = to_speedscope(folded, "wordpress native", unit="nanoseconds")
    check_speedscope(doc, folded)
    assert doc["profiles"][0]["unit"] == "nanoseconds"
    first = doc["profiles"][0]["samples"][1]      # root..leaf
    names = [doc["shared"]["frames"][i]["name"] for i in first]
    assert names[0] == "php-fpm8.2" and names[-1] == "clear_page_erms"
    path = tmp_path / "p.speedscope.json"
    write_speedscope(fold_excimer(profiles()), path, "php")
    check_speedscope(json.loads(path.read_text(encoding="utf-8")), fold_excimer(profiles()))


def test_speedscope_empty_and_bad_unit():
    check_speedscope(to_speedscope({}, "empty"), {})
    with pytest.raises(ValueError):
        to_speedscope({"a": 1}, "x", unit="cycles")
