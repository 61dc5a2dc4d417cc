"""Frame colours for flame graph SVGs (lockdown/reports/flamegraph.py).

Why: flamegraph.pl's palettes know kernel, JIT and Java/Perl frames but nothing of PHP, and its
default picks colours at random, so the same function changes colour from one graph to the next.
Here a frame's colour is a function of its category and its name only: a hash of the name picks
a shade inside the category's hue range, so a frame looks the same in every graph.

Palettes
- "hot": flamegraph.pl's default look (red to yellow), every frame one category.
- "native": native (perf) frames only: engine, libraries, kernel, JIT, unknown, other native.
- "php": as "native" for native stacks, plus PHP code and PHP builtins for PHP (Excimer) stacks.

Which stacks are PHP stacks: a stack is a PHP stack when its root frame looks like PHP, i.e. a
script path (`.php`), `main`/`{main}`, a closure, or a `Class::method`/`Class->method`
(`is_php_root`). perf stacks are rooted at the process name (`php-fpm8.2`, `swapper`) and are
native. The same name can be two things: `main` is PHP's main script in an Excimer stack and
C's main() in a perf stack.

Categories (`classify`), checked in this order:
- kernel: `_[k]` suffix (stackcollapse-perf.pl --kernel), `[[kernel.kallsyms]]`, vmlinux, vdso,
  a few unmistakable entry points (`entry_SYSCALL*`, `do_syscall_64`, `__x64_sys_*`) and
  kernel threads as process names (`swapper`, `kworker/...`). The renderer also counts every
  native frame above a kernel frame as kernel (the kernel calls no user code), unless the
  graph is reversed.
- jit: `_[j]` suffix (--jit), opcache's `JIT$...` perf-map names, `[perf-PID.map]`.
- unknown: `[unknown]`, `[module]` frames, `module+0x...` (unnamed static functions).
- In PHP stacks, with `builtins` given (PHP's own function and class lists, e.g. from the
  bundle manifest): a name that is in the set, or whose class is, is a builtin; everything else
  is PHP code. Without `builtins`, a heuristic: names with `::`, `->`, a namespace `\\`, a
  closure, `main`, `{main}` or a `.php` path are PHP code; a plain name (`preg_match`,
  `str_replace`, `mysqli_query`) is a builtin when it is only ever a leaf in the graph's PHP
  stacks, and PHP code when it calls something. The heuristic is wrong for user functions
  that call nothing (they show as builtins) and for builtins that call back, such as
  `array_map` or `preg_replace_callback` (they show as PHP code); pass `builtins` to be exact.
- In native stacks: engine (the PHP binary, its extensions and profilers: `php-fpm8.2` as
  process name, `zend_*`, `ZEND_*`, `execute_ex`, `php_*`, `zif_*`, `_emalloc`, `fpm_*`,
  `mysqlnd_*`, `concat_function`, `excimer_*`, `tideways_*` ...), libraries (`.so`, glibc
  names such as `__libc_*`, `pthread_*`, `__memset_evex`, `malloc`, `read`,
  `clock_gettime@@GLIBC_2.17`, C++ `std::`, PCRE2, OpenSSL), else other native code.
  Inline frames (`_[i]`) and PLT stubs (`@plt`) are classified by the name before the suffix.
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Collection
from dataclasses import dataclass
from functools import lru_cache

PALETTES = ("php", "native", "hot")


@dataclass(frozen=True)
class Category:
    key: str
    label: str
    lo: tuple[int, int, int]      # the shade range: a name's hash picks a point between lo and hi
    hi: tuple[int, int, int]


CATEGORIES: dict[str, Category] = {c.key: c for c in (
    Category("php", "PHP code", (60, 155, 55), (150, 215, 110)),
    Category("builtin", "PHP builtin", (40, 160, 170), (115, 215, 220)),
    Category("engine", "PHP engine", (205, 190, 45), (240, 228, 120)),
    Category("lib", "libraries", (160, 125, 210), (205, 180, 245)),
    Category("kernel", "kernel", (225, 115, 35), (250, 170, 85)),
    Category("jit", "JIT", (80, 135, 225), (150, 190, 250)),
    Category("unknown", "unknown", (160, 160, 160), (205, 205, 205)),
    Category("other", "other native", (200, 55, 30), (240, 115, 65)),
)}
ROOT_FILL = "rgb(205,205,205)"    # the "all" frame in the php and native palettes

_KERNEL = re.compile(r"_\[k\]$|^\[\[?(?:kernel\.kallsyms|vmlinux|vdso)\]?\]$|vmlinux"
                     r"|^(?:entry_SYSCALL|do_syscall_64$|__x64_sys_|__do_sys_|__vdso_|asm_exc_"
                     r"|exc_page_fault$|asm_sysvec_|sysvec_|__irq_exit|irq_exit|handle_softirqs$"
                     r"|__do_softirq$|handle_mm_fault$|__handle_mm_fault$)"
                     r"|^(?:swapper|kworker/|ksoftirqd/|kthreadd$|migration/|rcu_sched$)")
_JIT = re.compile(r"_\[j\]$|^JIT\$|^\[perf-\d+\.map\]$")
_UNKNOWN = re.compile(r"^\[.*\]$|\+0x[0-9a-fA-F]+$")
_PLT = re.compile(r"@plt$")
_PHP_CODE = re.compile(r"::|->|\\|^\{closure|^\{?main\}?$|\.php\b")
_PHP_ROOT = re.compile(r"\.php\b|^\{?main\}?$|^\{closure|::|->")
_ENGINE = re.compile(
    r"^(?:php(?:-fpm|-cgi|-cli)?[\d.]*(?:[:_].*)?$|libphp|zend_|_zend_|ZEND_|zif_|zim_"
    r"|execute_ex$|execute_internal$|php\w*?_|_php_|PHP_|_?e(?:malloc|free|realloc|calloc|strn?dup)"
    r"|_safe_e|fpm_|sapi_|_sapi|accel_|_accel|persistent_compile|compile_file$|compile_string$"
    r"|compile_filename$|zendparse$|lex_scan$|mysqlnd_|_mysqlnd|spl_|timelib_|gc_|zval_|rc_dtor"
    r"|i_zend|tsrm_|virtual_file|smart_str|mbfl_|OnUpdate|add_(?:assoc|index|next_index)_"
    r"|object_init|object_properties|rebuild_object_properties$|convert_to_|\w+_function$"
    r"|pcre_get_compiled_regex|excimer_|tideways_|tracing_|xhprof_|xdebug_)")
_LIB = re.compile(
    r"\.so\b|@@?GLIBC|^(?:__libc|libc_|__GI_|_IO_|_dl_|__dl_|_int_(?:malloc|free|realloc)"
    r"|__?pthread|pthread_|__(?:mem|str|wmem|stp)\w*|mem(?:cpy|set|move|cmp|chr)$"
    r"|str(?:len|n?cmp|r?chr|n?dup|n?cpy|n?cat|str|c?spn)$|malloc$|free$|calloc$|realloc$"
    r"|std::|__gnu_cxx::|__cxa_|operator (?:new|delete)|_?pcre2_|ssl_"
    r"|(?:SSL|EVP|CRYPTO|BN|X509|ASN1|PEM|ERR|BIO|RAND|OPENSSL|NCONF|OBJ)_"
    r"|__clock_gettime|clock_gettime|_start$|start_thread$|__clone|clone3?$|__lll_|__futex"
    r"|__libc_start|__ctype_|__open|__opendir|opendir_tail$|__close|__read|__write|__send"
    r"|__recv|__poll|__select|__getdents|glob_in_dir$|internal_fnwmatch$|fnmatch$"
    r"|(?:read|write|open|close|send|recv|sendto|recvfrom|poll|select|epoll_wait)$)")


def is_php_root(frame: str) -> bool:
    """Does a stack whose first (root) frame is `frame` come from PHP (Excimer) rather than perf?"""
    return _PHP_ROOT.search(frame) is not None


def _is_builtin(name: str, builtins: Collection[str]) -> bool:
    low = name.lower()
    if low in builtins:
        return True
    for sep in ("::", "->"):
        cls, found, _ = low.partition(sep)
        if found:
            return cls in builtins
    return False


def classify(name: str, *, php: bool, leaf_only: bool = False,
             builtins: Collection[str] | None = None) -> str:
    """The category key (CATEGORIES) of a frame. `php`: the frame is in a PHP (Excimer) stack;
    `leaf_only`: its name never calls anything in the graph's PHP stacks; `builtins`: PHP's
    internal function and class names, lower case (exact instead of the leaf heuristic)."""
    if _KERNEL.search(name):
        return "kernel"
    if _JIT.search(name):
        return "jit"
    if name.endswith("_[i]"):
        name = name[:-4]
    name = _PLT.sub("", name)
    if _UNKNOWN.search(name):
        return "unknown"
    if php:
        if builtins is not None:
            return "builtin" if _is_builtin(name, builtins) else "php"
        if _PHP_CODE.search(name):
            return "php"
        return "builtin" if leaf_only else "php"
    if _ENGINE.match(name):
        return "engine"
    if _LIB.search(name):
        return "lib"
    return "other"


@lru_cache(maxsize=65536)
def _shade(name: str) -> tuple[float, float, float, float]:
    """Four numbers in [0, 1) from a hash of the name: the same name, the same colour."""
    d = hashlib.blake2s(name.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return tuple(int.from_bytes(d[i:i + 2], "big") / 65536 for i in (0, 2, 4, 6))


def category_color(category: str, name: str) -> str:
    """A shade of the category's colour: mostly one hash value along lo..hi (lighter/darker),
    a little per channel so neighbours with similar names still differ."""
    c = CATEGORIES[category]
    t, r, g, b = _shade(name)
    if len(set(c.lo)) == 1 and len(set(c.hi)) == 1:     # a grey stays grey
        r = g = b = t
    rgb = [round(lo + (hi - lo) * (0.7 * t + 0.3 * v)) for lo, hi, v in zip(c.lo, c.hi, (r, g, b))]
    return "rgb({},{},{})".format(*rgb)


def hot_color(name: str) -> str:
    """flamegraph.pl's default "hot" range (red 205-255, green 0-230, blue 0-55), hashed."""
    t, r, _, b = _shade(name)
    return f"rgb({205 + round(50 * r)},{round(230 * t)},{round(55 * b)})"


def diff_intensity(before: float, after: float) -> float:
    """0 (unchanged) .. 1 (appeared from nothing or vanished): 1 - smaller/larger, so a frame
    that doubled and one that halved are equally intense."""
    hi = max(before, after)
    return 0.0 if hi <= 0 else 1.0 - min(before, after) / hi


def diff_color(before: float, after: float) -> str:
    """White when unchanged, red when the frame grew, blue when it shrank; the other two
    channels fall from 255 to 50 with the relative change (diff_intensity)."""
    s = diff_intensity(before, after)
    other = round(255 - 205 * s)
    if after > before:
        return f"rgb(255,{other},{other})"
    if after < before:
        return f"rgb({other},{other},255)"
    return "rgb(255,255,255)"
