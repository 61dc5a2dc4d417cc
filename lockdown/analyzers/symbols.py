"""Function names for native addresses in stripped binaries (Debian's php-fpm8.2, extensions).

perf names only what `.dynsym` exports, so samples in static functions show as `[unknown]`, and a
nearest-preceding-symbol lookup would smear them onto an exported neighbour. Every function still
has an unwind entry (an FDE in `.eh_frame`), so FDE ranges give each uncovered function its own
identity, `<basename>+0x<start>`, stable for a given build. Names come from `.symtab`, else from
detached debug symbols (/usr/lib/debug/.build-id, e.g. libc6-dbg), else `.dynsym`; x86-64 PLT
stubs are named `sym@plt` from the GOT slot they jump through. A function without a symbol that is
a PHP builtin's handler is named from the `zend_function_entry` tables the engine and each
extension register (`zif_<function>`, or `zim_::<method>`: the class is not in the table), read
from the dynamic relocations that fill them: Debian's php-fpm8.2 exports 12 `zif_` symbols, the
tables name about 1,500 handlers.

Addresses: `lookup()` takes ELF virtual addresses. perf script prints callchain frames as
`ip - map_start + map_pgoff`, a *file offset* in the DSO (checked with perf 6.1 on a non-PIE
binary and on a library whose p_offset != p_vaddr); `lookup_perf()` maps it through the
executable PT_LOAD headers. For Debian's binaries p_offset == p_vaddr, so there the two agree.

Tables are cached as JSON per GNU build id under `$LOCKDOWN_HOME/symbols/`.
"""
from __future__ import annotations

import bisect
import hashlib
import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import NoteSection, SymbolTableSection

from .. import paths

FORMAT = 2  # 2: builtin handlers named from zend_function_entry tables
_FUNC_TYPES = ("STT_FUNC", "STT_GNU_IFUNC")
_SHF_EXECINSTR = 0x4
_PF_X = 0x1
DEBUG_ROOT = Path("/usr/lib/debug")


@dataclass
class SymbolTable:
    """Sorted, non-overlapping `[start, end) -> name` ranges over one ELF's virtual addresses."""
    basename: str
    build_id: str | None
    starts: list[int]
    ends: list[int]
    names: list[str]
    # PT_LOAD segments as (p_offset, p_vaddr, p_filesz): turns perf's file offsets into vaddrs.
    segments: list[tuple[int, int, int]] = field(default_factory=list)
    source: str = ""  # where the names came from: ".symtab", ".dynsym" or a debug file's path

    @classmethod
    def from_elf(cls, path: str | os.PathLike) -> "SymbolTable":
        with open(path, "rb") as f:
            return _build(ELFFile(f), Path(path).name)

    def find(self, addr: int) -> tuple[int, int, str] | None:
        """`(start, end, name)` of the range holding `addr` (an ELF vaddr), or None."""
        i = bisect.bisect_right(self.starts, addr) - 1
        if i >= 0 and addr < self.ends[i]:
            return self.starts[i], self.ends[i], self.names[i]
        return None

    def lookup(self, addr: int) -> str | None:
        hit = self.find(addr)
        return hit[2] if hit else None

    def perf_to_vaddr(self, addr: int) -> int:
        """perf script's DSO-relative callchain address (a file offset) -> ELF vaddr."""
        for off, vaddr, size in self.segments:
            if off <= addr < off + size:
                return addr - off + vaddr
        return addr

    def lookup_perf(self, addr: int) -> str | None:
        return self.lookup(self.perf_to_vaddr(addr))

    def to_json(self) -> dict:
        return {"format": FORMAT, "basename": self.basename, "build_id": self.build_id,
                "source": self.source, "segments": self.segments,
                "starts": self.starts, "ends": self.ends, "names": self.names}

    @classmethod
    def from_json(cls, d: dict) -> "SymbolTable":
        if d.get("format") != FORMAT:
            raise ValueError(f"symbol cache format {d.get('format')!r}, expected {FORMAT}")
        return cls(d["basename"], d["build_id"], d["starts"], d["ends"], d["names"],
                   [tuple(s) for s in d["segments"]], d.get("source", ""))


# ---------------------------------------------------------------- cache

def cache_dir() -> Path:
    return paths.home() / "symbols"


def build_id(path: str | os.PathLike) -> str | None:
    with open(path, "rb") as f:
        return _build_id(ELFFile(f))


def debug_file(bid: str | None) -> Path | None:
    """Detached debug symbols (e.g. Debian's libc6-dbg) for a build id, if installed."""
    if not bid or len(bid) < 3 or not all(c in "0123456789abcdef" for c in bid):
        return None
    p = DEBUG_ROOT / ".build-id" / bid[:2] / f"{bid[2:]}.debug"
    return p if p.is_file() else None


