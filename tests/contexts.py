"""Small synthetic detector inputs: build a `Context` from a few requests, statements and
profiles, so each detector's rules can be tested on variants (other table names, other
builtins, PDO) without a capture. Real captures are tested in test_detect_minicms.py."""
from __future__ import annotations

from lockdown.analyzers.detectors import load_thresholds
from lockdown.analyzers.detectors.context import Context
from lockdown.bundle.model import PerfSample, RequestRecord, Statement


def request(rid: str, url: str = "/", method: str = "GET", wall_us: int = 100_000,
            cpu_us: int = 80_000, instrumented: bool = False, pid: int = 100) -> RequestRecord:
    n = int(rid.lstrip("r") or 0)
    return RequestRecord(id=rid, pid=pid, method=method, uri=url, status=200,
                         start_ns=n * 1_000_000_000, end_ns=n * 1_000_000_000 + wall_us * 1000,
                         start_unix=1.7e9 + n, wall_us=wall_us, cpu_us=cpu_us, peak_memory=2 << 20,
                         instrumented=instrumented, seq=n, url=url)


_seq = [0]


def statement(rid: str | None, sql: str, duration_us: int = 200, rows_sent: int = 1,
              rows_examined: int = 1, thread_id: int = 7) -> Statement:
    _seq[0] += 1
    return Statement(seq=_seq[0], request=rid, attribution="connection" if rid else "none",
                     thread_id=thread_id, schema="app", sql=sql, duration_us=duration_us,
                     lock_us=0, rows_sent=rows_sent, rows_examined=rows_examined,
                     rows_affected=None, timestamp=None)


def native(rid: str, frames: list[tuple[str, str]], pid: int = 100) -> PerfSample:
    """frames leaf first as (symbol, dso)."""
    return PerfSample(time_ns=1, pid=pid, tid=pid, comm="php-fpm8.2", period=10_101_010, request=rid,
                      frames=[[f"{i:x}", sym, 0, dso] for i, (sym, dso) in enumerate(frames)])


def context(requests, statements=(), xhprof=None, excimer=None, native_samples=(), php=None,
            capture=None, thresholds=None) -> Context:
    t = load_thresholds()
    for section, values in (thresholds or {}).items():
        t[section].update(values)
    manifest = {"target": {"name": "synthetic"}, "php": php or {"ini": {}, "extensions": {},
                                                                 "zend_extensions": ["Zend OPcache"]},
                "capture": capture or {}}
    return Context(requests=list(requests), statements=list(statements), xhprof_profiles=xhprof or {},
                   excimer=excimer or {}, native=list(native_samples), manifest=manifest, thresholds=t)
