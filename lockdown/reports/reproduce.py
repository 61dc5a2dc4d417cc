"""The commands that reproduce a run and its verifications, rebuilt from what they recorded
and shell-quoted, for the write-ups' and the report's "Reproduce" lines.

`lockdown run` records the options it was given (findings.json `run.options`, with
`run.target_arg`, the TARGET it resolves again); a findings.json written before that is read
back from what the run's files hold: bench.json's config (or its absence: --no-bench) and the
run block's capture size, xhprof rate and php.ini overrides. A verification's command comes
from its verify.json: the findings, the remediation picked, --each, the A/B size and the
re-capture's size and probe."""
from __future__ import annotations

import shlex

# `lockdown run`'s and `lockdown verify`'s defaults, which the commands below leave out
# (lockdown/options.py; cli/run.py and pipeline/run.py take RUN_DEFAULTS through here)
from ..options import DEFAULT_MAX_RUNS, RUN_DEFAULTS, VERIFY_DEFAULTS
from ..remediation.base import own_patch_path
from ..rundir.model import BenchConfig, BenchResult
from .bench_table import as_result


def _num(v) -> str:
    return format(v, "g") if isinstance(v, float) else str(v)


def _config(bench: BenchResult | dict | None) -> BenchConfig:
    """bench.json's config (BenchConfig() without one, or with --no-bench)."""
    bench = None if bench is None else as_result(bench)
    return bench.config if bench and bench.config else BenchConfig()


def _given_options(run_block: dict) -> list[str] | None:
    opts = run_block.get("options")
    if isinstance(opts, list) and all(isinstance(o, str) for o in opts):
        return list(opts)
    return None


def _read_back_options(run_block: dict, bench: BenchResult | dict | None) -> tuple[list[str], str]:
    """An older run's options, from what its files hold; and a note for what they cannot say."""
    out: list[str] = []
    cfg = _config(bench)
    if bench is None:
        out.append("--no-bench")
    else:
        for key, value in (("runs", cfg.runs), ("duration", cfg.duration), ("warmup_duration", cfg.warmup_duration)):
            if value is not None and value != RUN_DEFAULTS[key]:
                out += [f"--{key.replace('_', '-')}", _num(value)]
    for key in ("requests", "xhprof_every"):
        if run_block.get(key) is not None and run_block[key] != RUN_DEFAULTS[key]:
            out += [f"--{key.replace('_', '-')}", _num(run_block[key])]
    ini = run_block.get("php_ini") or cfg.php_ini
    for k, v in ini.items() if isinstance(ini, dict) else ():
        out += ["--php-ini", f"{k}={v}"]
    note = ""
    thresholds = run_block.get("thresholds")
    if isinstance(thresholds, dict):
        from ..analyzers.detectors import load_thresholds
        if thresholds != load_thresholds(None):
            note = ("  # and --thresholds FILE holding findings.json's run.thresholds "
                    "(this run did not record the file's name)")
    return out, note


def run_command(run_dir, target: str, run_block: dict | None, bench: BenchResult | dict | None) -> str:
    """`lockdown run TARGET -o DIR` with the options the run was given."""
    run_block = run_block if isinstance(run_block, dict) else {}
    spec = run_block.get("target_arg") if isinstance(run_block.get("target_arg"), str) else target
    given = _given_options(run_block)
    note = ""
    if given is None:
        given, note = _read_back_options(run_block, bench)
    return shlex.join(["lockdown", "run", spec, "-o", str(run_dir), *given]) + note


def _remediation_numbers(v: dict, finding) -> list[int]:
    """Which of the finding's remediations verify applied (1-based), as --remediation takes."""
    if finding is None:
        return []
    applied = [(r.get("kind"), r.get("content")) for r in v.get("remediations") or [] if isinstance(r, dict)]
    own = [(r.kind, r.content) for r in finding.remediations]
    picked = [own.index(a) + 1 for a in applied if a in own]
    return [] if picked in ([], [1]) else picked


def verify_command(run_dir, v: dict, findings: dict, run_block: dict | None, bench: BenchResult | dict | None) -> str:
    """The `lockdown verify` that made verify.json `v`; `findings` maps key -> Finding."""
    run_block = run_block if isinstance(run_block, dict) else {}
    key = (v.get("finding") or {}).get("key")
    keys = [g.get("key") for g in v.get("findings") or [] if isinstance(g, dict)] or [key]
    args = ["lockdown", "verify", str(run_dir)]
    if key == "all":
        args.append("--all")
    else:
        for k in keys:
            args += ["--finding", str(k)]
        patches = [p for r in v.get("remediations") or [] if isinstance(r, dict)
                   and (p := own_patch_path(r)) is not None]
        for path in patches:            # verify --patch: the user's own diffs
            args += ["--patch", path]
        if len(keys) == 1 and not patches:
            for i in _remediation_numbers(v, findings.get(keys[0])):
                args += ["--remediation", str(i)]
    if v.get("each"):
        args.append("--each")
    b = v.get("bench") or {}
    # the pairs asked for: the pilot when verify planned more (bench.plan), not the pairs measured
    plan = b.get("plan") if isinstance(b.get("plan"), dict) else {}
    args += ["--runs", _num(plan.get("pilot_runs") or b.get("runs_per_arm", VERIFY_DEFAULTS["runs"])),
             "--duration", _num(b.get("duration", VERIFY_DEFAULTS["duration"]))]
    if plan.get("max_runs") is not None and plan["max_runs"] != DEFAULT_MAX_RUNS:
        args += ["--max-runs", _num(plan["max_runs"])]
    ref = _config(bench)
    for opt in ("concurrency", "workers"):      # verify's default is the bench's, on the same host
        if b.get(opt) is not None and b.get(opt) != getattr(ref, opt):
            args += [f"--{opt}", _num(b[opt])]
    for opt in ("load", "warmup_duration"):
        if b.get(opt) is not None and b.get(opt) != VERIFY_DEFAULTS[opt]:
            args += [f"--{opt.replace('_', '-')}", _num(b[opt])]
    re_ = v.get("reprofile") or {}
    if re_.get("requests") is not None and re_.get("requests") != run_block.get("requests"):
        args += ["--requests", _num(re_["requests"])]
    if re_.get("probed") is False:
        args.append("--no-probe")
    return shlex.join(args)


def suggest_verify(run_dir, key: str) -> str:
    """The command that would verify one finding (not yet verified)."""
    return shlex.join(["lockdown", "verify", str(run_dir), "--finding", key])
