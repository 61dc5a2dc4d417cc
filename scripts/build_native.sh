#!/usr/bin/env bash
# native/ (lockdown's perf script folder in Rust, module lockdown_native): built and installed
# with maturin through pip when cargo is present, again only when its sources change. Without
# cargo, or when the build fails, lockdown folds with its pure-Python reference (slower, same
# output), so nothing else depends on this step. Called by scripts/setup.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x "${HOME:-}/.cargo/bin/cargo" ] && PATH="$PATH:$HOME/.cargo/bin"
if ! command -v cargo >/dev/null; then
  echo "setup: cargo not found: perf script folding stays pure Python (native/ not built; see docs/analysis.md)"
  exit 0
fi
mkdir -p native/target
exec 9>native/target/setup-lock   # one build at a time: concurrent `make unit`s share the target dir
flock 9
stamp="native/target/setup-stamp"
want="$(cat native/Cargo.toml native/Cargo.lock native/pyproject.toml native/src/*.rs | sha256sum | cut -c1-16) $($PYTHON -c 'import sys; print(sys.executable)')"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && (cd / && $PYTHON -c 'import lockdown_native' 2>/dev/null); then
  echo "setup: native folder present"
  exit 0
fi
pipflags=(-q --root-user-action=ignore)
if $PYTHON -c 'import sys, sysconfig, os; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")) else 1)'; then
  pipflags+=(--break-system-packages)
fi
echo "setup: building the native perf script folder (native/, cargo and maturin; about 2 minutes the first time)"
if $PYTHON -m pip install "${pipflags[@]}" ./native >/tmp/lockdown-native.log 2>&1; then
  echo "$want" > "$stamp"
else
  tail -20 /tmp/lockdown-native.log >&2
  echo "setup: note: the native folder did not build (log: /tmp/lockdown-native.log); folding stays pure Python" >&2
  $PYTHON -m pip uninstall "${pipflags[@]}" -y lockdown-native >/dev/null 2>&1 || true   # not a stale one
fi
exit 0
