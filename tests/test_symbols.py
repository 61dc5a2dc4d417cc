"""Symbols for stripped binaries: .dynsym names, FDE-based identities for static functions,
PLT stubs, the build-id cache, and agreement with what perf printed in a real capture."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from elftools.dwarf.callframe import FDE
from elftools.elf.elffile import ELFFile

from lockdown.analyzers import symbols
from lockdown.analyzers.symbols import SymbolTable

PHP_FPM = Path("/usr/sbin/php-fpm8.2")
LIBC = Path("/usr/lib/x86_64-linux-gnu/libc.so.6")


@pytest.fixture(autouse=True)
def private_home(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCKDOWN_HOME", str(tmp_path / "home"))


@pytest.fixture(scope="module")
def fpm() -> SymbolTable:
    return SymbolTable.from_elf(PHP_FPM)


def dynsym_functions(path: Path) -> dict[str, tuple[int, int]]:
    with open(path, "rb") as f:
        return {s.name: (s["st_value"], s["st_size"])
                for s in ELFFile(f).get_section_by_name(".dynsym").iter_symbols()
                if s["st_info"]["type"] == "STT_FUNC" and s["st_value"]}


def test_ranges_are_sorted_and_disjoint(fpm):
    assert fpm.source == ".dynsym"  # Debian's php-fpm is stripped
    assert len(fpm.starts) == len(fpm.ends) == len(fpm.names) > 3000
    assert all(s < e for s, e in zip(fpm.starts, fpm.ends))
    assert all(e <= s for e, s in zip(fpm.ends, fpm.starts[1:]))


def test_exported_functions_keep_their_names(fpm):
    funcs = dynsym_functions(PHP_FPM)
    start, size = funcs["execute_ex"]
    assert fpm.lookup(start) == fpm.lookup(start + size - 1) == "execute_ex"
    assert fpm.lookup(start + size) != "execute_ex"
    for name in ("_emalloc", "_efree", "zend_hash_find", "php_pcre_match_impl"):
        assert fpm.lookup(funcs[name][0]) == name
    # Every sized export starts a range at its own address (aliases may pick another name).
    for start, size in funcs.values():
        if size:
            assert fpm.find(start)[0] == start


def test_static_functions_get_fde_identities(fpm):
    with open(PHP_FPM, "rb") as f:
        fdes = symbols._fde_ranges(ELFFile(f))
    exported = {v[0] for v in dynsym_functions(PHP_FPM).values()}
    uncovered = [(s, e) for s, e in fdes if s not in exported and not fpm.lookup(s).endswith("@plt")
                 and "+0x" in fpm.lookup(s)]
    assert len(uncovered) > 5000  # the bulk of php-fpm's functions are static
    for s, e in uncovered[::50]:
        start, end, name = fpm.find(s)
        assert (start, name) == (s, f"php-fpm8.2+0x{s:x}")
        assert end <= e and fpm.lookup(e) != name  # no smearing past the FDE
    assert fpm.lookup(0) is None and fpm.lookup(1 << 40) is None


def test_builtin_handlers_are_named_from_the_function_tables(fpm):
    # Debian exports only a dozen zif_ symbols; the engine's zend_function_entry tables name the
    # rest. Where both exist they must agree (zlib registers gzclose etc. on the same handlers).
    funcs = dynsym_functions(PHP_FPM)
    with open(PHP_FPM, "rb") as f:
        handlers = symbols._handler_names(ELFFile(f))
    exported = {n: a for n, (a, _) in funcs.items() if n.startswith("zif_")}
    agree = [n for n, a in exported.items() if handlers.get(a) == n]
    assert len(agree) >= 10 and len(agree) >= len(exported) - 1, (exported, agree)
    assert len(handlers) > 1000 and all(re.fullmatch(r"zif_\w+|zim_::\w+", n) for n in handlers.values())
    names = set(fpm.names)
    assert {"zif_array_merge", "zif_implode", "zif_count", "zif_str_replace", "zif_in_array",
            "zif_preg_replace_callback", "zif_get_object_vars", "zif_function_exists"} <= names
    assert not {"zif_join", "zif_sizeof", "zif_key_exists"} & names  # aliases: the canonical name
    for name in ("zif_array_merge", "zif_str_replace"):  # unexported: an FDE's start, not smeared
        start, end, _ = fpm.find(fpm.starts[fpm.names.index(name)])
        assert name not in funcs and fpm.lookup(end) != name
    # so a sample in a builtin's own code is `builtin`, not the `vm` of its caller execute_ex
    from lockdown.analyzers.subsystems import categorise
    from lockdown.analyzers.symbolize import symbolize
    start = fpm.starts[fpm.names.index("zif_array_merge")]
    named = symbolize([_sample(start + 4)], {str(PHP_FPM): fpm})[0]
    assert named.frames[0][1] == "zif_array_merge" and categorise(named.frames) == "builtin"


def test_fde_headers_match_pyelftools():
    """Our header-only .eh_frame walker against pyelftools' full parser (libc: ~1 s)."""
    with open(LIBC, "rb") as f:
        elf = ELFFile(f)
        ref = [(e.header.initial_location, e.header.initial_location + e.header.address_range)
               for e in elf.get_dwarf_info().EH_CFI_entries()
               if isinstance(e, FDE) and e.header.address_range]
        assert symbols._fde_ranges(elf) == ref


