"""Turn what the collectors left in the run directory into bundle files.

Each function reads one collector's raw output, joins it to the request log and writes its
part of the bundle through a `BundleWriter`; each returns the counts the manifest records.
"""
from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

from ..bundle.model import ExcimerProfile, RequestRecord
from ..bundle.store import BundleWriter
from ..errors import LockdownError
from ..formats import perf_script, slowlog
from ..harness.driver import SentRequest
from .attribution import attribute_samples, attribute_statements
from .request_log import read_jsonl


def requests(raw: Path, sent: list[SentRequest], writer: BundleWriter) -> tuple[list[RequestRecord], dict]:
    """The request log joined with the driver's view; requests the log lacks are counted lost."""
    by_id = {s.id: s for s in sent}
    records: list[RequestRecord] = []
    seen = set()
    for d in read_jsonl(raw):
        s = by_id.get(d.get("id"))
        if s is None or d["id"] in seen:
            continue      # not one of this capture's requests (or a duplicate line)
        seen.add(d["id"])
        records.append(RequestRecord(
            id=d["id"], pid=d["pid"], method=d["method"], uri=d["uri"], status=d["status"],
            start_ns=d["start_ns"], end_ns=d["end_ns"], start_unix=d["start_unix"],
            wall_us=d["wall_us"], cpu_us=d["cpu_us"], peak_memory=d["peak_memory"],
            instrumented=bool(d.get("xhprof")), seq=s.seq, url=s.url,
            client_start_ns=s.client_start_ns, client_end_ns=s.client_end_ns,
            client_status=s.status, db_threads=d.get("db_threads"), capture_us=d.get("capture_us"),
            capture_blocking_us=d.get("capture_blocking_us"), engine=_int_map(d.get("engine")),
            sched=_int_map(d.get("sched")),
            uncached_scripts=_strings(d.get("uncached_scripts")), uncached_young=_strings(d.get("uncached_young")),
            php_errors=_php_errors(d.get("php_errors")),
            released_early=True if d.get("released_early") is True else None,
            after_release_statements=_count(d.get("after_release_statements"))))
    records.sort(key=lambda r: r.seq)
    writer.write_jsonl("requests.jsonl", records)
    lost = [s.id for s in sent if s.id not in seen]
    failed = [s.id for s in sent if s.error is not None]
    return records, {"sent": len(sent), "logged": len(records), "lost": len(lost),
                     "lost_ids": lost[:20], "client_errors": len(failed),
                     "instrumented": sum(r.instrumented for r in records),
                     "status_counts": dict(Counter(str(r.status) for r in records))}


def _count(raw) -> int | None:
    """A non-negative integer as the prepend writes it, else None."""
    return raw if type(raw) is int and raw >= 0 else None


def _strings(raw) -> list | None:
    """A list of strings as the prepend writes it, else None."""
    return raw if isinstance(raw, list) and all(type(v) is str for v in raw) else None


_ERROR_FIELDS = {"type": int, "message": str, "file": str, "line": int, "function": str, "count": int}


def _php_errors(raw) -> list | None:
    """The prepend's PHP errors of a request (onError), the well-formed entries only, else None."""
    if not isinstance(raw, list):
        return None
    good = [{k: e[k] for k in _ERROR_FIELDS} for e in raw if isinstance(e, dict)
            and all(type(e.get(k)) is t for k, t in _ERROR_FIELDS.items())]
    return good or None


def _int_map(raw) -> dict | None:
    """The prepend's engine or scheduler state, if it is the flat object of integers it writes."""
    if isinstance(raw, dict) and raw and all(type(v) is int for v in raw.values()):
        return raw
    return None


def perf(perf_data: Path, script_text: Path, build_ids: dict, records: list[RequestRecord],
         writer: BundleWriter) -> dict:
    shutil.copyfile(perf_data, writer.path("perf/perf.data"))
    shutil.copyfile(script_text, writer.path("perf/script.txt"))
    writer.write_json("perf/buildids.json", build_ids)
    with open(script_text, errors="replace") as f:
        try:
            samples = list(attribute_samples(perf_script.parse(f, str(script_text)), records))
        except perf_script.PerfScriptError as e:
            raise LockdownError(f"{e}; perf script output is not in the expected shape")
    writer.write_jsonl("perf/samples.jsonl", samples)
    inside = sum(1 for s in samples if s.request is not None)
    return {"samples": len(samples), "in_requests": inside, "outside_requests": len(samples) - inside,
            "pids": sorted({s.pid for s in samples})}


def excimer(raw: Path, records: list[RequestRecord], writer: BundleWriter) -> dict:
    """Excimer's sample times are relative to its start; the bundle stores CLOCK_MONOTONIC."""
    logged = {r.id for r in records}
    profiles = []
    for d in read_jsonl(raw):
        if d.get("request") not in logged:
            continue
        start = d["start_ns"]
        profiles.append(ExcimerProfile(d["request"], d["pid"], d["stacks"],
                                       [[start + t, w, i] for t, w, i in d["samples"]], start_ns=start))
    writer.write_jsonl("excimer.jsonl", profiles)
    with_stacks = {p.request for p in profiles if p.samples}
    return {"requests": len(profiles), "requests_with_samples": len(with_stacks),
            "samples": sum(len(p.samples) for p in profiles)}


def xhprof(raw_dir: Path, records: list[RequestRecord], writer: BundleWriter) -> dict:
    copied = 0
    for r in records:
        src = raw_dir / f"{r.id}.json"
        if r.instrumented and src.is_file():
            shutil.copyfile(src, writer.path(f"xhprof/{r.id}.json"))
            copied += 1
    return {"profiles": copied}


def statements(slow_log: Path, records: list[RequestRecord], concurrency: int,
               writer: BundleWriter, plans: bool = False, sql_mode: str = "") -> dict:
    """`plans`: the capture turned log_slow_verbosity=query_plan on; `sql_mode`: the server's
    global one, which says how statement texts quote (slowlog.parse tells a statement's own
    text from an entry's header by reading it as SQL). Lines end at '\n' only: a '\r' is part
    of a statement's text."""
    modes = {m.strip().upper() for m in sql_mode.split(",")}
    try:
        with open(slow_log, errors="replace", newline="\n") as f:
            entries = list(slowlog.parse(f, str(slow_log), plans=plans,
                                         backslash_escapes="NO_BACKSLASH_ESCAPES" not in modes,
                                         ansi_quotes="ANSI_QUOTES" in modes))
    except FileNotFoundError:
        raise LockdownError(f"{slow_log}: the server wrote no slow log; statement capture failed")
    except slowlog.SlowLogError as e:
        raise LockdownError(f"{e}; the slow log is not in the shape lockdown configured")
    shutil.copyfile(slow_log, writer.path("slow.log"))
    stmts = attribute_statements(entries, records, concurrency)
    writer.write_jsonl("statements.jsonl", stmts)
    return {"statements": len(stmts), "attribution": dict(Counter(s.attribution for s in stmts)), "plans": plans,
            "requests_with_statements": len({s.request for s in stmts if s.request})}
