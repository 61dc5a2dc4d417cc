"""Prerequisite checks for `lockdown doctor`: each one tries the real thing (load the
extension, sample a process with perf) rather than looking for files."""
from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from .. import paths
from . import cpu
from .toolchain import available, tool

SETUP = "run `make setup` (installs the Debian packages lockdown needs)"


@dataclass
class Check:
    name: str
    ok: bool
    required: bool
    detail: str
    fix: str = ""

    def to_json(self) -> dict:
        return asdict(self)


def _run(argv, timeout=60, **kw) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _version_check(name, argv, package, required=True, any_exit=False) -> Check:
    """The tool runs and says who it is (`any_exit`: tools whose usage text exits non-zero)."""
    if not available(argv[0]):
        return Check(name, False, required, f"{tool(argv[0])} not found",
                     f"apt-get install {package}  (or {SETUP})")
    p = _run([tool(argv[0]), *argv[1:]])
    text = ((p.stdout or "") + (p.stderr or "")).strip().splitlines() if p else []
    ok = p is not None and (p.returncode == 0 or (any_exit and bool(text)))
    return Check(name, ok, required, text[0] if text else "no output",
                 "" if ok else f"reinstall {package}")


def php_extension_dir() -> str | None:
    override = os.environ.get("LOCKDOWN_PHP_EXTENSION_DIR")
    if override:
        return override
    p = _run([tool("php"), "-n", "-r", "echo ini_get('extension_dir');"])
    return p.stdout.strip() if p and p.returncode == 0 else None


def extension_check(ext: str, package: str, required=True, zend=False, deps=()) -> Check:
    name = f"php extension {ext}"
    if not available("php"):
        return Check(name, False, required, "php CLI not found", SETUP)
    ext_dir = php_extension_dir()
    so = {"opcache": "opcache"}.get(ext, ext)
    directive = "zend_extension" if zend else "extension"
    probe = "Zend OPcache" if ext == "opcache" else ext
    loads = [a for dep in deps for a in ("-d", f"extension={dep}")]
    p = _run([tool("php"), "-n", "-d", f"extension_dir={ext_dir}", *loads, "-d", f"{directive}={so}",
              "-r", f"exit(extension_loaded('{probe}') ? 0 : 1);"])
    if p is not None and p.returncode == 0:
        return Check(name, True, required, f"loads from {ext_dir}")
    why = (p.stderr or p.stdout).strip().splitlines()[-1] if p and (p.stderr or p.stdout).strip() \
        else "not loaded"
    return Check(name, False, required, f"cannot be loaded from {ext_dir}: {why}",
                 f"apt-get install {package}")


def perf_check() -> Check:
    name = "perf sampling with DWARF call graphs"
    if not available("perf"):
        return Check(name, False, True, "perf not found", "apt-get install linux-perf")
    with tempfile.TemporaryDirectory(prefix="lockdown-doctor-") as tmp:
        data = Path(tmp, "perf.data")
        code = ("function f($n){return $n ? f($n-1)+1 : 0;} $t = microtime(true); "
                "while (microtime(true) - $t < 0.4) { f(40); }")
        rec = _run([tool("perf"), "record", "-q", "-F", "499", "--call-graph", "dwarf,16384",
                    "-o", str(data), "--", tool("php"), "-n", "-r", code], timeout=60)
        if rec is None or rec.returncode != 0:
            err = (rec.stderr.strip().splitlines() or ["failed"])[-1] if rec else "timed out"
            paranoid = Path("/proc/sys/kernel/perf_event_paranoid")
            level = paranoid.read_text().strip() if paranoid.exists() else "?"
            return Check(name, False, True, f"perf record failed: {err} (perf_event_paranoid={level})",
                         "run as root, or lower kernel.perf_event_paranoid (sysctl) to 1 or less")
        script = _run([tool("perf"), "script", "-i", str(data), "-F", "ip,sym"], timeout=120)
        if script is None or script.returncode != 0:
            return Check(name, False, True, "perf script could not read the recording",
                         "apt-get install --reinstall linux-perf")
        samples = [s for s in script.stdout.split("\n\n") if s.strip()]
        deep = [s for s in samples if len(s.strip().splitlines()) >= 4]
        if not samples:
            return Check(name, False, True, "perf recorded no samples",
                         "check that the cpu-clock event works: perf stat -e cpu-clock true")
        if len(deep) < len(samples) / 2:
            return Check(name, False, True,
                         f"only {len(deep)} of {len(samples)} samples have call stacks",
                         "use a kernel and perf with DWARF unwinding (libdw) support")
        return Check(name, True, True, f"{len(samples)} samples, {len(deep)} with call stacks")


def run_dir_check() -> Check:
    name = "writable run directory"
    root = paths.home()
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root):
            pass
        return Check(name, True, True, str(root))
    except OSError as e:
        return Check(name, False, True, f"{root}: {e.strerror}",
                     "set LOCKDOWN_HOME to a writable directory")