def cached(bid: str) -> SymbolTable | None:
    """The cached table for a build id (e.g. from a bundle's buildids.json), if any."""
    p = cache_dir() / f"{bid}.json"
    try:
        return SymbolTable.from_json(json.loads(p.read_text()))
    except (OSError, ValueError, KeyError):
        return None


def load(path: str | os.PathLike) -> SymbolTable:
    """Table for `path`, from the build-id cache when possible; parses and caches otherwise.

    Files without a build id are keyed by the SHA-1 of their contents instead.
    """
    with open(path, "rb") as f:
        elf = ELFFile(f)
        key = _build_id(elf)
        if key is None:
            f.seek(0)
            key = "sha1-" + hashlib.sha1(f.read()).hexdigest()
        table = cached(key)
        dbg = debug_file(key)
        if table is not None and (dbg is None or table.source == str(dbg)):
            return table  # else: debug symbols were installed since it was cached
        table = _build(elf, Path(path).name)
    dest = cache_dir() / f"{key}.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(table.to_json(), separators=(",", ":")))
    os.replace(tmp, dest)
    return table


# ---------------------------------------------------------------- building

def _build_id(elf: ELFFile) -> str | None:
    for sec in elf.iter_sections():
        if isinstance(sec, NoteSection):
            for note in sec.iter_notes():
                # pyelftools labels every type-3 note NT_GNU_BUILD_ID, systemtap's too.
                if note["n_type"] == "NT_GNU_BUILD_ID" and note["n_name"] == "GNU":
                    desc = note["n_desc"]
                    return desc.hex() if isinstance(desc, bytes) else desc
    return None


def _build(elf: ELFFile, basename: str) -> SymbolTable:
    exec_secs = sorted((s["sh_addr"], s["sh_addr"] + s["sh_size"]) for s in elf.iter_sections()
                       if s["sh_flags"] & _SHF_EXECINSTR and s["sh_size"])
    bid = _build_id(elf)
    dbg = debug_file(bid)
    source, syms = _function_symbols(elf)
    if dbg is not None:
        with open(dbg, "rb") as f:
            dsource, dsyms = _function_symbols(ELFFile(f))
        if dsource == ".symtab":
            source, syms = str(dbg), dsyms
    syms.update(_plt_symbols(elf))
    fdes = sorted(r for r in _fde_ranges(elf) if _inside(exec_secs, r[0]))

    # Zero-sized symbols (hand-written assembly) run to the next known start (symbol or FDE),
    # like perf, but never past the end of the FDE or section holding them.
    fde_starts = [s for s, _ in fdes]
    marks = sorted(set(syms) | set(fde_starts))
    ranges: list[tuple[int, int, str]] = []
    for start, (size, name, _bind) in syms.items():
        end = start + size
        if not size:
            end = _inside(exec_secs, start)
            if not end:
                continue
            i = bisect.bisect_right(marks, start)
            if i < len(marks):
                end = min(end, marks[i])
            j = bisect.bisect_right(fde_starts, start) - 1
            if j >= 0 and fdes[j][1] > start:
                end = min(end, fdes[j][1])
        ranges.append((start, end, name))
    ranges = _flatten(sorted(ranges))

    # FDE ranges not covered by any symbol become `<basename>+0x<start>` (the FDE's start when
    # that is uncovered, else the start of the uncovered tail).
    starts = [r[0] for r in ranges]
    handlers = _handler_names(elf)
    extra = []
    for s, e in fdes:
        i = max(bisect.bisect_right(starts, s) - 1, 0)
        head_free = not (i < len(ranges) and ranges[i][0] <= s < ranges[i][1])
        cur = s
        while cur < e:
            while i < len(ranges) and ranges[i][1] <= cur:
                i += 1
            if i < len(ranges) and ranges[i][0] <= cur:
                cur = ranges[i][1]
                continue
            nxt = min(ranges[i][0] if i < len(ranges) else e, e)
            ident = s if head_free else cur
            extra.append((cur, nxt, handlers.get(ident) or f"{basename}+0x{ident:x}"))
            cur = nxt
    ranges = _flatten(sorted(ranges + extra))

    segments = [(p["p_offset"], p["p_vaddr"], p["p_filesz"]) for p in elf.iter_segments()
                if p["p_type"] == "PT_LOAD" and p["p_flags"] & _PF_X]
    return SymbolTable(basename, bid, [r[0] for r in ranges], [r[1] for r in ranges],
                       [r[2] for r in ranges], segments, source)


