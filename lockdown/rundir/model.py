"""The documents of a `lockdown run` directory, each a type with a format version: the run
document (findings.json), the benchmark result (bench.json), the analysis (analysis.json), the
time accounting (accounting.json) and a verification (verify/KEY/verify.json). JSON in, JSON
out, nothing else.

`from_json` checks each typed field against its annotation (bundle/model.py's checks) and the
rules between fields (`problem`), so that a damaged document is one `DocumentError` naming the
field, not a TypeError deep in whichever report reads it first. Keys a type does not name are
kept as they were read (`extra`), and `to_json` gives back the JSON it was read from, key for
key and in order: readers of older or newer files lose nothing, and a document made here is
written as the writers always wrote it.

What is typed: the run document whole (findings as `analyzers.findings.Finding`; its `run`
block; the base a run started from, checked, kept as the JSON `remediation/base.py` reads);
bench.json whole (its config, each measured run, the runs set aside, the summary); a
verification's findings, A/B result (arms, runs, changes, plan), page comparison, re-capture
and what each fix adds (`each`), its remediations and the re-capture's own findings staying
their JSON; the time accounting whole; analysis.json's top level, its time budgets (overall,
by URL, by request) and its hot PHP and native functions. The other analysis views stay the
JSON objects their analyzers wrote, checked to be objects or lists where a reader indexes
into them.

bench.json and analysis.json have carried no `format` key so far: absent means format 1, and
another value is refused, as for findings.json and verify.json.
"""
from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from functools import cache
from typing import Callable, ClassVar

from ..analyzers.findings import Evidence, Finding, Remediation
from ..bundle.model import brief, checker

RUN_FORMAT = 1          # findings.json's `format` (lockdown run writes it)
BENCH_FORMAT = 1        # bench.json (no `format` key yet: absent means 1)
ANALYSIS_FORMAT = 1     # analysis.json (no `format` key yet: absent means 1)
VERIFY_FORMAT = 1       # verify/KEY/verify.json's `format`
ACCOUNTING_FORMAT = 1   # accounting.json's `format` (lockdown run writes it)

# what a findings.json written before its run block said these means (lockdown run's defaults)
DEFAULT_REQUESTS = 120
DEFAULT_XHPROF_EVERY = 10

_ABSENT = object()
_BOOKKEEPING = ("extra", "keys")


class DocumentError(ValueError):
    """A JSON document that does not have the shape its readers rely on (the message names
    the field; the store adds the file and what to do about it)."""


@cache
def _fields_of(cls: type) -> tuple[tuple[str, str, bool], ...]:
    """(name, annotation, required) of each typed field, worked out once per type."""
    return tuple((f.name, f.type, f.default is MISSING and f.default_factory is MISSING)
                 for f in fields(cls) if f.name not in _BOOKKEEPING)


def _default(cls: type, name: str):
    """A field's default value (MISSING for a required one)."""
    f = cls.__dataclass_fields__[name]
    return f.default_factory() if f.default_factory is not MISSING else f.default


def _plain(v):
    """A field's value as JSON: documents and findings written out, the rest as it is."""
    if isinstance(v, (_Document, Finding)):
        return v.to_json()
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, dict) and v and isinstance(next(iter(v.values())), _Document):
        return {k: _plain(x) for k, x in v.items()}      # documents by name (NESTED, dict[str, ...])
    return v


def check_record(data, spec: dict[str, str | None], required: tuple[str, ...], where: str) -> dict:
    """A JSON object with the fields of `spec` (name -> annotation; None: any JSON value),
    those in `required` present; the fields of `spec` it has, unknown ones left out (a newer
    writer's). DocumentError naming `where` and the field otherwise."""
    if type(data) is not dict:
        raise DocumentError(f"{where} is not a JSON object ({brief(data)})")
    out = {}
    for name, annotation in spec.items():
        v = data.get(name, _ABSENT)
        if v is _ABSENT:
            if name in required:
                raise DocumentError(f"no {where}.{name}")
            continue
        if annotation is not None and not checker(annotation).test(v):
            raise DocumentError(f"{where}.{name} is not {checker(annotation).one} ({brief(v)})")
        out[name] = v
    return out


REMEDIATION = {"kind": "str", "content": "str", "checked": "str", "file": "str | None", "steps": "list",
               "description": "str", "writes": "list | None", "origin": "str"}
EVIDENCE = {"what": "str", "value": None, "source": "str"}
FINDING = {"id": "str", "title": "str", "severity": "str", "share_pct": "float | None", "summary": "str",
           "evidence": "list", "remediations": "list", "urls": "list[str]", "requests": "list[str]",
           "details": "dict", "key": "str"}


def remediation_of(data, where: str) -> Remediation:
    return Remediation(**check_record(data, REMEDIATION, ("kind", "content"), where))