# A fixed PHP loop on every core for STEADY_SECONDS, counting its work per STEADY_SLICE: how
# much the machine's capacity moves right now, from slowdowns and from steal alike.
STEADY_SECONDS, STEADY_SLICE, STEADY_LIMIT_PCT = 2.0, 0.2, 5.0
STEADY_LOOP = ("$slice = {slice}; $end = microtime(true) + {seconds}; $next = microtime(true) + $slice; "
               "$n = 0; $out = []; while (true) {{ for ($j = 0; $j < 2000; $j++) {{ $n++; }} "
               "$t = microtime(true); if ($t >= $next) {{ $out[] = $n; $n = 0; $next += $slice; "
               "if ($t >= $end) break; }} }} echo implode(' ', $out);")


def steadiness_check() -> Check:
    """Not a prerequisite: a spot reading of how steady the host is, since no benchmark here
    is steadier than the machine under it (docs/bench.md, "Precision on this machine kind")."""
    name = "host steadiness (benchmark precision)"
    if not available("php"):
        return Check(name, False, False, "php CLI not found", SETUP)
    cores = os.cpu_count() or 1
    loop = STEADY_LOOP.format(slice=STEADY_SLICE, seconds=STEADY_SECONDS)
    before = cpu.snapshot()
    procs = [subprocess.Popen([tool("php"), "-n", "-r", loop], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True) for _ in range(cores)]
    try:
        outs = [p.communicate(timeout=STEADY_SECONDS + 30)[0].split() for p in procs]
    except subprocess.TimeoutExpired:
        return Check(name, False, False, "the CPU loop did not finish", "")
    finally:                        # also on Ctrl-C: no loop outlives the check
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    used = cpu.usage(before, cpu.snapshot())
    slices = min((len(o) for o in outs), default=0)
    if slices < 3:
        return Check(name, False, False, "the CPU loop reported too little to judge", "")
    work = [sum(int(o[i]) for o in outs) for i in range(slices)]
    cv = round(100.0 * statistics.stdev(work) / statistics.fmean(work), 1)    # judged as shown
    steal = used.get("steal_pct", 0.0)
    ok = cv <= STEADY_LIMIT_PCT and steal <= STEADY_LIMIT_PCT
    detail = (f"{cores} core(s) busy for {STEADY_SECONDS:g} s: work per {STEADY_SLICE:g} s varied "
              f"{cv:.1f}% (CV), steal {steal:.1f}% of the CPU")
    fix = ("" if ok else "a shared or busy machine: expect RPS to move about this much between runs; "
           "read bench's CV with the host's capacity taken out, and compare settings or fixes with "
           "`lockdown compare` / `lockdown verify` (interleaved pairs; docs/bench.md)")
    return Check(name, ok, False, detail, fix)


def run_checks() -> list[Check]:
    checks = [
        _version_check("php CLI", ["php", "-v"], "php8.2-cli"),
        _version_check("php-fpm", ["php-fpm", "-v"], "php8.2-fpm"),
        extension_check("opcache", "php8.2-opcache", zend=True),
        extension_check("mysqli", "php8.2-mysql", deps=("mysqlnd",)),
        extension_check("tideways_xhprof", "php8.2-tideways"),
        extension_check("excimer", "php-excimer"),
        # optional: captures at concurrency > 1 ask their sockets for their ports through FFI,
        # and read /proc/self/net/tcp (milliseconds a request) without it
        extension_check("ffi", "php8.2-common", required=False),
        perf_check(),
        _version_check("mariadbd", ["mariadbd", "--version"], "mariadb-server"),
        _version_check("mariadb-install-db", ["mariadb-install-db", "--help"], "mariadb-server",
                       any_exit=True),
        _version_check("mariadb client", ["mariadb", "--version"], "mariadb-client"),
        _version_check("nginx", ["nginx", "-v"], "nginx"),
        _version_check("wrk (default load generator)", ["wrk", "-v"], "wrk", any_exit=True),
    ]
    for name, argv, pkg in (("siege", ["siege", "-V"], "siege"), ("ab", ["ab", "-V"], "apache2-utils")):
        if available(name):
            checks.append(Check(f"{name} (--load {name})", True, False, tool(name)))
        else:
            checks.append(Check(f"{name} (--load {name})", False, False, "not found",
                                f"apt-get install {pkg}"))
    for target, path, pkg in (("wordpress", "/usr/share/wordpress/wp-settings.php", "wordpress"),
                              ("mediawiki", "/usr/share/mediawiki/maintenance/install.php", "mediawiki")):
        ok = Path(path).is_file()
        checks.append(Check(f"{target} package (target {target})", ok, False,
                            path if ok else f"{path} missing", "" if ok else f"apt-get install {pkg}"))
    checks.append(run_dir_check())
    checks.append(steadiness_check())
    return checks
