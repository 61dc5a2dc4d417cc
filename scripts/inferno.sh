#!/usr/bin/env bash
# inferno (crates.io), the Rust port of FlameGraph's scripts: the tools the tests and
# bench/fold_speed.py check lockdown's folded and three-column files against
# (inferno-collapse-perf, inferno-diff-folded, inferno-flamegraph). Installed with cargo when
# cargo is present and they are not; without cargo those checks say they are skipped. Never
# fails the set-up. Called by scripts/setup.sh.
set -uo pipefail
VERSION=0.12.8
[ -x "${HOME:-}/.cargo/bin/cargo" ] && PATH="$PATH:$HOME/.cargo/bin"
if command -v inferno-diff-folded >/dev/null && command -v inferno-flamegraph >/dev/null \
   && command -v inferno-collapse-perf >/dev/null; then
  echo "setup: inferno present"
  exit 0
fi
if ! command -v cargo >/dev/null; then
  echo "setup: cargo not found: inferno not installed (the checks against it are skipped)"
  exit 0
fi
echo "setup: installing inferno $VERSION with cargo (about 2 minutes the first time)"
if ! cargo install --quiet --locked --version "$VERSION" inferno >/tmp/lockdown-inferno.log 2>&1; then
  tail -20 /tmp/lockdown-inferno.log >&2
  echo "setup: note: inferno did not install (log: /tmp/lockdown-inferno.log); the checks against it are skipped" >&2
fi
exit 0
