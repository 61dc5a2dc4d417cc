"""The code passes the linter configured in pyproject.toml ([tool.ruff]: pyflakes, pycodestyle's
errors and warnings, and a few more), over lockdown/, tests/ and bench/: `make lint` runs the
same check."""
from __future__ import annotations

import subprocess
import sys

from conftest import REPO


def test_ruff_finds_nothing():
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert "No module named ruff" not in r.stderr, "ruff is missing: run `make setup`"
    assert r.returncode == 0, f"ruff check (make lint) found:\n{r.stdout}{r.stderr}"
