"""`lockdown doctor` on the real machine, and with an extension really missing."""
import json
import os
import re
from pathlib import Path


def test_doctor_passes_here(lockdown):
    r = lockdown("doctor", "--json")
    data = json.loads(r.stdout)
    failed = [c for c in data["checks"] if c["required"] and not c["ok"]]
    assert r.returncode == 0, failed
    assert data["ok"] is True
    names = {c["name"] for c in data["checks"]}
    for needed in ("php-fpm", "php extension tideways_xhprof", "php extension excimer",
                   "perf sampling with DWARF call graphs", "mariadbd", "nginx",
                   "writable run directory"):
        assert needed in names
    # FFI: optional (concurrent captures fall back to /proc/self/net/tcp without it)
    [ffi] = [c for c in data["checks"] if c["name"] == "php extension ffi"]
    assert ffi["ok"] and not ffi["required"], ffi
    # the host's steadiness: measured, never required, a warning with advice above 5%
    [row] = [c for c in data["checks"] if c["name"] == "host steadiness (benchmark precision)"]
    m = re.fullmatch(r"(\d+) core\(s\) busy for 2 s: work per 0.2 s varied ([\d.]+)% \(CV\), "
                     r"steal ([\d.]+)% of the CPU", row["detail"])
    assert m and int(m.group(1)) == os.cpu_count() and not row["required"], row
    steady = float(m.group(2)) <= 5.0 and float(m.group(3)) <= 5.0
    assert row["ok"] == steady and (row["fix"] == "") == steady, row


def test_doctor_reports_missing_extension(lockdown, tmp_path):
    real = Path(json.loads(lockdown("doctor", "--json").stdout)["checks"][2]["detail"].split()[-1])
    fake = tmp_path / "ext"
    fake.mkdir()
    for so in real.glob("*.so"):
        if so.name != "excimer.so":
            os.symlink(so, fake / so.name)
    r = lockdown("doctor", extra_env={"LOCKDOWN_PHP_EXTENSION_DIR": str(fake)})
    assert r.returncode == 3                    # the checks ran, and one says no
    row = next(line for line in r.stdout.splitlines() if "php extension excimer" in line)
    assert row.startswith("FAIL")
    assert "fix: apt-get install php-excimer" in r.stdout
    assert "tideways_xhprof" in r.stdout and "1 required check(s) failed" in r.stdout