@pytest.mark.skipif(not shutil.which("objdump"), reason="objdump not installed")
def test_plt_names_match_objdump(fpm):
    out = subprocess.run(["objdump", "-d", "-j", ".plt", "-j", ".plt.got", str(PHP_FPM)],
                         capture_output=True, text=True, check=True).stdout
    stubs = {int(a, 16): n for a, n in re.findall(r"^([0-9a-f]+) <(\S+@plt)>:", out, re.M)}
    assert len(stubs) > 500
    assert all(fpm.lookup(a) == n for a, n in stubs.items())


def test_dynsym_names_carry_versions_like_perf(monkeypatch, tmp_path):
    monkeypatch.setattr(symbols, "DEBUG_ROOT", tmp_path / "no-debug")  # as without libc6-dbg
    libc = SymbolTable.from_elf(LIBC)
    assert libc.source == ".dynsym"
    with open(LIBC, "rb") as f:
        addrs = [s["st_value"] for s in ELFFile(f).get_section_by_name(".dynsym").iter_symbols()
                 if s.name == "clock_gettime"]
    assert len(set(addrs)) == 1
    assert libc.lookup(addrs[0]) == "clock_gettime@@GLIBC_2.17"  # what perf 6.1 printed


@pytest.mark.skipif(symbols.debug_file(symbols.build_id(LIBC)) is None, reason="no libc6-dbg")
def test_zero_size_symbol_is_bounded_by_its_fde():
    """glibc's `__restore_rt` has size 0; its FDE deliberately starts one byte early."""
    libc = SymbolTable.from_elf(LIBC)
    assert libc.source.endswith(".debug")
    start = libc.names.index("__restore_rt")
    with open(LIBC, "rb") as f:
        fde = next((s, e) for s, e in symbols._fde_ranges(ELFFile(f))
                   if s <= libc.starts[start] < e)
    assert libc.ends[start] == fde[1]
    assert libc.lookup(fde[0]) == f"libc.so.6+0x{fde[0]:x}"


def test_perf_addresses_are_file_offsets():
    """perf prints `ip - map_start + pgoff`; only segments with p_offset != p_vaddr differ."""
    t = SymbolTable("libx.so", None, [0x2010F9, 0x20111B], [0x201114, 0x201142],
                    ["libx.so+0x2010f9", "lib_spin"], [(0x1000, 0x201000, 0x14D)])
    assert t.lookup_perf(0x1140) == "lib_spin" and t.lookup(0x1140) is None
    assert t.lookup_perf(0x1108) == "libx.so+0x2010f9"


def test_cache_by_build_id(tmp_path, monkeypatch):
    first = symbols.load(PHP_FPM)
    cache = symbols.cache_dir() / f"{first.build_id}.json"
    assert cache.is_file()
    with monkeypatch.context() as m:      # the second load must not parse the ELF again
        m.setattr(symbols, "_build", lambda *a: 1 / 0)
        again = symbols.load(PHP_FPM)
    assert again == first
    assert symbols.cached(first.build_id) == first

    # Same bytes but another build id: a new entry, named after the new file.
    data = bytearray(PHP_FPM.read_bytes())
    at = data.find(bytes.fromhex(first.build_id))
    data[at] ^= 0xFF
    other = tmp_path / "php-fpm-rebuilt"
    other.write_bytes(data)
    rebuilt = symbols.load(other)
    assert rebuilt.build_id != first.build_id
    assert (symbols.cache_dir() / f"{rebuilt.build_id}.json").is_file() and cache.is_file()
    assert any(n.startswith("php-fpm-rebuilt+0x") for n in rebuilt.names)

    # No build id note at all: keyed by content hash.
    data[at - 8:at - 4] = (0x99).to_bytes(4, "little")  # n_type no longer NT_GNU_BUILD_ID
    other.write_bytes(data)
    anon = symbols.load(other)
    assert anon.build_id is None
    assert len(list(symbols.cache_dir().glob("sha1-*.json"))) == 1


