"""Time accounting: how much of the timed requests' sampled time the findings explain, each
moment counted once however many findings cover it, and where the rest goes: the top
unexplained hotspots (PHP functions self and inclusive, builtin families, native subsystems),
each with its most common call path and the requests that show it. A pure function of samples,
statements and findings (docs/analysis.md, "Time accounting").

The unit is the sample. With Excimer (the default capture), each PHP sample stands for its
weight times the timer period of the capture's clock (the wall clock by default, else CPU
time), as every Excimer share does. Where perf ran too, the worker's main-thread perf samples
inside the sample's interval (since the sample before it, or the profiler's start) split it:
one slice per perf sample, each carrying the PHP stack and its native frames (the interval's
CPU time, at most the sample's own time), and one slice for the rest (off the CPU: waiting for
the database, the disk, a lock, a CPU). A capture without Excimer falls back to perf's samples
(one slice per sample, its period of CPU, no PHP stack). So slices tile the sampled time, and
explained + unexplained = the sampled time by construction, per request, URL and overall.

What a finding owns (`claim_of`; informational findings, hot-builtins and blocking-wait, own
nothing: they describe time, they do not explain it with a fix; nor do hotspot findings, which
point at time nobody explains: were they to own it, they would explain themselves, and the
unexplained share would shrink by the very findings that measure it):

- a PHP function (fs-scan: its walker; repeated-call: its function and the functions only it
  calls; file-static-cache: its getter; any other finding whose details name a `function`):
  every slice with that function anywhere on its PHP stack, on every URL (the fix is in the
  function);
- native frames (opcache: compiler frames; pcre-jit-off: samples in the regex subsystem;
  stat-storm: path resolution and stat system calls outside directory reads and stat-family
  builtins, the detector's rule; debug-extension: frames in the extension's shared object): the
  perf slices whose frames match, on every URL;
- statements (db-static-cache, n-plus-one, write-on-read, unindexed-query: the executions of
  its fingerprint; repeated-query: those of its statement but the first of each request, which
  a memo still sends; disk-spill: its fingerprint's executions the server flagged as spilling),
  on the finding's URLs. A statement costs its server time plus the round trip applied to its
  request. Samples cannot say which statement was running, so the statements' time is placed:
  a function that sends one statement per call (the statements name it, or the call graph
  shows it: `senders`) puts the slices under it in that statement set's group, and the part of
  them a finding owns is the part of the group's statements in that request that it covers (by
  count: each call is one statement); the request's other statements go to its database
  slices outside any sender (a PHP function calling a database builtin, by xhprof's call
  graph, or native frames in a database client), each owning covered time / max(statement
  time, slice time) of them, so that a finding never owns more than its statements took.

A slice is explained when any finding owns it whole (a frame), else for the part the
statement findings own together (the union of their statements: a statement two findings
cover counts once). Each finding's own time (`owned_us`) counts everything it claims, so the
findings' own times overlap where they nest (`overlap_us`); the explained total does not.
"""
from __future__ import annotations

import bisect
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field

from ..bundle.model import ExcimerProfile, PerfSample, Statement
from .builtins import ROOT, entries
from .closure_names import frames_named
from .detectors.stat_storm import stat_sample as storm_sample
from .findings import Finding
from .off_cpu import app_relative
from .sql_caller import caller_of
from .sql_text import fp_of, is_marker, normalize
from .subsystems import categorise, dso_name

TOP = 10                 # hotspots per kind
URL_TOP = 3              # each URL's own top unexplained functions (self)
REQUESTS_SHOWN = 5       # request ids named per hotspot
OFF_CPU = "off-cpu"      # the subsystem of a sample's time perf did not see on the CPU
NO_STACK = "(no PHP stack)"

# -- what each finding owns ------------------------------------------------------------------

PHP_FUNCTION_FINDINGS = {"fs-scan": ("walker",), "repeated-call": ("function", "nested"),
                         "file-static-cache": ("function",)}
SPILL_FLAGS = ("tmp_table_on_disk", "filesort_on_disk", "merge_passes")   # disk-spill's

# opcache's compiler frames (compile_file, the parser, the optimizer, persisting a script)
_COMPILER = re.compile(r"^(compile_file(\.|$)|compile_string(\.|$)|zendparse|zendlex|lex_scan|zend_compile_|"
                       r"zend_optimize_script|zend_optimizer_|zend_accel_script_persist|zend_persist_|"
                       r"persistent_compile_file)")
_DB_DSO = re.compile(r"^(mysqlnd|mysqli|pdo_mysql|pdo|pgsql|pdo_pgsql|sqlite3|pdo_sqlite)\.so$")
# database client builtins (xhprof names): their callers are where a request waits for its statements
_DB_BUILTIN = re.compile(r"^(mysqli|mysql_|pdo|pg_|sqlite3?)", re.I)


def compiling(frames) -> bool:
    return any(_COMPILER.match(f[1]) for f in frames)


def regex_sample(frames) -> bool:
    return categorise(list(frames)) == "regex"


def stat_sample(frames) -> bool:
    """stat-storm's own rule (path resolution and stat calls the engine's caches could absorb)."""
    return storm_sample(list(frames))


