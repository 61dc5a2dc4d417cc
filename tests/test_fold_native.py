"""The native perf script folder (native/, module lockdown_native) against the pure-Python
reference, `fold_perf_text`: the same {stack: count} on real captures (the committed WordPress
perf script, the golden bundles' samples rendered as perf prints them) and on texts made of the
cases the rules single out (inlined frames, [unknown], missing symbols, kernel and JIT frames,
odd process names, filtered events, comments, unterminated samples). The native tests skip
where `make setup` could not build the folder (no cargo); `fold_perf_bytes` is tested either way."""
from __future__ import annotations

import gzip
import io
import json
import random
import sys
from pathlib import Path

import pytest

from lockdown.analyzers import folded
from lockdown.analyzers.folded import NATIVE, fold_perf_bytes, fold_perf_text, format_folded
from lockdown.bundle.model import PerfSample
from lockdown.formats.perf_script import Frame

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "fixtures" / "perf"))
import record_expected  # noqa: E402  (the fixtures' recorder: inputs, option sets, recordings)

needs_native = pytest.mark.skipif(not NATIVE, reason="native/ not built (no cargo when make setup ran)")

OPTION_SETS = [{}, {"include_pid": True}, {"include_tid": True}, {"annotate_kernel": True, "annotate_jit": True},
               {"addrs": True, "annotate_kernel": True, "annotate_jit": True}, {"counts": True},
               {"event_filter": "page-faults"}, {"include_tid": True, "counts": True, "addrs": True}]


def reference(data: bytes, **opts) -> dict[str, int]:
    return fold_perf_text(io.StringIO(data.decode("utf-8"), newline="\n"), **opts)


def native(data: bytes, **opts) -> dict[str, int]:
    return fold_perf_bytes(data, native=True, **opts)


def threaded(data: bytes, threads: int, **opts) -> dict[str, int]:
    """The native folder cutting the input into `threads` pieces however small (after empty
    lines) and folding them on as many threads."""
    return folded._native.fold_perf(data, threads=threads, min_piece=1, **opts)


def golden_text(name: str) -> bytes:
    """A golden bundle's perf records as `perf script` prints them (the folder's own renderer)."""
    out = []
    with open(REPO / "fixtures" / "golden" / name / "bundle" / "perf" / "samples.jsonl", encoding="utf-8") as f:
        for line in f:
            r = PerfSample.from_json(json.loads(line))
            out.append(folded._header_line(r.comm, r.pid, r.tid, r.time_ns, r.period, "cpu-clock:pppH"))
            out += [folded._frame_line(Frame.from_json(fr)) for fr in r.frames]
            out.append("")
    return ("\n".join(out) + "\n").encode()


# --- real captures ---------------------------------------------------------------------------

@needs_native
@pytest.mark.parametrize("options", sorted(record_expected.OPTION_SETS))
@pytest.mark.parametrize("fixture", sorted(record_expected.FIXTURES))
def test_native_prints_what_stackcollapse_perf_pl_printed(fixture, options):
    """Byte for byte the script's recorded output (fixtures/perf/expected), as the reference does."""
    data = record_expected.read_bytes(record_expected.FIXTURES[fixture])
    expected = gzip.decompress(record_expected.expected_path(fixture, options).read_bytes()).decode()
    from tests.test_folded import KWARGS
    assert format_folded(native(data, **KWARGS[options])) == expected


@needs_native
@pytest.mark.parametrize("opts", OPTION_SETS, ids=str)
@pytest.mark.parametrize("source", ["wordpress", "minicms", "minicms-engine-off"])
def test_native_equals_reference_on_real_captures(source, opts):
    data = (record_expected.read_bytes(record_expected.FIXTURES[source]) if source == "wordpress"
            else golden_text(source))
    want = reference(data, **opts)
    assert native(data, **opts) == want
    assert threaded(data, 3, **opts) == want
    if "event_filter" not in opts:          # every capture here is of one event: never empty
        assert len(want) > 20


def test_fold_perf_bytes_without_native_is_the_reference():
    data = record_expected.read_bytes(record_expected.FIXTURES["small"])
    got = fold_perf_bytes(data, native=False, annotate_kernel=True)
    assert got == reference(data, annotate_kernel=True) and got


