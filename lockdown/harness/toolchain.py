"""Which binaries lockdown runs. Each can be overridden with LOCKDOWN_<NAME> (e.g. LOCKDOWN_PHP_FPM)."""
from __future__ import annotations

import os
import shutil

DEFAULTS = {
    "php": "php8.2",
    "php-fpm": "php-fpm8.2",
    "mariadbd": "mariadbd",
    "mariadb": "mariadb",
    "mariadb-dump": "mariadb-dump",
    "mariadb-install-db": "mariadb-install-db",
    "nginx": "nginx",
    "perf": "perf",
    "wrk": "wrk",
    "siege": "siege",
    "ab": "ab",
}

# Debian puts daemons in sbin, which a non-login root shell may not have on PATH.
_EXTRA_PATH = ["/usr/sbin", "/sbin", "/usr/local/sbin"]


def tool(name: str) -> str:
    """Absolute path of a tool when found, else its bare name (so errors name it)."""
    override = os.environ.get("LOCKDOWN_" + name.upper().replace("-", "_"))
    wanted = override or DEFAULTS.get(name, name)
    found = shutil.which(wanted) or shutil.which(
        wanted, path=os.pathsep.join([os.environ.get("PATH", ""), *_EXTRA_PATH]))
    return found or wanted


def available(name: str) -> bool:
    return os.path.isabs(tool(name)) and os.access(tool(name), os.X_OK)