def in_extension(names: Iterable[str]) -> Callable:
    patterns = [re.compile(rf"^{re.escape(n)}([-_.][\w.+-]*)?\.so$", re.I) for n in names if n]
    return lambda frames: any(p.match(dso_name(f[3])) for f in frames for p in patterns)


NATIVE_FINDINGS: dict[str, tuple[Callable[[dict], Callable], str]] = {
    "opcache": (lambda d: compiling, "perf samples compiling PHP (compiler frames)"),
    "pcre-jit-off": (lambda d: regex_sample, "perf samples in the regex subsystem"),
    "stat-storm": (lambda d: stat_sample, "perf samples resolving paths or in stat calls the caches could absorb"),
    "debug-extension": (lambda d: in_extension([*(d.get("names") or []), d.get("extension") or ""]),
                        "perf samples in the extension's shared object"),
}


@dataclass
class Claim:
    """What one finding owns (module docstring)."""
    key: str
    id: str
    title: str
    severity: str
    share_pct: float | None
    how: str                                             # in words
    frames: frozenset = frozenset()                      # PHP functions
    native: Callable | None = None                       # perf frames -> owned
    statements: Callable | None = None                   # (a request's statements) -> indices owned
    urls: frozenset | None = None                        # statements only on these URLs


def _finding(f) -> Finding:
    return f if isinstance(f, Finding) else Finding.from_json(f)


def findings_from_json(data) -> list[Finding]:
    """Findings as findings.json holds them ({"findings": [...]}) or as a plain list; ValueError
    when it is neither."""
    rows = data.get("findings") if isinstance(data, dict) else data
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ValueError("not a list of findings, nor an object with one under \"findings\"")
    try:
        return [Finding.from_json(r) for r in rows]
    except TypeError as e:
        raise ValueError(f"a finding that is not one: {e}") from None


PLACED = ", placed on their senders' calls and the URL's database samples"


UNCLAIMED = frozenset({"hotspot"})   # defect findings that own nothing (module docstring)


def owns_nothing(f: Finding) -> bool:
    return not f.is_defect or f.id in UNCLAIMED


def claim_of(finding) -> Claim | None:
    """What a defect finding owns; None for an informational one or a hotspot."""
    f = _finding(finding)
    if owns_nothing(f):
        return None
    d = f.details or {}
    base = dict(key=f.key or f.id, id=f.id, title=f.title, severity=f.severity, share_pct=f.share_pct)
    if f.id in NATIVE_FINDINGS:
        make, how = NATIVE_FINDINGS[f.id]
        return Claim(**base, how=how, native=make(d))
    names = [d.get(k) for k in PHP_FUNCTION_FINDINGS.get(f.id, ("function", "walker"))]
    frames = frozenset(n for v in names for n in (v if isinstance(v, list) else [v]) if isinstance(n, str) and n)
    if frames:
        return Claim(**base, how=f"samples with {' or '.join(sorted(frames))} on the PHP stack", frames=frames)
    urls = frozenset(f.urls) if f.urls else None
    if f.id == "repeated-query" and d.get("statement"):
        text = d["statement"]

        def repeats(stmts: list[Statement]) -> set[int]:
            mine = [i for i, s in enumerate(stmts) if normalize(s.sql) == text]
            return set(mine[1:])
        return Claim(**base, how="its statement's executions but the first of each request" + PLACED,
                     statements=repeats, urls=urls)
    if d.get("fingerprint"):
        fp = d["fingerprint"]
        spill = f.id == "disk-spill"

        def executions(stmts: list[Statement]) -> set[int]:
            return {i for i, s in enumerate(stmts) if fp_of(s.sql) == fp
                    and (not spill or s.plan is None or any(x in s.plan for x in SPILL_FLAGS))}
        return Claim(**base, how="the executions of its statement shape" + (" that spilled" if spill else "")
                     + PLACED, statements=executions, urls=urls)
    return Claim(**base, how="nothing the samples show: its details name no function, frame or statement")


# -- slices ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Slice:
    """A piece of one request's sampled time (module docstring)."""
    request: str
    us: float
    stack: tuple                   # PHP frames, root first (empty on a perf basis)
    native: tuple | None = None    # perf frames, leaf first, each (addr, symbol, offset, dso)
    on_cpu: bool | None = None     # True: a perf sample; False: the rest, off the CPU; None: no perf
    sample: int = -1               # the Excimer sample whose stack it holds (-1: none, perf alone: no stack)


def _frames(frames: list) -> tuple:
    return tuple(tuple(f) for f in frames)


