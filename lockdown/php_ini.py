"""Reading php.ini values as PHP reads them: which spellings turn a switch off, and sizes with
K/M/G suffixes. One place for the harness (checking --php-ini) and the analyzers (the
capture's configuration), which each had their own copy of the off-spellings."""
from __future__ import annotations

import re

# A boolean setting is off for these (PHP reads any other word as on only if it is "on",
# "yes" or "true"; these are the spellings configurations use)
OFF = frozenset({"", "0", "off", "false", "no", "none"})
# opcache.jit is a mode, not a boolean: these modes turn it off too
JIT_OFF = OFF | {"disable", "disabled"}

_SIZE = re.compile(r"^\s*(-?\d+)\s*([kmg]?)b?\s*$", re.I)


def is_off(value, spellings: frozenset = OFF) -> bool:
    """A setting's value (a string, a number or None) spells "off"."""
    return str("" if value is None else value).strip().lower() in spellings


def size_bytes(value: str | None) -> int | None:
    """A php.ini size ("4096K", "16M", "1G", "65536") in bytes; None when unreadable."""
    m = _SIZE.match(value) if value is not None else None
    if m is None:
        return None
    return int(m.group(1)) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()]
