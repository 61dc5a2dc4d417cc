"""PHP's serialize() format, written from Python.

xhprof_html reads saved runs with unserialize() (XHProfRuns_Default::get_run), so an export
for it has to be in this format. No maintained serializer is a dependency of lockdown and the
format is small, so it is written here. The output is the bytes PHP 8's serialize() gives for
the same value (default serialize_precision), so PHP re-serializing what it unserialized gives
the input back: that is what tests/test_export.py checks.

Mapping: None -> N, bool -> b, int -> i (d beyond 64 bits, as PHP holds such numbers),
float -> d, str -> s (length in UTF-8 bytes), bytes -> s (as is), dict -> a with its keys,
list/tuple -> a with keys 0..n-1. Keys that are canonical decimal integers ("5", not "05")
become integer keys, as they do in a PHP array.
"""
from __future__ import annotations

import math
import re
from decimal import Decimal

_INT64 = (-(2 ** 63), 2 ** 63 - 1)
_INT_KEY = re.compile(r"0|-?[1-9][0-9]*")


def serialize(value) -> bytes:
    out: list[bytes] = []
    _emit(value, out)
    return b"".join(out)


def php_float(f: float) -> str:
    """A double as PHP prints it with serialize_precision -1: the shortest digits that read
    back to the same double (as Python's repr), positional from 1e-4 up to below 1e17, else
    `D.DDDE+X`; `-0`, `INF`, `-INF`, `NAN` as PHP spells them."""
    if math.isnan(f):
        return "NAN"
    if math.isinf(f):
        return "INF" if f > 0 else "-INF"
    if f == 0:
        return "-0" if math.copysign(1.0, f) < 0 else "0"
    sign = "-" if f < 0 else ""
    t = Decimal(repr(abs(f))).as_tuple()
    exp = len(t.digits) + t.exponent - 1            # decimal exponent of the first digit
    digits = "".join(map(str, t.digits)).rstrip("0")
    if -4 <= exp < 17:
        if exp >= 0:
            whole, frac = digits[:exp + 1].ljust(exp + 1, "0"), digits[exp + 1:]
        else:
            whole, frac = "0", "0" * (-exp - 1) + digits
        return sign + whole + ("." + frac if frac else "")
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{'+' if exp >= 0 else '-'}{abs(exp)}"


def _string(raw: bytes, out: list[bytes]) -> None:
    out += [b"s:%d:\"" % len(raw), raw, b"\";"]


def _key(k, out: list[bytes]) -> None:
    if isinstance(k, bool):
        k = int(k)
    if isinstance(k, str) and _INT_KEY.fullmatch(k) and _INT64[0] <= int(k) <= _INT64[1]:
        k = int(k)
    if isinstance(k, int):
        if not _INT64[0] <= k <= _INT64[1]:
            raise ValueError(f"array key {k} does not fit PHP's 64-bit integer keys")
        out.append(b"i:%d;" % k)
    elif isinstance(k, str):
        _string(k.encode("utf-8"), out)
    else:
        raise TypeError(f"PHP array keys are int or str, not {type(k).__name__}")


def _emit(v, out: list[bytes]) -> None:
    if v is None:
        out.append(b"N;")
    elif isinstance(v, bool):
        out.append(b"b:1;" if v else b"b:0;")
    elif isinstance(v, int):
        if _INT64[0] <= v <= _INT64[1]:
            out.append(b"i:%d;" % v)
        else:
            try:
                f = float(v)
            except OverflowError:
                f = math.inf if v > 0 else -math.inf
            out.append(b"d:" + php_float(f).encode() + b";")
    elif isinstance(v, float):
        out.append(b"d:" + php_float(v).encode() + b";")
    elif isinstance(v, str):
        _string(v.encode("utf-8"), out)
    elif isinstance(v, (bytes, bytearray)):
        _string(bytes(v), out)
    elif isinstance(v, dict):
        out.append(b"a:%d:{" % len(v))
        for k, item in v.items():
            _key(k, out)
            _emit(item, out)
        out.append(b"}")
    elif isinstance(v, (list, tuple)):
        out.append(b"a:%d:{" % len(v))
        for i, item in enumerate(v):
            out.append(b"i:%d;" % i)
            _emit(item, out)
        out.append(b"}")
    else:
        raise TypeError(f"cannot serialize {type(v).__name__} for PHP")