def finding_of(data, where: str) -> Finding:
    """A Finding from its JSON (findings.json's findings[i]), every field checked."""
    d = check_record(data, FINDING, ("id", "title", "severity", "share_pct", "summary"), where)
    d["evidence"] = [Evidence(**check_record(e, EVIDENCE, tuple(EVIDENCE), f"{where}.evidence[{i}]"))
                     for i, e in enumerate(d.get("evidence", []))]
    d["remediations"] = [remediation_of(r, f"{where}.remediations[{i}]")
                         for i, r in enumerate(d.get("remediations", []))]
    key = d.get("key", "")
    if "/" in key or "\x00" in key or key in (".", ".."):       # it names files: findings/KEY.md
        raise DocumentError(f"{where}.key is {brief(key)}, not a finding's key")
    return Finding(**d)


@dataclass
class _Document:
    """A JSON object: typed fields (the subclass's dataclass fields, checked by annotation),
    documents nested in it (`NESTED`), and every other key as it was read (`extra`)."""
    extra: dict = field(default_factory=dict, kw_only=True, repr=False)
    keys: tuple | None = field(default=None, kw_only=True, repr=False, compare=False)   # as read, in order

    NESTED: ClassVar[dict[str, type]] = {}          # field -> the _Document type of it (or of its items, or values)
    CONVERT: ClassVar[dict[str, Callable]] = {}     # field -> (JSON, where) -> value, for other types
    OMIT_NONE: ClassVar[frozenset] = frozenset()    # fields a writer leaves out rather than write null

    @classmethod
    def from_json(cls, data, where: str = ""):
        """The document of one JSON object; DocumentError when a field is missing or of the wrong
        type, or the fields disagree (`problem`)."""
        if type(data) is not dict:
            raise DocumentError(f"{where.rstrip('.') or 'the document'} is not a JSON object ({brief(data)})")
        kw = {}
        for name, annotation, required in _fields_of(cls):
            v = data.get(name, _ABSENT)
            if v is _ABSENT:
                if required:
                    raise DocumentError(f"no {where}{name}")
                continue
            kw[name] = cls._value(name, annotation, v, f"{where}{name}")
        typed = {name for name, _, _ in _fields_of(cls)}
        doc = cls(**kw, extra={k: v for k, v in data.items() if k not in typed}, keys=tuple(data))
        why = doc.problem()
        if why:
            raise DocumentError(f"in {where.rstrip('.')}: {why}" if where else why)
        return doc

    @classmethod
    def _value(cls, name: str, annotation: str, v, path: str):
        if v is None and annotation.endswith("| None"):
            return None
        if name in cls.CONVERT:
            return cls.CONVERT[name](v, path)
        nested = cls.NESTED.get(name)
        if nested is None:
            check = checker(annotation)
            if not check.test(v):
                raise DocumentError(f"{path} is not {check.one} ({brief(v)})")
            return v
        if annotation.startswith("list["):
            if type(v) is not list or not all(type(item) is dict for item in v):
                raise DocumentError(f"{path} is not a list of objects ({brief(v)})")
            return [nested.from_json(item, f"{path}[{i}].") for i, item in enumerate(v)]
        if annotation.startswith("dict[str,"):
            if type(v) is not dict:
                raise DocumentError(f"{path} is not an object ({brief(v)})")
            return {k: nested.from_json(item, f"{path}.{k}.") for k, item in v.items()}
        return nested.from_json(v, f"{path}.")

    def problem(self) -> str | None:
        """What is wrong beyond the fields' own types, or None."""
        return None

    def to_json(self) -> dict:
        """The JSON object: the keys read, in their order; for a document made here, its fields
        in declaration order (those in OMIT_NONE only when set), then `extra`."""
        typed = {name: getattr(self, name) for name, _, _ in _fields_of(type(self))}
        if self.keys is not None:   # and a field absent there that has been given a value since
            order = list(self.keys) + [k for k, v in typed.items() if k not in self.keys and v is not None
                                       and v != _default(type(self), k)]
        else:
            order = [k for k, v in typed.items() if not (v is None and k in self.OMIT_NONE)]
        order += [k for k in self.extra if k not in order]
        return {k: _plain(typed[k]) if k in typed else self.extra[k]
                for k in order if k in typed or k in self.extra}


def _format_problem(value, version: int, what: str, absent_ok: bool = True) -> str | None:
    """What is wrong with a document's `format` (`_ABSENT`: no such key, which means `version`
    where `absent_ok`), or None when it is `version`."""
    if value is _ABSENT and absent_ok or (type(value) is int and value == version):
        return None
    shown = "missing" if value is _ABSENT else brief(value)
    return f"not {what} of format {version} (format {shown}): written by another lockdown version, or damaged"


