"""Hot native functions from perf's stacks: what `perf report --no-children` and `--children`
show, with each function's engine subsystem beside it.

An engine engineer reads this list first: the subsystem shares say the hash tables cost 20%,
this says which of `zend_hash_find`, `zend_hash_find_known_hash` or `zend_array_dup` does. A
function is its symbol in its DSO (the same name in two DSOs, such as libc's and the kernel's
`memcpy`, is two rows). Self: the function was the leaf; inclusive: anywhere on the stack,
counted once per sample however deep it recursed. The subsystem is the one
`subsystems.categorise` gives the stack from that frame down to the root, so libc's `memmove`
is listed as itself and put in the subsystem of its caller, as in the subsystem shares.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from .subsystems import Rules, categorise, dso_name
from .symbolize import UNKNOWN


_PER_PROCESS = re.compile(r"perf-\d+\.map$")


@dataclass(frozen=True)
class NativeFunction:
    name: str
    dso: str                 # the file name of the DSO ([kernel.kallsyms], libc.so.6, php-fpm8.2)
    subsystem: str           # the most frequent subsystem of its frames
    self_samples: int
    inclusive_samples: int


def hot_native(samples: Iterable, top: int = 20,
               rules: Rules | None = None) -> tuple[list[NativeFunction], int]:
    """The `top` native functions by self samples (then inclusive, then name), and the number
    of samples (the shares' base); `samples` are symbolized PerfSamples, leaf frame first."""
    samples = list(samples)     # a sample without frames counts in the base, as in the subsystems
    self_n: Counter = Counter()
    incl_n: Counter = Counter()
    for s in samples:
        if not s.frames:
            continue
        self_n[_key(s.frames[0])] += 1
        # a frame with no name is a function only as the leaf (where unwinding ended, it is
        # the root of every stack: 100% inclusive, and no information)
        incl_n.update({_key(f) for f in s.frames[1:] if f[1] != UNKNOWN} | {_key(s.frames[0])})
    listed = sorted(incl_n, key=lambda k: (-self_n[k], -incl_n[k], k))[:top]
    # each listed function's subsystem: that of its frame with the callers below it, once per
    # sample (the leafmost frame); one called from two subsystems' code (libc's memcpy) takes
    # the one it ran in most
    kinds: dict = {k: Counter() for k in listed}
    for s in samples:
        seen = set()
        for i, f in enumerate(s.frames):
            key = _key(f)
            if key in kinds and key not in seen and (i == 0 or f[1] != UNKNOWN):
                seen.add(key)
                kinds[key][categorise(s.frames[i:], rules)] += 1
    return [NativeFunction(name=k[0], dso=k[1], subsystem=_most(kinds[k]), self_samples=self_n[k],
                           inclusive_samples=incl_n[k]) for k in listed], len(samples)


def _key(frame) -> tuple[str, str]:
    """A frame ([addr, symbol, offset, dso]) as the function it is in: symbol and DSO file name
    (each worker's JIT map, perf-PID.map, as one)."""
    return frame[1], _PER_PROCESS.sub("perf-PID.map", dso_name(frame[3]))


def _most(c: Counter) -> str:
    """The most frequent key; the first by name among equals, so the result does not depend
    on the samples' order."""
    return min(c, key=lambda k: (-c[k], k))
