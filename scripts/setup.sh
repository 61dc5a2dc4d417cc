#!/usr/bin/env bash
# Idempotent set-up: Debian packages, then this Python package (editable, from pyproject.toml)
# with its dependencies and the test extra (pytest, ruff, ...).
# A second run checks and returns in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(php8.2-cli php8.2-fpm php8.2-mysql php8.2-opcache php8.2-tideways php-excimer php-apcu
      mariadb-server mariadb-client nginx linux-perf wrk siege apache2-utils wordpress mediawiki
      python3 python3-pip python3-venv ca-certificates chromium chromium-driver
      valgrind protobuf-compiler golang-github-google-pprof-dev redis-server php-redis
      php-laravel-framework)
# The readers the exports are tested with: callgrind_annotate (valgrind), `go tool pprof`
# (golang-go, unless a Go toolchain is on PATH already), and protoc with pprof's profile.proto
# (lockdown/reports/profile_pb2.py is checked against them). redis-server and php-redis: the
# fleet agent's transport (docs/fleet.md); lockdown starts its own Redis, never the system's.
command -v go >/dev/null || PKGS+=(golang-go)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" != 0 ]; then
    echo "setup: missing Debian packages: ${missing[*]}; run make setup as root" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/tmp/lockdown-apt.log 2>&1 || {
    tail -30 /tmp/lockdown-apt.log >&2; echo "setup: apt-get install failed (log: /tmp/lockdown-apt.log)" >&2; exit 1; }
else
  echo "setup: Debian packages present"
fi

# The unprivileged account lockdown's servers run as when it runs as root (docs/security.md)
if ! getent passwd lockdown-run >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin lockdown-run
    echo "setup: created the system account lockdown-run (lockdown's servers run as it)"
  else
    echo "setup: note: as root, lockdown runs its servers as the account lockdown-run; run make setup as root to create it" >&2
  fi
fi

PYTHON=${PYTHON:-python3}
# native/ (the perf script folder in Rust) when cargo is present; never fails the set-up
PYTHON="$PYTHON" bash scripts/build_native.sh
# inferno, the reference the folded-format tests compare with, when cargo is present
bash scripts/inferno.sh
stamp=".setup-stamp"
want="$(sha256sum < pyproject.toml | cut -c1-16) $(pwd) $($PYTHON -c 'import sys; print(sys.executable)')"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] \
   && [ "$(cd / && $PYTHON -c 'import click, jinja2, elftools, google.protobuf, redis, pytest, xdist, selenium, ruff, wheel, lockdown, os; print(os.path.dirname(os.path.dirname(lockdown.__file__)))' 2>/dev/null)" = "$(pwd)" ] \
   && command -v lockdown >/dev/null; then
  echo "setup: Python package present"
  exit 0
fi
pipflags=(-q)
if $PYTHON -c 'import sys, sysconfig, os; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")) else 1)'; then
  pipflags+=(--break-system-packages)   # Debian's python3: install beside the system packages
fi
echo "setup: installing the lockdown Python package (editable) and its dependencies"
$PYTHON -m pip install "${pipflags[@]}" --root-user-action=ignore -e ".[test]"
command -v pyenv >/dev/null && pyenv rehash || true
echo "$want" > "$stamp"
command -v lockdown >/dev/null || echo "setup: note: lockdown is installed in $($PYTHON -c 'import sysconfig; print(sysconfig.get_path("scripts"))'), add it to PATH" >&2