def excimer_slices(profiles: Iterable[ExcimerProfile], period_ms: float, perf: list[PerfSample] | None,
                   run_dir: str | None = None) -> list[Slice]:
    """The profiles' samples as slices, split by perf's main-thread samples in their intervals
    when `perf` is given (None: perf did not run)."""
    period_us = period_ms * 1000.0
    by_pid: dict[int, list[tuple[int, tuple]]] = defaultdict(list)
    periods: Counter = Counter()
    for s in perf or ():
        if s.tid == s.pid:
            by_pid[s.pid].append((s.time_ns, _frames(s.frames)))
            periods[s.period] += 1
    for v in by_pid.values():
        v.sort(key=lambda x: x[0])
    times = {pid: [t for t, _ in v] for pid, v in by_pid.items()}
    perf_us = periods.most_common(1)[0][0] / 1000.0 if periods else 0.0
    out: list[Slice] = []
    stacks_of: dict[str, tuple] = {}
    n = 0                              # Excimer samples so far: each slice names its own
    for p in profiles:
        if not p.samples:
            continue
        ordered = sorted(p.samples, key=lambda s: s[0])
        first_t, first_w = ordered[0][0], ordered[0][1]
        previous = (p.start_ns if p.start_ns is not None and p.start_ns <= first_t
                    else first_t - first_w * period_us * 1000)
        t_pid, s_pid = times.get(p.pid, []), by_pid.get(p.pid, [])
        before = None                  # the stack of the sample before, in this request
        before_n = -1                  # ... and its number
        for time_ns, weight, i in ordered:
            text = p.stacks[i]
            stack = stacks_of.get(text)
            if stack is None:
                stack = stacks_of[text] = tuple(app_relative(text, run_dir).split(";"))
            us = weight * period_us
            n += 1
            if perf is None:
                out.append(Slice(p.request, us, stack, sample=n))
            else:
                lo, hi = bisect.bisect_right(t_pid, previous), bisect.bisect_right(t_pid, time_ns)
                k = hi - lo
                cpu = min(k * perf_us, us)
                for at, frames in s_pid[lo:hi]:
                    # a sample on time: what ran in the first half of its interval is more
                    # likely what the sample before saw; a late one ends one long builtin call
                    # of its own function, which holds the whole interval
                    early = before is not None and weight <= 1 and at - previous < time_ns - at
                    # the slice names the sample whose stack it takes
                    out.append(Slice(p.request, cpu / k, before if early else stack, frames, True,
                                     before_n if early else n))
                if us - cpu > 0:
                    out.append(Slice(p.request, us - cpu, stack, None, False, n))
            previous, before, before_n = time_ns, stack, n
    return out


def perf_slices(perf: Iterable[PerfSample]) -> list[Slice]:
    """perf's samples as slices (no Excimer): each its period of CPU, main thread only."""
    return [Slice(s.request, s.period / 1000.0, (), _frames(s.frames), True)
            for s in perf if s.tid == s.pid and s.request is not None]


# -- builtins --------------------------------------------------------------------------------

# Builtin families, by the builtin's name (first match); methods are named without their class
# in the engine's tables (`::format`), so they are a family of their own.
FAMILIES = (
    ("regex", r"preg_"),
    ("database", r"(mysqli|mysqlnd|mysql_|pdo|pg_|sqlite)"),
    ("json/serialize", r"(json_|serialize$|unserialize$|var_export$|igbinary_|msgpack_)"),
    ("filesystem", r"(file_exists|is_file|is_dir|is_link|is_readable|is_writ|is_executable|file[mca]time|filesize"
                   r"|fileperms|fileinode|fileowner|filegroup|filetype|stat$|lstat$|realpath|opendir|readdir"
                   r"|closedir|rewinddir|scandir|glob$|dir$|touch$|unlink$|mkdir$|rmdir$|rename$|copy$|tempnam$"
                   r"|tmpfile$|clearstatcache$|chmod$|chown$|disk_)"),
    ("file i/o", r"(fopen|fread|fwrite|fputs|fgets|fgetc|fgetcsv|fputcsv|fseek|ftell|rewind$|feof|fflush|fclose"
                 r"|flock|ftruncate|fstat|file$|file_get_contents|file_put_contents|readfile|fpassthru|stream_"
                 r"|parse_ini_file)"),
    ("output", r"(ob_|print_r$|var_dump$|printf$|vprintf$|flush$|header|setcookie$|http_response_code$)"),
    ("hash/encoding", r"(md5|sha1|crc32|hash|base64_|bin2hex$|hex2bin$|urlencode$|urldecode$|rawurl|random_|"
                      r"password_|openssl_|sodium_|uniqid$|mt_rand$|rand$)"),
    ("date/time", r"(date|gmdate$|mktime$|gmmktime$|strtotime$|time$|microtime$|hrtime$|checkdate$|strftime$)"),
    ("class/function lookup", r"(class_exists|interface_exists|trait_exists|enum_exists|function_exists"
                              r"|method_exists|property_exists|is_callable|call_user_func|func_get_arg"
                              r"|spl_autoload|get_class|get_parent_class|get_object_vars|is_subclass_of|is_a$)"),
    ("array", r"(array|in_array$|count$|sizeof$|sort$|rsort$|usort$|uasort$|uksort$|asort$|arsort$|ksort$"
              r"|krsort$|natsort$|natcasesort$|range$|compact$|extract$|key$|current$|next$|reset$|end$"
              r"|min$|max$|shuffle$|iterator_)"),
    ("string", r"(str|substr|mb_|iconv|html|ctype_|implode$|join$|explode$|v?sprintf$|number_format$|l?trim$"
               r"|rtrim$|chop$|ucfirst$|ucwords$|lcfirst$|nl2br$|wordwrap$|addc?slashes$|stripc?slashes$"
               r"|chunk_split$|similar_text$|levenshtein$|soundex$|metaphone$|sscanf$|parse_str$|parse_url$"
               r"|http_build_query$|quotemeta$|setlocale$)"),
    ("network", r"(curl_|fsockopen|socket_|gethostby|dns_)"),
    ("compression", r"(gz|zlib_|deflate_|inflate_)"),
    ("xml", r"(xml|simplexml_|dom|libxml_)"),
    ("session", r"session_"),
)
_FAMILY = [(name, re.compile(rf"^{pattern}", re.I)) for name, pattern in FAMILIES]
_VM = re.compile(r"^(execute_ex|zend_execute|zend_call_function|ZEND_)")