def test_agrees_with_perf_on_real_capture(wordpress_bundle):
    """Where perf named a frame of a real WordPress capture (the session's shared bundle), our
    tables give the same symbol and offset, and they name every frame perf left [unknown]."""
    r, bundle = wordpress_bundle
    assert r.returncode == 0, r.stderr
    build_ids = json.loads((bundle / "perf" / "buildids.json").read_text())
    tables = {dso: symbols.load(dso) for dso, bid in build_ids.items()
              if dso.startswith("/") and Path(dso).is_file() and symbols.build_id(dso) == bid}
    assert str(PHP_FPM) in tables, sorted(tables)   # captured just now, with this php-fpm
    known = {dso: set(t.names) for dso, t in tables.items()}
    seen = Counter()
    for line in (bundle / "perf" / "samples.jsonl").read_text().splitlines():
        for addr_hex, name, offset, dso in json.loads(line)["frames"]:
            table = tables.get(dso)
            if table is None:
                continue
            addr = table.perf_to_vaddr(int(addr_hex, 16))
            if name == "[unknown]":
                seen[dso, "unknown"] += 1
                seen[dso, "identified"] += table.lookup(addr) is not None
            elif offset is not None and not name.endswith("@plt") and name in known[dso]:
                # perf 6.1 mislabels some x86 PLT stubs (it assumes .rela.plt order); objdump
                # agrees with us there, see test_plt_names_match_objdump.
                seen[dso, "named"] += 1
                assert table.find(addr)[::2] == (addr - offset, name), (addr_hex, name, offset)
    fpm = str(PHP_FPM)
    assert seen[fpm, "named"] > 1000 and seen[fpm, "unknown"] > 1000
    assert seen[fpm, "identified"] == seen[fpm, "unknown"]


# --- naming a bundle's [unknown] frames ------------------------------------------------------

def _sample(addr: int, dso: str = str(PHP_FPM), symbol: str = "[unknown]"):
    from lockdown.bundle.model import PerfSample
    return PerfSample(time_ns=1, pid=1, tid=1, comm="php-fpm8.2", period=1, request="r000000",
                      frames=[[f"{addr:x}", symbol, None, dso], ["1000", "execute_ex", 5, dso]])


def test_symbolize_names_static_functions_of_the_build_the_bundle_saw(fpm):
    from lockdown.analyzers.symbolize import Identity, symbolize, tables_for
    unnamed = next(i for i, n in enumerate(fpm.names) if n.startswith("php-fpm8.2+0x"))
    start, end = fpm.starts[unnamed], fpm.ends[unnamed]
    exported = fpm.names.index("execute_ex")
    addr = start + (end - start) // 2
    samples = [_sample(addr), _sample(fpm.starts[exported] + 1), _sample(0x10, dso="/tmp/perf-1.map")]
    bid = symbols.build_id(PHP_FPM)
    ident = Identity()
    named = symbolize(samples, tables_for({str(PHP_FPM): bid, "[kernel.kallsyms]": "00"}), ident)
    assert named[0].frames[0][1] == fpm.names[unnamed] and named[0].frames[0][2] == addr - start
    assert named[1].frames[0][1] == "execute_ex"
    assert named[2].frames[0][1] == "[unknown]"        # JIT code has no table
    assert named[0].frames[1] == samples[0].frames[1]  # named frames are left alone
    assert ident.to_json() == {"samples": 3, "leaf_unknown_before": 3, "leaf_unknown_after": 1,
                               "frames_named": 2, "leaf_unknown_pct": 33.33}
    # another build of the binary than the one the bundle saw: nothing is guessed
    assert tables_for({str(PHP_FPM): "0" * 40}) == {}
    assert symbolize(samples[:1], {}, None)[0].frames[0][1] == "[unknown]"


def test_anonymous_jit_code_is_pcre_when_opcache_jit_cannot_run():
    """perf cannot unwind out of JIT code: the recorded WordPress capture's JIT samples have no
    caller, and counted as `vm` (the passthrough's fallback) while they were PCRE2's JIT."""
    import gzip
    from lockdown.analyzers.subsystems import categorise
    from lockdown.analyzers.symbolize import PCRE_JIT, jit_name, symbolize
    from lockdown.bundle.model import PerfSample
    debian = {"opcache.enable": "1", "opcache.jit": "", "opcache.jit_buffer_size": "0", "pcre.jit": "1"}
    assert jit_name({"php": {"ini": debian}}) == PCRE_JIT
    assert jit_name({"php": {"ini": {**debian, "opcache.jit": "tracing", "opcache.jit_buffer_size": "64M"}}}) is None
    assert jit_name({"php": {"ini": {**debian, "opcache.enable": "0", "opcache.jit": "tracing",
                                      "opcache.jit_buffer_size": "64M"}}}) == PCRE_JIT
    assert jit_name({}) is None and jit_name({"php": {"ini": {}}}) is None     # not recorded: not guessed
    path = Path(__file__).resolve().parent.parent / "fixtures" / "perf" / "wordpress.samples.jsonl.gz"
    with gzip.open(path, "rt") as fh:
        samples = [PerfSample(**json.loads(line)) for line in fh]
    jitted = [s for s in samples if re.search(r"perf-\d+\.map$", s.frames[0][3])]
    assert len(jitted) >= 5
    assert {categorise(s.frames) for s in symbolize(jitted, {})} == {"vm"}
    named = symbolize(jitted, {}, jit=PCRE_JIT)
    assert {s.frames[0][1] for s in named} == {PCRE_JIT} and {categorise(s.frames) for s in named} == {"regex"}