def _inside(secs: list[tuple[int, int]], addr: int) -> int:
    """End of the executable section holding `addr`, or 0."""
    for lo, hi in secs:
        if lo <= addr < hi:
            return hi
    return 0


def _flatten(ranges: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Sorted ranges -> non-overlapping: an earlier range is cut where the next one starts."""
    out: list[tuple[int, int, str]] = []
    for i, (s, e, n) in enumerate(ranges):
        if out and out[-1][0] == s:
            continue  # same start: the first (already the preferred) wins
        if i + 1 < len(ranges) and ranges[i + 1][0] < e:
            e = ranges[i + 1][0]
        if e > s:
            out.append((s, e, n))
    return out


def _function_symbols(elf: ELFFile) -> tuple[str, dict[int, tuple[int, str, str]]]:
    """start -> (size, name, binding), one name per address chosen as perf does."""
    sec = elf.get_section_by_name(".symtab")
    if not isinstance(sec, SymbolTableSection) or sec.num_symbols() <= 1:
        sec = elf.get_section_by_name(".dynsym")
    if not isinstance(sec, SymbolTableSection):
        return "", {}
    versions = _version_suffixes(elf) if sec.name == ".dynsym" else None
    best: dict[int, tuple[int, str, str]] = {}
    for i, sym in enumerate(sec.iter_symbols()):
        info = sym["st_info"]
        if info["type"] not in _FUNC_TYPES or sym["st_shndx"] == "SHN_UNDEF" or not sym["st_value"]:
            continue
        name = sym.name + (versions[i] if versions and i < len(versions) else "")
        cand = (sym["st_size"], name, info["bind"])
        old = best.get(sym["st_value"])
        if old is None or _prefer(cand, old):
            best[sym["st_value"]] = cand
    return sec.name, best


def _prefer(a: tuple[int, str, str], b: tuple[int, str, str]) -> bool:
    """perf's choose_best_symbol: sized, non-weak, global, fewer leading '_', longer name."""
    def keys(s: tuple[int, str, str]) -> tuple:
        return (s[0] > 0, s[2] != "STB_WEAK", s[2] == "STB_GLOBAL",
                -(len(s[1]) - len(s[1].lstrip("_"))), len(s[1]))

    return keys(a) > keys(b)


def _version_suffixes(elf: ELFFile) -> list[str] | None:
    """Per .dynsym index: '@@VER' (default), '@VER' (hidden) or '' - the names perf prints."""
    versym, verdef = elf.get_section_by_name(".gnu.version"), elf.get_section_by_name(".gnu.version_d")
    if versym is None or verdef is None:
        return None
    names = {}
    for vd, aux in verdef.iter_versions():
        if not vd["vd_flags"] & 1:  # VER_FLG_BASE names the file, not a version
            names[vd["vd_ndx"]] = next(iter(aux)).name
    fmt = "<" if elf.little_endian else ">"
    raw = versym.data()
    out = []
    for (v,) in struct.iter_unpack(fmt + "H", raw):
        name = names.get(v & 0x7FFF)
        out.append("" if name is None else ("@" if v & 0x8000 else "@@") + name)
    return out


def _plt_symbols(elf: ELFFile) -> dict[int, tuple[int, str, str]]:
    """`name@plt` for x86-64 PLT stubs: decode each stub's `jmp *GOT(%rip)` and name it after the
    relocation that fills that GOT slot (covers .plt, .plt.sec and .plt.got alike)."""
    if elf["e_machine"] != "EM_X86_64" or elf.elfclass != 64 or not elf.little_endian:
        return {}
    got_names: dict[int, str] = {}
    for name in (".rela.plt", ".rela.dyn"):
        rel = elf.get_section_by_name(name)
        if rel is None or rel["sh_type"] != "SHT_RELA":
            continue
        dynsym = elf.get_section(rel["sh_link"])
        if not isinstance(dynsym, SymbolTableSection):
            continue
        for off, info, addend in struct.iter_unpack("<QQq", rel.data()):
            kind = info & 0xFFFFFFFF
            if info >> 32 and kind in (6, 7):  # R_X86_64_GLOB_DAT, _JUMP_SLOT
                got_names.setdefault(off, dynsym.get_symbol(info >> 32).name)
            elif kind == 37:  # R_X86_64_IRELATIVE: named like objdump does
                got_names.setdefault(off, f"*ABS*+0x{addend:x}")
    out: dict[int, tuple[int, str, str]] = {}
    for secname in (".plt", ".plt.sec", ".plt.got"):
        sec = elf.get_section_by_name(secname)
        if sec is None:
            continue
        data, base = sec.data(), sec["sh_addr"]
        step = sec["sh_entsize"] if sec["sh_entsize"] in (8, 16) else 16
        for pos in range(0, len(data) - 5, step):
            j = pos + (4 if data[pos:pos + 4] == b"\xf3\x0f\x1e\xfa" else 0)  # endbr64
            j += data[j:j + 1] == b"\xf2"  # bnd prefix
            if data[j:j + 2] != b"\xff\x25" or j + 6 > len(data):
                continue
            got = base + j + 6 + struct.unpack_from("<i", data, j + 2)[0]
            if got in got_names:
                out[base + pos] = (step, f"{got_names[got]}@plt", "STB_GLOBAL")
    return out


# ---------------------------------------------------------------- PHP builtin handlers

_ENTRY = 32  # zend_function_entry: fname, handler, arg_info, uint32 num_args, uint32 flags
_ACC_VISIBILITY = 0x7  # ZEND_ACC_PUBLIC|PROTECTED|PRIVATE: set on methods, never on functions


def _handler_names(elf: ELFFile) -> dict[int, str]:
    """handler address -> `zif_<name>` / `zim_::<name>`, from the zend_function_entry arrays.

    In a PIE or shared object each entry's pointers are R_X86_64_RELATIVE relocations, so an
    entry is 32 bytes whose first word points at an identifier string in a read-only data
    section, whose second points into code and whose third (the arg info) is relocated too.
    One handler may be registered under several names (aliases such as `join` for `implode`,
    zlib's `gzclose` for `fclose`, mysqli's methods for its functions): a function name is
    preferred to a method name, then the name from the table whose handlers lie nearest."""
    if elf["e_machine"] != "EM_X86_64" or elf.elfclass != 64 or not elf.little_endian:
        return {}
    rel = elf.get_section_by_name(".rela.dyn")
    if rel is None or rel["sh_type"] != "SHT_RELA":
        return {}
    target = {off: addend for off, info, addend in struct.iter_unpack("<QQq", rel.data())
              if info & 0xFFFFFFFF == 8}  # R_X86_64_RELATIVE
    secs = [(s["sh_addr"], s["sh_addr"] + s["sh_size"], s) for s in elf.iter_sections()
            if s["sh_addr"] and s["sh_size"] and s["sh_type"] != "SHT_NOBITS"]
    code = [(lo, hi) for lo, hi, s in secs if s["sh_flags"] & _SHF_EXECINSTR]
    data: dict[str, bytes] = {}

    def holder(addr: int):
        return next(((lo, s) for lo, hi, s in secs if lo <= addr < hi), (0, None))

    def identifier(addr: int) -> str | None:
        lo, sec = holder(addr)
        if sec is None or sec["sh_flags"] & (_SHF_EXECINSTR | 0x1):  # code or writable
            return None
        raw = data.setdefault(sec.name, sec.data())
        end = raw.find(b"\0", addr - lo)
        name = raw[addr - lo:end] if 0 < end - (addr - lo) <= 128 else b""
        return name.decode() if name and name.replace(b"_", b"a").isalnum() and name.isascii() else None

    # (table start, name, handler, is_method), tables being runs of consecutive entries
    found: list[tuple[int, str, int, bool]] = []
    table = prev = -1
    for off in sorted(target):
        handler = target.get(off + 8)
        if handler is None or off + 16 not in target or not any(lo <= handler < hi for lo, hi in code):
            continue
        name = identifier(target[off])
        lo, sec = holder(off)
        if name is None or sec is None or off + _ENTRY > lo + sec["sh_size"]:
            continue
        raw = data.setdefault(sec.name, sec.data())
        num_args, flags = struct.unpack_from("<II", raw, off + 24 - lo)
        if num_args > 255:
            continue
        table = table if off == prev + _ENTRY else off
        prev = off
        found.append((table, name, handler, bool(flags & _ACC_VISIBILITY)))
    handlers_of: dict[int, list[int]] = {}
    for t, _, h, _ in found:
        handlers_of.setdefault(t, []).append(h)
    centre = {t: sorted(hs)[len(hs) // 2] for t, hs in handlers_of.items()}
    best: dict[int, tuple] = {}
    for t, name, h, method in found:
        key = (method, abs(centre[t] - h), t)
        if h not in best or key < best[h][0]:
            best[h] = (key, f"zim_::{name}" if method else f"zif_{name}")
    return {h: v[1] for h, v in best.items()}


# ---------------------------------------------------------------- call frame info

def _fde_ranges(elf: ELFFile) -> list[tuple[int, int]]:
    """`(initial_location, initial_location + address_range)` of every FDE in .eh_frame and
    .debug_frame. Only headers are read: pyelftools decodes every CFA instruction too, which
    takes ~3 s on php-fpm8.2 against a few ms here."""
    out = []
    for name in (".eh_frame", ".debug_frame"):
        sec = elf.get_section_by_name(name)
        if sec is not None and sec["sh_type"] != "SHT_NOBITS" and sec["sh_size"]:
            out += _parse_cfi(sec.data(), sec["sh_addr"], name == ".eh_frame",
                              elf.little_endian, elf.elfclass // 8)
    return [(s, s + n) for s, n in out if n > 0]


def _uleb(d: bytes, p: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        b = d[p]
        p += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return v, p


def _sleb(d: bytes, p: int) -> tuple[int, int]:
    start = p
    v, p = _uleb(d, p)
    bits = 7 * (p - start)
    return (v - (1 << bits) if v & (1 << (bits - 1)) else v), p


def _parse_cfi(d: bytes, sec_addr: int, eh: bool, le: bool, asize: int) -> list[tuple[int, int]]:
    e = "<" if le else ">"
    fixed = {0x02: "H", 0x03: "I", 0x04: "Q", 0x0A: "h", 0x0B: "i", 0x0C: "q"}

    def encoded(p: int, enc: int, apply: bool) -> tuple[int, int]:
        fmt = enc & 0x0F
        if fmt == 0x00:
            fmt = 0x04 if asize == 8 else 0x03
        if fmt == 0x01:
            v, q = _uleb(d, p)
        elif fmt == 0x09:
            v, q = _sleb(d, p)
        else:
            c = fixed[fmt]
            v, q = struct.unpack_from(e + c, d, p)[0], p + struct.calcsize(c)
        if apply and enc & 0x70 == 0x10:  # pcrel (textrel/datarel do not occur for code)
            v = (v + sec_addr + p) & ((1 << (8 * asize)) - 1)
        return v, q

    cies: dict[int, int] = {}  # CIE offset -> FDE pointer encoding
    out = []
    p = 0
    while p + 4 <= len(d):
        start = p
        length = struct.unpack_from(e + "I", d, p)[0]
        p += 4
        if length == 0:
            if eh:
                break
            continue
        wide = length == 0xFFFFFFFF
        if wide:
            length = struct.unpack_from(e + "Q", d, p)[0]
            p += 8
        end = p + length
        idsize = 8 if wide else 4
        cie_id = struct.unpack_from(e + ("Q" if wide else "I"), d, p)[0]
        is_cie = cie_id == 0 if eh else cie_id == (1 << (8 * idsize)) - 1
        if is_cie:
            cies[start] = _cie_encoding(d, p + idsize, eh, encoded)
        else:
            cie = (p - cie_id) if eh else cie_id
            enc = cies.get(cie)
            if enc is None:
                enc = cies[cie] = _cie_at(d, cie, e, eh, encoded)
            q = p + idsize
            try:
                loc, q = encoded(q, enc, True)
                rng, q = encoded(q, enc & 0x0F, False)
                out.append((loc, rng))
            except (KeyError, struct.error, IndexError):
                pass
        p = end
    return out


def _cie_at(d: bytes, off: int, e: str, eh: bool, encoded) -> int:
    """Encoding of a CIE met out of order (FDEs normally follow their CIE)."""
    wide = struct.unpack_from(e + "I", d, off)[0] == 0xFFFFFFFF
    return _cie_encoding(d, off + (20 if wide else 8), eh, encoded)


def _cie_encoding(d: bytes, p: int, eh: bool, encoded) -> int:
    """FDE pointer encoding from a CIE body (after its id): the 'R' augmentation, else absptr."""
    version = d[p]
    p += 1
    nul = d.index(b"\0", p)
    aug = d[p:nul].decode("ascii", "replace")
    p = nul + 1
    if "eh" in aug:
        return 0x00
    if version >= 4:
        p += 2  # address_size, segment_selector_size
    _, p = _uleb(d, p)  # code alignment
    _, p = _sleb(d, p)  # data alignment
    p = p + 1 if version == 1 else _uleb(d, p)[1]  # return address register
    if not aug.startswith("z"):
        return 0x00
    _, p = _uleb(d, p)  # augmentation data length
    for ch in aug[1:]:
        if ch == "R":
            return d[p]
        if ch == "P":
            penc = d[p]
            _, p = encoded(p + 1, penc & 0x7F, False)
        elif ch == "L":
            p += 1
        elif ch not in "SB":
            break
    return 0x00