def family_of(builtin: str) -> str:
    if builtin.startswith("::"):
        return "methods"
    return next((name for name, p in _FAMILY if p.match(builtin)), "other")


def builtin_of(frames) -> str | None:
    """The builtin a native sample is in: the leafmost handler frame (`zif_name`, `zim_::name`)
    before any frame of the VM (a builtin that called back PHP code is not running itself), or a
    database client's shared object (`mysqlnd.so`); None when the sample is in no builtin."""
    for _, symbol, _, dso in frames:
        if symbol.startswith("zif_"):
            return symbol[4:]
        if symbol.startswith("zim_"):
            return symbol[4:] if symbol.startswith("zim_::") else "::" + symbol[4:]
        name = dso_name(dso)
        if _DB_DSO.match(name):
            return name
        if _VM.match(symbol):
            return None
    return None


# -- results ---------------------------------------------------------------------------------

@dataclass
class Hotspot:
    """Unexplained time of one function, builtin family or subsystem over the selection."""
    kind: str                      # self | inclusive | builtin_family | subsystem
    name: str
    us: float
    share_pct: float               # of the selection's sampled time
    us_per_request: float          # over the sampled requests
    path: list                     # the most common call path, root .. it (builtins: their PHP caller's path)
    path_pct: float                # of its time on that path
    requests: list                 # request ids with most of it, most first (REQUESTS_SHOWN)
    request_count: int
    urls: list                     # the URLs it shows on, most first
    members: list = field(default_factory=list)     # builtin family: its builtins, most first
    noted_by: list = field(default_factory=list)    # informational findings that name it


@dataclass
class Part:
    """The selection's time, overall or one URL's."""
    url: str | None
    requests: int                  # timed requests
    sampled_requests: int          # those with samples
    total_us: float
    explained_us: float
    unexplained_us: float
    by_finding: dict               # finding key -> its own time, us (overlapping)
    top: list = field(default_factory=list)        # URL parts: the top unexplained functions (self)

    @property
    def explained_pct(self) -> float | None:
        return 100.0 * self.explained_us / self.total_us if self.total_us else None

    @property
    def unexplained_pct(self) -> float | None:
        return 100.0 * self.unexplained_us / self.total_us if self.total_us else None

    def to_json(self) -> dict:
        per = self.sampled_requests or 0
        out = {"url": self.url, "requests": self.requests, "sampled_requests": self.sampled_requests,
               "total_us": round(self.total_us, 1), "explained_us": round(self.explained_us, 1),
               "unexplained_us": round(self.unexplained_us, 1),
               "explained_pct": _pct(self.explained_pct), "unexplained_pct": _pct(self.unexplained_pct),
               "mean_us": round(self.total_us / per, 1) if per else None,
               "by_finding_pct": {k: _pct(100.0 * v / self.total_us) for k, v in self.by_finding.items()
                                  if self.total_us and v > 0}}
        if self.url is not None:
            out["top"] = [_hotspot_json(h) for h in self.top]
        return out


@dataclass
class FindingTime:
    key: str
    id: str
    title: str
    severity: str
    share_pct: float | None        # the finding's own estimate
    how: str                       # what it owns
    owned_us: float                # the sampled time it owns (overlapping other findings')
    owned_pct: float | None


@dataclass
class Accounting:
    basis: str                     # excimer-wall | excimer-cpu | perf-cpu | none
    period_ms: float | None        # Excimer's period (excimer bases)
    perf: bool                     # perf's samples split the PHP samples (native hotspots)
    overall: Part
    urls: list[Part]
    findings: list[FindingTime]
    informational: list[str]       # keys of findings that own nothing by rule (hotspot findings too)
    hotspots: dict[str, list[Hotspot]]
    notes: list[str] = field(default_factory=list)
    findings_source: str = ""      # where the findings came from (the detect step, a findings.json)
    # (slice, its unexplained us): what the hotspot step reads; not in to_json
    unexplained_slices: list = field(default_factory=list, repr=False)

    @property
    def overlap_us(self) -> float:
        """The findings' own times beyond the explained time: what nested findings share."""
        return max(0.0, sum(f.owned_us for f in self.findings) - self.overall.explained_us)

    def to_json(self) -> dict:
        total = self.overall.total_us
        return {"basis": self.basis, "basis_text": BASIS_TEXT.get(self.basis, self.basis),
                "period_ms": self.period_ms, "perf": self.perf, "findings_source": self.findings_source,
                **{k: v for k, v in self.overall.to_json().items() if k != "url"},
                "overlap_us": round(self.overlap_us, 1),
                "overlap_pct": _pct(100.0 * self.overlap_us / total) if total else None,
                "urls": [u.to_json() for u in self.urls],
                "findings": [{**asdict(f), "owned_us": round(f.owned_us, 1), "owned_pct": _pct(f.owned_pct)}
                             for f in self.findings],
                "informational": self.informational,
                "hotspots": {k: [_hotspot_json(h) for h in v] for k, v in self.hotspots.items()},
                "notes": self.notes}


