"""Give `[unknown]` native frames a function identity before anything counts them.

perf names only exported functions of Debian's stripped php-fpm8.2, so samples in static
functions arrive as `[unknown]`. The bundle records each DSO's build id; the symbol table for
that build (`symbols.py`: .symtab, debug symbols, .dynsym, PLT stubs and .eh_frame ranges) names
every function, unexported ones as `php-fpm8.2+0x3368e0`. Tables come from the build-id cache or
from the DSO on this machine when its build id still matches; otherwise frames stay `[unknown]`.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from ..bundle.model import PerfSample
from ..php_ini import JIT_OFF, is_off
from . import symbols
from .symbols import SymbolTable

UNKNOWN = "[unknown]"
PCRE_JIT = "[PCRE JIT code]"
# anonymous executable memory, where JIT compilers put their code (perf names it after the
# /tmp/perf-PID.map it would read symbols from); subsystems.toml's JIT passthrough matches it too
_JIT_DSO = re.compile(r"//anon$|\[anon|perf-\d+\.map$|memfd:")


def jit_name(manifest: dict) -> str | None:
    """What the target's anonymous JIT code is, from the capture's php.ini: PCRE2's JIT code
    when OPcache's JIT cannot have run (OPcache or its JIT off, or no JIT buffer; PHP 8.2's
    default), else None (either JIT: the frame stays unnamed). perf cannot unwind out of JIT
    code, so such a sample has no caller to tell: on WordPress all 17 had one frame, and
    went to `vm` as unnamed JIT code."""
    ini = (manifest.get("php") or {}).get("ini") or {}
    if not isinstance(ini, dict) or "opcache.jit_buffer_size" not in ini:
        return None

    def off(key: str) -> bool:
        return is_off(ini.get(key), JIT_OFF)

    return PCRE_JIT if off("opcache.enable") or off("opcache.jit") or off("opcache.jit_buffer_size") else None


def tables_for(build_ids: Mapping[str, str]) -> dict[str, SymbolTable]:
    """DSO path -> symbol table of exactly the build the bundle saw."""
    out: dict[str, SymbolTable] = {}
    for dso, bid in build_ids.items():
        if not dso.startswith("/") or not bid:
            continue
        table = symbols.cached(bid)
        if table is None and os.path.isfile(dso):
            try:
                if symbols.build_id(dso) == bid:
                    table = symbols.load(dso)
            except (OSError, ValueError, Exception):  # not an ELF, unreadable: stays unnamed
                table = None
        if table is not None:
            out[dso] = table
    return out


@dataclass
class Identity:
    """How many samples keep a leaf with no name at all, the done-when figure of the analysis."""
    samples: int = 0
    leaf_unknown_before: int = 0
    leaf_unknown_after: int = 0
    frames_named: int = 0

    @property
    def leaf_unknown_pct(self) -> float:
        return 100.0 * self.leaf_unknown_after / self.samples if self.samples else 0.0

    def to_json(self) -> dict:
        return {"samples": self.samples, "leaf_unknown_before": self.leaf_unknown_before,
                "leaf_unknown_after": self.leaf_unknown_after, "frames_named": self.frames_named,
                "leaf_unknown_pct": round(self.leaf_unknown_pct, 2)}


def symbolize(samples: Iterable[PerfSample], tables: Mapping[str, SymbolTable],
              identity: Identity | None = None, jit: str | None = None) -> list[PerfSample]:
    """Samples with `[unknown]` frames named from `tables` (frame offsets become offsets from
    the function start), and unnamed frames in anonymous JIT memory named `jit` when given
    (`jit_name`); other frames untouched. Counts go to `identity` when given."""
    ident = identity if identity is not None else Identity()
    memo: dict[tuple[str, str], tuple[str, int | None] | None] = {}
    out = []
    for s in samples:
        ident.samples += 1
        if s.frames and s.frames[0][1] == UNKNOWN:
            ident.leaf_unknown_before += 1
        frames = s.frames
        if any(f[1] == UNKNOWN and (f[3] in tables or (jit and _JIT_DSO.search(f[3]))) for f in frames):
            frames = [_named(f, tables, memo, ident, jit) for f in frames]
            s = replace(s, frames=frames)
        if frames and frames[0][1] == UNKNOWN:
            ident.leaf_unknown_after += 1
        out.append(s)
    return out


def _named(frame: list, tables: Mapping[str, SymbolTable], memo: dict, ident: Identity,
           jit: str | None = None) -> list:
    addr, sym, _off, dso = frame
    if sym == UNKNOWN and jit and dso not in tables and _JIT_DSO.search(dso):
        ident.frames_named += 1
        return [addr, jit, None, dso]
    if sym != UNKNOWN or dso not in tables:
        return frame
    key = (dso, addr)
    if key not in memo:
        table = tables[dso]
        hit = table.find(table.perf_to_vaddr(int(addr, 16)))
        memo[key] = None if hit is None else (hit[2], table.perf_to_vaddr(int(addr, 16)) - hit[0])
    named = memo[key]
    if named is None:
        return frame
    ident.frames_named += 1
    return [addr, named[0], named[1], dso]