def test_fold_perf_bytes_refuses_native_when_not_built(monkeypatch):
    monkeypatch.setattr(folded, "_native", None)
    with pytest.raises(RuntimeError, match="not built"):
        fold_perf_bytes(b"", native=True)
    assert fold_perf_bytes(b"php 1/1 1.000000001: 5 cpu-clock: \n\t1 a (/x)\n\n") == {"php;a": 5}


# --- the cases the rules single out ----------------------------------------------------------

COMMS = ["php-fpm8.2", "java", "javac", "a", "V8 WorkerThread", "#cron", "é", "worker 2", "php-fpm: pool www",
         "x:y", "php\t1"]
IDS = ["4242/4243", "4242/4242", "4242", "0/0", "17/0", "  7/  7", "1//2"]
EVENTS = ["cpu-clock:pppH", "cpu-clock:pppH", "page-faults", "cycles:u"]
SYMBOLS = ["execute_ex", "[unknown]", "", "zend_call->inlined_a->inlined_b", "f->", "a->b_[i]",
           "(anonymous namespace)::f(int)", "ns::(anonymous namespace)::f(int)", "std::unique_ptr<Foo>::operator->",
           "net/http.(*Client).Do",
           "f;g", "q\"x'y", "Lcom/example/Foo;.run()V", "JIT$WP_Hook::apply_filters", "(x)", "RegExp:[&<>]",
           "clear_page_erms", "ä_unicode", "f(int) const", "g_[j]", "h+0xZZ", "sym with space", "->"]
DSOS = ["[kernel.kallsyms]", "/usr/lib/debug/boot/vmlinux", "[unknown]", "/tmp/perf-4243.map", "[vdso]",
        "/usr/sbin/php-fpm8.2", "/usr/lib/x86_64-linux-gnu/libc.so.6", "", "a (b)", "/tmp/perf-x.map"]


def header(rng: random.Random) -> str:
    comm, ids = rng.choice(COMMS), rng.choice(IDS)
    period = rng.choice(["10101010", "0", "1", "007", "", "18446744073709551615"])
    tail = rng.choice([f" {period} {rng.choice(EVENTS)}: ", f": {period} {rng.choice(EVENTS)}:", ":", " ",
                       f": {rng.choice(EVENTS)}: ", f": {period} {rng.choice(EVENTS)}: \r"])
    return f"{comm} {ids} {rng.randrange(10**4)}.{rng.randrange(10**9):09d}{tail}"


def frame(rng: random.Random) -> str:
    off = rng.choice(["", "+0x1f", "+0x0", "+0xABC"])
    lead = rng.choice(["\t", "\t    ", "        ", " "])
    return f"{lead}{rng.randrange(1 << 48):x} {rng.choice(SYMBOLS)}{off} ({rng.choice(DSOS)})"


def text(rng: random.Random, samples: int) -> bytes:
    lines = []
    for _ in range(samples):
        lines.append(header(rng))
        lines += [frame(rng) for _ in range(rng.randrange(6))]
        odd = rng.random()
        if odd < 0.05:
            lines.append("# a comment")
        elif odd < 0.08:
            lines.append("\tffff")                   # no "(dso)": the script skips it
        elif odd < 0.10:
            continue                                  # no blank line: the next header follows
        lines.append("")
    last = "\n".join(lines)
    return (last if rng.random() < 0.5 else last + "\n").encode()


@needs_native
@pytest.mark.parametrize("seed", range(6))
def test_native_equals_reference_on_edge_cases(seed):
    rng = random.Random(seed)
    data = text(rng, 400)
    for opts in OPTION_SETS:
        want = reference(data, **opts)
        assert native(data, **opts) == want, opts
        for threads in (2, 7):
            assert threaded(data, threads, **opts) == want, (threads, opts)
        assert want or "event_filter" in opts