def _pct(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


def _hotspot_json(h: Hotspot) -> dict:
    d = asdict(h)
    d.update(us=round(h.us, 1), share_pct=_pct(h.share_pct), us_per_request=round(h.us_per_request, 1),
             path_pct=round(h.path_pct, 1))
    return d


# -- the accounting --------------------------------------------------------------------------

def is_file_frame(name: str) -> bool:
    """Excimer's frame for a file's top-level code (xhprof's `main()`): the file's path."""
    return "/" in name or name.endswith((".php", ".inc"))


def db_callers(xhprof_profiles: Iterable[dict], is_internal: Callable[[str], bool] | None = None) -> set[str]:
    """PHP functions that call a database client builtin (xhprof's call graph); `main()` for a
    file's top-level code. With `is_internal` (the engine's function lists), only builtins count
    as the client and only user code as its caller; without, names alone decide."""
    internal = is_internal or (lambda name: _DB_BUILTIN.match(name) is not None)
    out = set()
    for profile in xhprof_profiles:
        for caller, callee, _ in entries(profile, is_internal):
            if _DB_BUILTIN.match(callee) and internal(callee) and not (caller and internal(caller)):
                out.add(caller or ROOT)
    return out


def account(slices: list[Slice], url_of: Mapping[str, str], findings: Iterable,
            statements_of: Mapping[str, list[Statement]] | None = None,
            round_trip_us: Mapping[str, float] | None = None,
            senders: Mapping[str, tuple[str, str]] | None = None,
            db_functions: set[str] | None = None, requests: Iterable[str] | None = None,
            basis: str = "excimer-wall", period_ms: float | None = None, perf: bool | None = None,
            top: int = TOP) -> Accounting:
    """The accounting of `slices` (the selection's timed requests) against `findings`.

    `url_of`: request id -> URL; `requests`: the selection's timed request ids, those without
    samples included (default: the slices'); `statements_of`: request id -> its statements in
    log order; `round_trip_us`: request id -> the round trip applied to each of its statements;
    `senders`: PHP function -> ("named", function) or ("shape", fingerprint), the statements it
    sends one per call; `db_functions`: PHP functions that call a database builtin (`main()` for
    top-level code), None when unknown (then a request's statements outside any sender are
    placed over all its slices outside one)."""
    found = [_finding(f) for f in findings]
    claims = [c for c in map(claim_of, found) if c is not None]
    informational = [f.key or f.id for f in found if owns_nothing(f)]
    rids = sorted(set(requests) if requests is not None else {s.request for s in slices})
    perf = any(s.on_cpu is not None for s in slices) if perf is None else perf
    notes: list[str] = []
    whole = _whole_owners(slices, claims)

    # statement owners: each slice's union part and each finding's part
    parts: list[tuple[float, dict]] = [(0.0, {})] * len(slices)
    by_statements = [c for c in claims if c.statements is not None]
    if by_statements and statements_of:
        parts = _place_statements(slices, url_of, by_statements, statements_of, round_trip_us or {},
                                  senders or {}, db_functions, basis, notes)

    t = _tally(slices, whole, parts, url_of)
    requests_of: dict[str, set] = defaultdict(set)
    for rid in rids:
        requests_of[url_of.get(rid, "?")].add(rid)
    for s in slices:
        requests_of[url_of.get(s.request, "?")].add(s.request)
    all_us = sum(t.total.values())
    owned_all: Counter = Counter()
    for c in t.owned.values():
        owned_all.update(c)
    n_sampled = sum(len(v) for v in t.sampled.values())
    hotspots = _hotspots(t.unexplained, url_of, all_us, n_sampled, top, found)
    url_parts = _url_parts(t, sorted(requests_of), requests_of, url_of, found)
    overall = Part(None, sum(len(v) for v in requests_of.values()), n_sampled, all_us,
                   sum(t.explained.values()), sum(x for _, x in t.unexplained), dict(owned_all))
    times = [FindingTime(c.key, c.id, c.title, c.severity, c.share_pct, c.how, owned_all[c.key],
                         100.0 * owned_all[c.key] / all_us if all_us else None) for c in claims]
    for ft in times:
        if all_us and not owned_all[ft.key] and (ft.share_pct or 0) > 0:
            notes.append(f"{ft.key}: its share ({ft.share_pct:g}%) is placed on no sample ({ft.how})"
                         + ("; no perf samples in this capture" if not perf and ft.id in NATIVE_FINDINGS else ""))
    return Accounting(basis, period_ms, bool(perf), overall, url_parts, times, informational, hotspots, notes,
                      unexplained_slices=t.unexplained)


def _whole_owners(slices: list[Slice], claims: list) -> list[tuple]:
    """Per slice: the keys of the findings that own it whole, by a PHP frame or a native one."""
    by_frame = [c for c in claims if c.frames]
    by_native = [c for c in claims if c.native is not None]
    php_owner: dict[tuple, tuple] = {}
    native_owner: dict[tuple, tuple] = {}
    whole: list[tuple] = []
    for s in slices:
        keys = php_owner.get(s.stack)
        if keys is None:
            on = set(s.stack)
            keys = php_owner[s.stack] = tuple(c.key for c in by_frame if c.frames & on)
        if s.native is not None and by_native:
            more = native_owner.get(s.native)
            if more is None:
                more = native_owner[s.native] = tuple(c.key for c in by_native if c.native(s.native))
            keys = keys + more
        whole.append(keys)
    return whole


@dataclass
class _Tally:
    """The slices' time summed per URL: in all, explained, owned by each finding; what is left
    unexplained of each slice; the requests sampled."""
    total: Counter = field(default_factory=Counter)
    explained: Counter = field(default_factory=Counter)
    owned: dict = field(default_factory=lambda: defaultdict(Counter))      # url -> key -> us
    unexplained: list = field(default_factory=list)                         # [(Slice, us)]
    sampled: dict = field(default_factory=lambda: defaultdict(set))


def _tally(slices: list[Slice], whole: list[tuple], parts: list[tuple[float, dict]],
           url_of: Mapping[str, str]) -> _Tally:
    t = _Tally()
    for s, keys, (frac, per_key) in zip(slices, whole, parts):
        url = url_of.get(s.request, "?")
        part = 1.0 if keys else frac
        t.total[url] += s.us
        t.explained[url] += s.us * part
        t.sampled[url].add(s.request)
        for k in keys:
            t.owned[url][k] += s.us
        for k, v in per_key.items():
            t.owned[url][k] += s.us * v
        if part < 1.0:
            t.unexplained.append((s, s.us * (1.0 - part)))
    return t


def _url_parts(t: _Tally, urls: list[str], requests_of: Mapping[str, set], url_of: Mapping[str, str],
               found: list[Finding]) -> list[Part]:
    out = []
    for u in urls:
        mine = [(s, x) for s, x in t.unexplained if url_of.get(s.request, "?") == u]
        out.append(Part(u, len(requests_of[u]), len(t.sampled[u]), t.total[u], t.explained[u],
                        sum(x for _, x in mine), dict(t.owned[u]),
                        _ranked(mine, "self", url_of, t.total[u], len(t.sampled[u]), URL_TOP, found)))
    return out


def _group_of(senders: Mapping[str, tuple[str, str]]):
    """statement -> its sender group ("named"/"shape", value), or None."""
    named = {v for how, v in senders.values() if how == "named"}
    shapes = sorted({v for how, v in senders.values() if how == "shape"})

    def group(s: Statement):
        if named:
            c = caller_of(s.sql)
            if c in named:
                return ("named", c)
        if shapes:
            fp = fp_of(s.sql)
            if fp in shapes:
                return ("shape", fp)
        return None
    return group


def _place_statements(slices, url_of, claims, statements_of, round_trip_us, senders, db_functions, basis,
                      notes) -> list[tuple[float, dict]]:
    """Per slice: (the part the statement findings own together, {finding key: its part}).
    Pooled per URL: a request has few samples, and the requests of a URL run the same code."""
    out: list[tuple[float, dict]] = [(0.0, {})] * len(slices)
    group_of = _group_of(senders)
    slice_group: dict[tuple, tuple | None] = {}
    db_slice: dict[tuple, bool] = {}
    functions = set(db_functions or ())
    top_level = ROOT in functions

    def group_for(stack: tuple):
        if stack not in slice_group:
            slice_group[stack] = next((senders[f] for f in reversed(stack) if f in senders), None)
        return slice_group[stack]

    def is_db(s: Slice) -> bool:
        if db_functions is None:
            return True
        if s.native is not None and any(_DB_DSO.match(dso_name(f[3])) for f in s.native):
            return True
        if s.stack not in db_slice:
            db_slice[s.stack] = any(f in functions or (top_level and is_file_frame(f)) for f in s.stack)
        return db_slice[s.stack]

    by_url: dict[str, list[int]] = defaultdict(list)
    for i, s in enumerate(slices):
        by_url[url_of.get(s.request, "?")].append(i)
    cpu_basis = basis != "excimer-wall"
    unplaced_us = 0.0
    for url, idx in by_url.items():
        # the URL's statements: (its sender group, its cost, the findings that own it)
        rows = []
        for rid in sorted({slices[i].request for i in idx}):
            stmts = [s for s in statements_of.get(rid, ()) if not is_marker(s.sql)]
            owners: list[set] = [set() for _ in stmts]
            for c in claims:
                if c.urls is None or url in c.urls:
                    for j in c.statements(stmts):
                        owners[j].add(c.key)
            trip = round_trip_us.get(rid, 0.0)
            rows += [(group_of(s), s.duration_us + trip, o) for s, o in zip(stmts, owners)]
        if not any(o for _, _, o in rows):
            continue
        present = {group_for(slices[i].stack) for i in idx} - {None}
        # the slices under a sender: by count, each of its calls is one statement
        shares: dict = {}
        for g in present:
            mine = [o for x, _, o in rows if x == g]
            per_key: Counter = Counter()
            for o in mine:
                for k in o:
                    per_key[k] += 1.0 / len(mine)
            shares[g] = (sum(1 for o in mine if o) / len(mine) if mine else 0.0, dict(per_key))
        # the other statements over the URL's database slices outside any sender
        rest = [(cost, o) for x, cost, o in rows if x not in present]
        candidates = [i for i in idx if group_for(slices[i].stack) is None and is_db(slices[i])]
        covered = sum(cost for cost, o in rest if o)
        rest_share: tuple = (0.0, {})
        if covered and (cpu_basis or not candidates):
            unplaced_us += covered
        elif covered:
            den = max(sum(cost for cost, _ in rest), sum(slices[i].us for i in candidates))
            per_key = Counter()
            for cost, o in rest:
                for k in o:
                    per_key[k] += cost / den
            rest_share = (covered / den, dict(per_key))
        for i in idx:
            g = group_for(slices[i].stack)
            if g is not None:
                out[i] = shares[g]
        for i in candidates:
            out[i] = rest_share
    if unplaced_us:
        why = ("a CPU-clock profile holds no time waiting for the database" if cpu_basis
               else "no sample of their URL's requests was in a function that sends SQL")
        notes.append(f"{unplaced_us / 1000:.1f} ms of statement findings' statements placed on no sample "
                     f"outside their senders ({why})")
    return out


def _hotspots(unexplained: list[tuple[Slice, float]], url_of, total_us: float, n_sampled: int, top: int,
              found: list[Finding]) -> dict[str, list[Hotspot]]:
    return {kind: _ranked(unexplained, kind, url_of, total_us, n_sampled, top, found)
            for kind in ("self", "inclusive", "builtin_family", "subsystem")}


def _keys(s: Slice, kind: str) -> list[tuple[str, tuple, str | None]]:
    """(name, call path, member) of each hotspot of `kind` a slice counts toward."""
    if kind == "self":
        return [(s.stack[-1], s.stack, None)] if s.stack else [(NO_STACK, (), None)]
    if kind == "inclusive":
        out, seen = [], set()
        for i, f in enumerate(s.stack):
            if i == 0 or f in seen:           # the entry script holds everything; recursion once
                continue
            seen.add(f)
            out.append((f, s.stack[:i + 1], None))
        return out
    if kind == "builtin_family":
        if not s.on_cpu or s.native is None:
            return []
        b = builtin_of(s.native)
        return [] if b is None else [(family_of(b), s.stack + (b,), b)]
    if s.on_cpu is None:                      # subsystem: perf did not run
        return []
    return [(OFF_CPU, s.stack, None)] if not s.on_cpu else [(categorise(list(s.native or ())), s.stack, None)]


def _ranked(unexplained: list[tuple[Slice, float]], kind: str, url_of, total_us: float, n_sampled: int,
            top: int, found: list[Finding]) -> list[Hotspot]:
    us: Counter = Counter()
    paths: dict[str, Counter] = defaultdict(Counter)
    reqs: dict[str, Counter] = defaultdict(Counter)
    urls: dict[str, Counter] = defaultdict(Counter)
    members: dict[str, Counter] = defaultdict(Counter)
    for s, x in unexplained:
        if x <= 0:
            continue
        for name, path, member in _keys(s, kind):
            us[name] += x
            paths[name][path] += x
            reqs[name][s.request] += x
            urls[name][url_of.get(s.request, "?")] += x
            if member:
                members[name][member] += x
    noted = _noted(found)
    out = []
    for name, t in sorted(us.items(), key=lambda kv: (-kv[1], kv[0]))[:top]:
        path, on_path = max(paths[name].items(), key=lambda kv: (kv[1], kv[0]))
        named = set().union(*(noted.get(m, set()) for m in members[name])) if members[name] else noted.get(name, set())
        out.append(Hotspot(
            kind, name, t, 100.0 * t / total_us if total_us else 0.0, t / n_sampled if n_sampled else 0.0,
            list(path), 100.0 * on_path / t, [r for r, _ in _most(reqs[name])[:REQUESTS_SHOWN]], len(reqs[name]),
            [u for u, _ in _most(urls[name])], [m for m, _ in _most(members[name])[:5]], sorted(named)))
    return out


def _most(c: Counter) -> list:
    return sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))