# ----------------------------------------------------------------------------- findings.json

@dataclass(kw_only=True)
class RunSettings(_Document):
    """findings.json `run`: how the run served and captured the target (what `lockdown verify
    DIR` does again), and how to give its command again (reports/reproduce.py). Older runs
    recorded only some of it: absent fields are None."""
    target_dir: str | None = None               # the target's directory, as it resolved
    php_ini: dict[str, str] = field(default_factory=dict)    # the overrides every copy was served with
    requests: int | None = None                 # requests in the capture
    xhprof_every: int | None = None
    thresholds: dict[str, dict] | None = None   # the detector thresholds the run used
    target_arg: str | None = None               # TARGET as `lockdown run` takes it again
    options: list[str] | None = None            # the recorded options given, as arguments
    base: dict | None = None                    # the fixes it started from (remediation/base.py Base.to_json)

    OMIT_NONE: ClassVar[frozenset] = frozenset({"base"})

    @property
    def capture_requests(self) -> int:
        return DEFAULT_REQUESTS if self.requests is None else self.requests

    @property
    def capture_xhprof_every(self) -> int:
        return DEFAULT_XHPROF_EVERY if self.xhprof_every is None else self.xhprof_every

    def base_remediations(self) -> list[Remediation]:
        """The base's remediations (checked by `problem`); [] without a base."""
        return [remediation_of(r, f"base.remediations[{i}]")
                for i, r in enumerate((self.base or {}).get("remediations") or [])]

    def problem(self) -> str | None:
        for name in ("requests", "xhprof_every"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                return f"{name} is {getattr(self, name)}, not a positive count"
        if self.base:           # ({} is none, as remediation/base.py Base.from_json reads it)
            try:
                check_record(self.base, {"source": "str | None", "remediations": "list", "php_ini": "dict[str, str]"},
                             ("remediations", "php_ini"), "base")
                self.base_remediations()
            except DocumentError as e:
                return str(e)
        return None


@dataclass(kw_only=True)
class RunDocument(_Document):
    """findings.json: what `lockdown run` found, and how it ran."""
    format: int = RUN_FORMAT
    target: str                                 # the target's name
    bundle: str | None = None                   # where the capture was written (DIR/bundle)
    run: RunSettings | None = None              # None in a findings.json written before it
    findings: list[Finding]
    dismissed: list[dict] = field(default_factory=list)   # candidates the argument probe dismissed

    NESTED: ClassVar[dict[str, type]] = {"run": RunSettings}
    CONVERT: ClassVar[dict[str, Callable]] = {
        "findings": lambda v, where: [finding_of(f, f"{where}[{i}]") for i, f in enumerate(_list(v, where))]}

    @classmethod
    def from_json(cls, data, where: str = ""):
        if type(data) is dict:       # the version first: another one's fields may differ in any way
            why = _format_problem(data.get("format", _ABSENT), RUN_FORMAT, "a findings file", absent_ok=False)
            if why:
                raise DocumentError(why)
        return super().from_json(data, where)

    @property
    def settings(self) -> RunSettings:
        """The run block, or one of defaults for a findings.json written before it."""
        return self.run if self.run is not None else RunSettings()


def _list(v, where: str) -> list:
    if type(v) is not list:
        raise DocumentError(f"{where} is not a list ({brief(v)})")
    return v


def bounds(ci) -> tuple:
    """(lo, hi) of an interval written as a two-item list; (None, None) for any other value."""
    return (ci[0], ci[1]) if isinstance(ci, (list, tuple)) and len(ci) == 2 else (None, None)


# ----------------------------------------------------------------------------- bench.json

@dataclass(kw_only=True)
class Latency(_Document):
    """A run's `latency_ms` (harness/loadgen.py): percentiles of the response times."""
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None

    OMIT_NONE: ClassVar[frozenset] = frozenset({"p50", "p90", "p99", "max"})


@dataclass(kw_only=True)
class HostCpu(_Document):
    """A run's `host_cpu` (harness/cpu.py summarize): the machine's CPU over the run; {} unknown."""
    busy_pct: float | None = None
    steal_pct: float | None = None
    iowait_pct: float | None = None

    OMIT_NONE: ClassVar[frozenset] = frozenset({"busy_pct", "steal_pct", "iowait_pct"})


@dataclass(kw_only=True)
class HostSpeed(_Document):
    """A run's `host_speed` (harness/host_speed.py SpeedProbe.summary); {} for runs recorded
    before the probe, or without a tick."""
    speed: float | None = None                  # the mean over the run
    cv: float | None = None
    samples: int | None = None
    series: list[float] = field(default_factory=list)      # each tick's speed, in order
    cpus: int | None = None

    OMIT_NONE: ClassVar[frozenset] = frozenset({"speed", "cv", "samples", "cpus"})


@dataclass(kw_only=True)
class ServerCpu(_Document):
    """A run's `server_cpu` (harness/server_cpu.py usage); {} when a server restarted or
    nothing was served."""
    seconds: float | None = None
    ms_per_request: float | None = None
    by_server: dict[str, float] = field(default_factory=dict)   # php-fpm, mariadbd, nginx

    OMIT_NONE: ClassVar[frozenset] = frozenset({"seconds", "ms_per_request"})


@dataclass(kw_only=True)
class BenchRun(_Document):
    """One measured run (harness/bench.py measured_run: loadgen.LoadResult and the host's and
    the servers' CPU during it), as bench.json `runs[i]` and `set_aside[i]` and each A/B arm's
    `runs[i]` hold it. Each field is None (or empty) where a run does not have it."""
    rps: float | None = None                    # successful responses per second
    latency_ms: Latency = field(default_factory=Latency)
    status_counts: dict[str, int] = field(default_factory=dict)
    errors: int | None = None                   # socket errors
    bytes: int | None = None
    requests: int | None = None                 # responses of any status
    duration_s: float | None = None
    tool: str | None = None                     # the load generator
    error_detail: dict = field(default_factory=dict)
    latency_resolution_ms: float | None = None  # None: recorded before it was
    ok: int | None = None
    failed: int | None = None
    started_at: float | None = None             # Unix time
    ended_at: float | None = None
    host_cpu: HostCpu = field(default_factory=HostCpu)
    host_speed: HostSpeed = field(default_factory=HostSpeed)
    server_cpu: ServerCpu = field(default_factory=ServerCpu)
    run: int | None = None                      # numbered as measured (runs set aside leave gaps)
    set_aside: str | None = None                # why the host's capacity set it aside (steady_runs.py)

    NESTED: ClassVar[dict[str, type]] = {"latency_ms": Latency, "host_cpu": HostCpu, "host_speed": HostSpeed,
                                         "server_cpu": ServerCpu}
    OMIT_NONE: ClassVar[frozenset] = frozenset({"run", "set_aside", "started_at", "ended_at"})


@dataclass(kw_only=True)
class BenchSummary(_Document):
    """A benchmark's `summary` (harness/bench.py summary_of, with keep_runs' counts in
    bench.json): the RPS over the runs kept (analyzers/stats.py summarize), the host's speed
    and steal, the CV with the host's capacity taken out, the servers' CPU per request. An A/B
    arm's summary has the first group only."""
    rps_mean: float | None = None
    rps_stddev: float | None = None             # None: one run
    rps_cv: float | None = None
    rps_ci95: list[float | None] = field(default_factory=lambda: [None, None])
    runs: int | None = None
    host_speed_mean: float | None = None
    host_speed_cv: float | None = None
    host_steal_pct_max: float | None = None
    host_capacity_cv: float | None = None
    rps_cv_speed_adjusted: float | None = None
    speed_elasticity: float | None = None
    server_cpu_ms_mean: float | None = None
    server_cpu_cv: float | None = None
    server_cpu_by_server_ms: dict[str, float] | None = None
    runs_measured: int | None = None            # bench.json only: the runs set aside are counted here
    runs_set_aside: int | None = None
    rps_cv_all_runs: float | None = None
    host_tolerance: float | None = None         # a fraction; None: every run kept
    host_unsteady: bool | None = None

    @property
    def ci95(self) -> tuple:
        """(lo, hi) of the RPS's 95% CI; (None, None) with one run or none recorded."""
        return bounds(self.rps_ci95)


@dataclass(kw_only=True)
class BenchUrl(_Document):
    """bench.json `config.urls[i]` (targets/config.py Url)."""
    path: str | None = None
    weight: float | None = None


@dataclass(kw_only=True)
class BenchConfig(_Document):
    """bench.json `config`: how it was measured (options.py BenchOptions, the DSN without its
    password), the URL mix, the host and the versions of what served."""
    runs: int | None = None
    duration: float | None = None
    concurrency: int | None = None
    workers: int | None = None
    load: str | None = None
    warmup_requests: int | None = None
    warmup_duration: float | None = None
    php_ini: dict = field(default_factory=dict)
    port: int | None = None
    mysql: str | None = None
    hooks: dict = field(default_factory=dict)
    rerun_disturbed: bool | None = None
    host_tolerance: float | None = None         # percent
    urls: list[BenchUrl] = field(default_factory=list)
    cpus: int | None = None
    host: str | None = None
    versions: dict = field(default_factory=dict)    # php, nginx, kernel, load, mariadb -> text
    php_extensions: list | None = None
    php_ini_effective_overrides: dict | None = None

    NESTED: ClassVar[dict[str, type]] = {"urls": BenchUrl}

    def option(self, name: str, absent=None):
        """A recorded option by name (BenchOptions' fields, or a key a newer writer added);
        `absent` when the config does not hold it."""
        if name in self.extra:
            return self.extra[name]
        if name in self.__dataclass_fields__ and name not in _BOOKKEEPING and name in (self.keys or ()):
            return getattr(self, name)
        return absent


@dataclass(kw_only=True)
class Sanity(_Document):
    """bench.json `sanity` (harness/bench.py sanity_check): the page checked before warming up."""
    url: str | None = None
    status: int | None = None
    bytes: int | None = None


@dataclass(kw_only=True)
class BenchResult(_Document):
    """bench.json (harness/bench.py run_bench's result): how it was measured, the runs kept
    and those set aside, and their summary."""
    format: int | None = None                   # absent: BENCH_FORMAT
    target: str | None = None
    canonical: bool | None = None               # measured with `lockdown bench`'s defaults
    non_default_options: list[str] = field(default_factory=list)
    on_top_of: str | None = None                # what the copies were patched with, in words
    config: BenchConfig | None = None
    base_url: str | None = None
    sanity: Sanity | None = None
    opcache_settle_s: float | None = None
    runs: list[BenchRun]
    set_aside: list[BenchRun] = field(default_factory=list)
    summary: BenchSummary | None = None

    NESTED: ClassVar[dict[str, type]] = {"config": BenchConfig, "sanity": Sanity, "runs": BenchRun,
                                         "set_aside": BenchRun, "summary": BenchSummary}
    OMIT_NONE: ClassVar[frozenset] = frozenset({"format", "target", "canonical", "on_top_of", "config", "base_url",
                                                "sanity", "opcache_settle_s", "summary"})

    def problem(self) -> str | None:
        return _format_problem(_ABSENT if self.format is None else self.format, BENCH_FORMAT, "a benchmark result")


# ----------------------------------------------------------------------------- analysis.json

@dataclass(kw_only=True)
class TimeBudget(_Document):
    """analysis.json `budget_overall` and `budget_by_url.URL` (analyzers/budget.py Budget): the
    mean wall time of requests split into CPU, database wait and other wait."""
    wall_us: float | None = None
    cpu_us: float | None = None
    db_wait_us: float | None = None
    other_wait_us: float | None = None
    residual_us: float | None = None
    cpu_by_subsystem_us: dict[str, float] = field(default_factory=dict)   # perf: the CPU time by subsystem
    requests: int | None = None                 # the requests in the mean
    cpu_queue_us: float | None = None           # waiting for a CPU; None: the capture did not record it


@dataclass(kw_only=True)
class RequestRow(TimeBudget):
    """analysis.json `by_request[i]`: one captured request, its time budget, and what it was."""
    id: str
    url: str | None = None
    status: int | None = None
    pid: int | None = None
    instrumented: bool | None = None            # xhprof-instrumented: left out of the timings
    statements: int | None = None
    sched: dict | None = None                   # the scheduler's counters (bundle/model.py RequestRecord)


@dataclass(kw_only=True)
class HotFunctionRow(_Document):
    """A row of analysis.json `php_functions.top` (analyzers/php_functions.py HotFunction) or
    `native_functions.top` (analyzers/native_functions.py: with its library and subsystem)."""
    name: str | None = None
    self_samples: float | None = None           # weight with the function on top of the stack
    inclusive_samples: float | None = None      # anywhere on it
    dso: str | None = None                      # native only
    subsystem: str | None = None                # native only


@dataclass(kw_only=True)
class HotFunctions(_Document):
    """analysis.json `php_functions` (Excimer: weights are timer periods) and `native_functions`
    (perf samples): the hottest functions by self weight, and the total every share rests on."""
    samples: float | None = None
    top: list[HotFunctionRow] = field(default_factory=list)
    sample_count: int | None = None             # Excimer: the samples themselves (a late one weighs more)

    NESTED: ClassVar[dict[str, type]] = {"top": HotFunctionRow}


_SECTIONS = ("subsystems", "native_functions", "scheduling", "php_functions", "off_cpu", "engine_state",
             "database_status", "builtins", "db_round_trip", "queries")


@dataclass(kw_only=True)
class Analysis(_Document):
    """analysis.json (analyzers/analysis.py analyze()): every view of the bundle. The views
    present in every analysis are required; the others are there when their collector was."""
    format: int | None = None                   # absent: ANALYSIS_FORMAT
    bundle: str | None = None
    target: str | None = None
    selection: dict | None = None
    requests: int
    instrumented_left_out: int | None = None
    subsystems: dict | None = None
    native_functions: HotFunctions | None = None
    budget_by_url: dict[str, TimeBudget]
    budget_overall: TimeBudget
    scheduling: dict | None = None
    tail: list[dict] | None = None
    by_request: list[RequestRow]
    php_functions: HotFunctions | None = None
    off_cpu: dict | None = None
    engine_state: dict | None = None
    database_status: dict | None = None
    builtins: dict | None = None
    db_round_trip: dict | None = None
    queries: dict | None = None

    NESTED: ClassVar[dict[str, type]] = {"budget_by_url": TimeBudget, "budget_overall": TimeBudget,
                                         "by_request": RequestRow, "php_functions": HotFunctions,
                                         "native_functions": HotFunctions}
    OMIT_NONE: ClassVar[frozenset] = frozenset({"format", "bundle", "target", "selection", "instrumented_left_out",
                                                "tail", *_SECTIONS})

    def problem(self) -> str | None:
        return _format_problem(_ABSENT if self.format is None else self.format, ANALYSIS_FORMAT, "an analysis")


# ----------------------------------------------------------------------------- verify.json

@dataclass(kw_only=True)
class VerifiedFinding(_Document):
    """A finding as verify.json names it (`finding`, `findings`): several verified together
    are `finding` {"key": "all" or "a+b", "id": null, ...}."""
    key: str
    id: str | None = None
    title: str | None = None
    subject: str | None = None
    share_pct: float | None = None


@dataclass(kw_only=True)
class Recapture(_Document):
    """verify.json `reprofile`: the patched copy captured again, and what the detectors said."""
    bundle: str | None = None
    requests: int | None = None
    gone: bool | None = None                    # none of the findings is there any more
    remaining: list[str] | None = None
    gone_by_finding: dict[str, bool] | None = None   # key -> gone, for each finding verified
    new: list[str] | None = None                # defects the run did not report
    findings: list[dict] | None = None
    probed: bool | None = None
    dismissed: list[dict] | None = None
    checks: list[dict] | None = None


@dataclass(kw_only=True)
class Change(_Document):
    """A measured change between two arms (analyzers/stats.py compare_paired, or
    compare_speed_adjusted with `elasticity`: the host's capacity taken out; with
    harness/ab_bench.py resolution's `resolvable_pct` and `power` on the verdict's)."""
    pairs: int | None = None
    runs: int | None = None
    ratio: float | None = None
    change_pct: float | None = None
    ci95_pct: list[float | None] = field(default_factory=lambda: [None, None])
    significant: bool | None = None             # the interval excludes zero
    se_log: float | None = None
    df: int | None = None
    method: str | None = None
    elasticity: float | None = None             # set: adjusted for the host's capacity
    resolvable_pct: float | None = None         # the smallest change the pairs resolve (80% power)
    power: float | None = None                  # their chance of resolving the one planned for

    @property
    def adjusted(self) -> bool:
        """Whether the host's capacity was taken out (the verdict's estimate when every run has it)."""
        return self.elasticity is not None

    @property
    def ci95(self) -> tuple:
        """(lo, hi) percent; (None, None) without an interval."""
        return bounds(self.ci95_pct)


@dataclass(kw_only=True)
class PairPlanResult(_Document):
    """An A/B's `plan` (harness/ab_bench.py planned_runs): the pilot pairs, the pairs needed to
    resolve the change planned for, and the pairs taken."""
    pilot_runs: int | None = None
    max_runs: int | None = None
    planned_change_pct: float | None = None
    named: str | None = None
    pilot_se_log: float | None = None
    runs_needed: int | None = None              # None: not within 1000
    runs: int | None = None
    measured_runs: int | None = None


@dataclass(kw_only=True)
class Arm(_Document):
    """One arm of an A/B (harness/ab_bench.py run_ab): its measured runs and their summary."""
    runs: list[BenchRun] = field(default_factory=list)
    summary: BenchSummary | None = None
    base_url: str | None = None
    opcache_settle_s: float | None = None

    NESTED: ClassVar[dict[str, type]] = {"runs": BenchRun, "summary": BenchSummary}

    @property
    def stats(self) -> BenchSummary:
        """The summary, or an empty one where the arm has none."""
        return self.summary or BenchSummary()


@dataclass(kw_only=True)
class ABResult(_Document):
    """An A/B benchmark (harness/ab_bench.py run_ab): verify.json `bench`, compare.json `bench`.
    The extra arms of `verify --each` (`others`) stay its JSON."""
    design: str | None = None
    runs_per_arm: int | None = None
    duration: float | None = None
    concurrency: int | None = None
    workers: int | None = None
    load: str | None = None
    warmup_requests: int | None = None
    warmup_duration: float | None = None
    order: list[str] | None = None
    before: Arm = field(default_factory=Arm)
    after: Arm = field(default_factory=Arm)
    measure_seconds: float | None = None
    change_paired: Change | None = None
    change: Change | None = None                # the verdict's estimate
    change_server_cpu: Change | None = None     # the servers' CPU per request, paired
    plan: PairPlanResult | None = None

    NESTED: ClassVar[dict[str, type]] = {"before": Arm, "after": Arm, "change_paired": Change, "change": Change,
                                         "change_server_cpu": Change, "plan": PairPlanResult}


@dataclass(kw_only=True)
class PageRow(_Document):
    """One URL of a page comparison (harness/responses.py compare_pages, compare_learned)."""
    url: str | None = None
    same: bool | None = None                    # None: it changes by itself too much to compare
    status_before: int | None = None
    status_after: int | None = None
    first_difference: dict | None = None
    learned_parts: int | None = None            # set: parts learned from two views and masked
    unstable: bool | None = None


@dataclass(kw_only=True)
class Responses(_Document):
    """verify.json `responses` (harness/responses.py compare_arms): the pages both arms serve."""
    urls: int | None = None
    same: int | None = None
    unstable: int | None = None
    learned: int | None = None
    volatile_patterns: int | None = None
    pages: list[PageRow] = field(default_factory=list)

    NESTED: ClassVar[dict[str, type]] = {"pages": PageRow}


@dataclass(kw_only=True)
class EachRow(_Document):
    """verify.json `each[i]` (remediation/verify.py each_adds): what one fix adds to the others."""
    findings: list[str] = field(default_factory=list)
    remediation: dict | None = None             # {"kind", "file"}
    arm: str | None = None
    without_rps: float | None = None
    all_rps: float | None = None
    change: Change | None = None
    pages: dict | None = None                   # {"same", "urls"}

    NESTED: ClassVar[dict[str, type]] = {"change": Change}


@dataclass(kw_only=True)
class Verification(_Document):
    """verify/KEY/verify.json (remediation/verify.py): one finding's fix, or several together,
    measured A/B (`bench`), its pages compared (`responses`) and captured again (`reprofile`)."""
    format: int = VERIFY_FORMAT
    finding: VerifiedFinding
    findings: list[VerifiedFinding] = field(default_factory=list)
    target: str | None = None
    remediations: list[dict] = field(default_factory=list)
    php_ini: dict | None = None                 # {"before": {...}, "after": {...}}
    base_remediations: list[dict] | None = None
    base_source: str | None = None
    responses: Responses | None = None          # the page comparison (harness/responses.py)
    bench: ABResult
    reprofile: Recapture
    before_bundle: str | None = None
    diff_svg: dict | None = None                # kind -> file name of a differential flame graph
    confirmed: bool | None = None
    each: list[EachRow] | None = None           # verify --each: what each fix adds to the others

    NESTED: ClassVar[dict[str, type]] = {"finding": VerifiedFinding, "findings": VerifiedFinding,
                                         "reprofile": Recapture, "bench": ABResult, "responses": Responses,
                                         "each": EachRow}
    OMIT_NONE: ClassVar[frozenset] = frozenset({"each"})

    @classmethod
    def from_json(cls, data, where: str = ""):
        if type(data) is dict:
            why = _format_problem(data.get("format", _ABSENT), VERIFY_FORMAT, "a verification")
            if why:
                raise DocumentError(why)
        return super().from_json(data, where)

    @property
    def key(self) -> str:
        return self.finding.key

    @property
    def together(self) -> bool:
        """Several findings fixed together (verify --all, or --finding given more than once)."""
        return len(self.findings) > 1

    def problem(self) -> str | None:
        if self.together and self.reprofile.gone_by_finding is None:
            return (f"{len(self.findings)} findings fixed together, but no reprofile.gone_by_finding "
                    f"(which of them each re-capture still showed)")
        return None


# ----------------------------------------------------------------------------- accounting.json

def _sum_problem(explained: float, unexplained: float, total: float) -> str | None:
    """The rule of every part of the accounting: explained + unexplained = the sampled time
    (each written rounded to 0.1 us), none of them below zero."""
    for name, v in (("total_us", total), ("explained_us", explained), ("unexplained_us", unexplained)):
        if v < 0:
            return f"{name} is {v:g}, below zero"
    if abs(explained + unexplained - total) > max(1.0, 1e-6 * total):
        return (f"explained_us + unexplained_us is {explained + unexplained:g}, not total_us {total:g}: "
                f"the two parts of the sampled time must add up to it")
    return None


@dataclass(kw_only=True)
class AccountingHotspot(_Document):
    """accounting.json `hotspots.KIND[i]` and `urls[i].top[i]` (analyzers/accounting.py
    Hotspot): unexplained time of one PHP function, builtin family or engine subsystem."""
    kind: str                                   # self | inclusive | builtin_family | subsystem
    name: str
    us: float
    share_pct: float | None = None              # of the sampled time (the URL's, for a URL's top)
    us_per_request: float | None = None
    path: list[str] = field(default_factory=list)      # the most common call path, root first
    path_pct: float | None = None               # of its time on that path
    requests: list[str] = field(default_factory=list)  # the requests with most of it, most first
    request_count: int | None = None
    urls: list[str] = field(default_factory=list)
    members: list[str] = field(default_factory=list)   # a builtin family's builtins
    noted_by: list[str] = field(default_factory=list)  # informational findings that name it


@dataclass(kw_only=True)
class AccountingPart(_Document):
    """accounting.json `urls[i]`: one URL's sampled time, the part the findings explain, and
    its top unexplained functions (self)."""
    url: str
    requests: int                               # timed requests
    sampled_requests: int                       # those with samples
    total_us: float
    explained_us: float
    unexplained_us: float
    explained_pct: float | None = None          # None: no samples
    unexplained_pct: float | None = None
    mean_us: float | None = None                # sampled time per sampled request
    by_finding_pct: dict[str, float] = field(default_factory=dict)   # each finding's own (overlapping)
    top: list[AccountingHotspot] = field(default_factory=list)

    NESTED: ClassVar[dict[str, type]] = {"top": AccountingHotspot}

    def problem(self) -> str | None:
        return _sum_problem(self.explained_us, self.unexplained_us, self.total_us)


@dataclass(kw_only=True)
class AccountedFinding(_Document):
    """accounting.json `findings[i]`: what one defect finding owns of the sampled time."""
    key: str
    id: str
    title: str
    severity: str
    share_pct: float | None = None              # the finding's own estimate
    how: str = ""                               # what it owns, in words
    owned_us: float                             # overlapping other findings' where they nest
    owned_pct: float | None = None


@dataclass(kw_only=True)
class AccountingHotspots(_Document):
    """accounting.json `hotspots`: the top unexplained hotspots of each kind."""
    self: list[AccountingHotspot] = field(default_factory=list)             # the PHP stack's leaf
    inclusive: list[AccountingHotspot] = field(default_factory=list)        # anywhere on it
    builtin_family: list[AccountingHotspot] = field(default_factory=list)   # perf: in a builtin
    subsystem: list[AccountingHotspot] = field(default_factory=list)        # perf: engine subsystem, off-cpu

    NESTED: ClassVar[dict[str, type]] = {"self": AccountingHotspot, "inclusive": AccountingHotspot,
                                         "builtin_family": AccountingHotspot, "subsystem": AccountingHotspot}


@dataclass(kw_only=True)
class TimeAccounting(_Document):
    """accounting.json (analyzers/accounting.py Accounting.to_json, with a format): how much of
    the timed requests' sampled time the run's findings explain, overall and per URL, each
    finding's own part, and the top unexplained hotspots. `lockdown run` writes it after the
    argument probe and the patch proposals; a run directory written before it has none."""
    format: int = ACCOUNTING_FORMAT
    basis: str                                  # excimer-wall | excimer-cpu | perf-cpu | none
    basis_text: str | None = None
    period_ms: float | None = None
    perf: bool
    findings_source: str = ""
    requests: int
    sampled_requests: int
    total_us: float
    explained_us: float
    unexplained_us: float
    explained_pct: float | None = None          # None: no samples
    unexplained_pct: float | None = None
    mean_us: float | None = None
    by_finding_pct: dict[str, float] = field(default_factory=dict)
    overlap_us: float | None = None             # the findings' own times beyond the explained time
    overlap_pct: float | None = None
    urls: list[AccountingPart] = field(default_factory=list)
    findings: list[AccountedFinding] = field(default_factory=list)
    informational: list[str] = field(default_factory=list)   # keys of findings that own nothing by rule
    hotspots: AccountingHotspots = field(default_factory=AccountingHotspots)
    notes: list[str] = field(default_factory=list)

    NESTED: ClassVar[dict[str, type]] = {"urls": AccountingPart, "findings": AccountedFinding,
                                         "hotspots": AccountingHotspots}

    @classmethod
    def from_json(cls, data, where: str = ""):
        if type(data) is dict:
            why = _format_problem(data.get("format", _ABSENT), ACCOUNTING_FORMAT, "a time accounting",
                                  absent_ok=False)
            if why:
                raise DocumentError(why)
        return super().from_json(data, where)

    @classmethod
    def of(cls, accounting) -> "TimeAccounting":
        """The document of an analyzers.accounting.Accounting (its to_json, checked)."""
        return cls.from_json({"format": ACCOUNTING_FORMAT, **accounting.to_json()})

    def problem(self) -> str | None:
        return _sum_problem(self.explained_us, self.unexplained_us, self.total_us)