@needs_native
def test_native_edge_cases_by_name():
    """A few of the cases above with their results written out, so that the comparison is not
    between two folders that agree on nothing."""
    data = ("php 1/1 1.000000001: 5 cpu-clock: \n"
            "\t1 zend_call->inl+0x4 (/usr/sbin/php)\n\t2 [unknown] (/usr/lib/libfoo.so)\n"
            "\t3 [unknown] ([unknown])\n\tffff\n\t4 clear_page_erms+0x9 ([kernel.kallsyms])\n"
            "\t5 JIT$f (/tmp/perf-9.map)\n\t6 (anonymous namespace)::g(int) (/x)\n\n"
            "java 2/2 1.000000002: 7 cpu-clock: \n\t1 Lorg/Foo;.run()V (/tmp/perf-2.map)\n\n"
            "php 1/1 1.000000003: 9 page-faults: \n\t1 a (/x)\n\n"
            "php 1/1 1.000000004: 11 cpu-clock: \n\t1 a (/x)\n").encode()
    want = {"php;JIT$f_[j];clear_page_erms_[k];[unknown];[libfoo.so];zend_call;inl_[i]": 5,
            "java;org/Foo:.run_[j]": 7}
    assert native(data, annotate_kernel=True, annotate_jit=True) == want == \
        reference(data, annotate_kernel=True, annotate_jit=True)
    assert native(data, event_filter="page-faults", include_pid=True) == {"php-1;a": 9}


@needs_native
def test_native_refuses_what_the_reference_refuses():
    with pytest.raises(UnicodeDecodeError):
        native(b"php 1/1 1.1: 5 cpu-clock: \n\t1 \xff (/x)\n\n")
    with pytest.raises(UnicodeDecodeError):
        reference(b"php 1/1 1.1: 5 cpu-clock: \n\t1 \xff (/x)\n\n")


@needs_native
def test_counts_beyond_128_bits_go_to_the_reference():
    big = 10**40
    data = f"php 1/1 1.000000001: {big} cpu-clock: \n\t1 a (/x)\n\n".encode() * 2
    assert native(data) == reference(data) == {"php;a": 2 * big}
    assert fold_perf_bytes(data) == {"php;a": 2 * big}


@needs_native
def test_threads_keep_the_first_event_of_the_whole_input():
    """The default event filter is the first event named in the input, also when the piece that
    names it is not the first one; each piece starts after an empty line."""
    untyped = "php 1/1 1.000000001:\n\t1 a (/x)\n\n" * 3
    faults = "php 1/1 1.000000002: 7 page-faults: \n\t1 b (/x)\n\n\n" * 3
    clock = "php 1/1 1.000000003: 5 cpu-clock: \n# c\n\t1 c (/x)\n\n" * 3
    data = (untyped + faults + clock + "php 1/1 1.000000004: 5 cpu-clock: \n\t1 d (/x)\n").encode()
    want = {"php;a": 3, "php;b": 21}
    assert reference(data) == want
    for threads in (1, 2, 3, 5, 12):
        assert threaded(data, threads) == want, threads
    assert threaded(data, 4, event_filter="cpu-clock") == {"php;a": 3, "php;c": 15}
    with pytest.raises(UnicodeDecodeError):
        threaded(data + b"php 1/1 1.1: 5 cpu-clock: \n\t1 \xff (/x)\n\n", 3)


@needs_native
@pytest.mark.parametrize("seed", range(4))
def test_native_equals_reference_on_random_lines(seed):
    """Lines of random pieces, headers and frames alike: where the hand-written matching of the
    header and period patterns could part from the script's regular expressions."""
    rng = random.Random(seed)
    pieces = [" ", " ", "\t", "\r", "\x0b", "a", "é", "1", "42", "0", "/", ":", ": ", ".", "java", "php", "(", ")",
              " (", "->", "[unknown]", "+0x1f", "#", "cpu-clock", "_[k]", "/tmp/perf-1.map", "[kernel.kallsyms]"]
    lines = ["".join(rng.choice(pieces) for _ in range(rng.randrange(12))) for _ in range(4000)]
    data = "\n".join(lines).encode()
    for opts in ({}, {"include_tid": True, "annotate_kernel": True, "annotate_jit": True}, {"addrs": True}):
        want = reference(data, **opts)
        assert native(data, **opts) == want and threaded(data, 5, **opts) == want, opts
        assert len(want) > 10