def _noted(found: list[Finding]) -> dict[str, set]:
    """Function or builtin name -> keys of the informational and hotspot findings that name it."""
    out: dict[str, set] = defaultdict(set)
    for f in found:
        if not owns_nothing(f):
            continue
        d = f.details or {}
        if isinstance(d.get("function"), str):
            out[d["function"]].add(f.key or f.id)
        if isinstance(d.get("subsystem"), str):           # a hotspot finding on a subsystem
            out[d["subsystem"]].add(f.key or f.id)
        for b in d.get("builtins") or []:
            if isinstance(b, dict) and isinstance(b.get("name"), str):
                out[b["name"]].add(f.key or f.id)
    return out


# -- from a bundle ---------------------------------------------------------------------------

BASIS_TEXT = {"excimer-wall": "Excimer's wall-clock samples", "excimer-cpu": "Excimer's CPU-clock samples",
              "perf-cpu": "perf's CPU samples (no Excimer profile)", "none": "no samples"}


def of_context(ctx, findings: Iterable, request_ids: Iterable[str] | None = None, top: int = TOP) -> Accounting:
    """The accounting of a bundle's timed requests (all of them, or those of `request_ids`)
    from the detectors' Context (detectors/context.py): its Excimer profiles, named perf
    samples, statements, the round trip applied to each request, and the statements' senders."""
    from .detectors.related import statement_senders      # the senders the detectors link findings by

    timed = set(ctx.timed_ids)
    chosen = timed if request_ids is None else timed & set(request_ids)
    capture = ctx.manifest.get("capture") or {}
    collected = capture.get("collect")
    perf = [s for s in ctx.native if s.request in chosen]
    has_perf = bool(perf) or (collected is not None and "perf" in collected)
    profiles = [p for p in ctx.excimer_profiles if p.request in chosen and p.samples]
    period = capture.get("excimer_period_ms")
    if profiles and period:
        basis = "excimer-wall" if capture.get("excimer_clock", "wall") == "wall" else "excimer-cpu"
        slices = excimer_slices(profiles, period, perf if has_perf else None, ctx.manifest.get("run_dir"))
    elif perf:
        basis, period = "perf-cpu", None
        slices = perf_slices(perf)
    else:
        basis, period, slices = "none", None, []
    trip = ctx.round_trip_applied
    senders = dict(statement_senders(ctx)) if ctx.xhprof_profiles else {
        n: ("named", n) for n in {caller_of(s.sql) for s in ctx.statements} - {None}}
    # the call graph's names, and the Excimer closure frames joined to them (closure_names.py)
    senders.update({frame: senders[ctx.xhprof_name(frame)] for frame in ctx.closure_joins.sole
                    if ctx.xhprof_name(frame) in senders})
    got = account(slices, ctx.url_of, findings, statements_of=ctx.statements_of,
                  round_trip_us=trip.per_call_us if trip else None, senders=senders,
                  db_functions=(frames_named(db_callers(ctx.xhprof_profiles.values(),
                                                        ctx.is_internal if ctx.internal_functions else None),
                                             ctx.closure_joins) if ctx.xhprof_profiles else None),
                  requests=chosen, basis=basis, period_ms=period, perf=bool(slices) and has_perf, top=top)
    if not ctx.xhprof_profiles:
        got.notes.append("no xhprof profiles: a request's statements outside their senders are spread over "
                         "all its samples outside them, not only those in functions that send SQL")
    return got


