"""The package as users install it: the wheel `pip install .` would build from this checkout
(pyproject.toml), not the editable install the other tests run. It holds every file of the
package (the data files lockdown reads, and the built-in targets, which lockdown/targets/builtin
links to in a checkout), and installed into a fresh virtual environment it runs
`lockdown run hello` from there.

No network: the wheel is built without build isolation (with the setuptools and wheel that
`make setup` installs), and the environment is made with --system-site-packages so that click,
jinja2 and pyelftools come from the Python `make setup` installed them into. lockdown itself is
installed from the wheel (--no-deps --ignore-installed, since the editable install is visible
too), and the test checks that the `lockdown` which runs is the environment's, not the checkout.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import REPO

# Left out of the copy the wheel is built from: what a build, a test run or git leave
COPY_SKIPS = (".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".ruff_cache",
              ".setup-stamp")
# Files no package holds: compiled, hidden (editor swap files), patch(1) and editor leftovers
NOT_PACKAGED = re.compile(r".*\.py[co]|\..*|.*~|.*\.orig|.*\.rej")
PIP = ("-m", "pip", "--disable-pip-version-check", "--no-input")


def _run(argv, **kwargs) -> subprocess.CompletedProcess:
    r = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=300, **kwargs)
    assert r.returncode == 0, f"{' '.join(map(str, argv))}: exit {r.returncode}\n{r.stdout[-3000:]}{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a copy of the checkout: setuptools writes build/ and egg-info into
    the tree it builds, and a build/lib left from an earlier build would put modules removed
    since into the wheel."""
    src = tmp_path_factory.mktemp("wheel-src") / "lockdown"
    shutil.copytree(REPO, src, symlinks=True, ignore=shutil.ignore_patterns(*COPY_SKIPS))
    out = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, *PIP, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", out, src])
    wheels = list(out.glob("lockdown-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def package_files() -> set[str]:
    """Every file under lockdown/ in the checkout, as the wheel names it: the built-in
    targets through the link to fixtures/apps, and their links to each other, followed."""
    files = set()
    for root, dirs, names in os.walk(REPO / "lockdown", followlinks=True):
        dirs[:] = [d for d in dirs if d != "__pycache__" and not d.startswith(".")]
        files.update((Path(root) / n).relative_to(REPO).as_posix() for n in names if not NOT_PACKAGED.fullmatch(n))
    return files


def test_the_wheel_holds_every_file_of_the_package(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = next(n.rsplit("/", 1)[0] for n in names if n.endswith(".dist-info/METADATA"))
        entry_points = z.read(f"{meta}/entry_points.txt").decode()
        requires = [line.split(":", 1)[1].strip() for line in z.read(f"{meta}/METADATA").decode().splitlines()
                    if line.startswith("Requires-Dist:")]
        hello = z.read("lockdown/targets/builtin/hello/target.toml")
    in_wheel = {n for n in names if n.startswith("lockdown/")}
    expected = package_files()
    assert not expected - in_wheel, f"files of lockdown/ left out of the wheel (pyproject.toml, " \
                                    f"[tool.setuptools.package-data]): {sorted(expected - in_wheel)}"
    assert not in_wheel - expected, sorted(in_wheel - expected)
    # what the issue found missing, named: the data files, the PHP helpers, the templates
    for name in ("analyzers/subsystems.toml", "analyzers/detectors/thresholds.toml", "remediation/recipes.toml",
                 "collectors/php/prepend.php", "collectors/php/locate.php", "collectors/php/argprobe.php",
                 "remediation/php/memoize.php", "harness/templates/nginx.conf.j2",
                 "reports/templates/report.html.j2", "targets/builtin/minicms/app/includes/l10n.php"):
        assert f"lockdown/{name}" in in_wheel, name
    assert hello == (REPO / "fixtures" / "apps" / "hello" / "target.toml").read_bytes()
    assert re.search(r"^lockdown = lockdown\.cli:main$", entry_points, re.M), entry_points
    names = {re.split(r"[<>=;\[ ]", r, maxsplit=1)[0] for r in requires}
    assert names >= {"click", "jinja2", "pyelftools", "pytest", "ruff"}


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh virtual environment with the wheel installed."""
    where = tmp_path_factory.mktemp("venv") / "v"
    _run([sys.executable, "-m", "venv", "--system-site-packages", where])
    _run([where / "bin" / "python", *PIP, "install", "-q", "--no-deps", "--no-index", "--ignore-installed", wheel])
    return where


def test_lockdown_run_hello_from_the_installed_wheel(venv, env, tmp_path):
    env = {k: v for k, v in env.items() if k not in ("PYTHONPATH", "LOCKDOWN_TARGETS")}
    site = _run([venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                cwd=tmp_path, env=env).stdout.strip()
    package = Path(site) / "lockdown"
    found = _run([venv / "bin" / "python", "-c", "import lockdown, lockdown.paths as p; "
                  "print(lockdown.__file__); print(p.builtin_targets_dir())"], cwd=tmp_path, env=env).stdout.split()
    assert found == [str(package / "__init__.py"), str(package / "targets" / "builtin")], found

    out = tmp_path / "out"
    r = subprocess.run([str(venv / "bin" / "lockdown"), "run", "hello", "-o", str(out), "--runs", "1",
                        "--duration", "1", "--warmup-duration", "1", "--requests", "10"],
                       capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for name in ("bench.json", "analysis.json", "findings.json", "report.html", "bundle/manifest.json"):
        assert (out / name).is_file(), name
    # the target served is the wheel's copy of hello
    documents = "".join(p.read_text() for p in [*out.glob("*.json"), *out.glob("bundle/*.json")])
    assert str(package / "targets" / "builtin" / "hello") in documents