def read_findings(path, bundle_root=None) -> tuple[list[Finding], list[str]]:
    """The findings of a findings.json (a `lockdown run` directory's, after the argument probe),
    and notes (one when it names another bundle than `bundle_root`); LockdownError when the
    file cannot be read or holds no findings."""
    import json
    from pathlib import Path

    from ..errors import LockdownError
    try:
        data = json.loads(Path(path).read_text())
        found = findings_from_json(data)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise LockdownError(f"{path}: cannot read findings ({e}); give a `lockdown run` directory's findings.json")
    notes = []
    named = data.get("bundle") if isinstance(data, dict) else None
    if bundle_root is not None and isinstance(named, str):
        try:
            other = Path(named).resolve() != Path(bundle_root).resolve()
        except OSError:
            other = True
        if other:
            notes.append(f"{path} holds the findings of {named}, not of this bundle: the samples are this bundle's")
    return found, notes


def of_bundle(bundle, findings: list | None = None, thresholds: dict | None = None, request: str | None = None,
              url: str | None = None, top: int = TOP, source: str | None = None) -> Accounting:
    """The accounting of a bundle's timed requests (or those of one URL or request) against
    `findings`, or, without them, the findings of the detect step (`detectors.detect` over the
    bundle with `thresholds`, the defaults when None): what `lockdown run` finds before the
    argument probe and the patches, which need servers."""
    from .analysis import select
    from .detectors import build_context, detect, load_thresholds

    ctx = build_context(bundle, thresholds if thresholds is not None else load_thresholds())
    if findings is None:
        findings = detect(ctx)
        source = source or ("the detect step over this bundle (" + ("the given thresholds" if thresholds is not None
                                                                   else "default thresholds")
                            + "), before the argument probe")
    ids = None
    if request is not None or url is not None:
        ids = {r.id for r in select(bundle.requests(), request, url, bundle.root / "requests.jsonl")}
    got = of_context(ctx, findings, ids, top)
    got.findings_source = source or "given"
    return got
